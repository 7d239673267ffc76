package sim

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
)

// The port serves both: gRPC (HTTP/2 with prior knowledge) on grpc-go, HTTP/1 on net/http, including
// a request shorter than HTTP/2's preface and a connection that closes before its first byte.
func TestGRPCNativeSharesThePort(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Mode: ModeInstant, GRPC: true, EngineGRPCOnly: true})
	addr := strings.TrimPrefix(e.URL(), "http://")

	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	silent.Close()

	h, err := healthpb.NewHealthClient(grpcConn(t, e)).Check(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC health = %v, %v", h, err)
	}
	if status, err := getStatus(testClient(t), e.URL()+"/health"); err != nil || status != http.StatusOK {
		t.Fatalf("HTTP/1 health = %d, %v", status, err)
	}

	short := "GET /health HTTP/1.0\r\n\r\n" // 24 bytes only with the CRLFs: the preface is 24
	short = short[:len(short)-4] + "\n\n"
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(sniffTimeout / 2)) // answered at once, not after the mux gives up
	if _, err := io.WriteString(c, short); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil || !strings.HasPrefix(string(got), "HTTP/1.0 200") {
		t.Fatalf("a %d-byte HTTP/1.0 request got %q, %v", len(short), got, err)
	}
}

// bridgeConn serves h with the bridge on a port of its own and returns a client connection to it.
func bridgeConn(t *testing.T, h http.Handler) *grpc.ClientConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newGRPCServer(h, context.Background(), slog.New(slog.DiscardHandler))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

type checker func(context.Context, *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error)

func (f checker) Check(ctx context.Context, r *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	return f(ctx, r)
}

// The bridge carries what a connect handler answers to a grpc-go client as that client expects it:
// messages, header and trailer metadata, the status code, a message needing percent-encoding, error
// details; and what a plain HTTP handler answers as the code gRPC maps its status to.
func TestGRPCNativeBridge(t *testing.T) {
	t.Parallel()
	detail, err := connect.NewErrorDetail(wrapperspb.String("why"))
	if err != nil {
		t.Fatal(err)
	}
	path, health := grpchealth.NewHandler(checker(func(ctx context.Context, r *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
		switch r.Service {
		case "ok":
			if info, _ := connect.CallInfoForHandlerContext(ctx); info == nil || info.RequestHeader().Get("X-Asked") != "yes" {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("x-asked metadata missing"))
			}
			return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
		case "busy":
			cerr := connect.NewError(connect.CodeResourceExhausted, errors.New("queue 100% full,\nretry: später"))
			cerr.Meta().Set("X-Retry-In", "5")
			cerr.AddDetail(detail)
			return nil, cerr
		case "slow":
			return nil, connect.NewError(connect.CodeUnavailable, errors.New("100% busy,\nretry: später"))
		case "abort":
			panic(http.ErrAbortHandler)
		case "panic":
			panic("a bug")
		}
		return nil, connect.NewError(connect.CodeNotFound, errors.New("unknown service"))
	}))
	mux := http.NewServeMux()
	mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Engine", "sim")
		health.ServeHTTP(w, r)
	}))
	mux.HandleFunc("/grpc.health.v1.Health/Watch", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "draining", http.StatusServiceUnavailable)
	})
	conn := bridgeConn(t, mux)
	client := healthpb.NewHealthClient(conn)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-asked", "yes")

	var header, trailer metadata.MD
	resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "ok"}, grpc.Header(&header))
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("ok: %v, %v", resp, err)
	}
	if got := header.Get("x-engine"); len(got) != 1 || got[0] != "sim" {
		t.Errorf("header metadata x-engine = %q, want [sim]", got)
	}

	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{Service: "busy"}, grpc.Trailer(&trailer))
	st, _ := status.FromError(err)
	if st.Code() != codes.ResourceExhausted || st.Message() != "queue 100% full,\nretry: später" {
		t.Errorf("busy: %v, want RESOURCE_EXHAUSTED with the message as written", err)
	}
	if d := st.Details(); len(d) != 1 || d[0].(*wrapperspb.StringValue).GetValue() != "why" {
		t.Errorf("busy: details %v, want the one added", d)
	}
	if got := trailer.Get("x-retry-in"); len(got) != 1 || got[0] != "5" {
		t.Errorf("busy: trailer x-retry-in = %q, want [5]", got)
	}

	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{Service: "slow"})
	if st, _ := status.FromError(err); st.Code() != codes.Unavailable || st.Message() != "100% busy,\nretry: später" {
		t.Errorf("slow: %v, want UNAVAILABLE with the message as written", err)
	}

	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{Service: "abort"})
	wantCode(t, err, codes.Internal, "reset")
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{Service: "panic"})
	wantCode(t, err, codes.Internal, "")

	w, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	wantCode(t, err, codes.Unavailable, "draining")

	_, err = sglangpb.NewSglangSchedulerClient(conn).HealthCheck(ctx, &sglangpb.HealthCheckRequest{})
	wantCode(t, err, codes.Unimplemented, "")

	// The server lived through the panics.
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "ok"}); err != nil {
		t.Fatalf("after the panics: %v", err)
	}
}

// A refusing engine lets its running calls finish and tells their connections to go away; a crash
// ends them at once; either way the engine serves again on the same port afterwards.
func TestGRPCNativeRefuseAndCrash(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Mode: ModeInstant, InstantOutputTokens: 4, GRPC: true, EngineGRPCOnly: true,
		Faults: Faults{Hold: true}})
	client := sglangpb.NewSglangSchedulerClient(grpcConn(t, e))
	health := healthpb.NewHealthClient(grpcConn(t, e))

	type result struct {
		done *sglangpb.GenerateComplete
		err  error
	}
	run := func() chan result {
		ch := make(chan result, 1)
		go func() {
			_, done, err := sglangRun(t.Context(), client, sglangReq("held", "hello there", 4, true))
			ch <- result{done, err}
		}()
		return ch
	}

	held := run()
	waitFor(t, "the call to be held", func() bool { return e.Stats().InFlight == 1 })
	if err := e.SetFaults(Faults{Hold: true, RefuseConnections: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "new calls to be refused", func() bool {
		_, err := health.Check(t.Context(), &healthpb.HealthCheckRequest{})
		return status.Code(err) == codes.Unavailable
	})
	if err := e.SetFaults(Faults{}); err != nil { // releases the held call and listens again
		t.Fatal(err)
	}
	if r := <-held; r.err != nil || r.done.GetCompletionTokens() != 4 {
		t.Fatalf("the call running while the engine refused: %v, %v; want it finished", r.done, r.err)
	}
	waitFor(t, "the engine to serve again", func() bool {
		_, err := health.Check(t.Context(), &healthpb.HealthCheckRequest{})
		return err == nil
	})

	if err := e.SetFaults(Faults{Hold: true}); err != nil {
		t.Fatal(err)
	}
	held = run()
	waitFor(t, "the call to be held", func() bool { return e.Stats().InFlight == 1 })
	e.Crash(20 * time.Millisecond)
	if r := <-held; r.err == nil {
		t.Fatal("a call survived the crash")
	}
	if err := e.SetFaults(Faults{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the engine to serve after its restart", func() bool {
		_, _, err := sglangRun(t.Context(), client, sglangReq("after", "hello there", 4, true))
		return err == nil
	})
}
