package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"

	workerv1 "github.com/sluicegw/sluice/gen/sluice/worker/v1"
	"github.com/sluicegw/sluice/gen/sluice/worker/v1/workerv1connect"
)

// Engine metadata and admin calls. For grpc:// workers the calls go through the *http.Client's
// grpc:// transport (NewHTTPClient installs one); a client without it fails with Go's "unsupported
// protocol scheme" error.

// maxMetaBody bounds metadata responses (model lists, server info, loads).
const maxMetaBody = 4 << 20

// StatusError is a non-2xx answer to a metadata or admin call.
type StatusError struct {
	Method, URL string
	Code        int
	Body        string // the start of the response body, for logs
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: status %d: %s", e.Method, e.URL, e.Code, e.Body)
}

// ErrNotSupported is returned for calls a worker protocol does not have.
var ErrNotSupported = errors.New("not supported by this worker protocol")

// IsGRPC reports whether a worker URL uses the worker gRPC protocol (grpc:// or grpcs://).
func IsGRPC(baseURL string) bool {
	return strings.HasPrefix(baseURL, "grpc://") || strings.HasPrefix(baseURL, "grpcs://")
}

// call sends a body-less request and decodes a 2xx JSON answer into dst (nil: drop it).
func (u *Upstream) call(ctx context.Context, method, url string, dst any) error {
	resp, err := u.Do(ctx, method, url, nil, http.Header{"Accept": {"application/json"}})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMetaBody))
	if err != nil {
		return err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &StatusError{Method: method, URL: url, Code: resp.StatusCode, Body: snippet(body)}
	}
	if dst == nil {
		return nil
	}
	if err := json.Unmarshal(body, dst); err != nil {
		return fmt.Errorf("%s %s: bad JSON: %w", method, url, err)
	}
	return nil
}

func snippet(b []byte) string {
	const n = 256
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// DiscoverModels lists the engine's models (GET /v1/models, the ids of "data"). grpc:// workers have
// no model listing: it returns nil, nil (their models come from configuration).
func (u *Upstream) DiscoverModels(ctx context.Context, baseURL string) ([]string, error) {
	if IsGRPC(baseURL) {
		return nil, nil
	}
	ids, _, err := u.listModels(ctx, strings.TrimSuffix(baseURL, "/"))
	return ids, err
}

// ServerInfo returns the engine's server info: GET /get_server_info, then /server_info when the first
// is missing (404/405). grpc:// workers have none: nil, nil.
func (u *Upstream) ServerInfo(ctx context.Context, baseURL string) (map[string]any, error) {
	if IsGRPC(baseURL) {
		return nil, nil
	}
	base := strings.TrimSuffix(baseURL, "/")
	var info map[string]any
	err := u.call(ctx, http.MethodGet, base+"/get_server_info", &info)
	var se *StatusError
	if errors.As(err, &se) && (se.Code == http.StatusNotFound || se.Code == http.StatusMethodNotAllowed) {
		info = nil
		err = u.call(ctx, http.MethodGet, base+"/server_info", &info)
	}
	if err != nil {
		return nil, err
	}
	return info, nil
}

// Load is an engine's load as it reports it.
type Load struct {
	Running int
	Waiting int
	// KVUsage is the fraction of the KV cache in use, 0..1 (mean over data-parallel ranks).
	KVUsage float64
	// Ranks is the load of each data-parallel rank, when the engine reports ranks (SGLang's
	// /v1/loads and /get_load list one entry per dp_rank); the fields above are their totals.
	Ranks []RankLoad
}

// RankLoad is one data-parallel rank's load.
type RankLoad struct {
	Rank             int
	Running, Waiting int
	KVUsage          float64
}

// FetchLoad reads an engine's load in the way its protocol offers it: grpc:// workers through
// LoadService.GetLoad, or their engine's GetLoads when protocol is "sglang" or "vllm" (none for
// "trtllm": ErrNotSupported); vLLM only through its Prometheus /metrics (fetchVLLMLoad); SGLang at
// GET /v1/loads, or GET /get_load on engines older than /v1/loads (both in
// python/sglang/srt/entrypoints/http_server.py).
func (u *Upstream) FetchLoad(ctx context.Context, baseURL, protocol string) (Load, error) {
	if IsGRPC(baseURL) && (protocol == "sglang" || protocol == "vllm") {
		return u.fetchEngineGRPCLoad(ctx, baseURL, protocol) // load_enginegrpc.go
	}
	if IsGRPC(baseURL) && protocol == "trtllm" {
		return Load{}, ErrNotSupported // TensorRT-LLM's service has no GetLoads
	}
	if IsGRPC(baseURL) {
		lc := workerv1connect.NewLoadServiceClient(u.client(), baseURL, connect.WithGRPC())
		r, err := lc.GetLoad(ctx, &workerv1.GetLoadRequest{})
		if err != nil {
			return Load{}, err
		}
		return Load{Running: int(r.GetRunningRequests()), Waiting: int(r.GetWaitingRequests()), KVUsage: r.GetKvUsage()}, nil
	}
	base := strings.TrimSuffix(baseURL, "/")
	if protocol == "vllm" {
		return u.fetchVLLMLoad(ctx, base)
	}
	var raw json.RawMessage
	err := u.call(ctx, http.MethodGet, base+"/v1/loads", &raw)
	if isMissingRoute(err) {
		if err = u.call(ctx, http.MethodGet, base+"/get_load", &raw); err == nil {
			return parseGetLoad(raw)
		}
	}
	if err != nil {
		return Load{}, err
	}
	return parseLoad(raw)
}

// isMissingRoute reports an answer that says the route does not exist (as opposed to a failure).
func isMissingRoute(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && (se.Code == http.StatusNotFound || se.Code == http.StatusMethodNotAllowed ||
		se.Code == http.StatusNotImplemented)
}

// parseGetLoad reads older SGLang's GET /get_load: a list with one object per data-parallel rank,
// {"dp_rank","num_reqs","num_waiting_reqs","num_tokens"} (GetLoadReqOutput in
// python/sglang/srt/managers/io_struct.py). num_reqs counts running and waiting requests together, so
// running is their difference. It reports no KV usage.
func parseGetLoad(raw []byte) (Load, error) {
	type entry struct {
		DPRank     *float64 `json:"dp_rank"`
		NumReqs    *float64 `json:"num_reqs"`
		NumWaiting *float64 `json:"num_waiting_reqs"`
	}
	var ranks []entry
	if err := json.Unmarshal(raw, &ranks); err != nil {
		var one entry
		if err2 := json.Unmarshal(raw, &one); err2 != nil {
			return Load{}, fmt.Errorf("get_load: %w", err)
		}
		ranks = append(ranks, one)
	}
	var l Load
	for i, r := range ranks {
		if r.NumReqs == nil && r.NumWaiting == nil {
			continue
		}
		total, waiting := 0, 0
		if r.NumReqs != nil {
			total = count(*r.NumReqs)
		}
		if r.NumWaiting != nil {
			waiting = count(*r.NumWaiting)
		}
		rl := RankLoad{Rank: i, Running: max(total-waiting, 0), Waiting: waiting}
		if r.DPRank != nil {
			rl.Rank = count(*r.DPRank)
		}
		l.Waiting += rl.Waiting
		l.Running += rl.Running
		l.Ranks = append(l.Ranks, rl)
	}
	if len(l.Ranks) == 0 {
		return Load{}, errors.New("get_load: no recognised load fields")
	}
	if len(l.Ranks) == 1 {
		l.Ranks = nil // one rank: nothing beyond the totals
	}
	return l, nil
}

type loadEntry struct {
	NumRunning  *float64    `json:"num_running_reqs"`
	NumWaiting  *float64    `json:"num_waiting_reqs"`
	TokenUsage  *float64    `json:"token_usage"`
	Running     *float64    `json:"running_requests"`
	Waiting     *float64    `json:"waiting_requests"`
	KVUsage     *float64    `json:"kv_usage"`
	RunningAlt  *float64    `json:"running"`
	WaitingAlt  *float64    `json:"waiting"`
	KVUsageAlt  *float64    `json:"kv_cache_usage"`
	DPRank      *float64    `json:"dp_rank"`
	LoadsInline []loadEntry `json:"loads"`
}

func first(vs ...*float64) (float64, bool) {
	for _, v := range vs {
		if v != nil {
			return *v, true
		}
	}
	return 0, false
}

func (e loadEntry) load() (Load, bool) {
	r, okR := first(e.NumRunning, e.Running, e.RunningAlt)
	w, okW := first(e.NumWaiting, e.Waiting, e.WaitingAlt)
	k, okK := first(e.TokenUsage, e.KVUsage, e.KVUsageAlt)
	return Load{Running: count(r), Waiting: count(w), KVUsage: max(k, 0)}, okR || okW || okK
}

// count turns an engine-reported count into an int: negative values become 0 and huge ones are capped,
// because converting an out-of-range float to int yields garbage (found by FuzzParseLoad: 1e300 became
// a large negative load, which placement would have preferred).
func count(f float64) int {
	const limit = 1 << 31
	switch {
	case !(f > 0):
		return 0
	case f > limit:
		return limit
	}
	return int(f)
}

func parseLoad(raw []byte) (Load, error) {
	var top loadEntry
	if err := json.Unmarshal(raw, &top); err != nil {
		return Load{}, fmt.Errorf("loads: %w", err)
	}
	if len(top.LoadsInline) > 0 {
		var sum Load
		for i, e := range top.LoadsInline {
			l, _ := e.load()
			sum.Running += l.Running
			sum.Waiting += l.Waiting
			sum.KVUsage += l.KVUsage
			rl := RankLoad{Rank: i, Running: l.Running, Waiting: l.Waiting, KVUsage: l.KVUsage}
			if e.DPRank != nil {
				rl.Rank = count(*e.DPRank)
			}
			sum.Ranks = append(sum.Ranks, rl)
		}
		sum.KVUsage /= float64(len(top.LoadsInline))
		if len(sum.Ranks) == 1 {
			sum.Ranks = nil // one rank: nothing beyond the totals
		}
		return sum, nil
	}
	l, ok := top.load()
	if !ok {
		return Load{}, errors.New("loads: no recognised load fields")
	}
	return l, nil
}

// FlushCache asks an SGLang engine to drop its prefix cache (POST /flush_cache). vLLM serves no such
// route and grpc:// workers have no such call: ErrNotSupported.
func (u *Upstream) FlushCache(ctx context.Context, baseURL, protocol string) error {
	if IsGRPC(baseURL) || protocol == "vllm" {
		return ErrNotSupported
	}
	return u.call(ctx, http.MethodPost, strings.TrimSuffix(baseURL, "/")+"/flush_cache", nil)
}

// Probe checks a worker's health. HTTP: GET baseURL+endpoint ("/health" when empty), healthy on 2xx.
// grpc://: the standard grpc.health.v1.Health/Check for the whole server (SERVING is healthy); a
// worker without the health service (Unimplemented) is probed with LoadService.GetLoad instead.
func (u *Upstream) Probe(ctx context.Context, baseURL, endpoint string) error {
	if IsGRPC(baseURL) {
		hc := grpchealth.NewClient(u.client(), baseURL, connect.WithGRPC())
		resp, err := hc.Check(ctx, &grpchealth.CheckRequest{})
		if connect.CodeOf(err) == connect.CodeUnimplemented {
			_, err = u.FetchLoad(ctx, baseURL, "grpc")
			return err
		}
		if err != nil {
			return err
		}
		if resp.Status != grpchealth.StatusServing {
			return fmt.Errorf("grpc health: %s", resp.Status)
		}
		return nil
	}
	if endpoint == "" {
		endpoint = "/health"
	}
	return u.call(ctx, http.MethodGet, strings.TrimSuffix(baseURL, "/")+endpoint, nil)
}

func (u *Upstream) client() *http.Client {
	if u.Client == nil {
		return http.DefaultClient
	}
	return u.Client
}

// DiscoverModels is (&Upstream{Client: client}).DiscoverModels.
func DiscoverModels(ctx context.Context, client *http.Client, baseURL string) ([]string, error) {
	return (&Upstream{Client: client}).DiscoverModels(ctx, baseURL)
}

// ServerInfo is (&Upstream{Client: client}).ServerInfo.
func ServerInfo(ctx context.Context, client *http.Client, baseURL string) (map[string]any, error) {
	return (&Upstream{Client: client}).ServerInfo(ctx, baseURL)
}

// FetchLoad is (&Upstream{Client: client}).FetchLoad.
func FetchLoad(ctx context.Context, client *http.Client, baseURL, protocol string) (Load, error) {
	return (&Upstream{Client: client}).FetchLoad(ctx, baseURL, protocol)
}

// FlushCache is (&Upstream{Client: client}).FlushCache.
func FlushCache(ctx context.Context, client *http.Client, baseURL, protocol string) error {
	return (&Upstream{Client: client}).FlushCache(ctx, baseURL, protocol)
}

// Probe is (&Upstream{Client: client}).Probe.
func Probe(ctx context.Context, client *http.Client, baseURL, endpoint string) error {
	return (&Upstream{Client: client}).Probe(ctx, baseURL, endpoint)
}
