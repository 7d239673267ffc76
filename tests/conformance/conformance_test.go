// Package conformance pins the exact bodies the gateway sends to each leg, per engine protocol,
// route, streaming, n and batch, each row citing the upstream file it was written from. A recording
// engine (engine_test.go) captures every leg a real gateway sends. The same cases run end to end
// through the simulator with the official OpenAI client in tests/e2e (engines_test.go).
package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/tests/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		http.DefaultClient.CloseIdleConnections()
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Upstream sources the rows are written from.
const (
	srcMiniLB    = "sgl-project/sglang python/sglang/srt/disaggregation/mini_lb.py"
	srcTokMgr    = "sgl-project/sglang python/sglang/srt/managers/tokenizer_manager.py (n samples of a prompt share its room)"
	srcScheduler = "sgl-project/sglang python/sglang/srt/managers/scheduler.py (null bootstrap_port: the engine's own)"
	srcSMGPD     = "smg-project/smg model_gateway/src/routers/http/pd_router.rs (room lists per prompt)"
	srcToyProxy  = "vllm-project/vllm tests/v1/kv_connector/nixl_integration/toy_proxy_server.py"
	srcNIXL      = "vllm-project/vllm vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py (request_finished)"
	srcSMGvLLM   = "smg-project/smg model_gateway/src/routers/grpc/common/stages/request_execution.rs (n > 1 skips the KV relay)"
	srcMooncake  = "vllm-project/vllm examples/disaggregated/mooncake_connector/mooncake_connector_proxy.py"
	srcKVBoth    = "vllm-project/vllm vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py (get_num_new_matched_tokens: remote KV only with do_remote_prefill); vllm/config/kv_transfer.py (kv_role kv_both: producer and consumer)"
	srcMigration = "vllm-project/vllm vllm/entrypoints/openai/serving_completion.py and sgl-project/sglang python/sglang/srt/entrypoints/openai/serving_completions.py (return_token_ids: token_ids per chunk, prompt_token_ids in the first)"
	srcChatIDs   = "vllm-project/vllm vllm/entrypoints/openai/serving_chat.py (return_token_ids: prompt_token_ids beside the first chunk's choices, token_ids per choice)"
	srcDPRanks   = "sgl-project/sglang python/sglang/srt/managers/io_struct.py (routed_dp_rank, disagg_prefill_dp_rank); smg-project/smg model_gateway/src/routers/http/pd_router.rs (rank hints per leg, rooms aligned to the rank)"
)

// row is one conformance case. Expected bodies are JSON templates: {{HOST}} and {{BPORT}} are the
// prefill's bootstrap host and port, {{KV}} the kv_transfer_params the vLLM prefill returned, and a
// string "$room:NAME" matches a bootstrap room (an integer in [0, 2^63)) bound to NAME: the same
// name is the same room on every leg, different names are different rooms.
type row struct {
	name     string
	source   string
	protocol string // "sglang" | "vllm"
	route    string
	body     string // what the client sends
	// engine behaviour
	nullPort bool     // the SGLang prefill reports no bootstrap port
	omitKV   bool     // the vLLM prefill returns no kv_transfer_params
	dpSize   int      // the SGLang engines report this dp_size (data-parallel attention ranks)
	mooncake bool     // the vLLM prefill runs a Mooncake bootstrap server
	args     []string // more gateway flags
	// expectations
	status  int
	prefill []string
	decode  []string
	check   func(t *testing.T, body []byte)
	legs    func(t *testing.T, prefill, decode []recordedLeg)
}

const (
	boot     = `,"bootstrap_host":"{{HOST}}","bootstrap_port":{{BPORT}},"bootstrap_room":"$room:a"}`
	prefillK = `"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`
	chatMsgs = `"model":"m","messages":[{"role":"user","content":"hi"}]`
)

// usageAsked is what the gateway adds to a streamed chat or completions request whose client did not
// ask for usage: it counts tokens from the engine's usage chunk, which it drops before the client sees it.
const usageAsked = `"stream_options":{"include_usage":true}`

func withBoot(obj, room string) string {
	return strings.TrimSuffix(obj, "}") + strings.ReplaceAll(boot, "$room:a", "$room:"+room)
}

var rows = []row{
	// SGLang: the same body to both legs, with bootstrap fields.
	{name: "sglang chat", source: srcMiniLB, protocol: "sglang", route: "/v1/chat/completions",
		body:    `{` + chatMsgs + `,"max_tokens":8,"engine_only":{"top_k":5}}`,
		status:  200,
		prefill: []string{withBoot(`{`+chatMsgs+`,"max_tokens":8,"engine_only":{"top_k":5}}`, "a")},
		decode:  []string{withBoot(`{`+chatMsgs+`,"max_tokens":8,"engine_only":{"top_k":5}}`, "a")}},
	{name: "sglang chat stream", source: srcMiniLB, protocol: "sglang", route: "/v1/chat/completions",
		body:    `{` + chatMsgs + `,"stream":true,"stream_options":{"include_usage":true}}`,
		status:  200,
		prefill: []string{withBoot(`{`+chatMsgs+`,"stream":true,"stream_options":{"include_usage":true}}`, "a")},
		decode:  []string{withBoot(`{`+chatMsgs+`,"stream":true,"stream_options":{"include_usage":true}}`, "a")}},
	{name: "sglang chat n=2 split into single samples", source: srcTokMgr, protocol: "sglang", route: "/v1/chat/completions",
		body:    `{` + chatMsgs + `,"n":2}`,
		status:  200,
		prefill: []string{withBoot(`{`+chatMsgs+`,"n":1}`, "a"), withBoot(`{`+chatMsgs+`,"n":1}`, "b")},
		decode:  []string{withBoot(`{`+chatMsgs+`,"n":1}`, "a"), withBoot(`{`+chatMsgs+`,"n":1}`, "b")},
		check:   choices(2)},
	// The client did not ask for usage: the gateway asks (usageAsked) and drops the usage chunk.
	{name: "sglang chat n=3 stream split", source: srcTokMgr, protocol: "sglang", route: "/v1/chat/completions",
		body:    `{` + chatMsgs + `,"n":3,"stream":true}`,
		status:  200,
		prefill: []string{withBoot(`{`+chatMsgs+`,"n":1,"stream":true,`+usageAsked+`}`, "a"), withBoot(`{`+chatMsgs+`,"n":1,"stream":true,`+usageAsked+`}`, "b"), withBoot(`{`+chatMsgs+`,"n":1,"stream":true,`+usageAsked+`}`, "c")},
		decode:  []string{withBoot(`{`+chatMsgs+`,"n":1,"stream":true,`+usageAsked+`}`, "a"), withBoot(`{`+chatMsgs+`,"n":1,"stream":true,`+usageAsked+`}`, "b"), withBoot(`{`+chatMsgs+`,"n":1,"stream":true,`+usageAsked+`}`, "c")},
		check:   streamIndexes(3)},
	{name: "sglang completions", source: srcMiniLB, protocol: "sglang", route: "/v1/completions",
		body:    `{"model":"m","prompt":"once upon","max_tokens":4}`,
		status:  200,
		prefill: []string{withBoot(`{"model":"m","prompt":"once upon","max_tokens":4}`, "a")},
		decode:  []string{withBoot(`{"model":"m","prompt":"once upon","max_tokens":4}`, "a")}},
	{name: "sglang completions token prompt is one prompt", source: srcMiniLB, protocol: "sglang", route: "/v1/completions",
		body:    `{"model":"m","prompt":[1,2,3]}`,
		status:  200,
		prefill: []string{withBoot(`{"model":"m","prompt":[1,2,3]}`, "a")},
		decode:  []string{withBoot(`{"model":"m","prompt":[1,2,3]}`, "a")}},
	{name: "sglang completions batch: one room per prompt", source: srcSMGPD, protocol: "sglang", route: "/v1/completions",
		body:    `{"model":"m","prompt":["a","b"]}`,
		status:  200,
		prefill: []string{`{"model":"m","prompt":["a","b"],"bootstrap_host":["{{HOST}}","{{HOST}}"],"bootstrap_port":[{{BPORT}},{{BPORT}}],"bootstrap_room":["$room:a","$room:b"]}`},
		decode:  []string{`{"model":"m","prompt":["a","b"],"bootstrap_host":["{{HOST}}","{{HOST}}"],"bootstrap_port":[{{BPORT}},{{BPORT}}],"bootstrap_room":["$room:a","$room:b"]}`}},
	{name: "sglang batch with n>1 is refused before any leg", source: srcTokMgr, protocol: "sglang", route: "/v1/completions",
		body: `{"model":"m","prompt":["a","b"],"n":2}`, status: 400},
	{name: "sglang generate", source: srcMiniLB, protocol: "sglang", route: "/generate",
		body:    `{"text":"the fox","sampling_params":{"max_new_tokens":4,"temperature":0}}`,
		status:  200,
		prefill: []string{withBoot(`{"text":"the fox","sampling_params":{"max_new_tokens":4,"temperature":0}}`, "a")},
		decode:  []string{withBoot(`{"text":"the fox","sampling_params":{"max_new_tokens":4,"temperature":0}}`, "a")}},
	{name: "sglang generate text batch", source: srcMiniLB, protocol: "sglang", route: "/generate",
		body:    `{"text":["a","b","c"]}`,
		status:  200,
		prefill: []string{`{"text":["a","b","c"],"bootstrap_host":["{{HOST}}","{{HOST}}","{{HOST}}"],"bootstrap_port":[{{BPORT}},{{BPORT}},{{BPORT}}],"bootstrap_room":["$room:a","$room:b","$room:c"]}`},
		decode:  []string{`{"text":["a","b","c"],"bootstrap_host":["{{HOST}}","{{HOST}}","{{HOST}}"],"bootstrap_port":[{{BPORT}},{{BPORT}},{{BPORT}}],"bootstrap_room":["$room:a","$room:b","$room:c"]}`}},
	{name: "sglang generate input_ids batch", source: srcMiniLB, protocol: "sglang", route: "/generate",
		body:    `{"input_ids":[[1,2],[3]]}`,
		status:  200,
		prefill: []string{`{"input_ids":[[1,2],[3]],"bootstrap_host":["{{HOST}}","{{HOST}}"],"bootstrap_port":[{{BPORT}},{{BPORT}}],"bootstrap_room":["$room:a","$room:b"]}`},
		decode:  []string{`{"input_ids":[[1,2],[3]],"bootstrap_host":["{{HOST}}","{{HOST}}"],"bootstrap_port":[{{BPORT}},{{BPORT}}],"bootstrap_room":["$room:a","$room:b"]}`}},
	{name: "sglang generate input_ids one prompt", source: srcMiniLB, protocol: "sglang", route: "/generate",
		body:    `{"input_ids":[1,2,3]}`,
		status:  200,
		prefill: []string{withBoot(`{"input_ids":[1,2,3]}`, "a")},
		decode:  []string{withBoot(`{"input_ids":[1,2,3]}`, "a")}},
	{name: "sglang generate n=2 split", source: srcTokMgr, protocol: "sglang", route: "/generate",
		body:    `{"text":"x","sampling_params":{"n":2,"max_new_tokens":3}}`,
		status:  200,
		prefill: []string{withBoot(`{"text":"x","sampling_params":{"n":1,"max_new_tokens":3}}`, "a"), withBoot(`{"text":"x","sampling_params":{"n":1,"max_new_tokens":3}}`, "b")},
		decode:  []string{withBoot(`{"text":"x","sampling_params":{"n":1,"max_new_tokens":3}}`, "a"), withBoot(`{"text":"x","sampling_params":{"n":1,"max_new_tokens":3}}`, "b")},
		check:   generateList(2)},
	{name: "sglang generate return_logprob merges the prefill's input logprobs", source: srcMiniLB, protocol: "sglang", route: "/generate",
		body:    `{"text":"x","return_logprob":true}`,
		status:  200,
		prefill: []string{withBoot(`{"text":"x","return_logprob":true}`, "a")},
		decode:  []string{withBoot(`{"text":"x","return_logprob":true}`, "a")},
		check:   inputLogprobs(2)},
	{name: "sglang null bootstrap port", source: srcScheduler, protocol: "sglang", route: "/v1/completions", nullPort: true,
		body:    `{"model":"m","prompt":"p"}`,
		status:  200,
		prefill: []string{withBoot(`{"model":"m","prompt":"p"}`, "a")},
		decode:  []string{withBoot(`{"model":"m","prompt":"p"}`, "a")}},

	// Data-parallel attention: placement picks a rank of each engine; the legs carry the hints.
	{name: "sglang dp ranks: hints per leg, room aligned to the prefill rank", source: srcDPRanks, protocol: "sglang", route: "/v1/chat/completions",
		dpSize:  4,
		body:    `{` + chatMsgs + `}`,
		status:  200,
		prefill: []string{strings.TrimSuffix(withBoot(`{`+chatMsgs+`}`, "a"), "}") + `,"routed_dp_rank":"$rank:p"}`},
		decode:  []string{strings.TrimSuffix(withBoot(`{`+chatMsgs+`}`, "a"), "}") + `,"disagg_prefill_dp_rank":"$rank:p","routed_dp_rank":"$rank:d"}`},
		legs:    roomsAlignedTo(4)},
	{name: "sglang dp ranks with a prompt batch: every room aligned", source: srcDPRanks, protocol: "sglang", route: "/generate",
		dpSize:  2,
		body:    `{"text":["a","b"]}`,
		status:  200,
		prefill: []string{`{"text":["a","b"],"bootstrap_host":["{{HOST}}","{{HOST}}"],"bootstrap_port":[{{BPORT}},{{BPORT}}],"bootstrap_room":["$room:a","$room:b"],"routed_dp_rank":"$rank:p"}`},
		decode:  []string{`{"text":["a","b"],"bootstrap_host":["{{HOST}}","{{HOST}}"],"bootstrap_port":[{{BPORT}},{{BPORT}}],"bootstrap_room":["$room:a","$room:b"],"disagg_prefill_dp_rank":"$rank:p","routed_dp_rank":"$rank:d"}`},
		legs:    roomsAlignedTo(2)},

	// vLLM NIXL: prefill first with the proxy's rewrites, then decode with the returned params.
	{name: "vllm chat", source: srcToyProxy, protocol: "vllm", route: "/v1/chat/completions",
		body:    `{` + chatMsgs + `,"max_tokens":64}`,
		status:  200,
		prefill: []string{`{` + chatMsgs + `,"max_tokens":1,` + prefillK + `,"stream":false}`},
		decode:  []string{`{` + chatMsgs + `,"max_tokens":64,"kv_transfer_params":{{KV}}}`}},
	// A streamed chat to vLLM over HTTP can migrate: the gateway asks for the token ids
	// (docs/migration.md), on the body both legs derive from.
	{name: "vllm chat stream with caps", source: srcToyProxy + "; " + srcChatIDs, protocol: "vllm", route: "/v1/chat/completions",
		body:    `{` + chatMsgs + `,"stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":50,"min_tokens":2,"min_completion_tokens":2}`,
		status:  200,
		prefill: []string{`{` + chatMsgs + `,"stream":false,"max_completion_tokens":1,"max_tokens":1,"return_token_ids":true,` + prefillK + `}`},
		decode:  []string{`{` + chatMsgs + `,"stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":50,"min_tokens":2,"min_completion_tokens":2,"return_token_ids":true,"kv_transfer_params":{{KV}}}`}},
	// A streamed completion of one prompt can migrate in HTTP mode: the gateway asks for the token ids
	// (docs/migration.md), on the body both legs derive from.
	{name: "vllm completions", source: srcToyProxy + "; " + srcMigration, protocol: "vllm", route: "/v1/completions",
		body:    `{"model":"m","prompt":"p","max_tokens":9,"stream":true}`,
		status:  200,
		prefill: []string{`{"model":"m","prompt":"p","max_tokens":1,"stream":false,"return_token_ids":true,` + prefillK + `}`},
		decode:  []string{`{"model":"m","prompt":"p","max_tokens":9,"stream":true,"return_token_ids":true,` + usageAsked + `,"kv_transfer_params":{{KV}}}`}},
	{name: "vllm prefill without kv_transfer_params: decode recomputes", source: srcNIXL + "; " + srcToyProxy, protocol: "vllm", route: "/v1/chat/completions",
		omitKV:  true,
		body:    `{` + chatMsgs + `,"max_tokens":64}`,
		status:  200,
		prefill: []string{`{` + chatMsgs + `,"max_tokens":1,` + prefillK + `,"stream":false}`},
		decode:  []string{`{` + chatMsgs + `,"max_tokens":64}`}},
	// Local prefill: a short prompt goes to a kv_both NIXL decode alone, as the client sent it, with no
	// kv_transfer_params, so the engine computes the prompt itself.
	{name: "vllm local prefill on a kv_both decode: no kv_transfer_params", source: srcKVBoth, protocol: "vllm", route: "/v1/chat/completions",
		args:   []string{"--pd-local-prefill-max-tokens", "64", "--decode-kv-role", "kv_both"},
		body:   `{` + chatMsgs + `,"max_tokens":64}`,
		status: 200,
		decode: []string{`{` + chatMsgs + `,"max_tokens":64}`}},
	{name: "vllm n=2 goes to decode alone", source: srcSMGvLLM, protocol: "vllm", route: "/v1/chat/completions",
		body:   `{` + chatMsgs + `,"n":2}`,
		status: 200,
		decode: []string{`{` + chatMsgs + `,"n":2}`}},
	{name: "vllm prompt batch goes to decode alone (one kv_transfer_params per answer)", source: srcToyProxy, protocol: "vllm", route: "/v1/completions",
		body:   `{"model":"m","prompt":["a","b"],"max_tokens":3}`,
		status: 200,
		decode: []string{`{"model":"m","prompt":["a","b"],"max_tokens":3}`}},
	// vLLM Mooncake: both legs at once, one transfer id, the decode told where the KV is.
	{name: "vllm mooncake chat", source: srcMooncake + "; " + srcChatIDs, protocol: "vllm", route: "/v1/chat/completions", mooncake: true,
		body:    `{` + chatMsgs + `,"max_tokens":64,"stream":true,"stream_options":{"include_usage":true}}`,
		status:  200,
		prefill: []string{`{` + chatMsgs + `,"max_tokens":1,"stream":false,"return_token_ids":true,"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"transfer_id":"$xfer"}}`},
		decode:  []string{`{` + chatMsgs + `,"max_tokens":64,"stream":true,"stream_options":{"include_usage":true},"return_token_ids":true,"kv_transfer_params":{"do_remote_decode":false,"do_remote_prefill":true,"remote_bootstrap_addr":"http://{{HOST}}:{{BPORT}}","remote_engine_id":"$engine","transfer_id":"$xfer"}}`},
		legs:    mooncakeLegs},
	{name: "vllm mooncake completions with max_completion_tokens", source: srcMooncake, protocol: "vllm", route: "/v1/completions", mooncake: true,
		body:    `{"model":"m","prompt":"p","max_completion_tokens":9,"min_tokens":2}`,
		status:  200,
		prefill: []string{`{"model":"m","prompt":"p","max_completion_tokens":1,"min_tokens":2,"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"transfer_id":"$xfer"},"stream":false,"max_tokens":1}`},
		decode:  []string{`{"model":"m","prompt":"p","max_completion_tokens":9,"min_tokens":2,"kv_transfer_params":{"do_remote_decode":false,"do_remote_prefill":true,"remote_bootstrap_addr":"http://{{HOST}}:{{BPORT}}","remote_engine_id":"$engine","transfer_id":"$xfer"}}`},
		legs:    mooncakeLegs},
	{name: "vllm mooncake n=2 goes to decode alone", source: srcMooncake + "; " + srcSMGvLLM, protocol: "vllm", route: "/v1/chat/completions", mooncake: true,
		body:   `{` + chatMsgs + `,"n":2}`,
		status: 200,
		decode: []string{`{` + chatMsgs + `,"n":2}`}},
	{name: "vllm has no /generate", source: srcToyProxy, protocol: "vllm", route: "/generate",
		body: `{"text":"x"}`, status: 400},
}

func TestLegBodies(t *testing.T) {
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			t.Logf("written from %s", tc.source)
			runRow(t, tc, "127.0.0.1:0", "127.0.0.1")
		})
	}
}

// An IPv6 prefill's bootstrap_host is bracketed, as mini_lb does (maybe_wrap_ipv6_address).
func TestIPv6BootstrapHost(t *testing.T) {
	tc := row{name: "ipv6", source: srcMiniLB, protocol: "sglang", route: "/v1/completions",
		body:    `{"model":"m","prompt":"p"}`,
		status:  200,
		prefill: []string{withBoot(`{"model":"m","prompt":"p"}`, "a")},
		decode:  []string{withBoot(`{"model":"m","prompt":"p"}`, "a")}}
	runRow(t, tc, "[::1]:0", "[::1]")
}

func runRow(t *testing.T, tc row, listen, host string) {
	rv := &rooms{}
	bport := 8998
	if tc.mooncake {
		bport = startBootstrap(t)
	}
	p := startEngine(t, &recordingEngine{kind: tc.protocol, role: "prefill", bootstrapPort: bport, omitKV: tc.omitKV, dpSize: tc.dpSize, mooncake: tc.mooncake, rooms: rv}, listen)
	if tc.nullPort {
		p.bootstrapPort = 0
	}
	d := startEngine(t, &recordingEngine{kind: tc.protocol, role: "decode", dpSize: tc.dpSize, rooms: rv}, listen)
	// No protocol, no port, no model given: everything is detected from the engines.
	prefillArgs := []string{"--prefill", p.srv.URL}
	if tc.mooncake {
		// The Mooncake bootstrap port is given, as to the reference proxy; the connector is detected
		// from it, the decode's from --kv-connector.
		prefillArgs = append(prefillArgs, strconv.Itoa(bport))
	}
	args := append([]string{"--pd-disaggregation", "--decode", d.srv.URL, "--prefill-max-inflight-requests-per-worker", "4", "--disable-retries"}, prefillArgs...)
	if tc.mooncake {
		args = append(args, "--kv-connector", "mooncake")
	}
	args = append(args, tc.args...)
	gw := testenv.StartGateway(t, app.Options{}, args...)

	req, _ := http.NewRequest(http.MethodPost, gw.URL+tc.route, strings.NewReader(tc.body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Cookie", "session=client-secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != tc.status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, out)
	}
	if tc.check != nil {
		tc.check(t, out)
	}

	port := strconv.Itoa(bport)
	if tc.nullPort {
		port = "null"
	}
	subst := strings.NewReplacer("{{HOST}}", host, "{{BPORT}}", port, "{{KV}}", kvParams)
	bind := map[string]uint64{}
	pl, dl := p.recorded(), d.recorded()
	matchLegs(t, "prefill", pl, tc.prefill, subst, bind)
	matchLegs(t, "decode", dl, tc.decode, subst, bind)
	if tc.legs != nil {
		tc.legs(t, pl, dl)
	}
	seen := map[uint64]string{}
	for name, v := range bind {
		if !strings.HasPrefix(name, "$room:") {
			continue
		}
		if other, dup := seen[v]; dup {
			t.Errorf("rooms %s and %s are the same room %v", name, other, v)
		}
		seen[v] = name
	}
	// Every leg: JSON, the one request id (per sample when split), no client cookie.
	ids := map[string]int{}
	for _, l := range append(pl, dl...) {
		if ct := l.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s leg Content-Type %q", l.Path, ct)
		}
		if c := l.Header.Get("Cookie"); c != "" {
			t.Errorf("the client's cookie reached an engine: %q", c)
		}
		ids[l.Header.Get("X-Request-Id")]++
	}
	for id, n := range ids {
		if id == "" || (len(pl) > 0 && n != 2) {
			t.Errorf("request id %q on %d legs, want each id on one prefill and one decode leg", id, n)
		}
		if !strings.HasPrefix(id, resp.Header.Get("X-Request-Id")) {
			t.Errorf("leg id %q does not derive from the client's %q", id, resp.Header.Get("X-Request-Id"))
		}
	}
}

// matchLegs finds an order of the expected bodies that matches the recorded legs with consistent
// room bindings (split samples arrive in any order).
func matchLegs(t *testing.T, role string, legs []recordedLeg, want []string, subst *strings.Replacer, bind map[string]uint64) {
	t.Helper()
	if len(legs) != len(want) {
		var got []string
		for _, l := range legs {
			b, _ := json.Marshal(l.Body)
			got = append(got, string(b))
		}
		t.Fatalf("%d %s legs, want %d:\n%s", len(legs), role, len(want), strings.Join(got, "\n"))
	}
	wants := make([]any, len(want))
	for i, w := range want {
		dec := json.NewDecoder(strings.NewReader(subst.Replace(w)))
		dec.UseNumber()
		if err := dec.Decode(&wants[i]); err != nil {
			t.Fatalf("bad template %s: %v", w, err)
		}
	}
	used := make([]bool, len(wants))
	var try func(i int, b map[string]uint64) map[string]uint64
	try = func(i int, b map[string]uint64) map[string]uint64 {
		if i == len(legs) {
			return b
		}
		for j, w := range wants {
			if used[j] {
				continue
			}
			nb := copyBind(b)
			if match(w, any(legs[i].Body), nb) {
				used[j] = true
				if r := try(i+1, nb); r != nil {
					return r
				}
				used[j] = false
			}
		}
		return nil
	}
	r := try(0, copyBind(bind))
	if r == nil {
		for i, l := range legs {
			b, _ := json.Marshal(l.Body)
			t.Errorf("%s leg %d body:\n  got  %s", role, i, b)
		}
		for _, w := range want {
			t.Errorf("  want %s", subst.Replace(w))
		}
		return
	}
	for k, v := range r {
		bind[k] = v
	}
}

func copyBind(b map[string]uint64) map[string]uint64 {
	c := make(map[string]uint64, len(b))
	for k, v := range b {
		c[k] = v
	}
	return c
}

// mooncakeLegs checks what the templates cannot: the transfer id is "xfer-<the legs' request id>" on
// both legs, the decode names an engine id the bootstrap server listed, and the prefill's rank header
// matches that engine id.
func mooncakeLegs(t *testing.T, prefill, decode []recordedLeg) {
	p, d := prefill[0], decode[0]
	pk, _ := p.Body["kv_transfer_params"].(map[string]any)
	dk, _ := d.Body["kv_transfer_params"].(map[string]any)
	if want := "xfer-" + p.Header.Get("X-Request-Id"); pk["transfer_id"] != want || dk["transfer_id"] != want {
		t.Errorf("transfer ids %v and %v, want %s on both legs", pk["transfer_id"], dk["transfer_id"], want)
	}
	rank, err := strconv.Atoi(p.Header.Get("X-data-parallel-rank"))
	if err != nil || rank < 0 || rank >= len(mooncakeEngineIDs) {
		t.Fatalf("prefill X-data-parallel-rank %q", p.Header.Get("X-data-parallel-rank"))
	}
	if dk["remote_engine_id"] != mooncakeEngineIDs[rank] {
		t.Errorf("decode remote_engine_id %v, want %s (rank %d)", dk["remote_engine_id"], mooncakeEngineIDs[rank], rank)
	}
}

func match(want, got any, bind map[string]uint64) bool {
	if s, ok := want.(string); ok && (s == "$xfer" || s == "$engine") {
		_, ok := got.(string)
		return ok // checked by mooncakeLegs
	}
	if s, ok := want.(string); ok && (strings.HasPrefix(s, "$rank:") || strings.HasPrefix(s, "$room:")) {
		n, ok := got.(json.Number)
		if !ok {
			return false
		}
		v, err := strconv.ParseUint(string(n), 10, 64)
		limit := uint64(1) << 63
		if strings.HasPrefix(s, "$rank:") {
			limit = 1024
		}
		if err != nil || v >= limit {
			return false
		}
		if prev, ok := bind[s]; ok {
			return prev == v
		}
		bind[s] = v
		return true
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok || !match(wv, gv, bind) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !match(w[i], g[i], bind) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(want, got)
}

// roomsAlignedTo checks that every room is congruent to the prefill rank modulo dp, so an engine that
// ignores the hints (it falls back to room % dp_size) lands on the same rank.
func roomsAlignedTo(dp int) func(*testing.T, []recordedLeg, []recordedLeg) {
	return func(t *testing.T, prefill, _ []recordedLeg) {
		for _, l := range prefill {
			rank, err := strconv.ParseUint(fmt.Sprint(l.Body["routed_dp_rank"]), 10, 64)
			if err != nil {
				t.Fatalf("prefill leg without a rank: %v", l.Body["routed_dp_rank"])
			}
			for _, r := range roomsOf(l.Body["bootstrap_room"]) {
				room, err := strconv.ParseUint(r, 10, 64)
				if err != nil {
					t.Fatalf("room %q: %v", r, err)
				}
				if room%uint64(dp) != rank {
					t.Errorf("room %d %% %d != prefill rank %d", room, dp, rank)
				}
			}
		}
	}
}

func choices(n int) func(*testing.T, []byte) {
	return func(t *testing.T, body []byte) {
		var r struct {
			Choices []struct{ Index int } `json:"choices"`
		}
		if err := json.Unmarshal(body, &r); err != nil || len(r.Choices) != n {
			t.Fatalf("answer %s: want %d choices (%v)", body, n, err)
		}
		for i, c := range r.Choices {
			if c.Index != i {
				t.Errorf("choice %d has index %d", i, c.Index)
			}
		}
	}
}

func streamIndexes(n int) func(*testing.T, []byte) {
	return func(t *testing.T, body []byte) {
		seen := map[int]bool{}
		for _, f := range bytes.Split(bytes.TrimSpace(body), []byte("\n\n")) {
			p := bytes.TrimPrefix(f, []byte("data: "))
			if string(p) == "[DONE]" {
				continue
			}
			var c struct {
				Choices []struct{ Index int } `json:"choices"`
			}
			if err := json.Unmarshal(p, &c); err != nil {
				t.Fatalf("frame %s: %v", p, err)
			}
			for _, ch := range c.Choices {
				seen[ch.Index] = true
			}
		}
		if len(seen) != n || bytes.Count(body, []byte("[DONE]")) != 1 {
			t.Errorf("stream: choice indexes %v and %d [DONE], want %d indexes and one [DONE]:\n%s", seen, bytes.Count(body, []byte("[DONE]")), n, body)
		}
	}
}

func generateList(n int) func(*testing.T, []byte) {
	return func(t *testing.T, body []byte) {
		var l []map[string]any
		if err := json.Unmarshal(body, &l); err != nil || len(l) != n {
			t.Errorf("answer %s: want a list of %d results (%v)", body, n, err)
		}
	}
}

func inputLogprobs(n int) func(*testing.T, []byte) {
	return func(t *testing.T, body []byte) {
		var r struct {
			MetaInfo struct {
				InputTokenLogprobs []any `json:"input_token_logprobs"`
			} `json:"meta_info"`
		}
		if err := json.Unmarshal(body, &r); err != nil || len(r.MetaInfo.InputTokenLogprobs) != n {
			t.Errorf("answer %s: want %d input logprobs (prefill's then decode's)", body, n)
		}
	}
}
