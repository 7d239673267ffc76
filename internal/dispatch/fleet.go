package dispatch

import (
	"context"
	"net/http"
	"time"

	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/worker"
)

// Discovery fills in what a worker spec leaves out by asking the engine.
type Discovery struct {
	HTTP *http.Client
	// DefaultProtocol applies to http(s) workers whose engine does not say (the --runtime flag).
	DefaultProtocol worker.Protocol
	// DefaultModels apply when the engine cannot be asked (the --model-id flag); empty = any model.
	DefaultModels []string
	// Timeout bounds the engine calls; zero means 5 s.
	Timeout time.Duration
}

// Complete returns spec with protocol and models filled in: grpc:// URLs speak the worker protocol;
// otherwise the engine's /get_server_info and /v1/models answer. A worker that cannot be reached keeps
// the defaults — it will not become routable before its health checks pass anyway.
func (d *Discovery) Complete(ctx context.Context, spec worker.Spec) worker.Spec {
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if backend.IsGRPC(spec.URL) { // grpc:// or grpcs://
		spec.Protocol = worker.ProtocolGRPC
	}
	if spec.Protocol == "" {
		if info, err := backend.ServerInfo(ctx, d.HTTP, spec.URL); err == nil {
			if p, perr := worker.ParseProtocol(backend.DetectProtocol(info)); perr == nil {
				spec.Protocol = p
			}
		}
	}
	if spec.Protocol == "" {
		spec.Protocol = d.DefaultProtocol
		if spec.Protocol == "" {
			spec.Protocol = worker.ProtocolSGLang
		}
	}
	if len(spec.Models) == 0 && spec.Protocol != worker.ProtocolGRPC {
		if models, err := backend.DiscoverModels(ctx, d.HTTP, spec.URL); err == nil && len(models) > 0 {
			spec.Models = models
		}
	}
	if len(spec.Models) == 0 {
		spec.Models = append([]string(nil), d.DefaultModels...)
	}
	return spec
}
