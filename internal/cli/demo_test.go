package cli

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/testkit/poll"
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
	if !poll.Wait(30*time.Second, func() bool {
		if m := gatewayLine.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
		}
		return base != ""
	}) {
		t.Fatalf("the demo printed no gateway URL:\n%s", out.String())
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

// The README's quick start builds ./sluice, runs ./sluice demo, and shows the commands to try beside it:
// every ./sluice command it shows after the demo is one the demo prints (with the demo's address), so
// a reader can paste either. The quick start's first sh block is read from the README itself.
func TestDemoPrintsTheQuickStartCommands(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, qs, ok := strings.Cut(string(readme), "\n## Quick start\n")
	if !ok {
		t.Fatal("README.md has no ## Quick start section")
	}
	_, block, ok := strings.Cut(qs, "```sh\n")
	if ok {
		block, _, ok = strings.Cut(block, "```")
	}
	if !ok {
		t.Fatal("the README's quick start has no sh block")
	}
	build := regexp.MustCompile(`(?m)^go build -o (\S+) \./cmd/sluice\b`).FindStringSubmatch(block)
	if build == nil {
		t.Fatalf("the quick start does not build the binary with go build -o:\n%s", block)
	}
	bin := "./" + strings.TrimPrefix(build[1], "./")
	var demoSeen bool
	var shown []string
	for _, line := range strings.Split(block, "\n") {
		line, _, _ = strings.Cut(line, " #") // a trailing comment is the README's, not the command's
		line = strings.TrimSpace(line)
		switch {
		case line == bin+" demo":
			demoSeen = true
		case demoSeen && strings.HasPrefix(line, bin+" "):
			shown = append(shown, line)
		}
	}
	if !demoSeen || len(shown) == 0 {
		t.Fatalf("the quick start should run %s demo and then show a %s command to try (%s top ...):\n%s", bin, bin, bin, block)
	}

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
	if !poll.Wait(30*time.Second, func() bool { return strings.Contains(out.String(), "Press Ctrl-C") }) {
		t.Fatalf("the demo printed no instructions:\n%s", out.String())
	}
	printed := out.String()
	m := gatewayLine.FindStringSubmatch(printed)
	if m == nil {
		t.Fatalf("the demo printed no gateway URL:\n%s", printed)
	}
	// The README shows the demo's default address; this demo listens on a free port.
	const readmeBase = "http://127.0.0.1:30000"
	for _, cmd := range shown {
		want := strings.ReplaceAll(cmd, readmeBase, m[1])
		if !strings.Contains(printed, "  "+want+"\n") {
			t.Errorf("the README's quick start shows %q, the demo does not print it (as %q):\n%s", cmd, want, printed)
		}
	}
	if regexp.MustCompile(`(?m)^\s+sluice `).MatchString(printed) {
		t.Errorf("the demo prints a bare sluice command; the quick start builds %s:\n%s", bin, printed)
	}
}
