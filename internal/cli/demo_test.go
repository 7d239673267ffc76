package cli

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// The demo samples its traces, so a first look at its /metrics (OpenMetrics, as Prometheus scrapes)
// shows trace-id exemplars.
func TestDemoMetricsCarryExemplars(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan int, 1)
	go func() { done <- Main(ctx, []string{"demo", "--port", "0"}, &out, io.Discard) }()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("demo exit %d", code)
		}
	}()
	gatewayLine := regexp.MustCompile(`gateway:\s+(http://\S+)`)
	var base string
	for deadline := time.Now().Add(30 * time.Second); base == ""; {
		if m := gatewayLine.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo printed no gateway URL:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond) // polling interval; the output is re-read
	}
	resp, err := http.Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"sim-model","messages":[{"role":"user","content":"Hello!"}],"max_tokens":4}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("chat: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	mresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if !regexp.MustCompile(`sluice_request_duration_seconds_bucket\{[^}]*\} \d+ # \{trace_id="[0-9a-f]{32}"\}`).Match(body) {
		t.Errorf("no trace_id exemplar on sluice_request_duration_seconds in the demo's metrics")
	}
}
