package smgapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/internal/auth"
	"github.com/sluicegw/sluice/internal/worker"
)

// specIn is SMG's WorkerSpec as clients send it (crates/protocols/src/worker.rs). Fields sluice has
// no use for (http_pool, resilience, max_connection_attempts, ...) are ignored, as SMG ignores
// unknown ones.
type specIn struct {
	URL            string            `json:"url"`
	Models         json.RawMessage   `json:"models"`
	WorkerType     string            `json:"worker_type"`
	ConnectionMode string            `json:"connection_mode"`
	RuntimeType    string            `json:"runtime_type"`
	Runtime        string            `json:"runtime"` // serde alias of runtime_type
	Provider       json.RawMessage   `json:"provider"`
	Labels         map[string]string `json:"labels"`
	Priority       *float64          `json:"priority"`
	Cost           *float64          `json:"cost"`
	APIKey         *string           `json:"api_key"`
	BootstrapPort  *int              `json:"bootstrap_port"`
	DPSize         *int              `json:"dp_size"`
	KVConnector    string            `json:"kv_connector"`
	Health         json.RawMessage   `json:"health"`
}

// SMG's defaults (DEFAULT_WORKER_PRIORITY, DEFAULT_WORKER_COST): sluice weighs no workers, so only
// these values are accepted (a spec read back from GET and sent again carries them).
const (
	defaultPriority = 50
	defaultCost     = 1.0
)

// errBadSpec is a spec sluice cannot honour; its message says why.
var errBadSpec = errors.New("bad worker spec")

func badSpec(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errBadSpec}, a...)...)
}

// proto turns an SMG spec into the admin API's.
func (s *specIn) proto() (*adminv1.WorkerSpec, error) {
	if s.URL == "" {
		return nil, badSpec("url is required")
	}
	out := &adminv1.WorkerSpec{Url: s.URL, Labels: s.Labels, KvConnector: kvConnector(s.KVConnector)}
	switch t := strings.ToLower(s.WorkerType); t {
	case "":
		out.Role = "regular" // SMG's WorkerType default
	case "regular", "prefill", "decode":
		out.Role = t
	case "encode":
		return nil, badSpec("worker_type encode is not supported: sluice has no encode stage")
	default:
		return nil, badSpec("worker_type must be regular, prefill or decode, got %q", s.WorkerType)
	}
	isGRPC := strings.HasPrefix(strings.ToLower(s.URL), "grpc://") || strings.HasPrefix(strings.ToLower(s.URL), "grpcs://")
	switch m := strings.ToLower(s.ConnectionMode); {
	case m == "" || m == "http":
	case m == "grpc" && isGRPC:
	case m == "grpc":
		return nil, badSpec("connection_mode grpc: sluice's grpc:// workers speak its own worker protocol, not the engines' gRPC servers; register the engine's HTTP URL")
	default:
		return nil, badSpec("connection_mode %q is not supported: sluice speaks HTTP to engines", s.ConnectionMode)
	}
	rt := s.RuntimeType
	if rt == "" {
		rt = s.Runtime
	}
	switch rt = strings.ToLower(rt); rt {
	case "", "unspecified":
	case "sglang", "vllm":
		out.Protocol = rt
	default:
		return nil, badSpec("runtime_type %s is not supported: sluice fronts SGLang and vLLM engines", rt)
	}
	if len(s.Provider) > 0 && string(s.Provider) != "null" {
		return nil, badSpec("provider is not supported: sluice does not route to cloud providers")
	}
	if s.Priority != nil && *s.Priority != defaultPriority {
		return nil, badSpec("priority is not supported: sluice does not weigh workers (its policies balance on load)")
	}
	if s.Cost != nil && *s.Cost != defaultCost {
		return nil, badSpec("cost is not supported: sluice does not weigh workers")
	}
	if len(s.Health) > 0 && string(s.Health) != "null" && string(s.Health) != "{}" {
		return nil, badSpec("per-worker health overrides are not supported: health checks use the gateway's settings")
	}
	if s.APIKey != nil {
		out.ApiKey = *s.APIKey
	}
	if s.BootstrapPort != nil {
		if *s.BootstrapPort < 0 || *s.BootstrapPort > 65535 {
			return nil, badSpec("bootstrap_port %d out of range", *s.BootstrapPort)
		}
		out.BootstrapPort = uint32(*s.BootstrapPort)
	}
	if s.DPSize != nil {
		if *s.DPSize < 0 || *s.DPSize > 1024 {
			return nil, badSpec("dp_size %d out of range", *s.DPSize)
		}
		out.DpSize = uint32(*s.DPSize)
	}
	models, err := modelIDs(s.Models)
	if err != nil {
		return nil, err
	}
	out.Models = models
	return out, nil
}

// modelIDs reads SMG's models: model cards ({"id": ...}) or plain ids.
func modelIDs(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badSpec("models must be a list of model cards")
	}
	var out []string
	for _, it := range items {
		var id string
		if json.Unmarshal(it, &id) == nil {
			out = append(out, id)
			continue
		}
		var card struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(it, &card) != nil || card.ID == "" {
			return nil, badSpec("each model card needs an id")
		}
		out = append(out, card.ID)
	}
	return out, nil
}

// kvConnector maps vLLM's connector class names (as SMG stores them) to sluice's.
func kvConnector(s string) string {
	switch strings.ToLower(s) {
	case "nixlconnector", "nixl":
		return "nixl"
	case "mooncakeconnector", "mooncake":
		return "mooncake"
	}
	return s
}

// workerInfo is SMG's WorkerInfo of a worker: its spec flattened, with id, model_id, is_healthy,
// status, load and job_status. Spec fields sluice does not have are left out.
func workerInfo(w *worker.Worker) map[string]any {
	spec := w.Spec()
	info := map[string]any{
		"id": w.ID(), "url": w.URL(), "worker_type": string(w.Role()),
		"connection_mode": "http", "runtime_type": string(w.Protocol()),
		"priority": defaultPriority, "cost": defaultCost,
		"is_healthy": w.Health() == worker.HealthReady, "status": w.Health().String(),
		"load": w.Load(), "job_status": nil,
	}
	if w.Protocol() == worker.ProtocolGRPC {
		info["connection_mode"], info["runtime_type"] = "grpc", "unspecified"
	}
	if models := w.Models(); len(models) > 0 {
		cards := make([]map[string]string, len(models))
		for i, m := range models {
			cards[i] = map[string]string{"id": m}
		}
		info["models"], info["model_id"] = cards, models[0]
	}
	if len(spec.Labels) > 0 {
		info["labels"] = spec.Labels
	}
	if spec.BootstrapPort != 0 {
		info["bootstrap_port"] = spec.BootstrapPort
	}
	if spec.DPSize > 0 {
		info["dp_size"] = spec.DPSize
	}
	switch spec.KVConnector {
	case "nixl":
		info["kv_connector"] = "NixlConnector"
	case "mooncake":
		info["kv_connector"] = "MooncakeConnector"
	}
	return info
}

// writeAdminError answers an admin service error in SMG's worker-route shape.
func writeAdminError(w http.ResponseWriter, err error) {
	if errors.Is(err, errBadSpec) {
		writeError(w, http.StatusBadRequest, codeBadRequest, strings.TrimPrefix(err.Error(), errBadSpec.Error()+": "))
		return
	}
	msg := err.Error()
	var ce *connect.Error
	if errors.As(err, &ce) {
		msg = ce.Message()
	}
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument:
		writeError(w, http.StatusBadRequest, codeBadRequest, msg)
	case connect.CodeNotFound:
		writeError(w, http.StatusNotFound, codeNotFound, msg)
	case connect.CodeAlreadyExists:
		writeError(w, http.StatusConflict, codeAlreadyExists, msg)
	case connect.CodeFailedPrecondition:
		writeError(w, http.StatusConflict, codeConflict, msg)
	case connect.CodeUnavailable:
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, msg)
	default:
		writeError(w, http.StatusInternalServerError, codeInternal, msg)
	}
}

func accepted(w http.ResponseWriter, extra map[string]any) {
	body := map[string]any{"status": "accepted"}
	for k, v := range extra {
		body[k] = v
	}
	writeJSON(w, http.StatusAccepted, body)
}

// createWorker: POST /workers. sluice registers the worker before answering (SMG queues a job and
// answers at once): the 202 body and Location header are SMG's, and the worker exists already
// (Pending until its first health check passes, which runs at once). An engine that contradicts the
// spec, or a URL already registered, is refused here rather than in a background job.
func (h *Handler) createWorker(w http.ResponseWriter, r *http.Request) {
	var in specIn
	if !readJSON(w, r, &in) {
		return
	}
	spec, err := in.proto()
	if err != nil {
		writeAdminError(w, err)
		return
	}
	out, err := h.d.Admin.AddWorker(r.Context(), &adminv1.AddWorkerRequest{Worker: spec})
	if err != nil {
		writeAdminError(w, err)
		return
	}
	id := out.GetWorker().GetId()
	loc := "/workers/" + id
	w.Header().Set("Location", loc)
	accepted(w, map[string]any{"worker_id": id, "url": out.GetWorker().GetUrl(), "location": loc,
		"message": "Worker registered; it serves once its health check passes"})
}

// listWorkers: GET /workers[?model=M].
func (h *Handler) listWorkers(w http.ResponseWriter, r *http.Request) {
	model := r.URL.Query().Get("model")
	workers := []map[string]any{}
	counts := map[worker.Role]int{}
	for _, wk := range h.d.Registry.Snapshot().All() {
		if model != "" && !wk.ServesModel(model) {
			continue
		}
		counts[wk.Role()]++
		workers = append(workers, workerInfo(wk))
	}
	writeJSON(w, http.StatusOK, map[string]any{"workers": workers, "total": len(workers), "stats": map[string]int{
		"prefill_count": counts[worker.RolePrefill], "decode_count": counts[worker.RoleDecode], "regular_count": counts[worker.RoleRegular]}})
}

func (h *Handler) lookup(w http.ResponseWriter, r *http.Request) (*worker.Worker, bool) {
	id := r.PathValue("id")
	wk, ok := h.d.Registry.Get(id)
	if !ok {
		writeError(w, http.StatusNotFound, codeNotFound, "Worker "+id+" not found")
	}
	return wk, ok
}

// getWorker: GET /workers/{id}.
func (h *Handler) getWorker(w http.ResponseWriter, r *http.Request) {
	if wk, ok := h.lookup(w, r); ok {
		writeJSON(w, http.StatusOK, workerInfo(wk))
	}
}

// replaceWorker: PUT /workers/{id} registers the worker again from a full spec (its engine asked
// again what it serves), keeping its id. As in SMG the URL cannot change.
func (h *Handler) replaceWorker(w http.ResponseWriter, r *http.Request) {
	wk, ok := h.lookup(w, r)
	if !ok {
		return
	}
	var in specIn
	if !readJSON(w, r, &in) {
		return
	}
	ps, err := in.proto()
	if err != nil {
		writeAdminError(w, err)
		return
	}
	if strings.TrimRight(ps.GetUrl(), "/") != wk.URL() {
		writeError(w, http.StatusBadRequest, codeBadRequest, fmt.Sprintf("URL mismatch: worker has URL '%s' but request body has '%s'. "+
			"URL changes are not supported via PUT. Use DELETE + POST instead.", wk.URL(), ps.GetUrl()))
		return
	}
	old := wk.Spec()
	if old.Managed() {
		writeError(w, http.StatusConflict, codeConflict, fmt.Sprintf("cannot replace %s: it follows Kubernetes pod %s/%s", wk.ID(), old.Namespace, old.Pod))
		return
	}
	role, err := worker.ParseRole(ps.GetRole())
	if err != nil {
		writeError(w, http.StatusBadRequest, codeBadRequest, err.Error())
		return
	}
	spec := worker.Spec{URL: wk.URL(), Role: role, Models: ps.GetModels(), BootstrapPort: int(ps.GetBootstrapPort()),
		Labels: ps.GetLabels(), APIKey: ps.GetApiKey(), DPSize: int(ps.GetDpSize()), KVConnector: ps.GetKvConnector(), Source: old.Source}
	if ps.GetProtocol() != "" {
		spec.Protocol = worker.Protocol(ps.GetProtocol())
	}
	if in.APIKey == nil {
		spec.APIKey = old.APIKey // a spec read back from GET has no key: keep the worker's
	}
	if h.d.Detector != nil {
		if spec, err = h.d.Detector.Complete(r.Context(), spec); err != nil {
			h.audit(r.Context(), "ReplaceWorker", wk.ID(), err)
			writeError(w, http.StatusBadRequest, codeBadRequest, err.Error())
			return
		}
	}
	nw, err := h.d.Registry.Replace(wk.ID(), spec)
	h.audit(r.Context(), "ReplaceWorker", wk.ID(), err)
	if err != nil {
		writeError(w, http.StatusBadRequest, codeBadRequest, err.Error())
		return
	}
	if h.d.Checker != nil {
		_, _ = h.d.Checker.CheckNow(r.Context(), nw.ID())
	}
	accepted(w, map[string]any{"worker_id": nw.ID(), "message": "Worker replaced"})
}

// updateIn is SMG's WorkerUpdateRequest.
type updateIn struct {
	Priority *float64          `json:"priority"`
	Cost     *float64          `json:"cost"`
	Labels   map[string]string `json:"labels"`
	APIKey   *string           `json:"api_key"`
	Health   json.RawMessage   `json:"health"`
}

// updateWorker: PATCH /workers/{id} replaces the labels and rotates the API key.
func (h *Handler) updateWorker(w http.ResponseWriter, r *http.Request) {
	wk, ok := h.lookup(w, r)
	if !ok {
		return
	}
	var in updateIn
	if !readJSON(w, r, &in) {
		return
	}
	check := specIn{Priority: in.Priority, Cost: in.Cost, Health: in.Health, URL: wk.URL()}
	if _, err := check.proto(); err != nil {
		writeAdminError(w, err)
		return
	}
	err := h.d.Registry.Update(wk.ID(), func(s *worker.Spec) {
		if in.Labels != nil {
			s.Labels = in.Labels
		}
		if in.APIKey != nil {
			s.APIKey = *in.APIKey
		}
	})
	h.audit(r.Context(), "UpdateWorker", wk.ID(), err)
	if err != nil {
		writeError(w, http.StatusBadRequest, codeBadRequest, err.Error())
		return
	}
	accepted(w, map[string]any{"worker_id": wk.ID(), "message": "Worker updated"})
}

// deleteWorker: DELETE /workers/{id}. A ready worker drains for --drain-settle-secs (in-flight
// requests finish, no new ones come) and is then removed, as in SMG; any other worker is removed at
// once.
func (h *Handler) deleteWorker(w http.ResponseWriter, r *http.Request) {
	wk, ok := h.lookup(w, r)
	if !ok {
		return
	}
	id := wk.ID()
	if h.d.DrainSettle <= 0 || wk.Health() != worker.HealthReady {
		if _, err := h.d.Admin.RemoveWorker(r.Context(), &adminv1.RemoveWorkerRequest{Id: id}); err != nil {
			writeAdminError(w, err)
			return
		}
		accepted(w, map[string]any{"worker_id": id, "message": "Worker removed"})
		return
	}
	if _, err := h.d.Admin.DrainWorker(r.Context(), &adminv1.DrainWorkerRequest{Id: id}); err != nil {
		writeAdminError(w, err)
		return
	}
	h.removeAfter(id, h.d.DrainSettle)
	accepted(w, map[string]any{"worker_id": id, "message": fmt.Sprintf("Worker draining; removed in %s", h.d.DrainSettle)})
}

// removeAfter removes a draining worker once the settle time has passed (once per worker).
func (h *Handler) removeAfter(id string, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, pending := h.removal[id]; pending || h.closed {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.removal[id] = cancel
	h.wg.Go(func() {
		defer func() {
			h.mu.Lock()
			delete(h.removal, id)
			h.mu.Unlock()
			cancel()
		}()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := h.d.Admin.RemoveWorker(ctx, &adminv1.RemoveWorkerRequest{Id: id}); err != nil && connect.CodeOf(err) != connect.CodeNotFound {
			h.d.Logger.Warn("removing a drained worker", "id", id, "err", err)
		}
	})
}

// audit writes the admin audit line of a change made here rather than through the admin service
// (which audits its own), in the same form.
func (h *Handler) audit(ctx context.Context, action, target string, err error) {
	who, method := "anonymous", ""
	if p, ok := auth.PrincipalFrom(ctx); ok {
		who, method = p.ID, p.Method
	}
	result, level := "ok", slog.LevelInfo
	if err != nil {
		result, level = "error", slog.LevelWarn
	}
	h.d.Logger.LogAttrs(ctx, level, "admin audit", slog.Bool("audit", true), slog.String("who", who), slog.String("auth_method", method),
		slog.String("action", action+" (SMG route)"), slog.String("target", target), slog.String("result", result))
}
