package dispatch

import (
	"io"
	"net/http"

	"github.com/sluicegw/sluice/internal/backend/body"
)

// Route is an inference endpoint.
type Route = body.Route

// The inference routes.
const (
	RouteChat        = body.RouteChat
	RouteCompletions = body.RouteCompletions
	RouteGenerate    = body.RouteGenerate
)

// Request is one client request as the surfaces hand it to dispatch.
type Request struct {
	Route Route
	// Body is the client's JSON, unknown fields preserved; dispatch rewrites copies of it per leg.
	Body []byte
	// Header carries the client's headers; only an allow-list goes upstream.
	Header http.Header
	// RequestID names the request in logs, spans and upstream (X-Request-Id); when empty, the client's
	// X-Request-Id header, else a generated UUID.
	RequestID string

	tenant string // set by Do from Config.Tenants
}

// Response is the decode (or regular) worker's response, ready to relay. The caller must Close it:
// Close ends the request — it cancels whatever still runs, releases every guard and ends the spans.
type Response struct {
	// Status is the upstream status (2xx; failures come back as errors).
	Status int
	// Header holds the headers to relay (content type and sluice's worker headers).
	Header http.Header
	// Body streams the response. For SSE responses, Stream is true.
	Body io.ReadCloser
	// Stream reports an SSE response.
	Stream bool
	// Model is the request's model.
	Model string
	// Worker and PrefillWorker are the URLs of the workers that served.
	Worker, PrefillWorker string
	// RequestID is the request's X-Request-Id: the client's, or one sluice generated. Both legs
	// carried it, and Header holds it for the client.
	RequestID string

	pd     *pdTiming // the PD legs' timing, when the answer had a prefill leg
	meter  *meter    // observes the answer (set by Do)
	length int64     // the worker's Content-Length, -1 when it sent none
}
