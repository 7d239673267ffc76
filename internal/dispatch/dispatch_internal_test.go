package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/worker"
)

func TestPlacementRequest(t *testing.T) {
	br := &body.Request{Route: RouteChat, Model: "llama", Text: "hello there"}
	tests := []struct {
		name      string
		header    http.Header
		want      *placement.Request
		wantErr   string // substring of the 400's message; "" for success
		wantParam string // the header named by the 400 (default X-Sluice-Target-Worker)
	}{
		{
			name:   "no routing headers",
			header: http.Header{},
			want:   &placement.Request{Model: "llama", Text: "hello there", TargetWorker: -1},
		},
		{
			name:   "sluice routing key",
			header: http.Header{"X-Sluice-Routing-Key": {"user-42"}},
			want:   &placement.Request{Model: "llama", Text: "hello there", RoutingKey: "user-42", TargetWorker: -1},
		},
		{
			name:   "SMG routing key alias",
			header: http.Header{"X-Smg-Routing-Key": {"session-7"}},
			want:   &placement.Request{Model: "llama", Text: "hello there", RoutingKey: "session-7", TargetWorker: -1},
		},
		{
			name:   "sluice routing key wins over the alias",
			header: http.Header{"X-Sluice-Routing-Key": {"mine"}, "X-Smg-Routing-Key": {"theirs"}},
			want:   &placement.Request{Model: "llama", Text: "hello there", RoutingKey: "mine", TargetWorker: -1},
		},
		{
			name:   "target worker index",
			header: http.Header{"X-Sluice-Target-Worker": {"2"}},
			want:   &placement.Request{Model: "llama", Text: "hello there", TargetWorker: 2},
		},
		{
			name:   "target worker zero",
			header: http.Header{"X-Sluice-Target-Worker": {"0"}},
			want:   &placement.Request{Model: "llama", Text: "hello there", TargetWorker: 0},
		},
		{
			name:   "SMG target worker alias",
			header: http.Header{"X-Smg-Target-Worker": {"1"}},
			want:   &placement.Request{Model: "llama", Text: "hello there", TargetWorker: 1},
		},
		{
			name:   "sluice target wins over the alias",
			header: http.Header{"X-Sluice-Target-Worker": {"3"}, "X-Smg-Target-Worker": {"1"}},
			want:   &placement.Request{Model: "llama", Text: "hello there", TargetWorker: 3},
		},
		{
			name:   "routing key and target together",
			header: http.Header{"X-Sluice-Target-Worker": {"1"}, "X-Sluice-Routing-Key": {"k"}},
			want:   &placement.Request{Model: "llama", Text: "hello there", RoutingKey: "k", TargetWorker: 1},
		},
		{
			name:    "non-numeric target",
			header:  http.Header{"X-Sluice-Target-Worker": {"abc"}},
			wantErr: `"abc"`,
		},
		{
			name:    "negative target",
			header:  http.Header{"X-Sluice-Target-Worker": {"-1"}},
			wantErr: `"-1"`,
		},
		{
			name:    "target with spaces",
			header:  http.Header{"X-Sluice-Target-Worker": {" 1"}},
			wantErr: `" 1"`,
		},
		{
			name:    "overflowing target",
			header:  http.Header{"X-Sluice-Target-Worker": {"99999999999999999999"}},
			wantErr: `"99999999999999999999"`,
		},
		{
			name:      "invalid SMG target",
			header:    http.Header{"X-Smg-Target-Worker": {"x"}},
			wantErr:   `"x"`,
			wantParam: HeaderSMGTargetWorker,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := placementRequest(br, tt.header, canonicalHeaders([]string{HeaderRoutingKey, HeaderSMGRoutingKey})) // as New keeps them
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("placementRequest() error = %v", err)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("placementRequest() mismatch (-want +got):\n%s", diff)
				}
				return
			}
			if err == nil {
				t.Fatalf("placementRequest() = %+v, want an error", got)
			}
			var ae *apierror.Error
			if !errors.As(err, &ae) {
				t.Fatalf("error %T is not an *apierror.Error", err)
			}
			if ae.Status != http.StatusBadRequest || ae.Code != apierror.CodeInvalidRequest {
				t.Errorf("error = %d %s, want 400 %s", ae.Status, ae.Code, apierror.CodeInvalidRequest)
			}
			if tt.wantParam == "" {
				tt.wantParam = HeaderTargetWorker
			}
			if ae.Param != tt.wantParam {
				t.Errorf("Param = %q, want the header the client sent, %q", ae.Param, tt.wantParam)
			}
			if !strings.Contains(ae.Message, tt.wantErr) {
				t.Errorf("Message = %q, want it to quote %s", ae.Message, tt.wantErr)
			}
		})
	}
}

// TestHeaderNamesCanonicalOnce: the header names of the configuration (lower case, as the flags spell
// them) still find the client's headers, and reading them costs no allocation per request (New
// canonicalizes them once, instead of Header.Get on every request).
func TestHeaderNamesCanonicalOnce(t *testing.T) {
	reg := worker.NewRegistry(worker.RegistryOptions{})
	pols, err := placement.NewSet(placement.Config{})
	if err != nil {
		t.Fatal(err)
	}
	adm, err := admission.New(admission.Settings{}, admission.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	x, err := New(Config{RequestIDHeaders: []string{"x-correlation-id", "x-request-id"}, RoutingKeyHeaders: []string{"x-session-id"}},
		Deps{Registry: reg, Policies: pols, Admission: adm})
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("x-request-id", "req-1")
	h.Set("x-session-id", "s-1")
	h.Set("x-smg-target-worker", "2")
	br := &body.Request{Route: RouteChat, Model: "m"}
	var id string
	var preq *placement.Request
	allocs := testing.AllocsPerRun(50, func() {
		id = firstHeader(h, x.cfg.RequestIDHeaders)
		preq, _ = placementRequest(br, h, x.cfg.RoutingKeyHeaders)
	})
	if id != "req-1" || preq.RoutingKey != "s-1" || preq.TargetWorker != 2 {
		t.Fatalf("request id %q, routing key %q, target %d; want req-1, s-1, 2", id, preq.RoutingKey, preq.TargetWorker)
	}
	if allocs > 1 { // the placement.Request itself
		t.Errorf("reading the headers allocates %v times per request, want at most 1", allocs)
	}
}

func TestIsRetryable(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{name: "upstream 408", err: &UpstreamError{Status: 408}, want: true},
		{name: "upstream 429", err: &UpstreamError{Status: 429}, want: true},
		{name: "upstream 500", err: &UpstreamError{Status: 500}, want: true},
		{name: "upstream 502", err: &UpstreamError{Status: 502}, want: true},
		{name: "upstream 503", err: &UpstreamError{Status: 503}, want: true},
		{name: "upstream 504", err: &UpstreamError{Status: 504}, want: true},
		{name: "wrapped upstream 503", err: fmt.Errorf("decode leg: %w", &UpstreamError{Status: 503}), want: true},
		{name: "upstream 400", err: &UpstreamError{Status: 400}, want: false},
		{name: "upstream 401", err: &UpstreamError{Status: 401}, want: false},
		{name: "upstream 404", err: &UpstreamError{Status: 404}, want: false},
		{name: "upstream 409", err: &UpstreamError{Status: 409}, want: false},
		{name: "upstream 422", err: &UpstreamError{Status: 422}, want: false},
		{name: "upstream 501", err: &UpstreamError{Status: 501}, want: false},
		{name: "transport refused", err: &TransportError{Worker: "w", Err: errors.New("connect: connection refused")}, want: true},
		{name: "transport deadline", err: &TransportError{Worker: "w", Err: context.DeadlineExceeded}, want: true},
		{name: "transport canceled", err: &TransportError{Worker: "w", Err: context.Canceled}, want: false},
		{
			name: "transport canceled inside url.Error",
			err:  &TransportError{Worker: "w", Err: &url.Error{Op: "Post", URL: "http://w/x", Err: context.Canceled}},
			want: false,
		},
		{name: "queue full", err: fmt.Errorf("%w: %w", admission.ErrRejected, admission.ErrQueueFull), want: false},
		{name: "queue timeout", err: fmt.Errorf("%w: %w", admission.ErrRejected, admission.ErrQueueTimeout), want: false},
		{name: "no healthy workers", err: fmt.Errorf("%w: %w", placement.ErrUnavailable, placement.ErrNoHealthyWorkers), want: false},
		{name: "model not found", err: placement.ErrModelNotFound, want: false},
		{name: "invalid target", err: placement.ErrInvalidTarget, want: false},
		{name: "classified 503", err: apierror.New(503, apierror.CodeNoAvailableWorkers, "x", nil), want: false},
		{name: "nil", err: nil, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := isRetryable(tt.err); got != tt.want {
				t.Errorf("isRetryable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestUpstreamErrorAPIError(t *testing.T) {
	tests := []struct {
		name        string
		err         *UpstreamError
		wantStatus  int
		wantCode    string
		wantMessage string
	}{
		{
			name:        "openai-shaped body is relayed",
			err:         &UpstreamError{Worker: "http://w1", Status: 400, Body: []byte(`{"error":{"message":"too long","type":"invalid_request_error","code":"context_length_exceeded"}}`)},
			wantStatus:  400,
			wantCode:    "context_length_exceeded",
			wantMessage: "too long",
		},
		{
			name:        "503 keeps its status",
			err:         &UpstreamError{Worker: "http://w1", Status: 503, Body: []byte(`{"message":"overloaded"}`)},
			wantStatus:  503,
			wantCode:    apierror.CodeUpstream,
			wantMessage: "overloaded",
		},
		{
			name:        "non-JSON body gets a generic message (no worker URL or raw body to the client)",
			err:         &UpstreamError{Worker: "http://w1", Status: 500, Body: []byte("boom")},
			wantStatus:  500,
			wantCode:    apierror.CodeUpstream,
			wantMessage: "upstream worker answered HTTP 500",
		},
		{
			name:        "explicit message",
			err:         &UpstreamError{Worker: "http://w1", Status: 502, Message: "prefill response has no usable kv_transfer_params"},
			wantStatus:  502,
			wantCode:    apierror.CodeUpstream,
			wantMessage: "prefill response has no usable kv_transfer_params",
		},
		{
			name:        "401 to the client's own credentials is the client's",
			err:         &UpstreamError{Worker: "http://w1", Status: 401, ClientAuth: true, Body: []byte(`{"detail":"Invalid API key"}`)},
			wantStatus:  401,
			wantCode:    apierror.CodeUnauthorized,
			wantMessage: "Invalid API key",
		},
		{
			name:        "403 to the client's own credentials keeps the engine's code",
			err:         &UpstreamError{Worker: "http://w1", Status: 403, ClientAuth: true, Body: []byte(`{"error":{"message":"no","code":"forbidden"}}`)},
			wantStatus:  403,
			wantCode:    "forbidden",
			wantMessage: "no",
		},
		{
			name:        "403 without a body",
			err:         &UpstreamError{Worker: "http://w1", Status: 403, ClientAuth: true},
			wantStatus:  403,
			wantCode:    apierror.CodePermissionDenied,
			wantMessage: "upstream worker answered HTTP 403",
		},
		{
			name:        "401 to the gateway's worker key is a 502",
			err:         &UpstreamError{Worker: "http://w1", Status: 401, Body: []byte(`{"detail":"Invalid API key"}`)},
			wantStatus:  502,
			wantCode:    apierror.CodeUpstream,
			wantMessage: "upstream worker refused the gateway's credentials (HTTP 401)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ae := tt.err.APIError()
			if ae.Status != tt.wantStatus || ae.Code != tt.wantCode || ae.Message != tt.wantMessage {
				t.Errorf("APIError() = %d %s %q, want %d %s %q", ae.Status, ae.Code, ae.Message, tt.wantStatus, tt.wantCode, tt.wantMessage)
			}
			// The boundary classification must agree with the error's own.
			if got := apierror.From(fmt.Errorf("attempt: %w", tt.err)); got.Status != tt.wantStatus {
				t.Errorf("apierror.From() status = %d, want %d", got.Status, tt.wantStatus)
			}
		})
	}
}

func TestUpstreamErrorTruncatesBody(t *testing.T) {
	e := &UpstreamError{Worker: "http://w1", Status: 500, Body: []byte(strings.Repeat("x", 2000))}
	if got, want := len(e.Error()), len("worker http://w1 answered 500: ")+512+len("..."); got != want {
		t.Errorf("len(Error()) = %d, want %d (body truncated to 512 bytes)", got, want)
	}
}

func TestTransportErrorAPIError(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantStatus int
	}{
		{name: "connection refused", err: errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), wantStatus: 502},
		{name: "EOF", err: io.ErrUnexpectedEOF, wantStatus: 502},
		{name: "os deadline", err: os.ErrDeadlineExceeded, wantStatus: 504},
		{name: "url.Error timeout", err: &url.Error{Op: "Post", URL: "http://w/x", Err: os.ErrDeadlineExceeded}, wantStatus: 504},
		{name: "context deadline", err: context.DeadlineExceeded, wantStatus: 504},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			te := &TransportError{Worker: "http://w1", Err: tt.err}
			ae := te.APIError()
			if ae.Status != tt.wantStatus || ae.Code != apierror.CodeUpstream {
				t.Errorf("APIError() = %d %s, want %d %s", ae.Status, ae.Code, tt.wantStatus, apierror.CodeUpstream)
			}
			if !errors.Is(ae, tt.err) {
				t.Errorf("APIError() does not unwrap to %v", tt.err)
			}
		})
	}
}

// countingCloser counts Close calls and returns a fixed error.
type countingCloser struct {
	io.Reader
	mu     sync.Mutex
	closes int
	err    error
}

func (c *countingCloser) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closes++
	return c.err
}

func TestOnCloseRunsOnce(t *testing.T) {
	closeErr := errors.New("close failed")
	inner := &countingCloser{Reader: strings.NewReader("body"), err: closeErr}
	var mu sync.Mutex
	calls := 0
	oc := &onClose{ReadCloser: inner, fn: func() {
		mu.Lock()
		calls++
		mu.Unlock()
	}}

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := oc.Close(); !errors.Is(err, closeErr) {
				t.Errorf("Close() = %v, want the inner Close error", err)
			}
		})
	}
	wg.Wait()
	if err := oc.Close(); !errors.Is(err, closeErr) {
		t.Errorf("Close() = %v, want the inner Close error", err)
	}
	if calls != 1 {
		t.Errorf("fn ran %d times, want 1", calls)
	}
	if inner.closes != 9 {
		t.Errorf("inner Close ran %d times, want 9 (every Close reaches the body)", inner.closes)
	}
}

// errReader returns data once, then err forever.
type errReader struct {
	data []byte
	err  error
}

func (r *errReader) Read(p []byte) (int, error) {
	if len(r.data) > 0 {
		n := copy(p, r.data)
		r.data = r.data[n:]
		return n, nil
	}
	return 0, r.err
}

// TestOnCloseEndsSpan: a leg's body ends its span once, after fn, however often it is closed.
func TestOnCloseEndsSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	_, span := tp.Tracer("test").Start(t.Context(), "leg")
	var endedBeforeFn bool
	oc := &onClose{ReadCloser: io.NopCloser(strings.NewReader("")), span: span,
		fn: func() { endedBeforeFn = len(exp.GetSpans()) > 0 }}
	for range 2 {
		if err := oc.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if spans := exp.GetSpans(); len(spans) != 1 || spans[0].Name != "leg" {
		t.Fatalf("ended spans %v, want the leg's, once", spans)
	}
	if endedBeforeFn {
		t.Error("the span ended before fn ran")
	}
}

func TestLegBody(t *testing.T) {
	readErr := errors.New("connection reset by peer")
	prefillFailed := errors.New("prefill leg failed")
	tests := []struct {
		name       string
		readErr    error
		cancel     bool
		wantErr    error  // errors.Is target
		wantPrefix string // prefix of the error text
	}{
		{name: "error with ctx live passes through", readErr: readErr, wantErr: readErr, wantPrefix: readErr.Error()},
		{name: "error with ctx done becomes request aborted", readErr: readErr, cancel: true, wantErr: prefillFailed, wantPrefix: "request aborted: "},
		{name: "EOF with ctx done stays EOF", readErr: io.EOF, cancel: true, wantErr: io.EOF, wantPrefix: "EOF"},
		{name: "EOF with ctx live stays EOF", readErr: io.EOF, wantErr: io.EOF, wantPrefix: "EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(t.Context())
			defer cancel(nil)
			if tt.cancel {
				cancel(prefillFailed)
			}
			lb := &legBody{ReadCloser: io.NopCloser(&errReader{data: []byte("data: x\n\n"), err: tt.readErr}), ctx: ctx}
			got, err := io.ReadAll(lb)
			if string(got) != "data: x\n\n" {
				t.Errorf("read %q, want the bytes before the error", got)
			}
			if errors.Is(tt.wantErr, io.EOF) {
				// io.ReadAll hides EOF: read once more to see it.
				_, err = lb.Read(make([]byte, 1))
			}
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("error = %v, want errors.Is %v", err, tt.wantErr)
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.wantPrefix) {
				t.Errorf("error = %v, want prefix %q", err, tt.wantPrefix)
			}
		})
	}
}

func TestClassifyRequestError(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		wantParam string
		wantMsg   string
	}{
		{name: "request error names the field", err: &body.RequestError{Param: "messages", Message: "messages is required"}, wantParam: "messages", wantMsg: "messages is required"},
		{name: "other error", err: errors.New("bad route"), wantMsg: "bad route"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ae *apierror.Error
			if !errors.As(classifyRequestError(tt.err), &ae) {
				t.Fatal("not an *apierror.Error")
			}
			if ae.Status != 400 || ae.Param != tt.wantParam || ae.Message != tt.wantMsg {
				t.Errorf("got %d param=%q %q, want 400 param=%q %q", ae.Status, ae.Param, ae.Message, tt.wantParam, tt.wantMsg)
			}
		})
	}
}

func TestClassifyRequestErrorMalformedJSON(t *testing.T) {
	_, err := body.ParseRequest(RouteChat, []byte(`{"model":`))
	var ae *apierror.Error
	if !errors.As(classifyRequestError(err), &ae) {
		t.Fatal("not an *apierror.Error")
	}
	if ae.Code != apierror.CodeInvalidJSON {
		t.Errorf("Code = %q, want %q", ae.Code, apierror.CodeInvalidJSON)
	}
}

func TestFinalRetryAfter(t *testing.T) {
	d, _ := newTestDispatcher(t, Config{})
	est := d.d.Admission.RetryAfter()
	if est <= 0 {
		t.Fatalf("admission RetryAfter() = %v, want > 0", est)
	}
	tests := []struct {
		name       string
		err        error
		wantStatus int
		want       time.Duration
	}{
		{name: "queue full 429", err: fmt.Errorf("%w: %w", admission.ErrRejected, admission.ErrQueueFull), wantStatus: 429, want: est},
		{name: "queue timeout 429", err: fmt.Errorf("%w: %w", admission.ErrRejected, admission.ErrQueueTimeout), wantStatus: 429, want: est},
		{name: "no healthy workers 503", err: fmt.Errorf("%w: %w", placement.ErrUnavailable, placement.ErrNoHealthyWorkers), wantStatus: 503, want: est},
		{name: "upstream 503", err: &UpstreamError{Worker: "http://w", Status: 503}, wantStatus: 503, want: est},
		{name: "upstream 429", err: &UpstreamError{Worker: "http://w", Status: 429}, wantStatus: 429, want: est},
		{name: "preset retry after is kept", err: apierror.New(503, apierror.CodeNoAvailableWorkers, "x", nil).WithRetryAfter(7 * time.Second), wantStatus: 503, want: 7 * time.Second},
		{name: "model not found 404", err: placement.ErrModelNotFound, wantStatus: 404},
		{name: "upstream 500", err: &UpstreamError{Worker: "http://w", Status: 500}, wantStatus: 500},
		{name: "upstream 502", err: &TransportError{Worker: "http://w", Err: errors.New("refused")}, wantStatus: 502},
		{name: "invalid request 400", err: apierror.InvalidRequest("model", "bad"), wantStatus: 400},
		{name: "unknown 500", err: errors.New("boom"), wantStatus: 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ae *apierror.Error
			if !errors.As(d.final(tt.err), &ae) {
				t.Fatal("final() did not return an *apierror.Error")
			}
			if ae.Status != tt.wantStatus || ae.RetryAfter != tt.want {
				t.Errorf("final() = %d RetryAfter=%v, want %d RetryAfter=%v", ae.Status, ae.RetryAfter, tt.wantStatus, tt.want)
			}
		})
	}
}

func TestNewRequiresCore(t *testing.T) {
	reg := worker.NewRegistry(worker.RegistryOptions{})
	pols, err := placement.NewSet(placement.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	adm, err := admission.New(admission.Settings{MaxInflightPerWorker: 1, QueueSize: 1, QueueTimeout: time.Second}, admission.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		deps    Deps
		wantErr bool
	}{
		{name: "all present", deps: Deps{Registry: reg, Policies: pols, Admission: adm, HTTP: &http.Client{}}},
		{name: "no registry", deps: Deps{Policies: pols, Admission: adm}, wantErr: true},
		{name: "no policies", deps: Deps{Registry: reg, Admission: adm}, wantErr: true},
		{name: "no admission", deps: Deps{Registry: reg, Policies: pols}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := New(Config{}, tt.deps)
			if (err != nil) != tt.wantErr {
				t.Fatalf("New() error = %v, wantErr %v", err, tt.wantErr)
			}
			if err == nil && d.cfg.Retry.MaxAttempts != 1 {
				t.Errorf("MaxAttempts = %d, want 1 when unset", d.cfg.Retry.MaxAttempts)
			}
		})
	}
}
