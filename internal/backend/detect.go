package backend

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// How Detect decided an engine's protocol (Detection.Source).
const (
	DetectedByURLScheme  = "url_scheme"      // grpc:// speaks the worker protocol
	DetectedByOwnedBy    = "models_owned_by" // GET /v1/models named the engine
	DetectedByVersion    = "version"         // GET /version answered: only vLLM serves it
	DetectedByServerInfo = "server_info"     // GET /get_server_info or /server_info answered: SGLang
)

// Detection is what an engine says about itself.
type Detection struct {
	// Protocol is "sglang", "vllm" or "grpc"; empty when the engine answered none of the probes (the
	// caller keeps its configured runtime, as the Rust gateway does).
	Protocol string
	// Source is one of the DetectedBy constants; empty with Protocol.
	Source string
	// Models are the ids of GET /v1/models (nil when it did not answer).
	Models []string
	// Info is set when SGLang's server info was read.
	Info *ServerInfoFields
	// Err is the first failure, for logs, when nothing could be detected.
	Err error
	// Reached reports whether the engine answered any probe at all (an HTTP status counts). An
	// engine that did not is still starting, or gone: what it is stays unknown, and the caller asks
	// again when it answers rather than assuming its configured runtime.
	Reached bool
}

// ServerInfoFields are the parts of SGLang's server info (its server args) a gateway checks against
// what the operator configured.
type ServerInfoFields struct {
	// DisaggregationMode is "prefill", "decode" or "null" (not a PD engine); empty when not reported.
	DisaggregationMode string
	// BootstrapPort is disaggregation_bootstrap_port; 0 when not reported.
	BootstrapPort int
	// DPSize is dp_size; 0 when not reported.
	DPSize int
	// MaxRunningRequests is max_running_requests, the engine's running window over all its
	// data-parallel ranks (python/sglang/srt/server_args.py; each rank's scheduler takes
	// max_running_requests // dp_size, python/sglang/srt/managers/scheduler.py); 0 when not reported.
	MaxRunningRequests int
	// MaxTotalTokens is max_total_tokens, the KV pool bound in tokens each data-parallel rank's model
	// runner takes when it is given (server_args.py; python/sglang/srt/model_executor/model_runner.py
	// caps max_total_num_tokens by it); 0 when not reported (the engine sized its pool from memory).
	MaxTotalTokens int
	// RankMaxRunningRequests is the smallest effective_max_running_requests_per_dp over the entries
	// of internal_states (one per data-parallel rank: python/sglang/srt/managers/scheduler.py
	// get_internal_state, gathered by http_server.py get_server_info): the window each rank's scheduler
	// enforces, which it also computes when --max-running-requests was not given (then the top-level
	// max_running_requests is null); 0 when not reported.
	RankMaxRunningRequests int
}

// Detect asks an engine what it is, the way the Rust gateway does
// (smg model_gateway/src/workflow/steps/local/detect_backend.rs): the owned_by of GET /v1/models
// ("sglang" or "nvidia" mean SGLang, "vllm" means vLLM), then GET /version (only vLLM serves it:
// vllm/entrypoints/openai/api_server.py), then GET /get_server_info or /server_info (SGLang,
// python/sglang/srt/entrypoints/http_server.py). /version is asked before server info because some
// vLLM builds also answer /server_info. For SGLang the server info is read in any case, for the
// disaggregation mode, bootstrap port and dp size. Every call carries the worker's API key
// (u.APIKey). Detect never fails: what it could not learn stays empty.
func (u *Upstream) Detect(ctx context.Context, baseURL string) Detection {
	if IsGRPC(baseURL) {
		return Detection{Protocol: "grpc", Source: DetectedByURLScheme}
	}
	base := strings.TrimSuffix(baseURL, "/")
	var d Detection
	models, ownedBy, err := u.listModels(ctx, base)
	d.Reached = answered(err)
	if err == nil {
		d.Models = models
	} else {
		d.Err = err
	}
	switch ownedBy {
	case "sglang", "nvidia":
		d.Protocol, d.Source = "sglang", DetectedByOwnedBy
	case "vllm":
		d.Protocol, d.Source = "vllm", DetectedByOwnedBy
	default:
		err := u.call(ctx, http.MethodGet, base+"/version", nil)
		d.Reached = d.Reached || answered(err)
		if err == nil {
			d.Protocol, d.Source = "vllm", DetectedByVersion
		} else if d.Err == nil {
			d.Err = err
		}
	}
	if d.Protocol == "" || d.Protocol == "sglang" {
		info, err := u.ServerInfo(ctx, base)
		d.Reached = d.Reached || answered(err)
		if err == nil {
			if d.Protocol == "" {
				d.Protocol, d.Source = "sglang", DetectedByServerInfo
			}
			d.Info = serverInfoFields(info)
		} else if d.Err == nil {
			d.Err = err
		}
	}
	if d.Protocol != "" {
		d.Err = nil
	}
	return d
}

// answered reports whether a call reached the engine: it succeeded, or the engine answered with a
// status or a body. Only a transport failure (connection refused, a timeout, a reset) did not.
func answered(err error) bool {
	var ue *url.Error
	return err == nil || !errors.As(err, &ue)
}

// listModels reads GET /v1/models: the model ids and the first model's owned_by.
func (u *Upstream) listModels(ctx context.Context, base string) ([]string, string, error) {
	var list struct {
		Data []struct {
			ID      string `json:"id"`
			OwnedBy string `json:"owned_by"`
		} `json:"data"`
	}
	if err := u.call(ctx, http.MethodGet, base+"/v1/models", &list); err != nil {
		return nil, "", err
	}
	ids := make([]string, 0, len(list.Data))
	for _, m := range list.Data {
		if m.ID != "" {
			ids = append(ids, m.ID)
		}
	}
	ownedBy := ""
	if len(list.Data) > 0 {
		ownedBy = strings.ToLower(list.Data[0].OwnedBy)
	}
	return ids, ownedBy, nil
}

// serverInfoFields picks the PD fields out of SGLang's server info. Numbers may come as JSON numbers
// or strings; anything unreadable is left at zero.
func serverInfoFields(info map[string]any) *ServerInfoFields {
	f := &ServerInfoFields{}
	if v, ok := info["disaggregation_mode"]; ok {
		switch m := v.(type) {
		case string:
			f.DisaggregationMode = strings.ToLower(m)
		case nil:
			f.DisaggregationMode = "null"
		}
	}
	f.BootstrapPort = intField(info["disaggregation_bootstrap_port"])
	f.DPSize = intField(info["dp_size"])
	f.MaxRunningRequests = intField(info["max_running_requests"])
	f.MaxTotalTokens = intField(info["max_total_tokens"])
	if states, ok := info["internal_states"].([]any); ok {
		for _, st := range states {
			m, _ := st.(map[string]any)
			if n := intField(m["effective_max_running_requests_per_dp"]); n > 0 && (f.RankMaxRunningRequests == 0 || n < f.RankMaxRunningRequests) {
				f.RankMaxRunningRequests = n
			}
		}
	}
	return f
}

func intField(v any) int {
	switch n := v.(type) {
	case float64:
		if n >= 0 && n <= 1<<31 && n == float64(int(n)) {
			return int(n)
		}
	case json.Number:
		if i, err := n.Int64(); err == nil && i >= 0 && i <= 1<<31 {
			return int(i)
		}
	case string:
		if i, err := strconv.Atoi(n); err == nil && i >= 0 {
			return i
		}
	}
	return 0
}
