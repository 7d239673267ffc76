package app

import (
	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/httpapi"
	"github.com/sluicegw/sluice/internal/server"
	"github.com/sluicegw/sluice/internal/telemetry"
	"github.com/sluicegw/sluice/internal/tokenizer"
	adminsvc "github.com/sluicegw/sluice/services/admin"
	openaisvc "github.com/sluicegw/sluice/services/openai"
)

// newServers builds the admin service and the handlers of every API surface (admin, OpenAI typed and
// REST, SMG compatibility, metrics, health); Start binds them to listeners (listeners.go).
func (a *App) newServers(cfg *config.Config, tracer trace.Tracer, tokenizers func(model string) *tokenizer.Tokenizer) error {
	logger, httpClient := a.logger, a.upstream
	a.adminSvc = adminsvc.New(adminsvc.Deps{
		Registry: a.Registry, Admission: a.Admission, Checker: a.checker, Detector: a.detector,
		HTTP: httpClient, Logger: logger, Cluster: a.clusterStatus(), PD: cfg.Mode() == config.ModePD,
		OnAdmissionUpdate: a.keepBandSeries, Capacity: a.Capacity, Budgets: a.budgets, Aliases: a.Aliases,
	})
	audited := adminsvc.NewAudited(a.adminSvc, logger)
	smgRoutes, err := a.setupSMG(cfg, audited)
	if err != nil {
		return err
	}
	openai := openaisvc.New(a.Dispatcher).WithTokenizers(tokenizers)
	rest := httpapi.New(httpapi.Options{
		Dispatcher: a.Dispatcher, MaxPayloadSize: cfg.Server.MaxPayloadSize, Metrics: a.Metrics,
		Tracer: tracer, Propagator: telemetry.Propagator(), Logger: logger, SpanAttributes: principalAttrs,
		Tokenizer: tokenizers,
	})
	a.handlers, err = server.NewHandlers(server.Options{
		Logger:        logger,
		Admin:         audited,
		AdminAuth:     a.auth.Admin,
		OpenAI:        openai,
		InferenceAuth: a.auth.Inference,
		REST:          rest,
		Metrics:       telemetry.MetricsHandler(a.Prom),
		Ready:         a.Ready,
		Warnings:      cfg.ExposureWarnings(),
		SeparateAdmin: cfg.Server.AdminPort != 0,
		Internal:      a.clusterService(),
		Pprof:         cfg.Telemetry.Pprof,
		HandlerOptions: []connect.HandlerOption{
			connect.WithReadMaxBytes(int(min(cfg.Server.MaxPayloadSize, 1<<31-1))),
			connect.WithInterceptors(telemetry.RPCTracing{Tracer: tracer, Propagator: telemetry.Propagator(), Attributes: principalAttrs}),
		},
		CORSAllowedOrigins: cfg.Auth.CORSAllowedOrigins,
		BodyReadTimeout:    cfg.Limits.BodyReadTimeout,
		WriteTimeout:       cfg.Limits.WriteTimeout,
		HSTS:               cfg.TLS.Enabled(),
		Concurrency:        a.smg.limiter,
		Routes:             smgRoutes,
	})
	return err
}
