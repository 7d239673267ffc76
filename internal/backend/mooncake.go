package backend

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/sluicegw/sluice/internal/backend/body"
)

// vLLM-style PD with the Mooncake connector, written from vLLM's own proxy
// (examples/disaggregated/mooncake_connector/mooncake_connector_proxy.py) and its usage guide
// (docs/features/mooncake_connector_usage.md): both legs go at once; the prefill keeps the KV cache
// under a transfer id, and the decode is told where to fetch it — the prefill's bootstrap server, its
// engine id for the chosen data-parallel rank, and the same transfer id.

// MooncakeDefaultBootstrapPort is VLLM_MOONCAKE_BOOTSTRAP_PORT's default.
const MooncakeDefaultBootstrapPort = 8998

// MooncakeBootstrapAddr is the remote_bootstrap_addr of a prefill engine: http://host:port, an IPv6
// literal in brackets (the proxy's maybe_wrap_ipv6_address + make_http_path).
func MooncakeBootstrapAddr(baseURL string, port int) string {
	if port <= 0 {
		port = MooncakeDefaultBootstrapPort
	}
	h := strings.Trim(body.BootstrapHost(baseURL), "[]")
	return "http://" + net.JoinHostPort(h, strconv.Itoa(port))
}

// MooncakeEngineIDs asks a prefill engine's bootstrap server for its engine ids: GET {addr}/query
// answers {"<dp rank>": {"engine_id": ...}, ...} (the proxy's get_prefiller_info). The ids come back by
// rank; their number is the engine's data-parallel size.
func (u *Upstream) MooncakeEngineIDs(ctx context.Context, bootstrapAddr string) ([]string, error) {
	var byRank map[string]struct {
		EngineID string `json:"engine_id"`
	}
	if err := u.call(ctx, http.MethodGet, strings.TrimSuffix(bootstrapAddr, "/")+"/query", &byRank); err != nil {
		return nil, err
	}
	if len(byRank) == 0 {
		return nil, fmt.Errorf("mooncake bootstrap %s/query: no ranks", bootstrapAddr)
	}
	ranks := make([]int, 0, len(byRank))
	for k, v := range byRank {
		r, err := strconv.Atoi(k)
		if err != nil || r < 0 || r >= len(byRank) || v.EngineID == "" {
			return nil, fmt.Errorf("mooncake bootstrap %s/query: bad rank entry %q", bootstrapAddr, k)
		}
		ranks = append(ranks, r)
	}
	sort.Ints(ranks)
	ids := make([]string, len(ranks))
	for _, r := range ranks {
		ids[r] = byRank[strconv.Itoa(r)].EngineID
	}
	return ids, nil
}

// HeaderDPRank is the header vLLM's API server reads a request's data-parallel rank from.
const HeaderDPRank = "X-data-parallel-rank"
