package httpapi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"

	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/dispatch"
)

// relaySSE relays an answer's events as they come. The engine's frames are forwarded as they are
// (data payload unchanged; dispatch.Frames only drops the usage chunk the gateway asked for). Every
// frame already complete in what was read from the engine goes out in one write and one flush: a
// frame is flushed as soon as it is complete and nothing more is buffered, so none waits for a later
// one, and frames that arrived together cost one syscall instead of one each. If the upstream ends
// without [DONE] because of an error, the client gets an OpenAI-shaped error frame: the status line
// went out long ago.
func relaySSE(ctx context.Context, w http.ResponseWriter, r *dispatch.Frames, logger *slog.Logger) {
	rc := http.NewResponseController(w)
	data, err := r.Next()
	for {
		// The output buffer is held only while writing: a stream waiting for its engine keeps none.
		bp := frameBufPool.Get().(*[]byte)
		buf := (*bp)[:0]
		if err != nil {
			if ctx.Err() != nil {
				logger.Debug("client went away mid-stream", "err", err)
				putFrameBuf(bp, buf)
				return
			}
			msg := "stream interrupted: " + err.Error()
			if errors.Is(err, io.EOF) {
				// The engine closed the stream without [DONE]: the client must not mistake a cut
				// stream for a complete one.
				msg = "stream ended before [DONE]"
			}
			e := apierror.New(http.StatusBadGateway, apierror.CodeUpstream, msg, err)
			buf = body.AppendSSE(buf, e.JSON())
			_, _ = w.Write(buf)
			_ = rc.Flush()
			putFrameBuf(bp, buf)
			return
		}
		done := false
		for {
			buf = body.AppendSSE(buf, data)
			if done = body.IsDone(data); done {
				break
			}
			var more bool
			if data, more = r.NextBuffered(); !more {
				break
			}
		}
		_, werr := w.Write(buf)
		putFrameBuf(bp, buf)
		if werr != nil {
			return // client gone; closing the body cancels the legs
		}
		if err := rc.Flush(); err != nil || done {
			return
		}
		data, err = r.Next()
	}
}

// frameBufPool holds the relays' output buffers.
var frameBufPool = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// putFrameBuf gives a relay's buffer back, unless a burst of large frames grew it.
func putFrameBuf(bp *[]byte, buf []byte) {
	if cap(buf) <= 64<<10 {
		*bp = buf[:0]
		frameBufPool.Put(bp)
	}
}

func (h *Handler) models(w http.ResponseWriter, _ *http.Request) {
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	for _, m := range h.o.Dispatcher.Models() {
		out.Data = append(out.Data, model{ID: m, Object: "model", Created: h.created, OwnedBy: "sluice"})
	}
	writeJSON(w, http.StatusOK, out)
}
