package sim

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/testkit/poll"
)

// Requests admitted but still queued for the prefill executor are reported as waiting, as SGLang's
// get_load counts its waiting queue, in every load report the gateway reads.
func TestLoadReportsCountPrefillQueueAsWaiting(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{PrefillTokensPerSec: 1000})
	c := testClient(t)
	prompt := strings.Repeat("word ", 2000) // 2000 tokens: 2 s of prefill each
	body := `{"model":"sim-model","max_tokens":1,"messages":[{"role":"user","content":"` + prompt + `"}]}`
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { post(t, c, e.URL()+"/v1/chat/completions", body) })
	}
	defer wg.Wait()
	if !poll.Wait(10*time.Second, func() bool { s := e.totalSnapshot(); return s.running == 3 && s.prefillWaiting == 2 }) {
		t.Fatalf("three requests never admitted with two queued for prefill: %+v", e.totalSnapshot())
	}
	_, loads := get(t, c, e.URL()+"/v1/loads")
	if !strings.Contains(string(loads), `"num_running_reqs":1,`) || !strings.Contains(string(loads), `"num_waiting_reqs":2,`) {
		t.Errorf("/v1/loads: %s, want 1 running and 2 waiting", loads)
	}
	_, old := get(t, c, e.URL()+"/get_load")
	if !strings.Contains(string(old), `"num_reqs":3`) || !strings.Contains(string(old), `"num_waiting_reqs":2`) {
		t.Errorf("/get_load: %s, want 3 requests of which 2 waiting", old)
	}
	_, metrics := get(t, c, e.URL()+"/metrics")
	if !strings.Contains(string(metrics), "sglang:num_queue_reqs{model_name=\"sim-model\"} 2") &&
		!strings.Contains(string(metrics), "sglang:num_queue_reqs 2") {
		t.Errorf("metrics lack 2 queued: %s", grepLines(string(metrics), "num_queue_reqs"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
