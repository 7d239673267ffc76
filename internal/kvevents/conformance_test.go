package kvevents_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/kvevents"
	"github.com/sluicegw/sluice/internal/testkit/poll"
	pythonenv "github.com/sluicegw/sluice/internal/testkit/python"
)

// python finds a Python 3 with Debian's python3-zmq and python3-msgpack (.ci/run installs them).
func python(t *testing.T) string {
	return pythonenv.Find(t, []string{"python3-zmq", "python3-msgpack"}, "zmq", "msgpack")
}

// pyPublisher is testdata/vllm_publisher.py running as a child process.
type pyPublisher struct {
	t     *testing.T
	stdin io.WriteCloser
	out   *bufio.Scanner
	pub   string
	rep   string
}

func startPyPublisher(t *testing.T, mode string) *pyPublisher {
	t.Helper()
	cmd := exec.Command(python(t), "testdata/vllm_publisher.py", mode)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close() // the script exits at EOF
		if err := cmd.Wait(); err != nil {
			t.Errorf("publisher: %v", err)
		}
	})
	p := &pyPublisher{t: t, stdin: stdin, out: bufio.NewScanner(stdout)}
	line := p.line()
	var pubPort, repPort int
	if _, err := fmt.Sscanf(line, "READY %d %d", &pubPort, &repPort); err != nil {
		t.Fatalf("publisher said %q: %v", line, err)
	}
	p.pub = fmt.Sprintf("tcp://127.0.0.1:%d", pubPort)
	p.rep = fmt.Sprintf("tcp://127.0.0.1:%d", repPort)
	return p
}

func (p *pyPublisher) line() string {
	p.t.Helper()
	if !p.out.Scan() {
		p.t.Fatalf("publisher output ended: %v", p.out.Err())
	}
	return p.out.Text()
}

// do sends a command and waits for its acknowledgement.
func (p *pyPublisher) do(cmd string) {
	p.t.Helper()
	if _, err := io.WriteString(p.stdin, cmd+"\n"); err != nil {
		p.t.Fatal(err)
	}
	if got := p.line(); !strings.HasPrefix(got, "OK "+cmd) {
		p.t.Fatalf("publisher answered %q to %q", got, cmd)
	}
}

// countingMetrics records the subscriber's counters.
type countingMetrics struct {
	mu        sync.Mutex
	gaps      map[bool]int
	cleared   map[string]int
	malformed int
	events    map[string]int
	lagged    int
}

func newCountingMetrics() *countingMetrics {
	return &countingMetrics{gaps: map[bool]int{}, cleared: map[string]int{}, events: map[string]int{}}
}

func (m *countingMetrics) SetBlocks(string, int, int) {}
func (m *countingMetrics) AddEvents(_ string, k string, n int) {
	m.mu.Lock()
	m.events[k] += n
	m.mu.Unlock()
}
func (m *countingMetrics) AddDropped(string, string, int) {}
func (m *countingMetrics) IncGap(_ string, repaired bool) {
	m.mu.Lock()
	m.gaps[repaired]++
	m.mu.Unlock()
}
func (m *countingMetrics) IncCleared(_ string, reason string) {
	m.mu.Lock()
	m.cleared[reason]++
	m.mu.Unlock()
}
func (m *countingMetrics) IncMalformed(string) {
	m.mu.Lock()
	m.malformed++
	m.mu.Unlock()
}
func (m *countingMetrics) ObserveLag(string, time.Duration) {
	m.mu.Lock()
	m.lagged++
	m.mu.Unlock()
}
func (m *countingMetrics) DeleteWorker(string) {}

func (m *countingMetrics) snapshot() (gaps map[bool]int, cleared map[string]int, malformed int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := map[bool]int{true: m.gaps[true], false: m.gaps[false]}
	c := map[string]int{"gap": m.cleared["gap"], "restart": m.cleared["restart"]}
	return g, c, m.malformed
}

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, what, 15*time.Second, cond)
}

func seqTokens(from, to uint32) []uint32 {
	var ids []uint32
	for i := from; i <= to; i++ {
		ids = append(ids, i)
	}
	return ids
}

// runSubscriber starts a subscriber on ep and stops it at cleanup, checking it ended with ctx.
func runSubscriber(t *testing.T, cfg kvevents.SubscriberConfig) {
	t.Helper()
	sub, err := kvevents.NewSubscriber(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	})
}

// TestConformanceVLLMPublisher decodes frames from an independent encoder of vLLM's format (Python,
// libzmq through pyzmq, msgpack), in both of msgspec's encodings, over real sockets: the scripted
// blocks are indexed by token chain, a lost frame is repaired through the ROUTER replay socket, a
// lost frame the replay buffer no longer holds clears the worker's index, AllBlocksCleared clears it.
func TestConformanceVLLMPublisher(t *testing.T) {
	for _, mode := range []string{"array", "map"} {
		t.Run(mode, func(t *testing.T) {
			p := startPyPublisher(t, mode)
			idx, err := kvevents.NewIndex(kvevents.IndexConfig{})
			if err != nil {
				t.Fatal(err)
			}
			m := newCountingMetrics()
			const w = "http://engine-a:8000"
			runSubscriber(t, kvevents.SubscriberConfig{
				Endpoint: kvevents.Endpoint{Worker: w, Publisher: p.pub, Replay: p.rep},
				Index:    idx, Metrics: m, RetryInterval: 20 * time.Millisecond,
			})
			match := func(ids []uint32) kvevents.Match { return idx.Match(w, 0, ids) }

			p.do("script")
			eventually(t, "chain A indexed", func() bool { return match(seqTokens(1, 12)).Blocks == 3 })
			if got := match(seqTokens(1, 12)); got.Tokens != 12 || got.PerTier[kvevents.TierGPU] != 3 || got.Score != 3 {
				t.Errorf("chain A: %+v, want 3 GPU blocks, 12 tokens, score 3", got)
			}
			eventually(t, "chain C indexed", func() bool { return match(seqTokens(200, 203)).Blocks == 1 })
			if got := match(seqTokens(200, 207)); got.PerTier[kvevents.TierCPU] != 1 || got.Score != 0.5 {
				t.Errorf("chain C (CPU): %+v, want 1 CPU block, score 0.5", got)
			}
			if got := match(seqTokens(100, 107)); got.Blocks != 1 {
				t.Errorf("chain B after BlockRemoved of its 2nd block: %d blocks, want 1", got.Blocks)
			}
			for _, tc := range []struct {
				ids  []uint32
				want int
			}{
				{seqTokens(1, 3), 0},                             // less than a block
				{seqTokens(1, 7), 1},                             // one full block
				{append(seqTokens(1, 4), 9, 9, 9, 9), 1},         // diverges in block 2
				{append(seqTokens(5, 8), seqTokens(1, 4)...), 0}, // block 2's tokens at the root: another chain
			} {
				if b, _ := idx.MatchedPrefix(w, 0, tc.ids); b != tc.want {
					t.Errorf("MatchedPrefix(%v) = %d blocks, want %d", tc.ids, b, tc.want)
				}
			}
			if b, _ := idx.MatchedPrefix(w, 1, seqTokens(1, 12)); b != 0 {
				t.Errorf("rank 1 matched %d blocks of rank 0's chain", b)
			}

			p.do("drop") // buffered, never published: the next heartbeat reveals the gap
			eventually(t, "dropped batch repaired", func() bool { return match(seqTokens(1, 16)).Blocks == 4 })
			if g, c, _ := m.snapshot(); g[true] != 1 || g[false] != 0 || c["gap"] != 0 {
				t.Errorf("after a repairable gap: gaps %v, clears %v", g, c)
			}

			p.do("clear")
			eventually(t, "AllBlocksCleared applied", func() bool { return idx.Stats(w, 0).Blocks == 0 })

			p.do("script")
			eventually(t, "chain A indexed again", func() bool { return match(seqTokens(1, 12)).Blocks == 3 })
			p.do("lose") // neither published nor buffered
			eventually(t, "index cleared after an unrepairable gap", func() bool { return idx.Stats(w, 0).Blocks == 0 })
			g, c, bad := m.snapshot()
			if g[false] != 1 || c["gap"] != 1 || c["restart"] != 0 || bad != 0 {
				t.Errorf("after an unrepairable gap: gaps %v, clears %v, malformed %d", g, c, bad)
			}
		})
	}
}
