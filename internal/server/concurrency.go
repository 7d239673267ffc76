package server

import (
	"errors"
	"net/http"
	"strings"

	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/concurrency"
)

// Error codes of the gateway-wide concurrency limit, named as the Rust gateway names them
// (model_gateway/src/middleware/concurrency.rs).
const (
	CodeAdmissionQueueFull    = "admission_queue_full"
	CodeAdmissionQueueTimeout = "admission_queue_timeout"
)

// limitError is the wire form of a refusal by the gateway limit: 429 when the queue is full, 408
// when the wait timed out (SMG's answers; a gRPC client sees ResourceExhausted and
// DeadlineExceeded), with the machine code in the body (OpenAI shape) or the error details.
func limitError(err error) *apierror.Error {
	switch {
	case errors.Is(err, concurrency.ErrQueueFull):
		return apierror.New(http.StatusTooManyRequests, CodeAdmissionQueueFull,
			"the gateway is at its concurrency limit (--max-concurrent-requests) and its queue is full, retry later", err)
	case errors.Is(err, concurrency.ErrQueueTimeout):
		return apierror.New(http.StatusRequestTimeout, CodeAdmissionQueueTimeout,
			"timed out waiting for a gateway concurrency slot (--queue-timeout-secs), retry later", err)
	}
	return apierror.From(err) // the client went away
}

// limited runs h under the gateway concurrency limit: a token is taken before h runs and given back
// when h returns, that is once the response has been written in full (a stream included) or the
// client has gone. Requests that do not generate (GET, ListModels) pass untouched. rpc selects the
// error form: the client's RPC protocol, else OpenAI JSON.
func limited(h http.Handler, l *concurrency.Limiter, rpc bool) http.Handler {
	if l == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || strings.HasSuffix(r.URL.Path, "/ListModels") {
			h.ServeHTTP(w, r)
			return
		}
		p, err := l.Acquire(r.Context())
		if err != nil {
			e := limitError(err)
			if rpc {
				writeRPCError(w, r, e)
			} else {
				e.WriteHTTP(w)
			}
			return
		}
		defer p.Release()
		h.ServeHTTP(w, r)
	})
}
