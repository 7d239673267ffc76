package dispatch

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/backend/enginerpc"
	"github.com/sluicegw/sluice/internal/enginegrpc"
	"github.com/sluicegw/sluice/internal/tokenizer"
	"github.com/sluicegw/sluice/internal/worker"
)

// completeEngine asks a grpc:// worker whether it speaks an engine's own gRPC (SGLang's scheduler,
// vLLM's engine, TensorRT-LLM's service: enginegrpc.Detect, or GetModelInfo of the protocol the
// operator named with --runtime/protocol). When it does and the model's tokenizer is loaded
// (--tokenizer-path), the worker is registered with the client's engine transport
// (backend.EngineRPC) and its spec says sglang, vllm or trtllm, so dispatch runs it as that engine,
// PD flows included (TensorRT-LLM: regular workers only, worker.ErrTRTLLMRole). handled is false when the worker is
// left to the sluice.worker.v1 protocol: the server answers it, or implements no engine service, or
// (detected, not named) no tokenizer is loaded for its model, since the gateway cannot speak token
// ids without one.
func (d *Detector) completeEngine(ctx context.Context, spec worker.Spec, logger *slog.Logger) (out worker.Spec, handled bool, err error) {
	et := backend.EngineRPC(d.HTTP)
	if et == nil {
		return spec, false, nil
	}
	named := spec.Protocol == worker.ProtocolSGLang || spec.Protocol == worker.ProtocolVLLM || spec.Protocol == worker.ProtocolTRTLLM
	defer func() {
		if !handled {
			et.RemoveEngine(spec.URL) // a re-detected worker that no longer speaks an engine's gRPC
		}
	}()
	// A server that answers sluice.worker.v1 (the simulator serves it beside an engine's protocol)
	// keeps it: it is ours, and needs no tokenizer.
	if !named && d.speaksWorkerV1(ctx, spec) {
		return spec, false, nil
	}
	invalid := func(err error) error { return fmt.Errorf("%w: worker %s: %w", worker.ErrInvalidSpec, spec.URL, err) }
	conn, err := dialEngine(spec.URL)
	if err != nil {
		return spec, true, invalid(err)
	}
	defer conn.Close()
	proto, info, err := identifyEngine(ctx, conn, spec, named)
	switch {
	case errors.Is(err, enginegrpc.ErrNotEngine):
		return spec, false, nil
	case err != nil && unreachable(err):
		return d.pending(spec, err, logger), true, nil
	case err != nil:
		return spec, true, invalid(err)
	}
	models := spec.Models
	if len(models) == 0 && info.ServedModelName != "" {
		models = []string{info.ServedModelName}
	}
	var model string
	if len(models) > 0 {
		model = models[0]
	}
	e, ok, err := d.engineFor(ctx, conn, spec, named, proto, model, info, logger)
	if !ok || err != nil {
		return spec, err != nil, err
	}
	if err := completeEngineServer(ctx, conn, proto, &spec, logger); err != nil {
		return spec, true, invalid(err)
	}
	if err := et.SetEngine(spec.URL, e); err != nil {
		return spec, true, invalid(err)
	}
	logger.Info("worker speaks an engine's own gRPC", "url", spec.URL, "engine", proto, "model", model,
		"context_length", info.ContextLength)
	return d.engineSpec(spec, named, proto, models), true, nil
}

// speaksWorkerV1 reports whether the worker answers sluice.worker.v1's load query.
func (d *Detector) speaksWorkerV1(ctx context.Context, spec worker.Spec) bool {
	_, err := (&backend.Upstream{Client: d.HTTP, APIKey: spec.APIKey}).FetchLoad(ctx, spec.URL, string(worker.ProtocolGRPC))
	return err == nil
}

// identifyEngine is the engine protocol the worker speaks and its model information: asked of the
// protocol the operator named, else detected (enginegrpc.ErrNotEngine when it implements none).
// TensorRT-LLM serves regular workers only (worker.ErrTRTLLMRole).
func identifyEngine(ctx context.Context, conn grpc.ClientConnInterface, spec worker.Spec, named bool) (enginegrpc.Protocol, enginegrpc.ModelInfo, error) {
	var (
		proto enginegrpc.Protocol
		info  enginegrpc.ModelInfo
		err   error
	)
	if named {
		proto = enginegrpc.Protocol(spec.Protocol)
		info, err = enginegrpc.GetModelInfo(ctx, conn, proto)
	} else {
		proto, info, err = enginegrpc.Detect(ctx, conn)
	}
	if err == nil && proto == enginegrpc.TRTLLM && spec.Role != worker.RoleRegular {
		err = worker.ErrTRTLLMRole
	}
	return proto, info, err
}

// engineFor is what the engine transport needs for the worker's model: its tokenizer, parsers and EOS
// ids. The tokenizer is the model's --tokenizer-path (or --model-path) one, else the engine's own,
// pulled with GetTokenizer. ok is false, with no error, when a detected (not named) engine has no
// tokenizer to give: the worker is then left to sluice.worker.v1, with a warning. A bundle that does
// not match its SHA-256 refuses the worker, named or not.
func (d *Detector) engineFor(ctx context.Context, conn grpc.ClientConnInterface, spec worker.Spec, named bool, proto enginegrpc.Protocol,
	model string, info enginegrpc.ModelInfo, logger *slog.Logger) (e enginerpc.Engine, ok bool, err error) {
	if d.Tokenizer != nil {
		e.Tokenizer = d.Tokenizer(model)
	}
	if e.Tokenizer == nil {
		tk, err := d.pulled.pull(ctx, conn, proto)
		switch {
		case err == nil:
			logger.Info("tokenizer pulled from the engine (GetTokenizer)", "url", spec.URL, "engine", proto, "model", model)
			e.Tokenizer = tk
		case errors.Is(err, enginegrpc.ErrTokenizerChecksum):
			return e, false, fmt.Errorf("%w: worker %s: its tokenizer (GetTokenizer) is refused: %w", worker.ErrInvalidSpec, spec.URL, err)
		case named:
			return e, false, fmt.Errorf("%w: worker %s speaks %s's gRPC, which takes token ids: give the tokenizer of model %q with --tokenizer-path or --model-path (the engine's own could not be pulled: %w)",
				worker.ErrInvalidSpec, spec.URL, proto, model, err)
		default:
			logger.Warn("worker speaks an engine's gRPC but no tokenizer is loaded for its model (--tokenizer-path, --model-path) and the engine's could not be pulled; using the sluice.worker.v1 protocol",
				"url", spec.URL, "engine", proto, "model", model, "err", err)
			return e, false, nil
		}
	}
	e.Protocol, e.Model, e.ContextLength = proto, model, info.ContextLength
	if d.Parsers != nil {
		e.ReasoningParser, e.ToolCallParser = d.Parsers(model)
	}
	for _, id := range info.EOSTokenIDs {
		e.EOS = append(e.EOS, int(id))
	}
	return e, true, nil
}

// completeEngineServer fills in what the engine's GetServerInfo tells of a worker the operator left
// out, as HTTP mode does from /get_server_info: SGLang's dp size, a prefill's bootstrap port, a
// decode's window and KV capacity (completeSGLang, after the same role check); vLLM's dp size and KV
// connector, its kv_role checked against the configured role. An engine that does not answer is not
// refused: what it did not tell stays as given, as over HTTP.
func completeEngineServer(ctx context.Context, conn grpc.ClientConnInterface, proto enginegrpc.Protocol, spec *worker.Spec, logger *slog.Logger) error {
	si, err := enginegrpc.GetServerInfo(ctx, conn, proto)
	if err != nil {
		logger.Warn("engine did not answer GetServerInfo; its dp size, bootstrap port and decode window stay as configured",
			"url", spec.URL, "engine", proto, "err", err)
		return nil
	}
	if info := backend.ParseServerInfo(si.SGLang); info != nil {
		if err := checkRole(spec.Role, info.DisaggregationMode); err != nil {
			return err
		}
		completeSGLang(spec, info)
	}
	if proto != enginegrpc.VLLM {
		return nil
	}
	if err := checkKVRole(spec.Role, si.KVRole); err != nil {
		return err
	}
	if spec.DPSize == 0 && si.DPSize > 1 {
		spec.DPSize = si.DPSize
	}
	if spec.KVConnector == "" {
		switch si.KVConnector {
		case "MooncakeConnector":
			spec.KVConnector = worker.KVConnectorMooncake
		case "NixlConnector":
			spec.KVConnector = worker.KVConnectorNIXL
		}
	}
	return nil
}

// checkKVRole compares a configured role with vLLM's kv_role: a producer only prefills, a consumer
// only decodes; kv_both (or no KV transfer, "") fits any role that the rest of the spec allows.
func checkKVRole(role worker.Role, kvRole string) error {
	switch {
	case kvRole == "kv_producer" && role == worker.RoleDecode, kvRole == "kv_consumer" && role == worker.RolePrefill:
		return fmt.Errorf("configured as %s, but the engine's server info says kv_role %s", role, kvRole)
	}
	return nil
}

// engineSpec is the worker's spec once its engine transport is registered: the engine's protocol, where
// it came from, the models, and a vLLM worker's KV connector default.
func (d *Detector) engineSpec(spec worker.Spec, named bool, proto enginegrpc.Protocol, models []string) worker.Spec {
	spec.ProtocolSource = worker.ProtocolFromModelInfo
	if named {
		spec.ProtocolSource = worker.ProtocolFromConfig
	}
	spec.Protocol, spec.Models = worker.Protocol(proto), models
	if spec.Protocol == worker.ProtocolVLLM && spec.KVConnector == "" {
		spec.KVConnector = d.DefaultKVConnector
		if spec.KVConnector == "" {
			spec.KVConnector = worker.KVConnectorNIXL
		}
	}
	return spec
}

// dialEngine makes a gRPC client for a grpc:// (h2c) or grpcs:// (TLS) worker URL; it connects lazily.
func dialEngine(workerURL string) (*grpc.ClientConn, error) {
	u, err := url.Parse(workerURL)
	if err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if u.Scheme == "grpcs" {
		creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	}
	return grpc.NewClient("passthrough:///"+u.Host, grpc.WithTransportCredentials(creds))
}

// unreachable reports a failure to reach the engine (it may still be starting), as opposed to an
// answer.
func unreachable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// pulledTokenizers keeps the tokenizers pulled from engines by their bundle's SHA-256: the workers of a
// model send the same bundle, which is unpacked and loaded once.
type pulledTokenizers struct {
	mu    sync.Mutex
	bySum map[string]*tokenizer.Tokenizer
}

// pull asks the engine for its tokenizer bundle and loads it, or returns the one loaded from the same
// bundle before.
func (p *pulledTokenizers) pull(ctx context.Context, conn grpc.ClientConnInterface, proto enginegrpc.Protocol) (*tokenizer.Tokenizer, error) {
	b, err := enginegrpc.GetTokenizer(ctx, conn, proto)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if tk, ok := p.bySum[b.SHA256]; ok {
		return tk, nil
	}
	tk, err := b.Load()
	if err != nil {
		return nil, err
	}
	if p.bySum == nil {
		p.bySum = map[string]*tokenizer.Tokenizer{}
	}
	p.bySum[b.SHA256] = tk
	return tk, nil
}
