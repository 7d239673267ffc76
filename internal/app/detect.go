package app

import (
	"context"
	"errors"
	"slices"

	"github.com/sluicegw/sluice/internal/worker"
)

// completeSpec completes a spec from its engine (dispatch.Detector) and, for a worker given by a flag,
// fills what the engine did not report from the serve flags: --dp-size, --decode-window and
// --decode-kv-role. Registration and later re-detection both go through it, so a worker detected
// late ends with the spec it would have had had its engine answered at startup.
func (a *App) completeSpec(ctx context.Context, spec worker.Spec) (worker.Spec, error) {
	spec, err := a.detector.Complete(ctx, spec)
	if err != nil || spec.DetectPending || spec.Source != worker.SourceFlag {
		return spec, err
	}
	if spec.DPSize == 0 && spec.Protocol != worker.ProtocolGRPC {
		spec.DPSize = a.cfg.Workers.DPSize
	}
	if spec.Role == worker.RoleDecode && spec.DecodeWindow == 0 {
		spec.DecodeWindow = a.cfg.Admission.DecodeWindow
	}
	if spec.Role == worker.RoleDecode {
		spec.KVRole = a.cfg.Workers.DecodeKVRole // Registry.Add refuses it on an SGLang engine
	}
	return spec, nil
}

// errStillUndetected is a detection that found the engine answering health but not yet its own
// description (it may still be loading its model): the worker stays not ready and is asked again.
var errStillUndetected = errors.New("the engine answers health but not yet GET /v1/models, /version or its server info")

// redetect is the health checker's Redetector: it asks w's engine again what it is, from what the
// operator gave (Spec.Given), when the engine first answers after registering unanswered, or when w
// comes back from NotReady (an engine restarted as another kind is noticed). Where the answer
// changes the spec, w is replaced under its id; otherwise only its DetectPending mark is cleared.
// A discovered worker's Given holds discovery's own facts (address, role, the pod's model and
// bootstrap port), which Complete keeps, so it is detected the same way.
func (a *App) redetect(ctx context.Context, w *worker.Worker) (*worker.Worker, error) {
	cur := w.Spec()
	if cur.Given == nil {
		return w, nil
	}
	got, err := a.completeSpec(ctx, *cur.Given)
	switch {
	case err != nil:
		return nil, err
	case got.DetectPending:
		return nil, errStillUndetected
	case !cur.DetectPending && sameDetection(cur, got):
		return w, nil
	case sameDetection(cur, got):
		return w, a.Registry.Update(w.ID(), func(s *worker.Spec) { s.DetectPending = false })
	}
	nw, err := a.Registry.Replace(w.ID(), got)
	if err != nil {
		return nil, err
	}
	a.logger.Info("worker detected", "id", nw.ID(), "url", nw.URL(), "protocol", nw.Protocol(), "by", got.ProtocolSource,
		"role", nw.Role(), "models", nw.Models(), "bootstrap_port", got.BootstrapPort, "dp_size", got.DPSize,
		"was_pending", cur.DetectPending)
	return nw, nil
}

// sameDetection reports whether two specs of one worker agree on everything detection decides.
func sameDetection(a, b worker.Spec) bool {
	return a.Protocol == b.Protocol && a.ProtocolSource == b.ProtocolSource && a.Role == b.Role &&
		slices.Equal(a.Models, b.Models) && a.BootstrapPort == b.BootstrapPort && a.DPSize == b.DPSize &&
		a.DecodeWindow == b.DecodeWindow && a.DecodeKVTokens == b.DecodeKVTokens &&
		a.KVConnector == b.KVConnector && a.KVRole == b.KVRole
}
