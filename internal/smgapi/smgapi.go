// Package smgapi serves the REST routes of the Rust gateway (SMG) that its users script against,
// mapped onto sluice's core and admin service, with the response shapes SMG answers: worker
// management (/workers, /workers/{id}), /get_loads, /flush_cache, engine passthroughs
// (/get_server_info, /get_model_info, /health_generate) and /engine_metrics. Where sluice cannot
// answer as SMG does, the difference is documented in docs/migrating-from-smg.md and the handler's
// comment. The shapes are read from smg-project/smg: model_gateway/src/server.rs (routes),
// worker/service.rs and crates/protocols/src/worker.rs (WorkerSpec, WorkerInfo, WorkerUpdateRequest,
// the {"error","code"} error body), worker/manager.rs (loads, flush, engine metrics).
//
// # Concurrency Model
//
// Handlers run in their server goroutines. DELETE /workers/{id} with a drain settle time starts one
// goroutine per removal, owned by the Handler: it waits for the settle time (or Close) and removes
// the worker. Close stops them all and waits for them.
package smgapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/internal/worker"
)

// Admin is the part of the admin service the worker routes use.
type Admin interface {
	AddWorker(context.Context, *adminv1.AddWorkerRequest) (*adminv1.AddWorkerResponse, error)
	RemoveWorker(context.Context, *adminv1.RemoveWorkerRequest) (*adminv1.RemoveWorkerResponse, error)
	DrainWorker(context.Context, *adminv1.DrainWorkerRequest) (*adminv1.DrainWorkerResponse, error)
}

// Detector completes a worker spec from its engine (dispatch.Detector).
type Detector interface {
	Complete(ctx context.Context, spec worker.Spec) (worker.Spec, error)
}

// Deps are what the routes work on.
type Deps struct {
	Registry *worker.Registry
	Admin    Admin
	Detector Detector
	Checker  *worker.HealthChecker
	// HTTP calls the engines.
	HTTP *http.Client
	// PD reports PD mode (engine passthroughs pick a prefill worker, as SMG's PD router does).
	PD bool
	// DrainSettle is --drain-settle-secs: DELETE /workers/{id} drains a ready worker this long
	// before removing it.
	DrainSettle time.Duration
	// FanoutTimeout bounds each engine call (default 5 s).
	FanoutTimeout time.Duration
	Logger        *slog.Logger
}

// Handler serves the routes.
type Handler struct {
	d Deps

	mu      sync.Mutex
	closed  bool
	removal map[string]context.CancelFunc // pending settle-then-remove, by worker id
	wg      sync.WaitGroup
}

// New builds the routes.
func New(d Deps) *Handler {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.FanoutTimeout <= 0 {
		d.FanoutTimeout = 5 * time.Second
	}
	if d.HTTP == nil {
		d.HTTP = http.DefaultClient
	}
	return &Handler{d: d, removal: map[string]context.CancelFunc{}}
}

// Close stops pending removals (the workers stay, draining) and waits for their goroutines.
func (h *Handler) Close() {
	h.mu.Lock()
	h.closed = true
	for _, cancel := range h.removal {
		cancel()
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// Route is one route and who may call it.
type Route struct {
	Pattern string
	Handler http.Handler
	// Access is "admin" (worker management, loads, cache), "inference" (engine passthroughs) or
	// "public" (engine metrics, as /metrics).
	Access string
}

// Routes lists the routes.
func (h *Handler) Routes() []Route {
	return []Route{
		{"POST /workers", http.HandlerFunc(h.createWorker), "admin"},
		{"GET /workers", http.HandlerFunc(h.listWorkers), "admin"},
		{"GET /workers/{id}", http.HandlerFunc(h.getWorker), "admin"},
		{"PUT /workers/{id}", http.HandlerFunc(h.replaceWorker), "admin"},
		{"PATCH /workers/{id}", http.HandlerFunc(h.updateWorker), "admin"},
		{"DELETE /workers/{id}", http.HandlerFunc(h.deleteWorker), "admin"},
		{"GET /get_loads", http.HandlerFunc(h.getLoads), "admin"},
		{"POST /flush_cache", http.HandlerFunc(h.flushCache), "admin"},
		{"GET /get_server_info", http.HandlerFunc(h.serverInfo), "inference"},
		{"GET /get_model_info", http.HandlerFunc(h.modelInfo), "inference"},
		{"GET /health_generate", http.HandlerFunc(h.healthGenerate), "inference"},
		{"GET /engine_metrics", http.HandlerFunc(h.engineMetrics), "public"},
	}
}

// Error codes of SMG's worker routes (worker/service.rs WorkerServiceError::error_code).
const (
	codeNotFound      = "WORKER_NOT_FOUND"
	codeBadRequest    = "BAD_REQUEST"
	codeAlreadyExists = "WORKER_ALREADY_EXISTS"
	codeConflict      = "WORKER_MANAGED" // sluice's: the worker belongs to Kubernetes discovery
	codeInternal      = "INTERNAL_SERVER_ERROR"
	codeUnavailable   = "SERVICE_UNAVAILABLE"
)

// writeError answers SMG's worker-route error body {"error": message, "code": CODE}.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"error": msg, "code": code})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// readJSON decodes a request body of at most 1 MiB.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, codeBadRequest, "request body too large")
			return false
		}
		writeError(w, http.StatusBadRequest, codeBadRequest, "invalid JSON body: "+err.Error())
		return false
	}
	return true
}
