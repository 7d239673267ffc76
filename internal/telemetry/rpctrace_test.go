package telemetry_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/gen/sluice/admin/v1/adminv1connect"
	openaiv1 "github.com/sluicegw/sluice/gen/sluice/openai/v1"
	"github.com/sluicegw/sluice/gen/sluice/openai/v1/openaiv1connect"
	"github.com/sluicegw/sluice/internal/telemetry"
)

const (
	incomingTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	incomingSpan  = "00f067aa0ba902b7"
	traceparent   = "00-" + incomingTrace + "-" + incomingSpan + "-01"
)

// admin answers ListWorkers and fails GetWorker; it records the span context its handlers see, which
// is where the core's spans would hang.
type admin struct {
	adminv1connect.UnimplementedAdminServiceHandler
	seen chan trace.SpanContext
}

func (a *admin) ListWorkers(ctx context.Context, _ *adminv1.ListWorkersRequest) (*adminv1.ListWorkersResponse, error) {
	a.seen <- trace.SpanContextFromContext(ctx)
	return &adminv1.ListWorkersResponse{Workers: []*adminv1.Worker{{Id: "w1"}}}, nil
}

func (a *admin) GetWorker(ctx context.Context, _ *adminv1.GetWorkerRequest) (*adminv1.GetWorkerResponse, error) {
	a.seen <- trace.SpanContextFromContext(ctx)
	return nil, connect.NewError(connect.CodeNotFound, errors.New("no worker w9"))
}

// streamer streams one chunk.
type streamer struct {
	openaiv1connect.UnimplementedOpenAIServiceHandler
	seen chan trace.SpanContext
}

func (s *streamer) StreamChatCompletion(ctx context.Context, _ *openaiv1.CreateChatCompletionRequest, st *connect.ServerStream[openaiv1.ChatCompletionChunk]) error {
	s.seen <- trace.SpanContextFromContext(ctx)
	return st.Send(&openaiv1.ChatCompletionChunk{Id: "c1"})
}

type tracingFixture struct {
	exp    *tracetest.InMemoryExporter
	admin  adminv1connect.AdminServiceClient
	openai openaiv1connect.OpenAIServiceClient
	seen   chan trace.SpanContext
}

func newTracingFixture(t *testing.T) *tracingFixture {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	icpt := connect.WithInterceptors(telemetry.RPCTracing{Tracer: tp.Tracer("test"), Propagator: propagation.TraceContext{}})

	seen := make(chan trace.SpanContext, 1)
	mux := http.NewServeMux()
	mux.Handle(adminv1connect.NewAdminServiceHandler(&admin{seen: seen}, icpt))
	mux.Handle(openaiv1connect.NewOpenAIServiceHandler(&streamer{seen: seen}, icpt))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &tracingFixture{
		exp: exp,
		// The interceptor on the client too: client calls must not get server spans.
		admin:  adminv1connect.NewAdminServiceClient(srv.Client(), srv.URL, icpt),
		openai: openaiv1connect.NewOpenAIServiceClient(srv.Client(), srv.URL),
		seen:   seen,
	}
}

// withTraceparent returns a client context whose request carries an incoming traceparent.
func withTraceparent(ctx context.Context) context.Context {
	ctx, info := connect.NewClientContext(ctx)
	info.RequestHeader().Set("traceparent", traceparent)
	return ctx
}

// spanView is the part of a recorded span the tests check.
type spanView struct {
	Name         string
	Kind         trace.SpanKind
	TraceID      string
	ParentSpanID string
	RemoteParent bool
	Status       codes.Code
	Attrs        map[attribute.Key]string
}

func view(s tracetest.SpanStub) spanView {
	attrs := map[attribute.Key]string{}
	for _, kv := range s.Attributes {
		attrs[kv.Key] = kv.Value.String()
	}
	v := spanView{Name: s.Name, Kind: s.SpanKind, TraceID: s.SpanContext.TraceID().String(),
		RemoteParent: s.Parent.IsRemote(), Status: s.Status.Code, Attrs: attrs}
	if s.Parent.IsValid() {
		v.ParentSpanID = s.Parent.SpanID().String()
	}
	return v
}

func TestRPCTracingUnary(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		call func(ctx context.Context, c adminv1connect.AdminServiceClient) error
		want spanView
	}{
		{
			name: "ok",
			call: func(ctx context.Context, c adminv1connect.AdminServiceClient) error {
				_, err := c.ListWorkers(ctx, &adminv1.ListWorkersRequest{})
				return err
			},
			want: spanView{
				Name: "sluice.admin.v1.AdminService/ListWorkers", Kind: trace.SpanKindServer,
				TraceID: incomingTrace, ParentSpanID: incomingSpan, RemoteParent: true, Status: codes.Unset,
				Attrs: map[attribute.Key]string{
					"rpc.system": "connect_rpc",
					"rpc.method": "/sluice.admin.v1.AdminService/ListWorkers",
				},
			},
		},
		{
			name: "error",
			call: func(ctx context.Context, c adminv1connect.AdminServiceClient) error {
				_, err := c.GetWorker(ctx, &adminv1.GetWorkerRequest{Id: "w9"})
				if connect.CodeOf(err) != connect.CodeNotFound {
					return errors.New("want a NotFound error, got " + connect.CodeOf(err).String())
				}
				return nil
			},
			want: spanView{
				Name: "sluice.admin.v1.AdminService/GetWorker", Kind: trace.SpanKindServer,
				TraceID: incomingTrace, ParentSpanID: incomingSpan, RemoteParent: true, Status: codes.Error,
				Attrs: map[attribute.Key]string{
					"rpc.system":                 "connect_rpc",
					"rpc.method":                 "/sluice.admin.v1.AdminService/GetWorker",
					"rpc.connect_rpc.error_code": "not_found",
				},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newTracingFixture(t)
			if err := tt.call(withTraceparent(t.Context()), f.admin); err != nil {
				t.Fatal(err)
			}
			handlerSaw := <-f.seen
			spans := f.exp.GetSpans()
			if len(spans) != 1 {
				t.Fatalf("recorded %d spans, want 1 (the server span)", len(spans))
			}
			if diff := cmp.Diff(tt.want, view(spans[0])); diff != "" {
				t.Errorf("span mismatch (-want +got):\n%s", diff)
			}
			if !handlerSaw.Equal(spans[0].SpanContext) {
				t.Errorf("handler context carries span %v, want the server span %v", handlerSaw, spans[0].SpanContext)
			}
		})
	}
}

func TestRPCTracingWithoutTraceparentStartsATrace(t *testing.T) {
	t.Parallel()
	f := newTracingFixture(t)
	if _, err := f.admin.ListWorkers(t.Context(), &adminv1.ListWorkersRequest{}); err != nil {
		t.Fatal(err)
	}
	<-f.seen
	spans := f.exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("recorded %d spans, want 1", len(spans))
	}
	s := spans[0]
	if s.Parent.IsValid() || !s.SpanContext.IsValid() {
		t.Errorf("span parent = %v, context = %v; want a new root span", s.Parent, s.SpanContext)
	}
	if s.SpanContext.TraceID().String() == incomingTrace {
		t.Error("span reuses a trace id it was never given")
	}
}

func TestRPCTracingStreaming(t *testing.T) {
	t.Parallel()
	f := newTracingFixture(t)
	stream, err := f.openai.StreamChatCompletion(withTraceparent(t.Context()), &openaiv1.CreateChatCompletionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for stream.Receive() {
		ids = append(ids, stream.Msg().GetId())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	_ = stream.Close()
	if diff := cmp.Diff([]string{"c1"}, ids); diff != "" {
		t.Errorf("chunks mismatch (-want +got):\n%s", diff)
	}
	handlerSaw := <-f.seen
	spans := f.exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("recorded %d spans, want 1", len(spans))
	}
	want := spanView{
		Name: "sluice.openai.v1.OpenAIService/StreamChatCompletion", Kind: trace.SpanKindServer,
		TraceID: incomingTrace, ParentSpanID: incomingSpan, RemoteParent: true, Status: codes.Unset,
		Attrs: map[attribute.Key]string{
			"rpc.system": "connect_rpc",
			"rpc.method": "/sluice.openai.v1.OpenAIService/StreamChatCompletion",
		},
	}
	if diff := cmp.Diff(want, view(spans[0])); diff != "" {
		t.Errorf("span mismatch (-want +got):\n%s", diff)
	}
	if !handlerSaw.Equal(spans[0].SpanContext) {
		t.Errorf("handler context carries span %v, want the server span %v", handlerSaw, spans[0].SpanContext)
	}
}
