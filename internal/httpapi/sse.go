package httpapi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"

	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/dispatch"
)

// relaySSE relays an answer's events frame by frame, flushing after each. The engine's frames are
// forwarded as they are (data payload unchanged; dispatch.Frames only drops the usage chunk the
// gateway asked for). If the upstream ends without [DONE] because of an error, the client gets an
// OpenAI-shaped error frame: the status line went out long ago.
func relaySSE(ctx context.Context, w http.ResponseWriter, r *dispatch.Frames, logger *slog.Logger) {
	rc := http.NewResponseController(w)
	buf := make([]byte, 0, 1024)
	for {
		data, err := r.Next()
		if err != nil {
			if ctx.Err() != nil {
				logger.Debug("client went away mid-stream", "err", err)
				return
			}
			msg := "stream interrupted: " + err.Error()
			if errors.Is(err, io.EOF) {
				// The engine closed the stream without [DONE]: the client must not mistake a cut
				// stream for a complete one.
				msg = "stream ended before [DONE]"
			}
			e := apierror.New(http.StatusBadGateway, apierror.CodeUpstream, msg, err)
			buf = backend.AppendSSE(buf[:0], e.JSON())
			_, _ = w.Write(buf)
			_ = rc.Flush()
			return
		}
		buf = backend.AppendSSE(buf[:0], data)
		if _, err := w.Write(buf); err != nil {
			return // client gone; closing the body cancels the legs
		}
		if err := rc.Flush(); err != nil {
			return
		}
		if backend.IsDone(data) {
			return
		}
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
