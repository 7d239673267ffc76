package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"

	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/dispatch"
)

// registerAux adds the rest of the OpenAI surface engines serve, routed by model like chat (with its
// retries, metrics and tracing): the pooling routes and tokenization answer JSON and go through the
// same handler as chat; /v1/responses and /v1/messages may stream events of their own (named SSE
// events, no [DONE]), relayed byte for byte.
func (h *Handler) registerAux() {
	for _, route := range body.AuxRoutes() {
		path := route.Path()
		switch route {
		case body.RouteResponses, body.RouteMessages:
			h.mux.Handle("POST "+path, h.passthrough(route, path))
		case body.RouteTokenize:
			h.mux.Handle("POST "+path, h.tokenize(h.inference(route, path)))
		case body.RouteDetokenize:
			h.mux.Handle("POST "+path, h.detokenize(h.inference(route, path)))
		default:
			h.mux.Handle("POST "+path, h.inference(route, path))
		}
	}
	// SMG (and vLLM) also serve rerank without the /v1 prefix.
	h.mux.Handle("POST /rerank", h.inference(body.RouteRerank, "/rerank"))
	// vLLM serves tokenize and detokenize without the /v1 prefix too (tokenize.go answers both with a
	// tokenizer).
	h.mux.Handle("POST /tokenize", h.tokenize(h.inference(body.RouteTokenize, "/tokenize")))
	h.mux.Handle("POST /detokenize", h.detokenize(h.inference(body.RouteDetokenize, "/detokenize")))
}

// passthrough serves a route whose stream is relayed as the engine sends it. It is the chat handler
// (inference) with the byte-level relay of copyRaw for streams; JSON answers are relayed alike.
func (h *Handler) passthrough(route dispatch.Route, name string) http.Handler {
	spanName := "POST " + name
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ctx := h.o.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := h.o.Tracer.Start(ctx, spanName, serverSpan)
		if span.IsRecording() {
			span.SetAttributes(attribute.String("http.route", name))
			h.principalAttributes(ctx, span)
		}
		defer span.End()
		rec := &recorder{h: h, route: name, start: start, span: span}
		defer rec.finish()

		body, e := readBody(w, r, h.o.MaxPayloadSize)
		if e != nil {
			rec.fail(w, e)
			return
		}
		resp, err := h.o.Dispatcher.Do(ctx, &dispatch.Request{Route: route, Body: body, Header: r.Header})
		rec.dispatched = true // dispatch records the request, answered or not
		if err != nil {
			rec.fail(w, apierror.From(err))
			return
		}
		defer resp.Body.Close()
		rec.model = resp.Model
		rec.status = resp.Status
		copyHeaders(w, resp)
		w.WriteHeader(resp.Status)
		copyRaw(r.Context(), w, resp.Raw(), route, h.o.Logger)
	})
}

// readBody reads a request body of at most limit bytes, which must be UTF-8 (JSON text is).
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *apierror.Error) {
	// Not pooled: an upstream transport may read a request body after RoundTrip returned.
	var buf bytes.Buffer
	if r.ContentLength > 0 && r.ContentLength <= limit {
		buf.Grow(int(r.ContentLength) + bytes.MinRead)
	}
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit)); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, apierror.New(http.StatusRequestEntityTooLarge, apierror.CodePayloadTooLarge,
				"request body exceeds the maximum payload size of "+strconv.FormatInt(mbe.Limit, 10)+" bytes", err)
		}
		return nil, apierror.New(http.StatusBadRequest, apierror.CodeInvalidRequest, "could not read the request body", err)
	}
	if !utf8.Valid(buf.Bytes()) {
		return nil, apierror.New(http.StatusBadRequest, apierror.CodeInvalidJSON, "request body is not valid UTF-8", nil)
	}
	return buf.Bytes(), nil
}

// copyRaw relays a stream of named SSE events chunk by chunk, flushing each: the engine's framing is
// kept (event names included; these streams end when the engine closes them, with no [DONE]). A
// stream cut by a failure gets one error event in the route's own format.
func copyRaw(ctx context.Context, w http.ResponseWriter, body io.Reader, route dispatch.Route, logger *slog.Logger) {
	rc := http.NewResponseController(w)
	bp := copyBufPool.Get().(*[]byte)
	defer copyBufPool.Put(bp)
	buf := *bp
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
		}
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			logger.Debug("passthrough stream interrupted", "route", route.String(), "err", err)
			_, _ = w.Write(streamErrorEvent(route, "stream interrupted: "+err.Error()))
			_ = rc.Flush()
			return
		}
	}
}

// streamErrorEvent is an error event in the stream format of route: Anthropic's
// {"type":"error","error":{...}} for Messages, OpenAI's Responses error event otherwise.
func streamErrorEvent(route dispatch.Route, msg string) []byte {
	var payload any
	if route == body.RouteMessages {
		payload = map[string]any{"type": "error", "error": map[string]string{"type": "api_error", "message": msg}}
	} else {
		payload = map[string]any{"type": "error", "code": apierror.CodeUpstream, "message": msg, "param": nil}
	}
	b, _ := json.Marshal(payload)
	return append(append([]byte("event: error\ndata: "), b...), '\n', '\n')
}
