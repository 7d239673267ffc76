package smgapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/proto"

	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/worker"
)

// maxEngineBody bounds what is read from an engine for a passthrough or a metrics scrape.
const maxEngineBody = 16 << 20

// fanout calls fn for every worker of ws (backend.Fanout), in their order.
func fanout[T any](ctx context.Context, h *Handler, ws []*worker.Worker, fn func(context.Context, *worker.Worker, *backend.Upstream) T) []T {
	return backend.Fanout(ctx, h.d.HTTP, h.d.FanoutTimeout, ws, fn)
}

// getLoads: GET /get_loads answers SMG's {"workers":[{"worker","load","details"}]}. SMG's load is
// the engine's KV tokens in use; sluice reads requests, not tokens, from the engines, so its load is
// running + waiting requests, with the per-rank counts in details; -1 when the engine did not answer,
// as in SMG.
func (h *Handler) getLoads(w http.ResponseWriter, r *http.Request) {
	loads := fanout(r.Context(), h, h.d.Registry.Snapshot().All(), func(ctx context.Context, wk *worker.Worker, u *backend.Upstream) map[string]any {
		l, err := u.FetchLoad(ctx, wk.URL(), string(wk.Protocol()))
		if err != nil {
			return map[string]any{"worker": wk.URL(), "load": -1, "details": map[string]any{"error": err.Error()}}
		}
		ranks := []map[string]any{}
		add := func(rank, running, waiting int, usage float64) {
			ranks = append(ranks, map[string]any{"dp_rank": rank, "num_running_reqs": running, "num_waiting_reqs": waiting,
				"num_total_reqs": running + waiting, "token_usage": usage})
		}
		if len(l.Ranks) == 0 {
			add(0, l.Running, l.Waiting, l.KVUsage)
		}
		for _, rk := range l.Ranks {
			add(rk.Rank, rk.Running, rk.Waiting, rk.KVUsage)
		}
		return map[string]any{"worker": wk.URL(), "load": l.Running + l.Waiting, "details": map[string]any{
			"timestamp": time.Now().UTC().Format(time.RFC3339), "dp_rank_count": len(ranks), "loads": ranks}}
	})
	writeJSON(w, http.StatusOK, map[string]any{"workers": loads})
}

// flushCache: POST /flush_cache flushes the prefix cache of every worker that has the call (SGLang
// HTTP engines); vLLM and worker-protocol workers are skipped, as SMG skips gRPC ones. 200 when all
// flushed, 206 when some failed.
func (h *Handler) flushCache(w http.ResponseWriter, r *http.Request) {
	all := h.d.Registry.Snapshot().All()
	type result struct {
		url     string
		err     error
		skipped bool
	}
	results := fanout(r.Context(), h, all, func(ctx context.Context, wk *worker.Worker, u *backend.Upstream) result {
		err := u.FlushCache(ctx, wk.URL(), string(wk.Protocol()))
		return result{url: wk.URL(), err: err, skipped: errors.Is(err, backend.ErrNotSupported)}
	})
	successful, failed := []string{}, [][2]string{}
	flushable := 0
	for _, res := range results {
		switch {
		case res.skipped:
		case res.err != nil:
			flushable++
			failed = append(failed, [2]string{res.url, res.err.Error()})
		default:
			flushable++
			successful = append(successful, res.url)
		}
	}
	body := map[string]any{"workers_flushed": len(successful), "total_http_workers": flushable, "total_workers": len(all)}
	if len(failed) == 0 {
		body["status"] = "success"
		body["message"] = fmt.Sprintf("Successfully flushed cache on all %d HTTP workers", len(successful))
		writeJSON(w, http.StatusOK, body)
		return
	}
	body["status"] = "partial_success"
	body["message"] = fmt.Sprintf("Flushed cache on %d of %d HTTP workers", len(successful), flushable)
	body["successful"], body["failed"] = successful, failed
	writeJSON(w, http.StatusPartialContent, body)
}

// passthroughWorker picks the worker an engine passthrough goes to, as SMG does: the first routable
// worker (a prefill worker in PD mode), HTTP engines only, SGLang preferred (vLLM serves no server
// or model info).
func (h *Handler) passthroughWorker() *worker.Worker {
	role := worker.RoleRegular
	if h.d.PD {
		role = worker.RolePrefill
	}
	now := time.Now()
	var first *worker.Worker
	for _, wk := range h.d.Registry.Snapshot().ByRole(role) {
		if !wk.Routable(now) || wk.Protocol() == worker.ProtocolGRPC {
			continue
		}
		if wk.Protocol() == worker.ProtocolSGLang {
			return wk
		}
		if first == nil {
			first = wk
		}
	}
	return first
}

// proxyGET relays GET path of wk: the engine's status, content type and body.
func (h *Handler) proxyGET(w http.ResponseWriter, r *http.Request, wk *worker.Worker, path string) {
	ctx, cancel := context.WithTimeout(r.Context(), h.d.FanoutTimeout)
	defer cancel()
	resp, err := (&backend.Upstream{Client: h.d.HTTP, APIKey: wk.APIKey()}).Do(ctx, http.MethodGet, wk.URL()+path, nil, http.Header{"Accept": {"application/json"}})
	if err != nil {
		writeError(w, http.StatusBadGateway, "UPSTREAM_ERROR", "worker "+wk.URL()+": "+err.Error())
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxEngineBody))
	if err != nil {
		writeError(w, http.StatusBadGateway, "UPSTREAM_ERROR", "worker "+wk.URL()+": "+err.Error())
		return
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.Header().Set("X-Sluice-Worker", wk.URL())
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
}

func (h *Handler) proxyFirst(w http.ResponseWriter, r *http.Request, path string) {
	wk := h.passthroughWorker()
	if wk == nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "No workers are available")
		return
	}
	h.proxyGET(w, r, wk, path)
}

// serverInfo: GET /get_server_info, the engine's own (SGLang's server args).
func (h *Handler) serverInfo(w http.ResponseWriter, r *http.Request) {
	h.proxyFirst(w, r, "/get_server_info")
}

// modelInfo: GET /get_model_info, the engine's own.
func (h *Handler) modelInfo(w http.ResponseWriter, r *http.Request) {
	h.proxyFirst(w, r, "/get_model_info")
}

// healthGenerate: GET /health_generate asks an engine to generate one token (SGLang's
// /health_generate; vLLM has none, its /health is asked instead). In PD mode one prefill and one
// decode worker are asked together and both must pass, as in SMG's PD router.
func (h *Handler) healthGenerate(w http.ResponseWriter, r *http.Request) {
	path := func(wk *worker.Worker) string {
		if wk.Protocol() == worker.ProtocolVLLM {
			return "/health"
		}
		return "/health_generate"
	}
	if !h.d.PD {
		wk := h.passthroughWorker()
		if wk == nil {
			writeError(w, http.StatusServiceUnavailable, codeUnavailable, "No workers are available")
			return
		}
		h.proxyGET(w, r, wk, path(wk))
		return
	}
	prefill := h.passthroughWorker()
	var decode *worker.Worker
	now := time.Now()
	for _, wk := range h.d.Registry.Snapshot().ByRole(worker.RoleDecode) {
		if wk.Routable(now) && wk.Protocol() != worker.ProtocolGRPC {
			decode = wk
			break
		}
	}
	if prefill == nil || decode == nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "No healthy worker pair available")
		return
	}
	errs := fanout(r.Context(), h, []*worker.Worker{prefill, decode}, func(ctx context.Context, wk *worker.Worker, u *backend.Upstream) error {
		resp, err := u.Do(ctx, http.MethodGet, wk.URL()+path(wk), nil, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", wk.URL(), err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxEngineBody))
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("%s: status %d", wk.URL(), resp.StatusCode)
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "Health generate failed: "+strings.ReplaceAll(err.Error(), "\n", "; "))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "Health generate passed on both prefill and decode")
}

// engineMetrics: GET /engine_metrics scrapes every HTTP engine's Prometheus /metrics once and answers
// all of it in one exposition, each sample labelled worker_addr with its engine's URL, as SMG does
// (worker/manager.rs get_engine_metrics). 503 when no engine answered.
func (h *Handler) engineMetrics(w http.ResponseWriter, r *http.Request) {
	var ws []*worker.Worker
	for _, wk := range h.d.Registry.Snapshot().All() {
		if wk.Protocol() != worker.ProtocolGRPC {
			ws = append(ws, wk)
		}
	}
	if len(ws) == 0 {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "No available workers")
		return
	}
	scrapes := fanout(r.Context(), h, ws, func(ctx context.Context, wk *worker.Worker, u *backend.Upstream) map[string]*dto.MetricFamily {
		resp, err := u.Do(ctx, http.MethodGet, wk.URL()+"/metrics", nil, http.Header{"Accept": {"text/plain"}})
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, maxEngineBody))
		if err != nil {
			return nil
		}
		label := &dto.LabelPair{Name: proto.String("worker_addr"), Value: proto.String(wk.URL())}
		for _, f := range fams {
			for _, m := range f.Metric {
				m.Label = append(m.Label, label)
			}
		}
		return fams
	})
	merged := map[string]*dto.MetricFamily{}
	answered := 0
	for _, fams := range scrapes {
		if fams == nil {
			continue
		}
		answered++
		for name, f := range fams {
			if have, ok := merged[name]; ok && have.GetType() == f.GetType() {
				have.Metric = append(have.Metric, f.Metric...)
				continue
			}
			merged[name] = f
		}
	}
	if answered == 0 {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "All backend requests failed")
		return
	}
	var buf bytes.Buffer
	for _, name := range slices.Sorted(maps.Keys(merged)) {
		if _, err := expfmt.MetricFamilyToText(&buf, merged[name]); err != nil {
			writeError(w, http.StatusInternalServerError, codeInternal, "Failed to aggregate metrics: "+err.Error())
			return
		}
	}
	w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	_, _ = w.Write(buf.Bytes())
}
