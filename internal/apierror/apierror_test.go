package apierror_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/auth"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/worker"
)

// wire is the part of an *apierror.Error that reaches clients.
type wire struct {
	Status  int
	Type    string
	Code    string
	Param   string
	Message string
}

func wireOf(e *apierror.Error) wire {
	return wire{Status: e.Status, Type: e.Type, Code: e.Code, Param: e.Param, Message: e.Message}
}

// selfClassified knows its wire form, like dispatch's upstream and transport errors.
type selfClassified struct{}

func (selfClassified) Error() string { return "upstream said no" }
func (e selfClassified) APIError() *apierror.Error {
	return apierror.New(http.StatusBadGateway, apierror.CodeUpstream, "relayed", e)
}

func TestFrom(t *testing.T) {
	invalidTarget := fmt.Errorf("%w: index 7, 2 candidates", placement.ErrInvalidTarget)
	workerNotFound := fmt.Errorf("%w: w9", worker.ErrNotFound)
	workerExists := fmt.Errorf("%w: http://10.0.0.5:30000", worker.ErrAlreadyExists)
	workerInvalid := fmt.Errorf("%w: url: missing host", worker.ErrInvalidSpec)

	tests := []struct {
		name string
		err  error
		want wire
		// cause is what the result unwraps to; nil means err itself.
		cause error
	}{
		{
			name: "queue full as admission returns it",
			err:  fmt.Errorf("%w: %w", admission.ErrRejected, admission.ErrQueueFull),
			want: wire{429, "rate_limit_error", apierror.CodeQueueFull, "", "prefill admission queue is full, retry later"},
		},
		{
			name: "queue timeout as admission returns it",
			err:  fmt.Errorf("%w: %w", admission.ErrRejected, admission.ErrQueueTimeout),
			want: wire{429, "rate_limit_error", apierror.CodeQueueTimeout, "", "timed out waiting for a prefill admission slot, retry later"},
		},
		{
			name: "decode queue full as admission returns it",
			err:  fmt.Errorf("%w: %w", admission.ErrRejected, admission.ErrDecodeQueueFull),
			want: wire{429, "rate_limit_error", apierror.CodeDecodeQueueFull, "", "every decode worker is at its in-flight bound and the admission queue is full, retry later"},
		},
		{
			name: "decode queue timeout as admission returns it",
			err:  fmt.Errorf("%w: %w", admission.ErrRejected, admission.ErrDecodeQueueTimeout),
			want: wire{429, "rate_limit_error", apierror.CodeDecodeQueueTimeout, "", "timed out waiting for a decode seat, retry later"},
		},
		{
			name: "tenant queue full as admission returns it",
			err:  fmt.Errorf("%w: %w", admission.ErrRejected, admission.ErrTenantQueueFull),
			want: wire{429, "rate_limit_error", apierror.CodeTenantQueueFull, "", "this tenant's share of the admission queue is full, retry later"},
		},
		{
			name: "shutting down as admission returns it",
			err:  fmt.Errorf("%w: %w", admission.ErrRejected, admission.ErrShuttingDown),
			want: wire{503, "service_unavailable_error", apierror.CodeShuttingDown, "", "the gateway is shutting down, retry on another replica"},
		},
		{
			name: "model not found",
			err:  placement.ErrModelNotFound,
			want: wire{404, "not_found_error", apierror.CodeModelNotFound, "", "no worker serves the requested model"},
		},
		{
			name: "model not found names the model",
			err:  &placement.ModelNotFoundError{Model: "gpt-x"},
			want: wire{404, "not_found_error", apierror.CodeModelNotFound, "", "The model `gpt-x` does not exist: no worker serves it"},
		},
		{
			name: "no healthy workers as placement returns it",
			err:  fmt.Errorf("%w: %w", placement.ErrUnavailable, placement.ErrNoHealthyWorkers),
			want: wire{503, "service_unavailable_error", apierror.CodeNoAvailableWorkers, "", "no healthy worker is available for the requested model"},
		},
		{
			name: "bare no healthy workers",
			err:  placement.ErrNoHealthyWorkers,
			want: wire{503, "service_unavailable_error", apierror.CodeNoAvailableWorkers, "", "no healthy worker is available for the requested model"},
		},
		{
			name: "unavailable class (at capacity)",
			err:  fmt.Errorf("%w: %w", placement.ErrUnavailable, placement.ErrAtCapacity),
			want: wire{503, "service_unavailable_error", apierror.CodeNoAvailableWorkers, "", "no healthy worker is available for the requested model"},
		},
		{
			name: "invalid target names the header",
			err:  invalidTarget,
			want: wire{400, "invalid_request_error", apierror.CodeInvalidRequest, "X-Sluice-Target-Worker", invalidTarget.Error()},
		},
		{
			name: "worker not found",
			err:  workerNotFound,
			want: wire{404, "not_found_error", apierror.CodeNotFound, "", workerNotFound.Error()},
		},
		{
			name: "worker already exists",
			err:  workerExists,
			want: wire{409, "invalid_request_error", apierror.CodeAlreadyExists, "", workerExists.Error()},
		},
		{
			name: "worker invalid spec",
			err:  workerInvalid,
			want: wire{400, "invalid_request_error", apierror.CodeInvalidRequest, "", workerInvalid.Error()},
		},
		{
			name: "context canceled",
			err:  context.Canceled,
			want: wire{499, "invalid_request_error", apierror.CodeCanceled, "", "request canceled"},
		},
		{
			name: "admission cancelled wraps context canceled",
			err:  fmt.Errorf("%w: %w", admission.ErrCancelled, context.Canceled),
			want: wire{499, "invalid_request_error", apierror.CodeCanceled, "", "request canceled"},
		},
		{
			name: "deadline exceeded",
			err:  fmt.Errorf("waiting: %w", context.DeadlineExceeded),
			want: wire{504, "server_error", apierror.CodeTimeout, "", "request timed out"},
		},
		{
			name:  "self-classified error",
			err:   fmt.Errorf("attempt 3: %w", selfClassified{}),
			want:  wire{502, "server_error", apierror.CodeUpstream, "", "relayed"},
			cause: selfClassified{},
		},
		{
			name: "unknown error is a generic 500",
			err:  errors.New("dial tcp 10.1.2.3:30000: token sk-secret rejected"),
			want: wire{500, "server_error", apierror.CodeInternal, "", "internal error"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := apierror.From(tt.err)
			if got == nil {
				t.Fatal("From returned nil")
			}
			if diff := cmp.Diff(tt.want, wireOf(got)); diff != "" {
				t.Errorf("From(%q) mismatch (-want +got):\n%s", tt.err, diff)
			}
			cause := tt.cause
			if cause == nil {
				cause = tt.err
			}
			if !errors.Is(got, cause) {
				t.Errorf("From(%q) does not unwrap to %q", tt.err, cause)
			}
		})
	}
}

func TestFromUnknownDoesNotLeakCause(t *testing.T) {
	cause := errors.New("open /etc/sluice/keys: api key sk-secret")
	e := apierror.From(cause)
	for _, s := range []string{e.Message, e.Error(), string(e.JSON())} {
		if strings.Contains(s, "sk-secret") || strings.Contains(s, "/etc/sluice") {
			t.Errorf("client-visible text %q leaks the cause", s)
		}
	}
}

func TestFromNilAndPassThrough(t *testing.T) {
	if got := apierror.From(nil); got != nil {
		t.Errorf("From(nil) = %v, want nil", got)
	}
	orig := apierror.InvalidRequest("model", "model is required")
	if got := apierror.From(fmt.Errorf("handler: %w", orig)); got != orig {
		t.Errorf("From(wrapped *Error) = %p, want the same error %p", got, orig)
	}
}

// acceptNone is a Select callback for a fleet whose only worker is always at its limit.
func acceptNone(func(string) bool) (string, error) { return "", admission.ErrNoCapacity }

// TestFromRealAdmissionErrors classifies the errors a real admission controller returns, so a change
// in how admission wraps its sentinels cannot silently break the mapping.
func TestFromRealAdmissionErrors(t *testing.T) {
	tests := []struct {
		name     string
		settings admission.Settings
		wantCode string
	}{
		{
			name:     "queue full",
			settings: admission.Settings{MaxInflightPerWorker: 1, QueueSize: 0},
			wantCode: apierror.CodeQueueFull,
		},
		{
			name:     "queue timeout",
			settings: admission.Settings{MaxInflightPerWorker: 1, QueueSize: 1, QueueTimeout: time.Second},
			wantCode: apierror.CodeQueueTimeout,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, err := admission.New(tt.settings, admission.Deps{})
				if err != nil {
					t.Fatal(err)
				}
				_, err = c.Acquire(t.Context(), admission.Request{Queue: "m", Select: acceptNone})
				if err == nil {
					t.Fatal("Acquire succeeded, want a rejection")
				}
				e := apierror.From(err)
				if e.Status != http.StatusTooManyRequests || e.Code != tt.wantCode {
					t.Errorf("From(%q) = %d %s, want 429 %s", err, e.Status, e.Code, tt.wantCode)
				}
			})
		})
	}
}

func TestConnectCode(t *testing.T) {
	tests := []struct {
		name   string
		status int
		want   connect.Code
		// back is StatusFromConnectCode(want): equal to status for the statuses sluice answers with,
		// different for the few HTTP statuses that share a code.
		back int
	}{
		{name: "bad request", status: 400, want: connect.CodeInvalidArgument, back: 400},
		{name: "unauthorized", status: 401, want: connect.CodeUnauthenticated, back: 401},
		{name: "forbidden", status: 403, want: connect.CodePermissionDenied, back: 403},
		{name: "not found", status: 404, want: connect.CodeNotFound, back: 404},
		{name: "conflict", status: 409, want: connect.CodeAlreadyExists, back: 409},
		{name: "too many requests", status: 429, want: connect.CodeResourceExhausted, back: 429},
		{name: "canceled", status: 499, want: connect.CodeCanceled, back: 499},
		{name: "internal", status: 500, want: connect.CodeInternal, back: 500},
		{name: "not implemented", status: 501, want: connect.CodeUnimplemented, back: 501},
		{name: "unavailable", status: 503, want: connect.CodeUnavailable, back: 503},
		{name: "gateway timeout", status: 504, want: connect.CodeDeadlineExceeded, back: 504},
		{name: "payload too large shares invalid argument", status: 413, want: connect.CodeInvalidArgument, back: 400},
		{name: "unprocessable shares invalid argument", status: 422, want: connect.CodeInvalidArgument, back: 400},
		{name: "bad gateway shares unavailable", status: 502, want: connect.CodeUnavailable, back: 503},
		{name: "request timeout shares deadline exceeded", status: 408, want: connect.CodeDeadlineExceeded, back: 504},
		{name: "unlisted status is internal", status: 418, want: connect.CodeInternal, back: 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := apierror.New(tt.status, apierror.CodeInternal, "x", nil)
			got := e.ConnectCode()
			if got != tt.want {
				t.Errorf("ConnectCode() for %d = %v, want %v", tt.status, got, tt.want)
			}
			if back := apierror.StatusFromConnectCode(got); back != tt.back {
				t.Errorf("StatusFromConnectCode(%v) = %d, want %d", got, back, tt.back)
			}
		})
	}
}

func TestStatusFromConnectCodeAliases(t *testing.T) {
	tests := []struct {
		code connect.Code
		want int
	}{
		{connect.CodeFailedPrecondition, 400},
		{connect.CodeOutOfRange, 400},
		{connect.CodeAborted, 409},
		{connect.CodeUnknown, 500},
		{connect.CodeDataLoss, 500},
	}
	for _, tt := range tests {
		t.Run(tt.code.String(), func(t *testing.T) {
			if got := apierror.StatusFromConnectCode(tt.code); got != tt.want {
				t.Errorf("StatusFromConnectCode(%v) = %d, want %d", tt.code, got, tt.want)
			}
		})
	}
}

func errorInfo(t *testing.T, ce *connect.Error) *errdetails.ErrorInfo {
	t.Helper()
	var infos []*errdetails.ErrorInfo
	for _, d := range ce.Details() {
		v, err := d.Value()
		if err != nil {
			t.Fatalf("detail %s: %v", d.Type(), err)
		}
		if info, ok := v.(*errdetails.ErrorInfo); ok {
			infos = append(infos, info)
		}
	}
	if len(infos) != 1 {
		t.Fatalf("got %d ErrorInfo details, want 1", len(infos))
	}
	return infos[0]
}

func TestConnect(t *testing.T) {
	queueFull := fmt.Errorf("%w: %w", admission.ErrRejected, admission.ErrQueueFull)
	tests := []struct {
		name         string
		err          *apierror.Error
		wantCode     connect.Code
		wantReason   string
		wantMetadata map[string]string
	}{
		{
			name:         "queue full with retry after rounds up",
			err:          apierror.From(queueFull).WithRetryAfter(1200 * time.Millisecond),
			wantCode:     connect.CodeResourceExhausted,
			wantReason:   apierror.CodeQueueFull,
			wantMetadata: map[string]string{"retry_after_seconds": "2"},
		},
		{
			name:         "unavailable with whole seconds",
			err:          apierror.From(placement.ErrNoHealthyWorkers).WithRetryAfter(3 * time.Second),
			wantCode:     connect.CodeUnavailable,
			wantReason:   apierror.CodeNoAvailableWorkers,
			wantMetadata: map[string]string{"retry_after_seconds": "3"},
		},
		{
			name:         "shutting down is unavailable with its own one-second retry",
			err:          apierror.From(fmt.Errorf("%w: %w", admission.ErrRejected, admission.ErrShuttingDown)),
			wantCode:     connect.CodeUnavailable,
			wantReason:   apierror.CodeShuttingDown,
			wantMetadata: map[string]string{"retry_after_seconds": "1"},
		},
		{
			name:       "no retry after, no metadata",
			err:        apierror.From(placement.ErrModelNotFound),
			wantCode:   connect.CodeNotFound,
			wantReason: apierror.CodeModelNotFound,
		},
		{
			name:       "invalid request",
			err:        apierror.InvalidRequest("messages", "messages must not be empty"),
			wantCode:   connect.CodeInvalidArgument,
			wantReason: apierror.CodeInvalidRequest,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ce := tt.err.Connect()
			if ce.Code() != tt.wantCode {
				t.Errorf("Code() = %v, want %v", ce.Code(), tt.wantCode)
			}
			if ce.Message() != tt.err.Message {
				t.Errorf("Message() = %q, want %q", ce.Message(), tt.err.Message)
			}
			info := errorInfo(t, ce)
			if info.GetDomain() != apierror.Domain {
				t.Errorf("ErrorInfo domain = %q, want %q", info.GetDomain(), apierror.Domain)
			}
			if diff := cmp.Diff(tt.wantMetadata, info.GetMetadata()); diff != "" {
				t.Errorf("ErrorInfo metadata mismatch (-want +got):\n%s", diff)
			}
			// CodeString reads the reason back, through wrapping too.
			if got := apierror.CodeString(fmt.Errorf("call: %w", ce)); got != tt.wantReason {
				t.Errorf("CodeString() = %q, want %q", got, tt.wantReason)
			}
		})
	}
}

func TestCodeStringWithoutDetail(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{name: "nil", err: nil},
		{name: "plain error", err: errors.New("boom")},
		{name: "connect error without details", err: connect.NewError(connect.CodeInternal, errors.New("boom"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := apierror.CodeString(tt.err); got != "" {
				t.Errorf("CodeString() = %q, want empty", got)
			}
		})
	}
}

func TestWriteHTTP(t *testing.T) {
	tests := []struct {
		name             string
		err              *apierror.Error
		wantStatus       int
		wantRetryAfter   string
		wantRetryAfterMs string
		wantBody         string
	}{
		{
			name:       "param null when empty",
			err:        apierror.New(http.StatusNotFound, apierror.CodeModelNotFound, "no worker serves the requested model", nil),
			wantStatus: 404,
			wantBody:   `{"error":{"message":"no worker serves the requested model","type":"not_found_error","param":null,"code":"model_not_found"}}`,
		},
		{
			name:       "param set",
			err:        apierror.InvalidRequest("messages", "messages is required"),
			wantStatus: 400,
			wantBody:   `{"error":{"message":"messages is required","type":"invalid_request_error","param":"messages","code":"invalid_request"}}`,
		},
		{
			name:           "retry after rounds 1.2s up to 2",
			err:            apierror.New(429, apierror.CodeQueueFull, "full", nil).WithRetryAfter(1200 * time.Millisecond),
			wantStatus:     429,
			wantRetryAfter: "2", wantRetryAfterMs: "1200",
			wantBody: `{"error":{"message":"full","type":"rate_limit_error","param":null,"code":"pd_prefill_queue_full"}}`,
		},
		{
			name:           "retry after of whole seconds is kept",
			err:            apierror.New(503, apierror.CodeNoAvailableWorkers, "none", nil).WithRetryAfter(time.Second),
			wantStatus:     503,
			wantRetryAfter: "1", wantRetryAfterMs: "1000",
			wantBody: `{"error":{"message":"none","type":"service_unavailable_error","param":null,"code":"no_available_workers"}}`,
		},
		{
			name:           "retry after of 1ns rounds up to 1",
			err:            apierror.New(429, apierror.CodeQueueTimeout, "slow", nil).WithRetryAfter(time.Nanosecond),
			wantStatus:     429,
			wantRetryAfter: "1", wantRetryAfterMs: "1",
			wantBody: `{"error":{"message":"slow","type":"rate_limit_error","param":null,"code":"pd_prefill_queue_timeout"}}`,
		},
		{
			name:       "message with quotes is escaped",
			err:        apierror.New(500, apierror.CodeInternal, `bad "thing"`, nil),
			wantStatus: 500,
			wantBody:   `{"error":{"message":"bad \"thing\"","type":"server_error","param":null,"code":"internal_error"}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			tt.err.WriteHTTP(rec)
			if rec.Code != tt.wantStatus {
				t.Errorf("status = %d, want %d", rec.Code, tt.wantStatus)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
			if got := rec.Header().Get("Retry-After"); got != tt.wantRetryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tt.wantRetryAfter)
			}
			if _, ok := rec.Header()["Retry-After"]; !ok && tt.wantRetryAfter != "" {
				t.Error("Retry-After header missing")
			}
			if got := rec.Header().Get("Retry-After-Ms"); got != tt.wantRetryAfterMs {
				t.Errorf("Retry-After-Ms = %q, want %q (milliseconds, rounded up, beside Retry-After)", got, tt.wantRetryAfterMs)
			}
			if diff := cmp.Diff(tt.wantBody+"\n", rec.Body.String()); diff != "" {
				t.Errorf("body mismatch (-want +got):\n%s", diff)
			}
			// The body must also be valid JSON with the four OpenAI fields, param included when null.
			var m map[string]map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
				t.Fatalf("body is not JSON: %v", err)
			}
			if _, ok := m["error"]["param"]; !ok {
				t.Error(`body has no "param" key`)
			}
		})
	}
}

func TestFromUpstream(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		want   wire
	}{
		{
			name:   "openai shaped",
			status: 400,
			body:   `{"error":{"message":"prompt too long","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
			want:   wire{400, "invalid_request_error", "context_length_exceeded", "messages", "prompt too long"},
		},
		{
			name:   "openai shaped with null param and code",
			status: 500,
			body:   `{"error":{"message":"engine crashed","type":"server_error","param":null,"code":null}}`,
			want:   wire{500, "server_error", apierror.CodeUpstream, "", "engine crashed"},
		},
		{
			name:   "engine type names and numeric codes become OpenAI's for the status",
			status: 400,
			body:   `{"error":{"message":"bad sampling params","type":"BadRequestError","code":400}}`,
			want:   wire{400, "invalid_request_error", apierror.CodeInvalidRequest, "", "bad sampling params"},
		},
		{
			name:   "message object",
			status: 503,
			body:   `{"message":"engine is overloaded"}`,
			want:   wire{503, "service_unavailable_error", apierror.CodeUpstream, "", "engine is overloaded"},
		},
		{
			name:   "vllm error object",
			status: 400,
			body:   `{"object":"error","message":"max_tokens too large","type":"BadRequestError","param":"max_tokens","code":400}`,
			want:   wire{400, "invalid_request_error", apierror.CodeInvalidRequest, "max_tokens", "max_tokens too large"},
		},
		{
			name:   "string error",
			status: 503,
			body:   `{"error":"model is still loading"}`,
			want:   wire{503, "service_unavailable_error", apierror.CodeUpstream, "", "model is still loading"},
		},
		{
			name:   "non-JSON body uses the fallback",
			status: 502,
			body:   "<html>Bad Gateway</html>",
			want:   wire{502, "server_error", apierror.CodeUpstream, "", "worker failed"},
		},
		{
			name:   "empty body uses the fallback",
			status: 500,
			body:   "",
			want:   wire{500, "server_error", apierror.CodeUpstream, "", "worker failed"},
		},
		{
			name:   "FastAPI detail",
			status: 429,
			body:   `{"detail":"slow down"}`,
			want:   wire{429, "rate_limit_error", apierror.CodeUpstream, "", "slow down"},
		},
		{
			name:   "JSON without a message uses the fallback",
			status: 404,
			body:   `{"detail":[{"loc":["body"]}]}`,
			want:   wire{404, "not_found_error", apierror.CodeNotFound, "", "worker failed"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := apierror.FromUpstream(tt.status, []byte(tt.body), "worker failed", nil)
			if diff := cmp.Diff(tt.want, wireOf(got)); diff != "" {
				t.Errorf("FromUpstream mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFromWire(t *testing.T) {
	classified := apierror.From(fmt.Errorf("%w: %w", admission.ErrRejected, admission.ErrQueueFull))
	tests := []struct {
		name string
		err  error
		want wire
	}{
		{
			name: "connect error with ErrorInfo keeps the code",
			err:  apierror.New(http.StatusConflict, apierror.CodeAlreadyExists, "worker exists", nil).Connect(),
			want: wire{409, "invalid_request_error", apierror.CodeAlreadyExists, "", "worker exists"},
		},
		{
			name: "connect error without detail takes the status default",
			err:  connect.NewError(connect.CodeNotFound, errors.New("no worker w7")),
			want: wire{404, "not_found_error", apierror.CodeNotFound, "", "no worker w7"},
		},
		{
			name: "wrapped connect error",
			err:  fmt.Errorf("admin: %w", connect.NewError(connect.CodeUnauthenticated, errors.New("missing key"))),
			want: wire{401, "authentication_error", apierror.CodeUnauthorized, "", "missing key"},
		},
		{
			name: "grpc status invalid argument",
			err:  status.Error(codes.InvalidArgument, "type mismatch, parameter: id"),
			want: wire{400, "invalid_request_error", apierror.CodeInvalidRequest, "", "type mismatch, parameter: id"},
		},
		{
			name: "grpc status unimplemented",
			err:  status.Error(codes.Unimplemented, "method FlushCache not implemented"),
			want: wire{501, "server_error", apierror.CodeUnimplemented, "", "method FlushCache not implemented"},
		},
		{
			name: "grpc status unknown falls back to From",
			err:  status.Error(codes.Unknown, "secret detail"),
			want: wire{500, "server_error", apierror.CodeInternal, "", "internal error"},
		},
		{
			name: "plain core error goes through From",
			err:  placement.ErrModelNotFound,
			want: wire{404, "not_found_error", apierror.CodeModelNotFound, "", "no worker serves the requested model"},
		},
		{
			name: "plain unknown error is a generic 500",
			err:  errors.New("secret detail"),
			want: wire{500, "server_error", apierror.CodeInternal, "", "internal error"},
		},
		{
			name: "classified error passes through",
			err:  classified,
			want: wireOf(classified),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := apierror.FromWire(tt.err)
			if diff := cmp.Diff(tt.want, wireOf(got)); diff != "" {
				t.Errorf("FromWire(%v) mismatch (-want +got):\n%s", tt.err, diff)
			}
		})
	}
}

// TestConnectFromWireRoundTrip: an error sent as Connect comes back with the same status and code.
func TestConnectFromWireRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{name: "queue full", err: fmt.Errorf("%w: %w", admission.ErrRejected, admission.ErrQueueFull)},
		{name: "queue timeout", err: fmt.Errorf("%w: %w", admission.ErrRejected, admission.ErrQueueTimeout)},
		{name: "model not found", err: placement.ErrModelNotFound},
		{name: "no healthy workers", err: placement.ErrNoHealthyWorkers},
		{name: "worker exists", err: worker.ErrAlreadyExists},
		{name: "worker managed by discovery", err: fmt.Errorf("%w: w3 is pod ns/p", worker.ErrManaged)},
		{name: "deadline", err: context.DeadlineExceeded},
		{name: "canceled", err: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sent := apierror.From(tt.err)
			got := apierror.FromWire(sent.Connect())
			if got.Status != sent.Status || got.Code != sent.Code || got.Message != sent.Message {
				t.Errorf("round trip = %d %s %q, want %d %s %q", got.Status, got.Code, got.Message, sent.Status, sent.Code, sent.Message)
			}
		})
	}
}

// TestWorkerManagedWireForm pins the one code whose RPC code and HTTP status are not derived from each
// other: FailedPrecondition on RPC, 409 on REST, both ways.
func TestWorkerManagedWireForm(t *testing.T) {
	e := apierror.From(fmt.Errorf("%w: w3", worker.ErrManaged))
	if e.Status != 409 || e.Code != apierror.CodeWorkerManaged {
		t.Fatalf("From = %d %s, want 409 %s", e.Status, e.Code, apierror.CodeWorkerManaged)
	}
	if got := e.Connect().Code(); got != connect.CodeFailedPrecondition {
		t.Errorf("RPC code = %v, want failed_precondition", got)
	}
	if got := apierror.FromWire(e.Connect()); got.Status != 409 || got.Code != apierror.CodeWorkerManaged {
		t.Errorf("FromWire = %d %s, want 409 %s", got.Status, got.Code, apierror.CodeWorkerManaged)
	}
	// Another FailedPrecondition keeps the default mapping.
	other := apierror.FromWire(connect.NewError(connect.CodeFailedPrecondition, errors.New("x")))
	if other.Status != 400 {
		t.Errorf("plain failed_precondition -> %d, want 400", other.Status)
	}
}

// TestFromAuthRefusal: the authenticator's refusals, which carry only a class and a message, are
// rendered as OpenAI's 401 and 403 errors and the matching RPC codes.
func TestFromAuthRefusal(t *testing.T) {
	t.Parallel()
	a, err := auth.New(auth.Config{APIKey: "sk-user", AdminAPIKey: "sk-admin"})
	if err != nil {
		t.Fatal(err)
	}
	req := func(token string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/v1/models", nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		return r
	}
	tests := []struct {
		name  string
		check func(*http.Request) (context.Context, error)
		token string
		want  wire
		code  connect.Code
	}{
		{"missing", a.Inference, "", wire{401, "authentication_error", apierror.CodeUnauthorized, "",
			"missing API key or token (Authorization: Bearer <key>)"}, connect.CodeUnauthenticated},
		{"invalid", a.Inference, "sk-wrong", wire{401, "authentication_error", apierror.CodeUnauthorized, "",
			"invalid API key or token"}, connect.CodeUnauthenticated},
		{"admin invalid", a.Admin, "sk-wrong", wire{401, "authentication_error", apierror.CodeUnauthorized, "",
			"invalid admin API key or token"}, connect.CodeUnauthenticated},
		{"forbidden", a.Admin, "sk-user", wire{403, "permission_error", apierror.CodePermissionDenied, "",
			"this credential does not grant the admin API"}, connect.CodePermissionDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := tt.check(req(tt.token))
			if err == nil {
				t.Fatal("request not refused")
			}
			got := apierror.From(err)
			if diff := cmp.Diff(tt.want, wireOf(got)); diff != "" {
				t.Errorf("From mismatch (-want +got):\n%s", diff)
			}
			if c := got.Connect().Code(); c != tt.code {
				t.Errorf("RPC code = %v, want %v", c, tt.code)
			}
		})
	}
}
