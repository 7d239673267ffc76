// Package apierror is the one place where sluice's errors become wire errors: an HTTP status with an
// OpenAI-shaped JSON body on REST, and a Connect/gRPC code with the same machine-readable code string
// (as a google.rpc.ErrorInfo reason) on RPC. Core packages return sentinel errors; the boundary calls
// From to classify them, so every surface answers the same failure the same way.
package apierror

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Machine-readable error codes, shared by REST bodies and RPC error details.
const (
	CodeQueueFull    = "pd_prefill_queue_full"
	CodeQueueTimeout = "pd_prefill_queue_timeout"
	// The decode side (no free decode seat) held the request back (DESIGN.md §3b).
	CodeDecodeQueueFull    = "pd_decode_queue_full"
	CodeDecodeQueueTimeout = "pd_decode_queue_timeout"
	CodeNoAvailableWorkers = "no_available_workers"
	CodeModelNotFound      = "model_not_found"
	CodeInvalidRequest     = "invalid_request"
	CodeInvalidJSON        = "invalid_json"
	CodePayloadTooLarge    = "payload_too_large"
	CodeUnauthorized       = "invalid_api_key"
	CodePermissionDenied   = "permission_denied"
	CodeOriginNotAllowed   = "origin_not_allowed"
	CodeNotFound           = "not_found"
	CodeAlreadyExists      = "already_exists"
	CodeWorkerManaged      = "worker_managed"
	CodeUpstream           = "upstream_error"
	CodeTimeout            = "request_timeout"
	CodeCanceled           = "request_canceled"
	CodeUnimplemented      = "unimplemented"
	CodeInternal           = "internal_error"
	// CodeShuttingDown: the gateway is draining for shutdown and refused or dequeued the request
	// (503 with Retry-After: another replica can take it at once).
	CodeShuttingDown = "shutting_down"
)

// Tenant codes (internal/admission's tenancy, internal/tenant's budgets).
const (
	// CodeTenantQueueFull: a tenant reached its own queue bound (--tenant-max-queued).
	CodeTenantQueueFull = "tenant_queue_full"
	// CodeRateLimitExceeded: a tenant's token or request budget is spent (OpenAI's own code).
	CodeRateLimitExceeded = "rate_limit_exceeded"
)

// Codes of requests refused at the HTTP layer, before any route (internal/server), and of a route's
// wrong method or media type.
const (
	CodeMalformedRequest            = "malformed_request"
	CodeHeadersTooLarge             = "request_header_fields_too_large"
	CodeHTTPVersionNotSupported     = "http_version_not_supported"
	CodeUnsupportedTransferEncoding = "unsupported_transfer_encoding"
	CodeMethodNotAllowed            = "method_not_allowed"
	CodeUnsupportedMediaType        = "unsupported_media_type"
)

// Domain is the ErrorInfo domain of sluice's RPC error details.
const Domain = "sluice.dev"

// Error is a classified error, ready for any wire.
type Error struct {
	// Status is the HTTP status.
	Status int
	// Type is OpenAI's error "type" (invalid_request_error, rate_limit_error, server_error, ...).
	Type string
	// Code is the machine-readable code (pd_prefill_queue_full, ...).
	Code string
	// Param names the offending request field, when there is one.
	Param string
	// Message is shown to the client: it must not contain secrets.
	Message string
	// RetryAfter, when positive, is sent as Retry-After (rounded up to whole seconds) and as
	// Retry-After-Ms (rounded up to milliseconds), which the official OpenAI SDKs read first: a
	// 300 ms estimate is not stretched to a whole second.
	RetryAfter time.Duration
	// Allow, on a 405, lists the methods the path serves (sent as Allow).
	Allow []string
	// Header holds extra response headers (the x-ratelimit-* of a tenant's budget).
	Header http.Header

	cause error
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the classified cause.
func (e *Error) Unwrap() error { return e.cause }

// New builds an error from its parts; cause may be nil.
func New(status int, code, message string, cause error) *Error {
	return &Error{Status: status, Type: typeFor(status), Code: code, Message: message, cause: cause}
}

// InvalidRequest is a 400 naming the offending field.
func InvalidRequest(param, message string) *Error {
	e := New(http.StatusBadRequest, CodeInvalidRequest, message, nil)
	e.Param = param
	return e
}

// WithRetryAfter sets the Retry-After hint and returns e.
func (e *Error) WithRetryAfter(d time.Duration) *Error {
	e.RetryAfter = d
	return e
}

func typeFor(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status == http.StatusServiceUnavailable:
		return "service_unavailable_error"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

// body is OpenAI's error shape.
type body struct {
	Error bodyError `json:"error"`
}

type bodyError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// JSON returns the OpenAI-shaped body of e.
func (e *Error) JSON() []byte {
	b := body{Error: bodyError{Message: e.Message, Type: e.Type, Code: e.Code}}
	if e.Param != "" {
		b.Error.Param = &e.Param
	}
	out, _ := json.Marshal(b) // cannot fail: strings only
	return out
}

// WriteHTTP writes e as an HTTP response with an OpenAI-shaped JSON body.
func (e *Error) WriteHTTP(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int((e.RetryAfter+time.Second-1)/time.Second)))
		h.Set("Retry-After-Ms", retryAfterMs(e.RetryAfter))
	}
	if len(e.Allow) > 0 {
		h.Set("Allow", strings.Join(e.Allow, ", "))
	}
	for k, vs := range e.Header {
		h[k] = vs
	}
	w.WriteHeader(e.Status)
	_, _ = w.Write(append(e.JSON(), '\n'))
}

// ConnectCode is the Connect/gRPC code for e's HTTP status.
func (e *Error) ConnectCode() connect.Code {
	if c, _, ok := pinned(e.Code); ok {
		return c
	}
	switch e.Status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return connect.CodeInvalidArgument
	case http.StatusUnauthorized:
		return connect.CodeUnauthenticated
	case http.StatusForbidden:
		return connect.CodePermissionDenied
	case http.StatusNotFound:
		return connect.CodeNotFound
	case http.StatusConflict:
		return connect.CodeAlreadyExists
	case http.StatusTooManyRequests:
		return connect.CodeResourceExhausted
	case http.StatusServiceUnavailable, http.StatusBadGateway:
		return connect.CodeUnavailable
	case http.StatusGatewayTimeout, http.StatusRequestTimeout:
		return connect.CodeDeadlineExceeded
	case 499:
		return connect.CodeCanceled
	case http.StatusNotImplemented:
		return connect.CodeUnimplemented
	default:
		return connect.CodeInternal
	}
}

// Connect converts e to a Connect error carrying an ErrorInfo detail whose reason is e.Code
// (and, for 429/503, a "retry_after_seconds" metadata entry). The REST surface's extra headers
// travel as the error's metadata (response headers on Connect, trailers on gRPC), so a budgeted
// tenant's rejection carries the same x-ratelimit-* and Retry-After-Ms as on REST; a retry hint is
// also a Retry-After metadata entry and a google.rpc.RetryInfo detail, the delay gRPC clients read.
func (e *Error) Connect() *connect.Error {
	ce := connect.NewError(e.ConnectCode(), errors.New(e.Message))
	info := &errdetails.ErrorInfo{Reason: e.Code, Domain: Domain}
	if e.RetryAfter > 0 {
		secs := strconv.Itoa(int((e.RetryAfter + time.Second - 1) / time.Second))
		info.Metadata = map[string]string{"retry_after_seconds": secs}
		ce.Meta().Set("Retry-After", secs)
		ce.Meta().Set("Retry-After-Ms", retryAfterMs(e.RetryAfter))
	}
	if d, err := connect.NewErrorDetail(info); err == nil {
		ce.AddDetail(d)
	}
	if e.RetryAfter > 0 {
		if d, err := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(e.RetryAfter)}); err == nil {
			ce.AddDetail(d)
		}
	}
	for k, vs := range e.Header {
		ce.Meta()[k] = append([]string(nil), vs...)
	}
	return ce
}

// retryAfterMs is d in whole milliseconds, rounded up, for Retry-After-Ms.
func retryAfterMs(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10)
}

// pinned gives the wire form of codes whose RPC code and HTTP status do not follow the status-based
// mapping. worker_managed (the admin API refusing to remove or drain a worker that service discovery
// owns) is FailedPrecondition on RPC — the gRPC code for "do not retry until the system state is
// fixed" (here: the pod or its labels must change) — and 409 Conflict on REST, because the request is
// well formed but conflicts with the worker's current owner; the generic FailedPrecondition -> 400
// mapping would read as a malformed request.
func pinned(code string) (connect.Code, int, bool) {
	if code == CodeWorkerManaged {
		return connect.CodeFailedPrecondition, http.StatusConflict, true
	}
	return 0, 0, false
}

// StatusFromConnectCode maps a Connect code to the HTTP status sluice uses for it.
func StatusFromConnectCode(c connect.Code) int {
	switch c {
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition, connect.CodeOutOfRange:
		return http.StatusBadRequest
	case connect.CodeUnauthenticated:
		return http.StatusUnauthorized
	case connect.CodePermissionDenied:
		return http.StatusForbidden
	case connect.CodeNotFound:
		return http.StatusNotFound
	case connect.CodeAlreadyExists, connect.CodeAborted:
		return http.StatusConflict
	case connect.CodeResourceExhausted:
		return http.StatusTooManyRequests
	case connect.CodeUnavailable:
		return http.StatusServiceUnavailable
	case connect.CodeDeadlineExceeded:
		return http.StatusGatewayTimeout
	case connect.CodeCanceled:
		return 499
	case connect.CodeUnimplemented:
		return http.StatusNotImplemented
	default:
		return http.StatusInternalServerError
	}
}

// CodeString returns the machine code carried by a Connect error's ErrorInfo detail, if any.
func CodeString(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ""
	}
	for _, d := range ce.Details() {
		v, derr := d.Value()
		if derr != nil {
			continue
		}
		if info, ok := v.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

// FromWire classifies an error that came back from a handler or from grpc-gateway's own request
// parsing (a gRPC status), for the REST error handler.
func FromWire(err error) *Error {
	var ae *Error
	if errors.As(err, &ae) {
		return ae
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		st := StatusFromConnectCode(ce.Code())
		code := CodeString(ce)
		if code == "" {
			code = defaultCode(st)
		}
		if c, pst, ok := pinned(code); ok && c == ce.Code() {
			st = pst
		}
		return New(st, code, ce.Message(), err)
	}
	if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
		st := StatusFromConnectCode(connect.Code(s.Code()))
		return New(st, defaultCode(st), s.Message(), err)
	}
	return From(err)
}

func defaultCode(status int) string {
	switch status {
	case http.StatusBadRequest:
		return CodeInvalidRequest
	case http.StatusUnauthorized:
		return CodeUnauthorized
	case http.StatusForbidden:
		return CodePermissionDenied
	case http.StatusNotFound:
		return CodeNotFound
	case http.StatusConflict:
		return CodeAlreadyExists
	case http.StatusServiceUnavailable:
		return CodeNoAvailableWorkers
	case http.StatusNotImplemented:
		return CodeUnimplemented
	case http.StatusGatewayTimeout:
		return CodeTimeout
	case 499:
		return CodeCanceled
	default:
		return CodeInternal
	}
}
