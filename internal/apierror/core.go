package apierror

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/worker"
)

// APIErrorer is implemented by errors that know their wire form (upstream and transport errors).
type APIErrorer interface {
	APIError() *Error
}

// fromCore maps the core packages' sentinel errors to their documented status and code.
func fromCore(err error) *Error {
	var ae APIErrorer
	if errors.As(err, &ae) {
		return ae.APIError()
	}
	switch {
	case errors.Is(err, admission.ErrQueueFull):
		return New(http.StatusTooManyRequests, CodeQueueFull, "prefill admission queue is full, retry later", err)
	case errors.Is(err, admission.ErrQueueTimeout):
		return New(http.StatusTooManyRequests, CodeQueueTimeout, "timed out waiting for a prefill admission slot, retry later", err)
	case errors.Is(err, placement.ErrModelNotFound):
		return New(http.StatusNotFound, CodeModelNotFound, "no worker serves the requested model", err)
	case errors.Is(err, placement.ErrInvalidTarget):
		e := New(http.StatusBadRequest, CodeInvalidRequest, err.Error(), err)
		e.Param = "X-Sluice-Target-Worker"
		return e
	case errors.Is(err, placement.ErrNoHealthyWorkers), errors.Is(err, placement.ErrUnavailable):
		return New(http.StatusServiceUnavailable, CodeNoAvailableWorkers, "no healthy worker is available for the requested model", err)
	case errors.Is(err, worker.ErrNotFound):
		return New(http.StatusNotFound, CodeNotFound, err.Error(), err)
	case errors.Is(err, worker.ErrAlreadyExists):
		return New(http.StatusConflict, CodeAlreadyExists, err.Error(), err)
	case errors.Is(err, worker.ErrManaged):
		return New(http.StatusConflict, CodeWorkerManaged, err.Error(), err)
	case errors.Is(err, worker.ErrInvalidSpec):
		return New(http.StatusBadRequest, CodeInvalidRequest, err.Error(), err)
	}
	return nil
}

// FromUpstream relays a worker's error response: its status, and its message and code when the body is
// OpenAI-shaped ({"error":{...}}) or a plain {"message":...} object.
func FromUpstream(status int, body []byte, fallback string, cause error) *Error {
	e := New(status, CodeUpstream, fallback, cause)
	var b struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(body, &b) != nil {
		return e
	}
	if b.Message != "" {
		e.Message = b.Message
	}
	var inner struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
		Param   string          `json:"param"`
	}
	if len(b.Error) > 0 && json.Unmarshal(b.Error, &inner) == nil {
		if inner.Message != "" {
			e.Message = inner.Message
		}
		if inner.Type != "" {
			e.Type = inner.Type
		}
		var code string
		if json.Unmarshal(inner.Code, &code) == nil && code != "" {
			e.Code = code
		}
		e.Param = inner.Param
	} else if len(b.Error) > 0 {
		var s string
		if json.Unmarshal(b.Error, &s) == nil && s != "" {
			e.Message = s
		}
	}
	return e
}
