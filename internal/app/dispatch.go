package app

import (
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/dispatch"
	"github.com/sluicegw/sluice/internal/telemetry"
	"github.com/sluicegw/sluice/internal/tokenizer"
	"github.com/sluicegw/sluice/internal/worker"
)

// newDispatch builds the dispatcher (one request's life) and the engine detector of new workers.
func (a *App) newDispatch(cfg *config.Config, tracer trace.Tracer, tokenizers func(model string) *tokenizer.Tokenizer) error {
	logger, httpClient := a.logger, a.upstream
	var err error
	attempts := cfg.Retry.MaxRetries
	if cfg.Retry.Disabled {
		attempts = 1
	}
	a.Dispatcher, err = dispatch.New(dispatch.Config{
		PD:                            cfg.Mode() == config.ModePD,
		RequestTimeout:                cfg.Server.RequestTimeout,
		DropClientAuthorization:       a.auth.InferenceProtected(),
		IgnoreRanks:                   !cfg.Placement.DPAware,
		RequestIDHeaders:              cfg.Server.RequestIDHeaders,
		RoutingKeyHeaders:             routingKeyHeaders(cfg),
		CharsPerToken:                 cfg.Admission.CharsPerToken,
		CheckOverload:                 cfg.Load.OverloadWaitingRequests >= 0,
		OverloadWaitingRequests:       cfg.Load.OverloadWaitingRequests,
		CheckDecodeOverload:           cfg.Load.DecodeOverloadWaitingRequests >= 0,
		DecodeOverloadWaitingRequests: cfg.Load.DecodeOverloadWaitingRequests,
		DecodeMaxKVUsage:              cfg.Load.DecodeMaxKVUsage,
		LocalPrefillMaxTokens:         cfg.Admission.LocalPrefillMaxTokens,
		Tenants:                       tenantResolver(cfg.Tenants),
		Budgets:                       a.budgets,
		Aliases:                       a.Aliases,
		ExposeAliasTarget:             cfg.Aliases.ExposeTarget,
		Pairing:                       cfg.Pairing.Rules,
		MaxMigrations:                 cfg.Retry.MaxMigrations,
		Retry: dispatch.RetryConfig{MaxAttempts: attempts, Backoff: backend.BackoffConfig{
			Initial: cfg.Retry.InitialBackoff, Multiplier: cfg.Retry.BackoffMultiplier,
			Max: cfg.Retry.MaxBackoff, Jitter: cfg.Retry.JitterFactor,
		}},
	}, dispatch.Deps{
		Registry: a.Registry, Admission: a.Admission, Policies: a.Policies,
		HTTP: httpClient, Metrics: dispatchMetrics{Metrics: a.Metrics, reg: a.Registry, capacity: a.Capacity,
			tenants: newTenantMetrics(a.Prom, cfg.Tenants)}, Tracer: tracer,
		Propagator: telemetry.Propagator(), Logger: logger, Tokenizer: tokenizers,
	})
	if err != nil {
		return err
	}
	var models []string
	if cfg.Workers.ModelID != "" {
		models = []string{cfg.Workers.ModelID}
	}
	fallback := worker.Protocol(cfg.Workers.Runtime)
	if fallback == worker.ProtocolTRTLLM {
		fallback = worker.ProtocolSGLang // TensorRT-LLM's is a gRPC protocol: an http(s) worker keeps --runtime's default
	}
	a.detector = &dispatch.Detector{HTTP: httpClient, DefaultProtocol: fallback,
		DefaultModels: models, DefaultKVConnector: cfg.Workers.KVConnector, Tokenizer: tokenizers, Logger: logger,
		Parsers: func(model string) (string, string) {
			return cfg.Parsers.ReasoningParser(model), cfg.Parsers.ToolCallParser(model)
		}}
	return nil
}
