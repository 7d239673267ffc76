package dispatch

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/tokenizer"
	"github.com/sluicegw/sluice/internal/worker"
)

// Detector completes a worker's spec from what its engine says about itself (backend.Detect) before
// the worker is registered — by flag, through the admin API or from discovery — and refuses a worker
// whose engine contradicts what the operator configured.
type Detector struct {
	HTTP *http.Client
	// DefaultProtocol applies to http(s) workers whose engine answers none of the probes (--runtime).
	DefaultProtocol worker.Protocol
	// DefaultModels apply when the engine does not list its models (--model-id); empty = any model.
	DefaultModels []string
	// DefaultKVConnector is the KV connector of vLLM workers whose connector is neither given nor
	// detected (--kv-connector); empty means nixl.
	DefaultKVConnector string
	// Tokenizer is the tokenizer of a model (--tokenizer-path), or nil: a grpc:// worker speaking an
	// engine's own gRPC is served with it (fleet_engine.go).
	Tokenizer func(model string) *tokenizer.Tokenizer
	// Parsers names a model's reasoning and tool-call parsers (--reasoning-parser, --tool-call-parser;
	// "" for none), or is nil: the gateway parses the chat answers of those workers itself.
	Parsers func(model string) (reasoningParser, toolCallParser string)
	// Timeout bounds the engine calls; zero means 5 s.
	Timeout time.Duration
	Logger  *slog.Logger

	pulled pulledTokenizers // tokenizers pulled from engines (fleet_engine.go)
}

// Complete returns spec with what the operator left out filled in from the engine: the protocol
// (unless given; how it was decided goes to ProtocolSource), the models, and from SGLang's server
// info the bootstrap port of a prefill worker and the dp size. A worker whose engine reports a
// disaggregation mode other than its configured role is refused with an error wrapping
// worker.ErrInvalidSpec. An engine that cannot be reached yet (it loads for minutes) is returned with
// DetectPending set and nothing guessed: the health checker runs Complete again from spec.Given when
// the engine first answers, and only then makes it ready. The returned spec's Given is spec as passed.
func (d *Detector) Complete(ctx context.Context, spec worker.Spec) (worker.Spec, error) {
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	logger := d.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}

	given := spec.Clone()
	given.Given, given.DetectPending = nil, false
	spec.Given = &given
	if backend.IsGRPC(spec.URL) {
		if out, handled, err := d.completeEngine(ctx, spec, logger); handled {
			return out, err
		}
	}
	det := (&backend.Upstream{Client: d.HTTP, APIKey: spec.APIKey}).Detect(ctx, spec.URL)
	detected, _ := worker.ParseProtocol(det.Protocol)
	if detected == "" && !det.Reached {
		return d.pending(spec, det.Err, logger), nil
	}
	d.protocol(&spec, det, detected, logger)
	if len(spec.Models) == 0 {
		spec.Models = det.Models
	}
	if len(spec.Models) == 0 {
		spec.Models = append([]string(nil), d.DefaultModels...)
	}
	if spec.Protocol == worker.ProtocolVLLM {
		d.completeVLLM(ctx, &spec, logger)
	}
	if info := det.Info; info != nil && spec.Protocol == worker.ProtocolSGLang {
		if err := checkRole(spec.Role, info.DisaggregationMode); err != nil {
			return spec, fmt.Errorf("%w: worker %s: %w", worker.ErrInvalidSpec, spec.URL, err)
		}
		completeSGLang(&spec, info)
	}
	return spec, nil
}

// protocol decides the worker's protocol and says how (ProtocolSource): the URL scheme for grpc://,
// else the configured one (warning when the engine reports another), else the detected one, else the
// configured runtime's default.
func (d *Detector) protocol(spec *worker.Spec, det backend.Detection, detected worker.Protocol, logger *slog.Logger) {
	switch {
	case det.Source == backend.DetectedByURLScheme: // grpc:// and grpcs:// speak the worker protocol
		spec.Protocol, spec.ProtocolSource = worker.ProtocolGRPC, worker.ProtocolFromURLScheme
	case spec.Protocol != "":
		spec.ProtocolSource = worker.ProtocolFromConfig
		if detected != "" && detected != spec.Protocol {
			logger.Warn("worker protocol configured differently from what the engine reports; keeping the configured one",
				"url", spec.URL, "configured", spec.Protocol, "detected", detected, "by", det.Source)
		}
	case detected != "":
		spec.Protocol, spec.ProtocolSource = detected, det.Source
	default:
		spec.Protocol, spec.ProtocolSource = d.DefaultProtocol, worker.ProtocolFromDefault
		if spec.Protocol == "" {
			spec.Protocol = worker.ProtocolSGLang
		}
		logger.Warn("worker protocol not detected; using the configured runtime",
			"url", spec.URL, "protocol", spec.Protocol, "err", det.Err)
	}
}

// completeSGLang fills in what SGLang's server info tells of a worker the operator left out: a
// prefill's bootstrap port, the dp size, a decode's window and KV capacity.
func completeSGLang(spec *worker.Spec, info *backend.ServerInfoFields) {
	if spec.Role == worker.RolePrefill && spec.BootstrapPort == 0 {
		spec.BootstrapPort = info.BootstrapPort
	}
	if spec.DPSize == 0 {
		spec.DPSize = info.DPSize
	}
	switch {
	case spec.Role != worker.RoleDecode:
	case info.RankMaxRunningRequests > 0:
		// Each rank's scheduler reports the window it enforces (also when the engine sized it itself).
		spec.DecodeWindow = info.RankMaxRunningRequests
	case info.MaxRunningRequests > 0:
		// The engine's own window wins over a declared one: it is what its scheduler enforces.
		spec.DecodeWindow = info.MaxRunningRequests / max(spec.DPSize, 1)
	}
	if spec.Role == worker.RoleDecode && info.MaxTotalTokens > 0 {
		spec.DecodeKVTokens = int64(info.MaxTotalTokens)
	}
}

// pending marks a spec whose engine did not answer: it is registered, but not made ready before the
// health checker has asked it again (Spec.DetectPending). Until then the protocol is a placeholder the
// worker is never routed with; nothing else is guessed, so detection later starts from what was given.
func (d *Detector) pending(spec worker.Spec, err error, logger *slog.Logger) worker.Spec {
	spec.DetectPending = true
	if spec.Protocol == "" {
		spec.Protocol, spec.ProtocolSource = d.DefaultProtocol, worker.ProtocolPending
		if spec.Protocol == "" {
			spec.Protocol = worker.ProtocolSGLang
		}
	} else {
		spec.ProtocolSource = worker.ProtocolFromConfig
	}
	logger.Info("engine not answering yet; it is asked what it is when it first passes a health check, and not routed before",
		"url", spec.URL, "err", err)
	return spec
}

// completeVLLM decides a vLLM worker's KV connector. vLLM does not tell over HTTP, but a Mooncake
// prefill engine runs a bootstrap server whose /query lists its engine id per data-parallel rank
// (mooncake_connector_proxy.py): a prefill worker that answers it is Mooncake, and its dp size is
// kept (the ids themselves change when the engine restarts: pd_mooncake.go reads them as it goes).
// Anything else takes the given connector, else --kv-connector.
func (d *Detector) completeVLLM(ctx context.Context, spec *worker.Spec, logger *slog.Logger) {
	if spec.Role == worker.RolePrefill && (spec.KVConnector == "" || spec.KVConnector == worker.KVConnectorMooncake) {
		addr := backend.MooncakeBootstrapAddr(spec.URL, spec.BootstrapPort)
		ids, err := (&backend.Upstream{Client: d.HTTP, APIKey: spec.APIKey}).MooncakeEngineIDs(ctx, addr)
		switch {
		case err == nil:
			spec.KVConnector = worker.KVConnectorMooncake
			if spec.DPSize == 0 && len(ids) > 1 {
				spec.DPSize = len(ids)
			}
			return
		case spec.KVConnector == worker.KVConnectorMooncake:
			logger.Warn("Mooncake prefill worker's bootstrap server did not answer /query yet",
				"url", spec.URL, "bootstrap", addr, "err", err)
			return
		}
	}
	if spec.KVConnector == "" {
		spec.KVConnector = d.DefaultKVConnector
		if spec.KVConnector == "" {
			spec.KVConnector = worker.KVConnectorNIXL
		}
	}
}

// checkRole compares a configured role with SGLang's disaggregation_mode ("prefill", "decode", or
// "null" for an engine not running PD; server_args.py).
func checkRole(role worker.Role, mode string) error {
	if role == "" {
		role = worker.RoleRegular
	}
	switch mode {
	case "":
		return nil
	case "null":
		if role != worker.RoleRegular {
			return fmt.Errorf("configured as %s, but the engine does not run disaggregated (server info disaggregation_mode is null); start it with --disaggregation-mode %s", role, role)
		}
	case "prefill", "decode":
		if string(role) != mode {
			return fmt.Errorf("configured as %s, but the engine's server info says disaggregation_mode %s", role, mode)
		}
	}
	return nil
}
