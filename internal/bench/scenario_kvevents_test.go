package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicegw/sluice/internal/sim"
)

// TestKVConversationTokenIDsAreTheSimulators: the ids a kv_aware run sends are the ones the simulator
// makes of the text the other runs send, so a text turn followed by the next turn as ids hits the
// engine's prefix cache for the whole first turn, and another conversation's ids hit nothing.
func TestKVConversationTokenIDsAreTheSimulators(t *testing.T) {
	e, err := sim.New(sim.Config{Protocol: sim.ProtocolVLLM, BlockSize: kvBlockSize, PrefillTokensPerSec: 1e7,
		ITLBase: time.Microsecond, ITLPerSeq: time.Nanosecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	hc := &http.Client{Transport: NewTransport(2)}
	defer hc.CloseIdleConnections()
	q := newRequester(hc, e.URL(), EndpointCompletions, "", true)
	send := func(body []byte) {
		t.Helper()
		var rec Record
		q.do(t.Context(), body, nil, &rec)
		if !rec.OK() {
			t.Fatalf("completion: %d %s %s", rec.Status, rec.Code, rec.Error)
		}
	}
	conv, other := newKVConversation(24, 0), newKVConversation(24, 1)
	send(conv.body(0, false))
	e.ResetStats()
	send(conv.body(1, true))
	st := e.Stats()
	if st.PromptTokens != int64(promptLen(1)) {
		t.Errorf("turn 1 as ids: %d prompt tokens, want %d", st.PromptTokens, promptLen(1))
	}
	if want := int64(promptLen(0)); st.PrefixCacheHitTokens != want {
		t.Errorf("turn 1 as ids after turn 0 as text: %d cached tokens, want %d (the whole first turn)", st.PrefixCacheHitTokens, want)
	}
	e.ResetStats()
	send(other.body(0, true))
	if st := e.Stats(); st.PrefixCacheHitTokens != 0 {
		t.Errorf("another conversation: %d cached tokens, want 0", st.PrefixCacheHitTokens)
	}
}

// TestKVLoadSpreadsTurnsOverReplicas: each conversation's next turn extends its previous prompt and
// goes to the next replica; only requests started after measure are recorded.
func TestKVLoadSpreadsTurnsOverReplicas(t *testing.T) {
	type seen struct {
		server int
		prompt string
	}
	var mu sync.Mutex
	var got []seen
	var gws []*gateway
	for i := range kvReplicas {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var req struct {
				Prompt string `json:"prompt"`
			}
			b, _ := io.ReadAll(r.Body)
			if err := json.Unmarshal(b, &req); err != nil || r.URL.Path != "/v1/completions" {
				http.Error(w, "bad request", http.StatusBadRequest)
				return
			}
			mu.Lock()
			got = append(got, seen{i, req.Prompt})
			mu.Unlock()
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\"x\"}]}\n\ndata: [DONE]\n\n")
		}))
		defer srv.Close()
		gws = append(gws, &gateway{url: srv.URL})
	}
	hc := &http.Client{Transport: NewTransport(kvConvs)}
	defer hc.CloseIdleConnections()
	l := &kvLoad{hc: hc, gws: gws, seed: 3}
	l.measure(time.Now())
	l.run(context.Background(), time.Now().Add(200*time.Millisecond))

	// Group the prompts by conversation (their first word pair is random per conversation).
	byConv := map[string][]seen{}
	for _, s := range got {
		byConv[s.prompt[:9]] = append(byConv[s.prompt[:9]], s)
	}
	if len(byConv) < kvConvs {
		t.Fatalf("%d conversations seen, want at least %d", len(byConv), kvConvs)
	}
	for _, turns := range byConv {
		for i := 1; i < len(turns); i++ {
			prev, cur := turns[i-1], turns[i]
			if !strings.HasPrefix(cur.prompt, prev.prompt+" ") || len(strings.Fields(cur.prompt)) != len(strings.Fields(prev.prompt))+kvTurnTokens {
				t.Fatalf("turn %d does not extend the previous one by %d words", i, kvTurnTokens)
			}
			if cur.server != (prev.server+1)%kvReplicas {
				t.Errorf("turn %d on replica %d after replica %d, want the next one", i, cur.server, prev.server)
			}
		}
	}
	recs := l.records()
	if len(recs) != len(got) || int(l.sent.Load()) != len(got) {
		t.Errorf("%d records, %d sent, %d served", len(recs), l.sent.Load(), len(got))
	}
	for i, r := range recs {
		if !r.OK() || r.TTFTMS <= 0 || r.Index != int64(i) {
			t.Fatalf("record %d: %+v", i, r)
		}
	}
}

// TestKVLoadRecordsOnlyMeasuredRequests: before measure nothing is kept.
func TestKVLoadRecordsOnlyMeasuredRequests(t *testing.T) {
	l := &kvLoad{}
	l.add(time.Now(), Record{Status: http.StatusOK})
	now := time.Now()
	l.measure(now)
	l.add(now.Add(-time.Millisecond), Record{Status: http.StatusOK})
	l.add(now.Add(3*time.Millisecond), Record{Status: http.StatusOK})
	recs := l.records()
	if len(recs) != 1 || recs[0].StartMS != 3 {
		t.Fatalf("records %+v, want the one started 3 ms after measure", recs)
	}
}

func TestGaugeSum(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_kv_index_blocks"}, []string{"medium", "worker"})
	other := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_kv_index_blocks_other"}, []string{"worker"})
	reg.MustRegister(g, other)
	g.WithLabelValues("GPU", "http://127.0.0.1:1").Set(12)
	g.WithLabelValues("CPU", "http://127.0.0.1:1").Set(3)
	g.WithLabelValues("GPU", "http://127.0.0.1:10").Set(100)
	other.WithLabelValues("http://127.0.0.1:1").Set(7)
	got, err := gaugeSum(reg, "sluice_kv_index_blocks", "worker", "http://127.0.0.1:1")
	if err != nil || got != 15 {
		t.Fatalf("sum %v, %v; want 15", got, err)
	}
}

// TestKVEventsScenarioSmoke runs the short form of kv-events: a row per variant with served requests
// and a hit rate, the restart section, the plot. Not performance.
func TestKVEventsScenarioSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts simulators and gateways")
	}
	dir := t.TempDir()
	res, err := RunScenario(context.Background(), "kv-events", ScenarioOptions{OutDir: dir, Short: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res.Markdown())
	if got, want := len(res.Table)-1, 7; got != want {
		t.Fatalf("%d table rows, want %d", got, want)
	}
	for _, run := range res.Runs {
		h, _ := run.Extra["hit_rate"].(float64)
		if run.Summary.Succeeded == 0 || h <= 0 || h > 1 {
			t.Errorf("run %s: hit rate %v, summary %+v", run.Label, run.Extra["hit_rate"], run.Summary)
		}
	}
	if len(res.Sections) != 2 || len(res.Sections[0].Table) != 2 || len(res.Sections[1].Table) != 2 {
		t.Fatalf("want a restart section per restart variant: %+v", res.Sections)
	}
	for _, k := range []string{"kv-aware-3-restart_recovery_ms", "kv-aware-3-restart-redial_recovery_ms"} {
		if v, _ := res.Measurements[k].(float64); v <= 0 {
			t.Errorf("%s = %v", k, res.Measurements[k])
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "kv-events-ttft.svg")); err != nil || !strings.Contains(string(b), "<polyline") {
		t.Errorf("plot: %v", err)
	}
}
