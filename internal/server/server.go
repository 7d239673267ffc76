// Package server assembles sluice's single listener: one http.Server speaking HTTP/1.1 and h2c that
// serves Connect, gRPC and gRPC-Web for the typed services, REST for the admin API (grpc-gateway,
// in-process), the OpenAI REST surface, gRPC reflection and health, /health, /readiness and /metrics.
// It owns no business logic: handlers arrive already built.
package server

import (
	"context"
	"crypto/tls"
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
	"github.com/sluicegw/sluice/internal/concurrency"
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
	// AdminAuth guards every admin route (RPC and REST); nil means open. It returns the request's
	// context carrying the caller (for audit lines and spans), or the error to send.
	AdminAuth func(r *http.Request) (context.Context, error)
	// OpenAI serves sluice.openai.v1 over Connect/gRPC/gRPC-Web.
	OpenAI openaiv1connect.OpenAIServiceHandler
	// InferenceAuth guards the inference routes (typed RPC and REST); nil means open. Same contract
	// as AdminAuth.
	InferenceAuth func(r *http.Request) (context.Context, error)
	// REST serves the OpenAI REST surface (/v1/..., /generate).
	REST http.Handler
	// Metrics serves /metrics.
	Metrics http.Handler
	// Ready reports whether the gateway can serve (nil error) for /readiness and gRPC health.
	Ready func() error
	// Warnings are shown in /health's "warnings" (what the settings leave open: config.ExposureWarnings).
	Warnings []string
	// HandlerOptions are added to every Connect handler (interceptors).
	HandlerOptions []connect.HandlerOption
	// SeparateAdmin leaves the admin routes out of Handler; AdminHandler serves them instead.
	SeparateAdmin bool
	// Pprof serves net/http/pprof under /debug/pprof/ with the admin routes (and their auth).
	Pprof bool

	// CORSAllowedOrigins lets browsers on these origins ("*" = any, without credentials) call every
	// route; empty = no CORS headers, preflights refused.
	CORSAllowedOrigins []string
	// BodyReadTimeout bounds reading a request body; WriteTimeout each write of a response (a client
	// that stops reading is cut off). Zero = no bound.
	BodyReadTimeout, WriteTimeout time.Duration
	// AdminMaxBytes bounds admin request bodies (default DefaultAdminMaxBytes).
	AdminMaxBytes int64
	// HSTS adds Strict-Transport-Security to admin responses (set when the listeners serve TLS).
	HSTS bool

	// Concurrency, when set, bounds the inference routes (REST and typed RPC) gateway-wide
	// (concurrency.go).
	Concurrency *concurrency.Limiter
	// Routes are more REST routes (the Rust gateway's, routes.go), each with its guard.
	Routes []Route
	// Internal are Connect services served with the admin routes, behind the same auth and limits:
	// cluster admission's coordination service.
	Internal []InternalService
}

// InternalService is a Connect service for the admin listener.
type InternalService struct {
	Name, Path string
	Handler    http.Handler
}

// DefaultAdminMaxBytes bounds admin request bodies: worker specs and settings are a few hundred bytes.
const DefaultAdminMaxBytes = 1 << 20

// Handlers are the assembled routes: Main for the public port, Admin for a separate admin port (nil
// unless Options.SeparateAdmin).
type Handlers struct {
	Main  http.Handler
	Admin http.Handler
	// Probe serves /liveness, /readiness and /health alone, for a listener of its own
	// (--health-check-port); Metrics serves /metrics alone (--prometheus-port).
	Probe, Metrics http.Handler
}

// NewHandlers builds the routes.
func NewHandlers(o Options) (*Handlers, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.AdminMaxBytes <= 0 {
		o.AdminMaxBytes = DefaultAdminMaxBytes
	}
	main := http.NewServeMux()
	services := []string{grpchealth.HealthV1ServiceName}

	if o.OpenAI != nil {
		path, h := openaiv1connect.NewOpenAIServiceHandler(o.OpenAI, o.HandlerOptions...)
		main.Handle(path, guardRPC(limited(h, o.Concurrency, true), o.InferenceAuth))
		services = append(services, openaiv1connect.OpenAIServiceName)
	}
	if o.REST != nil {
		rest := guard(limited(requireJSON(o.REST), o.Concurrency, false), o.InferenceAuth)
		main.Handle("/v1/", rest)
		main.Handle("/generate", rest)
		main.Handle("/rerank", rest)     // SMG's native rerank path
		main.Handle("/tokenize", rest)   // vLLM's tokenize path
		main.Handle("/detokenize", rest) // vLLM's detokenize path
	}

	adminMux := main
	if o.SeparateAdmin {
		adminMux = http.NewServeMux()
	}
	adminRoute := func(h http.Handler) http.Handler {
		return securityHeaders(limitAdminBody(h, o.AdminMaxBytes), o.HSTS)
	}
	if o.Admin != nil {
		adminOpts := append(append([]connect.HandlerOption{}, o.HandlerOptions...), connect.WithReadMaxBytes(int(o.AdminMaxBytes)))
		path, h := adminv1connect.NewAdminServiceHandler(o.Admin, adminOpts...)
		adminMux.Handle(path, adminRoute(guardRPC(h, o.AdminAuth)))
		gw := runtime.NewServeMux(
			runtime.WithMarshalerOption(runtime.MIMEWildcard, adminJSON{&runtime.JSONPb{
				MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
				UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
			}}),
			runtime.WithErrorHandler(restErrorHandler),
			runtime.WithRoutingErrorHandler(restRoutingErrorHandler),
		)
		if err := adminv1.RegisterAdminServiceHandlerServer(context.Background(), gw, o.Admin); err != nil {
			return nil, fmt.Errorf("admin REST: %w", err)
		}
		adminMux.Handle("/admin/v1/", adminRoute(guard(requireJSON(gw), o.AdminAuth)))
		services = append(services, adminv1connect.AdminServiceName)
	}

	for _, is := range o.Internal {
		adminMux.Handle(is.Path, adminRoute(guardRPC(is.Handler, o.AdminAuth)))
		services = append(services, is.Name)
	}

	if o.Pprof {
		adminMux.Handle("/debug/pprof/", adminRoute(guard(http.HandlerFunc(pprof.Index), o.AdminAuth)))
		adminMux.Handle("/debug/pprof/cmdline", adminRoute(guard(http.HandlerFunc(pprof.Cmdline), o.AdminAuth)))
		adminMux.Handle("/debug/pprof/profile", adminRoute(guard(http.HandlerFunc(pprof.Profile), o.AdminAuth)))
		adminMux.Handle("/debug/pprof/symbol", adminRoute(guard(http.HandlerFunc(pprof.Symbol), o.AdminAuth)))
		adminMux.Handle("/debug/pprof/trace", adminRoute(guard(http.HandlerFunc(pprof.Trace), o.AdminAuth)))
	}

	reflector := grpcreflect.NewStaticReflector(services...)
	main.Handle(grpcreflect.NewHandlerV1(reflector))
	main.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	if o.SeparateAdmin {
		adminMux.Handle(grpcreflect.NewHandlerV1(reflector))
		adminMux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	}
	main.Handle(grpchealth.NewHandler(&healthChecker{ready: o.Ready}))

	mountProbes(main, o.Ready, o.Warnings)
	mountRoutes(main, adminMux, adminRoute, o.Routes)
	outer := func(h http.Handler) http.Handler {
		return newCORS(o.CORSAllowedOrigins).wrap(withDeadlines(h, o.BodyReadTimeout, o.WriteTimeout))
	}
	if o.Metrics != nil {
		main.Handle("GET /metrics", o.Metrics)
	}
	main.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { apierror.NoRoute(w, r, main, "/") })
	if o.SeparateAdmin {
		adminMux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { apierror.NoRoute(w, r, adminMux, "/") })
	}
	hs := &Handlers{Main: outer(main), Probe: probeHandler(o.Ready, o.Warnings), Metrics: metricsHandler(o.Metrics)}
	if o.SeparateAdmin {
		hs.Admin = outer(adminMux)
	}
	return hs, nil
}

// mountProbes serves /health, /liveness and /readiness on mux. /health lists warnings, when there are
// any, beside its status: an operator checking the gateway sees that an API is open to the network.
func mountProbes(mux *http.ServeMux, ready func() error, warnings []string) {
	health := []byte(`{"status":"ok"}` + "\n")
	if len(warnings) > 0 {
		b, _ := json.Marshal(map[string]any{"status": "ok", "warnings": warnings})
		health = append(b, '\n')
	}
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(health)
	})
	mux.HandleFunc("GET /liveness", liveness)
	mux.HandleFunc("GET /readiness", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if ready != nil {
			if err := ready(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				b, _ := json.Marshal(map[string]string{"status": "not_ready", "reason": err.Error()})
				_, _ = w.Write(append(b, '\n'))
				return
			}
		}
		_, _ = w.Write([]byte(`{"status":"ready"}` + "\n"))
	})
}

// guard runs auth before a REST handler; failures get the OpenAI-shaped JSON body.
func guard(h http.Handler, auth func(*http.Request) (context.Context, error)) http.Handler {
	if auth == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, err := auth(r)
		if err != nil {
			apierror.From(err).WriteHTTP(w)
			return
		}
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// guardRPC runs auth before a Connect handler; failures are answered in the RPC protocol the client
// speaks (Connect, gRPC or gRPC-Web), with the machine code in the error details.
func guardRPC(h http.Handler, auth func(*http.Request) (context.Context, error)) http.Handler {
	if auth == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, err := auth(r)
		if err != nil {
			writeRPCError(w, r, apierror.From(err))
			return
		}
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// writeRPCError writes e in the protocol the client speaks (Connect, gRPC or gRPC-Web), or as REST
// JSON when it speaks none.
func writeRPCError(w http.ResponseWriter, r *http.Request, e *apierror.Error) {
	if ew := connect.NewErrorWriter(); ew.IsSupported(r) {
		_ = ew.Write(w, r, e.Connect())
		return
	}
	e.WriteHTTP(w)
}

func restErrorHandler(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, _ *http.Request, err error) {
	plainParseError(apierror.FromWire(err)).WriteHTTP(w)
}

func restRoutingErrorHandler(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, status int) {
	if allow := adminAllowed(r.URL.Path); status == http.StatusMethodNotAllowed && len(allow) > 0 {
		apierror.MethodNotAllowed(r.Method, r.URL.Path, allow).WriteHTTP(w)
		return
	}
	apierror.New(status, apierror.CodeNotFound, fmt.Sprintf("no admin route for %s %s", r.Method, r.URL.Path), nil).WriteHTTP(w)
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

// Server is one listener serving HTTP/1.1 and HTTP/2 (h2c in plaintext, h2 by ALPN over TLS).
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// ListenOptions configure a listener. Zero limits take the defaults noted.
type ListenOptions struct {
	Logger *slog.Logger
	// Name labels the listener in logs and connection metrics ("main", "admin").
	Name string
	// TLS, when set, serves HTTPS (see tlsconf.Server); otherwise plaintext HTTP/1.1 and h2c.
	TLS *tls.Config
	// ReadHeaderTimeout bounds the TLS handshake and reading request headers (default 10 s).
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes idle keep-alive connections (default 120 s).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers, HTTP/1.1 and HTTP/2 (default 64 KiB).
	MaxHeaderBytes int
	// MaxConnections caps open connections; further ones are closed at once (0 = no cap).
	MaxConnections int
	// Conns, when set, counts connections.
	Conns ConnMetrics
}

// Listen binds addr (host:port; port 0 picks a free one) for h.
func Listen(addr string, h http.Handler, o ListenOptions) (*Server, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ReadHeaderTimeout <= 0 {
		o.ReadHeaderTimeout = 10 * time.Second
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 120 * time.Second
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = 64 << 10
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	ln = newCappedListener(ln, o.MaxConnections, o.Name, o.Conns)
	var p http.Protocols
	p.SetHTTP1(true)
	if o.TLS != nil {
		p.SetHTTP2(true)
		ln = tls.NewListener(ln, o.TLS)
	} else {
		p.SetUnencryptedHTTP2(true)
		ln = wireErrListener{Listener: ln, maxHeaderBytes: o.MaxHeaderBytes}
	}
	srv := &http.Server{
		Handler:           h,
		Protocols:         &p,
		TLSConfig:         o.TLS,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    o.MaxHeaderBytes,
		// 250 concurrent streams per HTTP/2 connection (Go's default, stated): with MaxConnections it
		// bounds the requests one listener holds.
		HTTP2:    &http.HTTP2Config{MaxConcurrentStreams: 250},
		ErrorLog: slog.NewLogLogger(o.Logger.Handler(), slog.LevelDebug),
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
