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
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := u.call(ctx, http.MethodGet, strings.TrimSuffix(baseURL, "/")+"/v1/models", &list); err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(list.Data))
	for _, m := range list.Data {
		if m.ID != "" {
			ids = append(ids, m.ID)
		}
	}
	return ids, nil
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

// sglangInfoKeys are server-info keys only SGLang reports (its server args).
var sglangInfoKeys = []string{
	"disaggregation_mode", "tokenizer_path", "disaggregation_bootstrap_port", "tp_size",
	"mem_fraction_static", "chunked_prefill_size", "max_total_num_tokens", "schedule_policy",
}

// DetectProtocol guesses an HTTP engine's protocol from its server info: an explicit "protocol"
// string (the sluice simulator reports one) wins; otherwise any SGLang server-arg key
// (disaggregation_mode, tokenizer_path, tp_size, ...) means "sglang"; anything else, including no
// info at all (vLLM has no /get_server_info), means "vllm".
func DetectProtocol(info map[string]any) string {
	if p, ok := info["protocol"].(string); ok && p != "" {
		return strings.ToLower(p)
	}
	for _, k := range sglangInfoKeys {
		if _, ok := info[k]; ok {
			return "sglang"
		}
	}
	return "vllm"
}

// Load is an engine's load as it reports it.
type Load struct {
	Running int
	Waiting int
	// KVUsage is the fraction of the KV cache in use, 0..1 (mean over data-parallel ranks).
	KVUsage float64
}

// FetchLoad reads the engine's load: GET /v1/loads for HTTP engines, LoadService.GetLoad for grpc://.
// The JSON is read leniently: SGLang's {"loads":[{"num_running_reqs","num_waiting_reqs",
// "token_usage"},...]} (summed over ranks, usage averaged), the same keys at the top level, or the
// worker protocol's names (running_requests, waiting_requests, kv_usage).
func (u *Upstream) FetchLoad(ctx context.Context, baseURL string) (Load, error) {
	if IsGRPC(baseURL) {
		lc := workerv1connect.NewLoadServiceClient(u.client(), baseURL, connect.WithGRPC())
		r, err := lc.GetLoad(ctx, &workerv1.GetLoadRequest{})
		if err != nil {
			return Load{}, err
		}
		return Load{Running: int(r.GetRunningRequests()), Waiting: int(r.GetWaitingRequests()), KVUsage: r.GetKvUsage()}, nil
	}
	var raw json.RawMessage
	if err := u.call(ctx, http.MethodGet, strings.TrimSuffix(baseURL, "/")+"/v1/loads", &raw); err != nil {
		return Load{}, err
	}
	return parseLoad(raw)
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
		for _, e := range top.LoadsInline {
			l, _ := e.load()
			sum.Running += l.Running
			sum.Waiting += l.Waiting
			sum.KVUsage += l.KVUsage
		}
		sum.KVUsage /= float64(len(top.LoadsInline))
		return sum, nil
	}
	l, ok := top.load()
	if !ok {
		return Load{}, errors.New("loads: no recognised load fields")
	}
	return l, nil
}

// FlushCache asks the engine to drop its prefix cache (POST /flush_cache). grpc:// workers have no
// such call: ErrNotSupported.
func (u *Upstream) FlushCache(ctx context.Context, baseURL string) error {
	if IsGRPC(baseURL) {
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
			_, err = u.FetchLoad(ctx, baseURL)
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
func FetchLoad(ctx context.Context, client *http.Client, baseURL string) (Load, error) {
	return (&Upstream{Client: client}).FetchLoad(ctx, baseURL)
}

// FlushCache is (&Upstream{Client: client}).FlushCache.
func FlushCache(ctx context.Context, client *http.Client, baseURL string) error {
	return (&Upstream{Client: client}).FlushCache(ctx, baseURL)
}

// Probe is (&Upstream{Client: client}).Probe.
func Probe(ctx context.Context, client *http.Client, baseURL, endpoint string) error {
	return (&Upstream{Client: client}).Probe(ctx, baseURL, endpoint)
}
