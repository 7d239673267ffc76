package apierror

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/auth"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/toolcall"
	"github.com/sluicegw/sluice/internal/worker"
)

// APIErrorer is implemented by errors that know their wire form (upstream and transport errors).
type APIErrorer interface {
	APIError() *Error
}

// shuttingDownRetryAfter is the Retry-After of a request refused by a draining gateway.
const shuttingDownRetryAfter = time.Second

// fromCore maps the core packages' sentinel errors to their documented status and code.
func fromCore(err error) *Error {
	var ae APIErrorer
	if errors.As(err, &ae) {
		return ae.APIError()
	}
	switch {
	case errors.Is(err, toolcall.ErrNoToolParser):
		return InvalidRequest("tools", err.Error())
	case errors.Is(err, admission.ErrShuttingDown):
		// A fixed second, not the release-rate estimate: the retry is for another replica.
		return New(http.StatusServiceUnavailable, CodeShuttingDown, "the gateway is shutting down, retry on another replica", err).
			WithRetryAfter(shuttingDownRetryAfter)
	case errors.Is(err, admission.ErrTenantQueueFull):
		return New(http.StatusTooManyRequests, CodeTenantQueueFull, "this tenant's share of the admission queue is full, retry later", err)
	case errors.Is(err, admission.ErrDisplaced) && errors.Is(err, admission.ErrDecodeQueueFull):
		return New(http.StatusTooManyRequests, CodeDecodeQueueFull, "a higher-priority request took this request's place in the full admission queue while every decode worker was at its in-flight bound, retry later", err)
	case errors.Is(err, admission.ErrPredictedTimeout) && errors.Is(err, admission.ErrDecodeQueueTimeout):
		return New(http.StatusTooManyRequests, CodeDecodeQueueTimeout, "the predicted wait for a decode seat exceeds the timeout, retry later", err)
	case errors.Is(err, admission.ErrDecodeQueueFull):
		return New(http.StatusTooManyRequests, CodeDecodeQueueFull, "every decode worker is at its in-flight bound and the admission queue is full, retry later", err)
	case errors.Is(err, admission.ErrDecodeQueueTimeout):
		return New(http.StatusTooManyRequests, CodeDecodeQueueTimeout, "timed out waiting for a decode seat, retry later", err)
	case errors.Is(err, admission.ErrDisplaced):
		return New(http.StatusTooManyRequests, CodeQueueFull, "a higher-priority request took this request's place in the full prefill admission queue, retry later", err)
	case errors.Is(err, admission.ErrQueueFull):
		return New(http.StatusTooManyRequests, CodeQueueFull, "prefill admission queue is full, retry later", err)
	case errors.Is(err, admission.ErrPredictedTimeout):
		return New(http.StatusTooManyRequests, CodeQueueTimeout, "the predicted wait for a prefill admission slot exceeds the timeout, retry later", err)
	case errors.Is(err, admission.ErrQueueTimeout):
		return New(http.StatusTooManyRequests, CodeQueueTimeout, "timed out waiting for a prefill admission slot, retry later", err)
	case errors.Is(err, placement.ErrModelNotFound):
		var mnf *placement.ModelNotFoundError
		if errors.As(err, &mnf) && mnf.Model != "" {
			return New(http.StatusNotFound, CodeModelNotFound, modelNotFoundMessage(mnf.Model), err)
		}
		return New(http.StatusNotFound, CodeModelNotFound, "no worker serves the requested model", err)
	case errors.Is(err, placement.ErrInvalidTarget):
		e := New(http.StatusBadRequest, CodeInvalidRequest, err.Error(), err)
		e.Param = "X-Sluice-Target-Worker"
		return e
	case errors.Is(err, placement.ErrNoCompatibleWorkers):
		return New(http.StatusServiceUnavailable, CodeNoAvailableWorkers,
			"no routable prefill and decode workers of the requested model speak the same KV handoff", err)
	case errors.Is(err, placement.ErrNoHealthyWorkers), errors.Is(err, placement.ErrUnavailable):
		return New(http.StatusServiceUnavailable, CodeNoAvailableWorkers, "no healthy worker is available for the requested model", err)
	case errors.Is(err, auth.ErrForbidden):
		return New(http.StatusForbidden, CodePermissionDenied, refusalMessage(err), err)
	case errors.Is(err, auth.ErrUnauthenticated):
		return New(http.StatusUnauthorized, CodeUnauthorized, refusalMessage(err), err)
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

// refusalMessage is what a refused caller is shown: the refusal's own message, which names no
// credential, or a generic one for an unexpected error of the class.
func refusalMessage(err error) string {
	if r, ok := errors.AsType[*auth.Refusal](err); ok {
		return r.Message
	}
	if errors.Is(err, auth.ErrForbidden) {
		return "this credential does not grant this API"
	}
	return "missing or invalid API key or token"
}

// maxModelInMessage bounds the model name quoted back in an error message: the name is the client's.
const maxModelInMessage = 256

// modelNotFoundMessage names the model, as OpenAI's own model_not_found does, so a client that typed
// the name wrong sees which name the gateway read.
func modelNotFoundMessage(model string) string {
	if len(model) > maxModelInMessage {
		model = strings.ToValidUTF8(model[:maxModelInMessage], "") + "..."
	}
	return "The model `" + model + "` does not exist: no worker serves it"
}

// FromUpstream relays a worker's error response: its status, with the message, type, code and param
// the engine gave in any of the shapes engines use — OpenAI's {"error":{...}} (newer vLLM, SGLang
// /generate), {"object":"error","message",...} (SGLang's and older vLLM's OpenAI servers), FastAPI's
// {"detail":"..."} and {"error":"..."}. The engines' own type names ("BadRequestError") are replaced
// by OpenAI's type for the status, and a code that is not a string by the code for the status, so
// clients see one vocabulary. fallback is the message when the body has none.
func FromUpstream(status int, body []byte, fallback string, cause error) *Error {
	e := New(status, upstreamCode(status), fallback, cause)
	var b struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
		Type    string          `json:"type"`
		Param   json.RawMessage `json:"param"`
		Code    json.RawMessage `json:"code"`
	}
	if json.Unmarshal(body, &b) != nil {
		return e
	}
	var detail string
	if json.Unmarshal(b.Detail, &detail) == nil && detail != "" {
		e.Message = detail
	}
	if b.Message != "" {
		e.Message = b.Message
	}
	typ, code, param := b.Type, b.Code, b.Param
	var inner struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
		Param   json.RawMessage `json:"param"`
	}
	if len(b.Error) > 0 && json.Unmarshal(b.Error, &inner) == nil {
		if inner.Message != "" {
			e.Message = inner.Message
		}
		typ, code, param = inner.Type, inner.Code, inner.Param
	} else if len(b.Error) > 0 {
		var s string
		if json.Unmarshal(b.Error, &s) == nil && s != "" {
			e.Message = s
		}
	}
	if openAIType(typ) {
		e.Type = typ
	}
	var c string
	if json.Unmarshal(code, &c) == nil && c != "" {
		e.Code = c
	}
	var p string
	if json.Unmarshal(param, &p) == nil {
		e.Param = p
	}
	return e
}

// upstreamCode is the code of an engine error that names none: a client error keeps its meaning, a
// server error is the upstream's.
func upstreamCode(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return CodeInvalidRequest
	case http.StatusNotFound:
		return CodeNotFound
	case http.StatusRequestEntityTooLarge:
		return CodePayloadTooLarge
	}
	return CodeUpstream
}

// openAIType reports whether t is one of the error types of OpenAI's API.
func openAIType(t string) bool {
	switch t {
	case "invalid_request_error", "authentication_error", "permission_error", "not_found_error",
		"rate_limit_error", "server_error", "service_unavailable_error", "insufficient_quota":
		return true
	}
	return false
}
