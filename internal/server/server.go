// Package server assembles sluice's single listener: one http.Server speaking HTTP/1.1 and h2c that
// serves Connect, gRPC and gRPC-Web for the typed services, REST for the admin API (grpc-gateway,
// in-process), the OpenAI REST surface, gRPC reflection and health, /health, /readiness and /metrics.
// It owns no business logic: handlers arrive already built.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/gen/sluice/admin/v1/adminv1connect"
	"github.com/sluicegw/sluice/gen/sluice/openai/v1/openaiv1connect"
	"github.com/sluicegw/sluice/internal/apierror"
)

// AdminService is the admin implementation: the Connect handler interface and the go-grpc server
// interface (for grpc-gateway's in-process REST), which share method signatures.
type AdminService interface {
	adminv1connect.AdminServiceHandler
	adminv1.AdminServiceServer
}

// Options are the parts the server assembles. Nil handlers are left out of the mux.
type Options struct {
	Logger *slog.Logger
	// Admin serves sluice.admin.v1 over Connect/gRPC/gRPC-Web and REST under /admin/v1/.
	Admin AdminService
	// AdminAuth guards every admin route (RPC and REST); nil means open.
	AdminAuth func(r *http.Request) error
	// OpenAI serves sluice.openai.v1 over Connect/gRPC/gRPC-Web.
	OpenAI openaiv1connect.OpenAIServiceHandler
	// InferenceAuth guards the inference routes (typed RPC and REST); nil means open.
	InferenceAuth func(r *http.Request) error
	// REST serves the OpenAI REST surface (/v1/..., /generate).
	REST http.Handler
	// Metrics serves /metrics.
	Metrics http.Handler
	// Ready reports whether the gateway can serve (nil error) for /readiness and gRPC health.
	Ready func() error
	// HandlerOptions are added to every Connect handler (interceptors).
	HandlerOptions []connect.HandlerOption
	// SeparateAdmin leaves the admin routes out of Handler; AdminHandler serves them instead.
	SeparateAdmin bool
	// Pprof serves net/http/pprof under /debug/pprof/ with the admin routes (and their auth).
	Pprof bool
	// Internal are Connect services served with the admin routes, behind the same auth: cluster
	// admission's coordination service.
	Internal []InternalService
}

// InternalService is a Connect service for the admin listener.
type InternalService struct {
	Name, Path string
	Handler    http.Handler
}

// Handlers are the assembled routes: Main for the public port, Admin for a separate admin port (nil
// unless Options.SeparateAdmin).
type Handlers struct {
	Main  http.Handler
	Admin http.Handler
}

// NewHandlers builds the routes.
func NewHandlers(o Options) (*Handlers, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	main := http.NewServeMux()
	services := []string{grpchealth.HealthV1ServiceName}

	if o.OpenAI != nil {
		path, h := openaiv1connect.NewOpenAIServiceHandler(o.OpenAI, o.HandlerOptions...)
		main.Handle(path, guardRPC(h, o.InferenceAuth))
		services = append(services, openaiv1connect.OpenAIServiceName)
	}
	if o.REST != nil {
		main.Handle("/v1/", guard(o.REST, o.InferenceAuth))
		main.Handle("/generate", guard(o.REST, o.InferenceAuth))
	}

	adminMux := main
	if o.SeparateAdmin {
		adminMux = http.NewServeMux()
	}
	if o.Admin != nil {
		path, h := adminv1connect.NewAdminServiceHandler(o.Admin, o.HandlerOptions...)
		adminMux.Handle(path, guardRPC(h, o.AdminAuth))
		gw := runtime.NewServeMux(
			runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.JSONPb{
				MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
				UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
			}),
			runtime.WithErrorHandler(restErrorHandler),
			runtime.WithRoutingErrorHandler(restRoutingErrorHandler),
		)
		if err := adminv1.RegisterAdminServiceHandlerServer(context.Background(), gw, o.Admin); err != nil {
			return nil, fmt.Errorf("admin REST: %w", err)
		}
		adminMux.Handle("/admin/v1/", guard(gw, o.AdminAuth))
		services = append(services, adminv1connect.AdminServiceName)
	}

	for _, is := range o.Internal {
		adminMux.Handle(is.Path, guardRPC(is.Handler, o.AdminAuth))
		services = append(services, is.Name)
	}

	if o.Pprof {
		adminMux.Handle("/debug/pprof/", guard(http.HandlerFunc(pprof.Index), o.AdminAuth))
		adminMux.Handle("/debug/pprof/cmdline", guard(http.HandlerFunc(pprof.Cmdline), o.AdminAuth))
		adminMux.Handle("/debug/pprof/profile", guard(http.HandlerFunc(pprof.Profile), o.AdminAuth))
		adminMux.Handle("/debug/pprof/symbol", guard(http.HandlerFunc(pprof.Symbol), o.AdminAuth))
		adminMux.Handle("/debug/pprof/trace", guard(http.HandlerFunc(pprof.Trace), o.AdminAuth))
	}

	reflector := grpcreflect.NewStaticReflector(services...)
	main.Handle(grpcreflect.NewHandlerV1(reflector))
	main.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	if o.SeparateAdmin {
		adminMux.Handle(grpcreflect.NewHandlerV1(reflector))
		adminMux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	}
	main.Handle(grpchealth.NewHandler(&healthChecker{ready: o.Ready}))

	main.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	main.HandleFunc("GET /readiness", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if o.Ready != nil {
			if err := o.Ready(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				b, _ := json.Marshal(map[string]string{"status": "not_ready", "reason": err.Error()})
				_, _ = w.Write(append(b, '\n'))
				return
			}
		}
		_, _ = w.Write([]byte(`{"status":"ready"}` + "\n"))
	})
	if o.Metrics != nil {
		main.Handle("GET /metrics", o.Metrics)
	}
	main.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		apierror.New(http.StatusNotFound, apierror.CodeNotFound, fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path), nil).WriteHTTP(w)
	})
	hs := &Handlers{Main: main}
	if o.SeparateAdmin {
		hs.Admin = adminMux
	}
	return hs, nil
}

// guard runs auth before a REST handler; failures get the OpenAI-shaped JSON body.
func guard(h http.Handler, auth func(*http.Request) error) http.Handler {
	if auth == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := auth(r); err != nil {
			apierror.From(err).WriteHTTP(w)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// guardRPC runs auth before a Connect handler; failures are answered in the RPC protocol the client
// speaks (Connect, gRPC or gRPC-Web), with the machine code in the error details.
func guardRPC(h http.Handler, auth func(*http.Request) error) http.Handler {
	if auth == nil {
		return h
	}
	ew := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := auth(r); err != nil {
			e := apierror.From(err)
			if ew.IsSupported(r) {
				_ = ew.Write(w, r, e.Connect())
				return
			}
			e.WriteHTTP(w)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func restErrorHandler(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, _ *http.Request, err error) {
	apierror.FromWire(err).WriteHTTP(w)
}

func restRoutingErrorHandler(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, status int) {
	msg := fmt.Sprintf("no admin route for %s %s", r.Method, r.URL.Path)
	code := apierror.CodeNotFound
	if status == http.StatusMethodNotAllowed {
		msg = fmt.Sprintf("method %s not allowed on %s", r.Method, r.URL.Path)
		code = apierror.CodeInvalidRequest
	}
	apierror.New(status, code, msg, nil).WriteHTTP(w)
}

// healthChecker answers gRPC health: the server as a whole ("") is SERVING while it runs (liveness);
// the inference service is SERVING only when the gateway is ready (readiness), so a gRPC load balancer can
// probe either.
type healthChecker struct{ ready func() error }

func (c *healthChecker) Check(_ context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	switch req.Service {
	case "", adminv1connect.AdminServiceName:
		return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
	case openaiv1connect.OpenAIServiceName:
		if c.ready != nil && c.ready() != nil {
			return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
		}
		return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("unknown service %q", req.Service))
}

// Server is one listener serving HTTP/1.1 and h2c.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Listen binds addr (host:port; port 0 picks a free one) for h.
func Listen(addr string, h http.Handler, logger *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Handler:           h,
		Protocols:         &p,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       5 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
	}
	return &Server{srv: srv, ln: ln}, nil
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve serves until Shutdown; it returns nil after a shutdown.
func (s *Server) Serve() error {
	if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops accepting, waits for in-flight requests until ctx ends, then closes what is left.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	return err
}
