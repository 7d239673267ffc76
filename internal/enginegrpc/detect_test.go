package enginegrpc

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	trtllmpb "github.com/sluicegw/sluice/gen/trtllm"
	vllmpb "github.com/sluicegw/sluice/gen/vllm/grpc/engine"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Fakes of the engines' services: each answers GetModelInfo and, through the generated
// Unimplemented* embedding, UNIMPLEMENTED for everything else, as the engines' servicers do.
type fakeSGLang struct {
	sglangpb.UnimplementedSglangSchedulerServer
	info *sglangpb.GetModelInfoResponse
	err  error
}

func (f fakeSGLang) GetModelInfo(context.Context, *sglangpb.GetModelInfoRequest) (*sglangpb.GetModelInfoResponse, error) {
	return f.info, f.err
}

type fakeVLLM struct {
	vllmpb.UnimplementedVllmEngineServer
	info *vllmpb.GetModelInfoResponse
}

func (f fakeVLLM) GetModelInfo(context.Context, *vllmpb.GetModelInfoRequest) (*vllmpb.GetModelInfoResponse, error) {
	return f.info, nil
}

type fakeTRTLLM struct {
	trtllmpb.UnimplementedTrtllmServiceServer
	info *trtllmpb.GetModelInfoResponse
}

func (f fakeTRTLLM) GetModelInfo(context.Context, *trtllmpb.GetModelInfoRequest) (*trtllmpb.GetModelInfoResponse, error) {
	return f.info, nil
}

var (
	sglangInfo = &sglangpb.GetModelInfoResponse{
		ModelPath: "Qwen/Qwen3-0.6B", ServedModelName: "qwen3", MaxContextLength: 40960,
		EosTokenIds: []int32{151645, 151643}, VocabSize: 151936,
	}
	vllmInfo = &vllmpb.GetModelInfoResponse{
		ModelPath: "/models/llama", ServedModelName: "llama-3.1-8b", MaxContextLength: 131072,
		EosTokenIds: []int32{128001, 128008, 128009},
	}
	trtllmInfo = &trtllmpb.GetModelInfoResponse{
		ModelId: "meta-llama/Llama-3.1-8B-Instruct", MaxInputLen: 4096, MaxSeqLen: 8192,
	}
)

// methodLog records the gRPC methods a client called.
type methodLog struct {
	mu      sync.Mutex
	methods []string
}

func (l *methodLog) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	l.mu.Lock()
	l.methods = append(l.methods, method)
	l.mu.Unlock()
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (l *methodLog) sorted() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(slices.Values(l.methods))
}

// serve starts a gRPC server on a loopback socket with the standard health service (which every
// engine serves) and whatever register adds, and returns a client connection to it.
func serve(t *testing.T, register func(*grpc.Server)) (*grpc.ClientConn, *methodLog) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	register(srv)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return dial(t, lis.Addr().String())
}

func dial(t *testing.T, addr string) (*grpc.ClientConn, *methodLog) {
	t.Helper()
	log := &methodLog{}
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(log.intercept))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, log
}

// testContext bounds a test's RPCs so that a broken server fails the test instead of hanging it.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestDetectEachEngine(t *testing.T) {
	for _, tc := range []struct {
		name     string
		register func(*grpc.Server)
		want     Protocol
		wantInfo ModelInfo
	}{{
		name: "sglang",
		register: func(s *grpc.Server) {
			sglangpb.RegisterSglangSchedulerServer(s, fakeSGLang{info: sglangInfo})
		},
		want: SGLang,
		wantInfo: ModelInfo{
			ServedModelName: "qwen3", ModelPath: "Qwen/Qwen3-0.6B", ContextLength: 40960,
			EOSTokenIDs: []int32{151645, 151643},
		},
	}, {
		name: "sglang without a served name goes by its model path",
		register: func(s *grpc.Server) {
			sglangpb.RegisterSglangSchedulerServer(s, fakeSGLang{info: &sglangpb.GetModelInfoResponse{
				ModelPath: "Qwen/Qwen3-0.6B", MaxContextLength: 40960, EosTokenIds: []int32{151645},
			}})
		},
		want: SGLang,
		wantInfo: ModelInfo{
			ServedModelName: "Qwen/Qwen3-0.6B", ModelPath: "Qwen/Qwen3-0.6B", ContextLength: 40960,
			EOSTokenIDs: []int32{151645},
		},
	}, {
		name: "vllm",
		register: func(s *grpc.Server) {
			vllmpb.RegisterVllmEngineServer(s, fakeVLLM{info: vllmInfo})
		},
		want: VLLM,
		wantInfo: ModelInfo{
			ServedModelName: "llama-3.1-8b", ModelPath: "/models/llama", ContextLength: 131072,
			EOSTokenIDs: []int32{128001, 128008, 128009},
		},
	}, {
		name: "trtllm",
		register: func(s *grpc.Server) {
			trtllmpb.RegisterTrtllmServiceServer(s, fakeTRTLLM{info: trtllmInfo})
		},
		want:     TRTLLM,
		wantInfo: ModelInfo{ServedModelName: "meta-llama/Llama-3.1-8B-Instruct", ContextLength: 8192},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			conn, log := serve(t, tc.register)
			got, info, err := Detect(testContext(t), conn)
			if err != nil {
				t.Fatalf("Detect: %v", err)
			}
			if got != tc.want {
				t.Errorf("protocol = %q, want %q", got, tc.want)
			}
			if diff := cmp.Diff(tc.wantInfo, info); diff != "" {
				t.Errorf("model info (-want +got):\n%s", diff)
			}
			// Each engine service is asked once, by its upstream method path; health is never asked.
			want := []string{
				"/sglang.grpc.scheduler.SglangScheduler/GetModelInfo",
				"/trtllm.TrtllmService/GetModelInfo",
				"/vllm.grpc.engine.VllmEngine/GetModelInfo",
			}
			if diff := cmp.Diff(want, log.sorted()); diff != "" {
				t.Errorf("methods called (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDetectHealthAloneIsNoEngine(t *testing.T) {
	conn, _ := serve(t, func(*grpc.Server) {})
	// The health service does answer: it just proves nothing about the protocol.
	if _, err := healthpb.NewHealthClient(conn).Check(testContext(t), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health check: %v", err)
	}
	p, _, err := Detect(testContext(t), conn)
	if !errors.Is(err, ErrNotEngine) {
		t.Fatalf("Detect = %q, %v; want ErrNotEngine", p, err)
	}
}

func TestDetectTwoEnginesIsAmbiguous(t *testing.T) {
	conn, _ := serve(t, func(s *grpc.Server) {
		sglangpb.RegisterSglangSchedulerServer(s, fakeSGLang{info: sglangInfo})
		vllmpb.RegisterVllmEngineServer(s, fakeVLLM{info: vllmInfo})
	})
	p, _, err := Detect(testContext(t), conn)
	if !errors.Is(err, ErrAmbiguous) || p != "" {
		t.Fatalf("Detect = %q, %v; want ErrAmbiguous", p, err)
	}
}

// An engine whose service exists but fails (still loading, say) is not taken for another engine.
func TestDetectFailingEngineIsAnError(t *testing.T) {
	conn, _ := serve(t, func(s *grpc.Server) {
		sglangpb.RegisterSglangSchedulerServer(s, fakeSGLang{err: status.Error(codes.Unavailable, "model is loading")})
	})
	p, _, err := Detect(testContext(t), conn)
	if p != "" || status.Code(err) != codes.Unavailable || errors.Is(err, ErrNotEngine) {
		t.Fatalf("Detect = %q, %v; want the engine's UNAVAILABLE", p, err)
	}
}

func TestDetectUnreachableIsTransportError(t *testing.T) {
	// A port that was just listened on and closed: nothing answers there.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	conn, _ := dial(t, addr)
	p, info, err := Detect(testContext(t), conn)
	if p != "" || status.Code(err) != codes.Unavailable || errors.Is(err, ErrNotEngine) || errors.Is(err, ErrAmbiguous) {
		t.Fatalf("Detect = %q, %+v, %v; want a transport error (UNAVAILABLE)", p, info, err)
	}
}

func TestGetModelInfoOfNamedProtocol(t *testing.T) {
	conn, _ := serve(t, func(s *grpc.Server) {
		vllmpb.RegisterVllmEngineServer(s, fakeVLLM{info: vllmInfo})
	})
	ctx := testContext(t)
	info, err := GetModelInfo(ctx, conn, VLLM)
	if err != nil || info.ServedModelName != "llama-3.1-8b" {
		t.Fatalf("GetModelInfo(vllm) = %+v, %v", info, err)
	}
	// The wrong protocol named (say by --runtime) is the engine's UNIMPLEMENTED, not a silent success.
	if _, err := GetModelInfo(ctx, conn, SGLang); status.Code(err) != codes.Unimplemented {
		t.Fatalf("GetModelInfo(sglang) on a vLLM engine: %v; want UNIMPLEMENTED", err)
	}
	if _, err := GetModelInfo(ctx, conn, Protocol("mlx")); err == nil {
		t.Fatal("GetModelInfo(mlx) succeeded")
	}
}

func TestParseProtocol(t *testing.T) {
	for in, want := range map[string]Protocol{
		"sglang": SGLang, "vllm": VLLM, "trtllm": TRTLLM, "tensorrt-llm": TRTLLM, "SGLang": SGLang,
	} {
		if got, err := ParseProtocol(in); err != nil || got != want {
			t.Errorf("ParseProtocol(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "grpc", "mlx"} {
		if got, err := ParseProtocol(in); err == nil {
			t.Errorf("ParseProtocol(%q) = %q, want an error", in, got)
		}
	}
}
