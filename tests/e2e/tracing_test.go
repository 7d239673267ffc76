package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	openaiv1 "github.com/sluicegw/sluice/gen/sluice/openai/v1"
	"github.com/sluicegw/sluice/gen/sluice/openai/v1/openaiv1connect"
	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/internal/telemetry"
)

// TestOneTracePerRequest: a PD request continuing an incoming traceparent yields one trace with the
// server span, the admission wait and slot spans and both leg spans under it, and the traceparent reaches
// the engines.
func TestOneTracePerRequest(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang, Engine: instantEngine()})
	gw := startGateway(t, app.Options{TracerProvider: &telemetry.TracerProvider{TracerProvider: tp, Shutdown: tp.Shutdown}},
		append([]string{"--pd-disaggregation", "--prefill-max-inflight-requests-per-worker", "2"}, pdArgs(c)...)...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(shortChat))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}

	want := []string{"POST /v1/chat/completions", "sluice.admission.wait", "sluice.admission.slot", "sluice.leg.prefill", "sluice.leg.decode"}
	var spans tracetest.SpanStubs
	waitFor(t, "all spans ended", 5*time.Second, func() bool {
		spans = exp.GetSpans()
		return len(byName(spans)) >= len(want)
	})
	named := byName(spans)
	for _, n := range want {
		s, ok := named[n]
		if !ok {
			t.Fatalf("missing span %q; have %v", n, keys(named))
		}
		if s.SpanContext.TraceID().String() != traceID {
			t.Errorf("span %q in trace %s, want %s", n, s.SpanContext.TraceID(), traceID)
		}
	}
	server := named["POST /v1/chat/completions"]
	if server.Parent.SpanID().String() != "00f067aa0ba902b7" || server.SpanKind != trace.SpanKindServer {
		t.Errorf("server span parent %s kind %v, want the incoming span and kind server", server.Parent.SpanID(), server.SpanKind)
	}
	for _, n := range want[1:] {
		if named[n].Parent.SpanID() != server.SpanContext.SpanID() {
			t.Errorf("span %q parent %s, want the server span %s", n, named[n].Parent.SpanID(), server.SpanContext.SpanID())
		}
	}
	attrs := map[string]string{}
	for _, a := range named["sluice.admission.wait"].Attributes {
		attrs[string(a.Key)] = a.Value.String()
	}
	if attrs["sluice.admission.outcome"] != "admitted" || attrs["sluice.admission.worker"] != c.ByRole(sim.RolePrefill)[0].URL() {
		t.Errorf("wait span attributes %v", attrs)
	}
	for _, e := range c.Engines {
		if tpHeader := e.Stats().LastTraceparent; !strings.Contains(tpHeader, traceID) {
			t.Errorf("engine %s saw traceparent %q, want trace %s", e.URL(), tpHeader, traceID)
		}
	}

	// The typed API is traced the same way: a server span per RPC with the legs under it.
	exp.Reset()
	const rpcTrace = "0af7651916cd43dd8448eb211c80319c"
	cl := openaiv1connect.NewOpenAIServiceClient(http.DefaultClient, gw.URL)
	cctx, call := connect.NewClientContext(context.Background())
	call.RequestHeader().Set("traceparent", "00-"+rpcTrace+"-b7ad6b7169203331-01")
	if _, err := cl.CreateChatCompletion(cctx, &openaiv1.CreateChatCompletionRequest{Model: simModel,
		Messages: []*openaiv1.ChatMessage{{Role: "user", Content: structpb.NewStringValue("traced")}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "rpc spans", 5*time.Second, func() bool { return len(byName(exp.GetSpans())) >= len(want) })
	named = byName(exp.GetSpans())
	rpc, ok := named["sluice.openai.v1.OpenAIService/CreateChatCompletion"]
	if !ok {
		t.Fatalf("no RPC server span; have %v", keys(named))
	}
	if rpc.SpanContext.TraceID().String() != rpcTrace {
		t.Errorf("RPC span trace %s, want the incoming %s", rpc.SpanContext.TraceID(), rpcTrace)
	}
	if named["sluice.leg.decode"].Parent.SpanID() != rpc.SpanContext.SpanID() {
		t.Errorf("decode leg is not a child of the RPC span")
	}
}

func byName(spans tracetest.SpanStubs) map[string]tracetest.SpanStub {
	out := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		out[s.Name] = s
	}
	return out
}

func keys(m map[string]tracetest.SpanStub) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestTraceShowsRetriesSamplesAndConventions: one trace per request shows a retried attempt (an
// event on the request span, the failed leg with error status), the n > 1 split (one span per sample,
// each with its two legs), and carries OpenTelemetry's GenAI and HTTP attribute names.
func TestTraceShowsRetriesSamplesAndConventions(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	c := startCluster(t, sim.ClusterConfig{Prefill: 2, Decode: 1, Protocol: sim.ProtocolSGLang, Engine: instantEngine()})
	gw := startGateway(t, app.Options{TracerProvider: &telemetry.TracerProvider{TracerProvider: tp, Shutdown: tp.Shutdown}},
		append([]string{"--pd-disaggregation", "--prefill-policy", "round_robin", "--retry-initial-backoff-ms", "1",
			"--prefill-max-inflight-requests-per-worker", "4"}, pdArgs(c)...)...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	bad := c.ByRole(sim.RolePrefill)[0]
	if err := bad.SetFaults(sim.Faults{ErrorRate: 1, ErrorStatus: 503}); err != nil {
		t.Fatal(err)
	}
	// Round robin over two prefill workers: of two requests, one tries the failing worker first.
	const body = `{"model":"sim-model","n":2,"messages":[{"role":"user","content":"hi"}],"max_tokens":4}`
	for range 2 {
		resp, err := post(context.Background(), gw.URL+"/v1/chat/completions", body)
		mustOK(t, resp, err)
	}
	var spans tracetest.SpanStubs
	waitFor(t, "both server spans ended", 5*time.Second, func() bool {
		spans = exp.GetSpans()
		n := 0
		for _, s := range spans {
			if s.Name == "POST /v1/chat/completions" {
				n++
			}
		}
		return n == 2
	})
	attrs := func(s tracetest.SpanStub) map[string]string {
		m := map[string]string{}
		for _, a := range s.Attributes {
			m[string(a.Key)] = a.Value.String()
		}
		return m
	}
	children := map[trace.SpanID][]tracetest.SpanStub{}
	for _, s := range spans {
		children[s.Parent.SpanID()] = append(children[s.Parent.SpanID()], s)
	}
	retried := 0
	for _, s := range spans {
		if s.Name != "POST /v1/chat/completions" {
			continue
		}
		a := attrs(s)
		for k, want := range map[string]string{"gen_ai.operation.name": "chat", "gen_ai.request.model": "sim-model",
			"gen_ai.request.choice.count": "2", "http.response.status_code": "200", "http.request.method": "POST", "http.route": "/v1/chat/completions"} {
			if a[k] != want {
				t.Errorf("server span %s = %q, want %q", k, a[k], want)
			}
		}
		if a["gen_ai.usage.output_tokens"] == "" || a["gen_ai.usage.output_tokens"] == "0" {
			t.Errorf("server span has no output token usage: %v", a)
		}
		for _, e := range s.Events {
			if e.Name != "sluice.retry" {
				continue
			}
			retried++
			ea := map[string]string{}
			for _, a := range e.Attributes {
				ea[string(a.Key)] = a.Value.String()
			}
			// The split attempt ends with the failed sample's 503, or with a sibling's leg cut short
			// by that failure (the order in which the samples end decides).
			if (ea["error.type"] != "503" && ea["error.type"] != "transport") || ea["sluice.attempt"] != "1" || ea["sluice.retry.backoff"] == "" {
				t.Errorf("retry event attributes %v, want error.type 503 (or transport) after attempt 1", ea)
			}
		}
		// The successful attempt's split: two sample spans, each with a prefill and a decode leg.
		samples := 0
		for _, ch := range children[s.SpanContext.SpanID()] {
			if ch.Name != "sluice.sample" {
				continue
			}
			legs := map[string]int{}
			for _, l := range children[ch.SpanContext.SpanID()] {
				legs[l.Name]++
				la := attrs(l)
				if la["server.address"] != "127.0.0.1" || la["server.port"] == "" || la["http.request.method"] != "POST" || la["sluice.worker"] == "" {
					t.Errorf("leg span %s attributes %v", l.Name, la)
				}
			}
			if legs["sluice.leg.prefill"] == 1 && legs["sluice.leg.decode"] == 1 {
				samples++
			}
		}
		if samples < 2 {
			t.Errorf("trace %s: %d sample spans with both legs, want 2 (the split)", s.SpanContext.TraceID(), samples)
		}
	}
	if retried == 0 { // round robin sends at least one of the two to the failing worker first
		t.Error("no retry event over the two requests")
	}
	failedLegs := 0
	for _, s := range spans {
		if s.Name == "sluice.leg.prefill" && s.Status.Code == codes.Error && attrs(s)["sluice.worker"] == bad.URL() {
			failedLegs++
		}
	}
	if failedLegs == 0 {
		t.Error("no failed prefill leg span on the failing worker")
	}
}
