package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/gen/sluice/admin/v1/adminv1connect"
	"github.com/sluicegw/sluice/internal/sim"
)

// TestMigrationOnDrain: a decode worker drained through the admin API in the middle of a stream gives
// its stream up at once: the stream continues on the other decode (reason "drain") and the client
// reads exactly the uninterrupted answer, instead of the drain waiting for it. In every mode that
// migrates: the engines' gRPC (chat), and over HTTP SGLang /generate with input_ids, vLLM completions
// with a token-id prompt and vLLM chat.
func TestMigrationOnDrain(t *testing.T) {
	t.Parallel()
	type drainMode struct {
		pdMode
		path, body string
	}
	chat := `{"model":"` + simModel + `","messages":[{"role":"user","content":"a stream that outlives a drain"}],"max_tokens":40,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}`
	modes := []drainMode{
		{pdModes()[1], "/v1/chat/completions", chat}, // grpc-sglang
		{pdModes()[2], "/v1/chat/completions", chat}, // grpc-vllm
		{pdModes()[0], "/generate", `{"input_ids":[11,12,13,14],"sampling_params":{"max_new_tokens":40,"temperature":0},"stream":true}`},
		{pdMode{name: "http-vllm", protocol: sim.ProtocolVLLM}, "/v1/completions",
			`{"model":"` + simModel + `","prompt":[11,12,13,14],"max_tokens":40,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}`},
		{pdMode{name: "http-vllm-chat", protocol: sim.ProtocolVLLM}, "/v1/chat/completions", chat},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			c := m.startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 2, Engine: sim.Config{Seed: 5, ITLBase: 15 * time.Millisecond}})
			gw := m.startGateway(t, c)
			want := readStream(t, gw.URL+m.path, m.body, nil)
			if !strings.HasSuffix(want, "[DONE]") || strings.Contains(want, "error") {
				t.Fatalf("uninterrupted run: %s", want)
			}
			got := make(chan string, 1)
			started := make(chan struct{})
			go func() { got <- readStream(t, gw.URL+m.path, m.body, started) }()
			<-started // the client has content: its stream is read from its decode
			var serving string
			waitFor(t, "a decode serves the stream", 10*time.Second, func() bool {
				for _, d := range c.ByRole(sim.RoleDecode) {
					if workerLoad(gw, m.url(d)) > 0 {
						serving = m.url(d)
						return true
					}
				}
				return false
			})
			if n := gw.Dispatcher.Movable(serving); n != 1 {
				t.Errorf("Movable(%s) = %d before the drain, want 1", serving, n)
			}
			admin := adminv1connect.NewAdminServiceClient(http.DefaultClient, gw.URL)
			if _, err := admin.DrainWorker(context.Background(), &adminv1.DrainWorkerRequest{Id: workerID(t, gw, serving)}); err != nil {
				t.Fatal(err)
			}
			if g := <-got; g != want {
				t.Fatalf("drained stream %s\nuninterrupted   %s", g, want)
			}
			if n := drainMigrations(t, gw); n != 1 {
				t.Errorf("sluice_migrations_total{reason=drain,outcome=migrated} = %v, want 1 (%v)", n, scrape(t, gw.URL, "sluice_migrations_total"))
			}
			released(t, gw)
			waitFor(t, "the drained worker holds nothing", 10*time.Second, func() bool { return workerLoad(gw, serving) == 0 })
			if n := gw.Dispatcher.Movable(serving); n != 0 {
				t.Errorf("Movable(%s) = %d after the drain, want 0", serving, n)
			}
		})
	}
}

// readStream streams one request and returns every data payload it read, in order, each with the
// fields that vary between two runs of one request (ids, created, cache hits) removed; started (if not nil) is
// closed once the first payload is read that is not a chat's role alone (a chat stream moves once it
// has content).
func readStream(t *testing.T, url, body string, started chan<- struct{}) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if started != nil {
			close(started)
		}
		return "request: " + err.Error()
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		payload, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if started != nil && !strings.Contains(payload, `"role"`) {
			close(started)
			started = nil
		}
		var v map[string]any
		if json.Unmarshal([]byte(payload), &v) == nil {
			delete(v, "id")
			delete(v, "created")
			if meta, ok := v["meta_info"].(map[string]any); ok {
				delete(meta, "id")
				delete(meta, "cached_tokens") // the second run of a prompt finds it cached
			}
			if u, ok := v["usage"].(map[string]any); ok {
				delete(u, "prompt_tokens_details")
			}
			b, _ := json.Marshal(v) // keys sorted: a rewritten chunk orders them otherwise
			payload = string(b)
		}
		out = append(out, payload)
	}
	if started != nil {
		close(started)
	}
	if err := sc.Err(); err != nil {
		out = append(out, "read error: "+err.Error())
	}
	return strings.Join(out, "\n")
}

// workerID is the gateway's id of the worker at url.
func workerID(t *testing.T, gw *gateway, url string) string {
	t.Helper()
	w, ok := gw.Registry.Snapshot().ByURL(url)
	if !ok {
		t.Fatalf("no worker at %s", url)
	}
	return w.ID()
}

func drainMigrations(t *testing.T, gw *gateway) float64 {
	t.Helper()
	total := 0.0
	for k, v := range scrape(t, gw.URL, "sluice_migrations_total") {
		if strings.Contains(k, "reason=drain") && strings.Contains(k, "outcome=migrated") {
			total += v
		}
	}
	return total
}
