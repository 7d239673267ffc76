package sim

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"
)

// engineVersion is what the simulator reports as the engine version (SGLang server info "version",
// vLLM GET /version). It names the simulator so that no one mistakes it for a release.
const engineVersion = "0.0.0+sluice.sim"

// handleModels serves GET /v1/models. Both engines list their served model with owned_by naming the
// engine: SGLang's ModelCard (python/sglang/srt/entrypoints/openai/protocol.py: owned_by "sglang"),
// vLLM's (vllm/entrypoints/openai/engine/protocol.py ModelCard: owned_by "vllm", plus permission).
func (e *Engine) handleModels(w http.ResponseWriter, _ *http.Request) {
	now := time.Now().Unix()
	data := make([]map[string]any, 0, len(e.cfg.Models))
	for _, m := range e.cfg.Models {
		card := map[string]any{
			"id": m, "object": "model", "created": now, "owned_by": string(e.cfg.Protocol), "root": m,
			"parent": nil, "max_model_len": e.cfg.ContextLength,
		}
		if e.cfg.Protocol == ProtocolVLLM {
			card["permission"] = []map[string]any{{
				"id": "modelperm-" + e.id, "object": "model_permission", "created": now,
				"allow_create_engine": false, "allow_sampling": true, "allow_logprobs": true,
				"allow_search_indices": false, "allow_view": true, "allow_fine_tuning": false,
				"organization": "*", "group": nil, "is_blocking": false,
			}}
		}
		data = append(data, card)
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// handleVersion serves vLLM's GET /version: {"version": "..."}.
func (e *Engine) handleVersion(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": engineVersion})
}

func (e *Engine) healthFailing() bool {
	f := e.faults.Load()
	return f.FailHealth && f.appliesTo(e.cfg.Role)
}

// handleHealth serves GET /health: 200 with an empty body, 503 when failing (both engines).
func (e *Engine) handleHealth(w http.ResponseWriter, _ *http.Request) {
	if e.healthFailing() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// handleHealthGenerate runs a one-token generation through the model (so an overloaded engine answers
// slowly, as a real one does). SGLang runs it on a fake bootstrap in PD mode; so does the simulator.
func (e *Engine) handleHealthGenerate(w http.ResponseWriter, r *http.Request) {
	if e.healthFailing() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	sp := sampleSpec{prompt: newPrompt(appendTokens(nil, "health check")), maxTokens: 1, rid: "HEALTH_CHECK"}
	sp.rank = e.chooseRank(&sp)
	rf := requestFaults{slowness: e.faults.Load().SlownessFactor}
	if _, err := e.runSample(r.Context(), &rf, &sp, func(int, string) error { return nil }); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// disaggregationMode is SGLang's --disaggregation-mode: "null" for a regular engine.
func (e *Engine) disaggregationMode() string {
	if e.cfg.Role == RoleRegular {
		return "null"
	}
	return string(e.cfg.Role)
}

// reportedBootstrapPort is the disaggregation_bootstrap_port server arg: the port a prefill's
// bootstrap server listens on, else the configured (default) value.
func (e *Engine) reportedBootstrapPort() int {
	if bp := e.BootstrapPort(); bp != 0 {
		return bp
	}
	if e.cfg.BootstrapPort != 0 {
		return e.cfg.BootstrapPort
	}
	return DefaultBootstrapPort
}

// loadBalanceMethod is SGLang's resolved --load-balance-method: "auto" becomes follow_bootstrap_room on a
// PD prefill and round_robin otherwise (server_args.py _handle_load_balance_method).
func (e *Engine) loadBalanceMethod() string {
	if e.cfg.Role == RolePrefill {
		return "follow_bootstrap_room"
	}
	return "round_robin"
}

// handleServerInfo serves GET /get_server_info and /server_info: the engine's server args plus its
// scheduler info, internal states and version (http_server.py get_server_info). The keys are a
// realistic subset of SGLang's ServerArgs; values the simulator does not model keep SGLang's defaults.
// With DP attention the simulated ranks are one attention-TP rank each (tp_size = dp_size), and the
// scheduler info (max_total_num_tokens, max_req_input_len) is rank 0's, as the DP controller reports it.
func (e *Engine) handleServerInfo(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, e.serverInfo())
}

// serverInfo is what /get_server_info answers (and SGLang's gRPC GetServerInfo splits into server args
// and scheduler info).
func (e *Engine) serverInfo() map[string]any {
	model := e.cfg.Models[0]
	rankKV := e.ranks[0].sched.kvCap
	// One internal state per DP rank (tokenizer_manager get_internal_state gathers every rank's
	// scheduler get_internal_state); effective_max_running_requests_per_dp is the rank's running
	// window after the engine divided --max-running-requests by dp_size, the figure a gateway sizing
	// decode seats wants (the top-level max_running_requests is the server arg as given).
	internal := make([]any, len(e.ranks))
	for i, rk := range e.ranks {
		internal[i] = map[string]any{
			"last_gen_throughput":                   0.0,
			"memory_usage":                          map[string]any{"token_capacity": rk.sched.kvCap},
			"effective_max_running_requests_per_dp": rk.sched.maxRunning,
		}
	}
	info := map[string]any{
		"model_path":                      model,
		"tokenizer_path":                  model,
		"tokenizer_mode":                  "auto",
		"served_model_name":               model,
		"host":                            e.cfg.Host,
		"port":                            e.Port(),
		"context_length":                  e.cfg.ContextLength,
		"tp_size":                         e.cfg.DPSize,
		"dp_size":                         e.cfg.DPSize,
		"pp_size":                         1,
		"ep_size":                         1,
		"enable_dp_attention":             e.cfg.DPSize > 1,
		"load_balance_method":             e.loadBalanceMethod(),
		"max_running_requests":            e.cfg.MaxRunningRequests,
		"max_total_tokens":                rankKV,
		"chunked_prefill_size":            8192,
		"max_prefill_tokens":              16384,
		"schedule_policy":                 "fcfs",
		"mem_fraction_static":             0.88,
		"page_size":                       e.cfg.BlockSize,
		"random_seed":                     e.cfg.Seed,
		"skip_tokenizer_init":             false,
		"enable_metrics":                  true,
		"disaggregation_mode":             e.disaggregationMode(),
		"disaggregation_bootstrap_port":   e.reportedBootstrapPort(),
		"disaggregation_transfer_backend": "mooncake",
		"disaggregation_ib_device":        nil,
		// scheduler_info
		"max_total_num_tokens": rankKV,
		"max_req_input_len":    min(int64(e.cfg.ContextLength), rankKV) - 1,
		"internal_states":      internal,
		"version":              engineVersion,
	}
	return info
}

// handleModelInfo serves GET /get_model_info and /model_info.
func (e *Engine) handleModelInfo(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"model_path":                e.cfg.Models[0],
		"tokenizer_path":            e.cfg.Models[0],
		"is_generation":             true,
		"preferred_sampling_params": nil,
		"weight_version":            "default",
	})
}

// handleLoads serves SGLang's GET /v1/loads: one entry per DP rank with the core load fields of
// GetLoadsReqOutput (python/sglang/srt/entrypoints/v1_loads.py, io_struct.py). ?dp_rank=N keeps that
// rank only (an unknown rank gives an empty list, tokenizer_manager get_loads); num_accelerators is per
// DP rank. cache_hit_rate is the rank's prefix cache hit tokens / prompt tokens since start or reset.
func (e *Engine) handleLoads(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	loads := make([]any, 0, len(e.ranks))
	only := -1
	if s := r.URL.Query().Get("dp_rank"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			// FastAPI's validation of an int query parameter.
			writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": []map[string]any{{
				"type": "int_parsing", "loc": []string{"query", "dp_rank"},
				"msg": "Input should be a valid integer, unable to parse string as an integer", "input": s,
			}}})
			return
		}
		only = v
		if v < 0 || v >= len(e.ranks) {
			only = len(e.ranks) // none
		}
	}
	for _, rk := range e.ranks {
		if only >= 0 && rk.index != only {
			continue
		}
		s := rk.sched.snapshot()
		usage := float64(s.kvUsed) / float64(max(s.kvCap, 1))
		hitRate := 0.0
		if p := rk.promptTokens.Load(); p > 0 {
			hitRate = float64(rk.cachedTokens.Load()) / float64(p)
		}
		loads = append(loads, map[string]any{
			"dp_rank":              rk.index,
			"timestamp":            float64(now.UnixNano()) / 1e9,
			"num_running_reqs":     s.reportedRunning(),
			"num_waiting_reqs":     s.reportedWaiting(),
			"num_used_tokens":      s.kvUsed,
			"num_total_tokens":     s.kvUsed,
			"max_total_num_tokens": s.kvCap,
			"token_usage":          usage,
			"gen_throughput":       0.0,
			"cache_hit_rate":       hitRate,
			"utilization":          usage,
			"max_running_requests": rk.sched.maxRunning,
			"disaggregation":       map[string]any{"mode": e.disaggregationMode()},
			"queues":               map[string]any{"waiting": s.reportedWaiting(), "grammar": 0, "paused": 0, "retracted": 0},
		})
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"timestamp":        now.UTC().Format(time.RFC3339Nano),
		"version":          engineVersion,
		"accelerator":      nil,
		"num_accelerators": 1,
		"loads":            loads,
	})
}

// handleGetLoad serves SGLang's older GET /get_load: a list of GetLoadReqOutput, one per DP rank, where
// num_reqs counts running and waiting requests (scheduler get_load).
func (e *Engine) handleGetLoad(w http.ResponseWriter, _ *http.Request) {
	out := make([]map[string]any, len(e.ranks))
	for i, rk := range e.ranks {
		s := rk.sched.snapshot()
		out[i] = map[string]any{
			"dp_rank":          rk.index,
			"num_reqs":         s.reportedRunning() + s.reportedWaiting(),
			"num_waiting_reqs": s.reportedWaiting(),
			"num_tokens":       s.kvUsed,
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// handleFlush serves SGLang's /flush_cache (GET and POST).
func (e *Engine) handleFlush(w http.ResponseWriter, _ *http.Request) {
	for _, r := range e.ranks {
		r.cache.flush()
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n")
}

// faultsPatch is a POST /sim/faults body: Faults fields plus refuse_for_ms.
type faultsPatch struct {
	Faults
	// RefuseForMS refuses connections for that long, then listens again by itself (a process whose
	// listener is closed cannot be told over HTTP to reopen it).
	RefuseForMS float64 `json:"refuse_for_ms"`
	// CrashForMS kills the engine as SIGKILL would and restarts it after that long (Engine.Crash); the
	// faults themselves are left as they were.
	CrashForMS float64 `json:"crash_for_ms"`
}

func (e *Engine) handleSetFaults(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		writeSimError(w, http.StatusBadRequest, err.Error())
		return
	}
	p := faultsPatch{Faults: e.Faults()}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&p); err != nil {
		writeSimError(w, http.StatusBadRequest, "malformed JSON: "+err.Error())
		return
	}
	if p.CrashForMS < 0 {
		writeSimError(w, http.StatusBadRequest, "crash_for_ms must not be negative")
		return
	}
	if p.CrashForMS > 0 {
		// The whole answer goes out first (with its length, so that the client has read all of it):
		// the crash drops this connection too.
		b, _ := json.Marshal(e.Faults())
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		_, _ = w.Write(b)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		e.Crash(time.Duration(p.CrashForMS * float64(time.Millisecond)))
		return
	}
	if p.RefuseForMS > 0 {
		p.RefuseConnections = true
	}
	if err := p.validate(); err != nil {
		writeSimError(w, http.StatusBadRequest, err.Error())
		return
	}
	f := e.storeFaults(p.Faults)
	refuse := f.RefuseConnections && f.appliesTo(e.cfg.Role)
	// Answer first: closing the listener also drops this connection's keep-alive.
	writeJSON(w, http.StatusOK, f)
	if err := e.applyRefuse(refuse, time.Duration(p.RefuseForMS*float64(time.Millisecond))); err != nil {
		e.logger.Error("sim: apply refuse_connections", "err", err)
	}
}
