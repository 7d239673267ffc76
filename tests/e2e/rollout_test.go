package e2e

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// TestRollingDecodeUpdateGRPC is a rolling update of the decode pods of engines discovered in gRPC
// mode (--service-discovery-protocol grpc), under steady streaming load (#36, docs/kubernetes.md): each
// old decode pod is replaced by a new one (created and ready first, as a Deployment's surge does), then
// deleted while it streams (inTheMiddle: one of its streams surely is when the pod goes). Every client stream must complete with the text of an uninterrupted run.
// "killed": the old engine is also killed at once (a termination grace period shorter than the
// answers, or an engine that exits at once on SIGTERM), and streams it still had migrate. "drained":
// the old engine lives on; the drain of its deleted pod moves its streams (reason drain), so nothing
// waits for them.
func TestRollingDecodeUpdateGRPC(t *testing.T) {
	t.Parallel()
	t.Run("killed", func(t *testing.T) { t.Parallel(); rollingDecodeUpdate(t, true, true) })
	t.Run("drained", func(t *testing.T) { t.Parallel(); rollingDecodeUpdate(t, false, true) })
}

// TestRollingDecodeUpdateHTTP is the same rollout of vLLM engines discovered over HTTP: their chat
// streams migrate too (the engine gives the token ids, docs/migration.md).
func TestRollingDecodeUpdateHTTP(t *testing.T) {
	t.Parallel()
	t.Run("killed", func(t *testing.T) { t.Parallel(); rollingDecodeUpdate(t, true, false) })
	t.Run("drained", func(t *testing.T) { t.Parallel(); rollingDecodeUpdate(t, false, false) })
}

// rollingDecodeUpdate runs the rollout on SGLang engines over their gRPC, or vLLM's over HTTP; each
// run on a port of its own.
func rollingDecodeUpdate(t *testing.T, kill, grpc bool) {
	const p0, d0, d1, d2, d3 = "127.0.0.12", "127.0.0.13", "127.0.0.14", "127.0.0.15", "127.0.0.16"
	port := freeLoopbackPort(t, p0)
	cfg := sim.Config{Protocol: sim.ProtocolVLLM, Seed: 3, ITLBase: 3 * time.Millisecond}
	scheme, flags := "http", []string{"--service-discovery-protocol", "http"}
	if grpc {
		cfg = sim.Config{GRPC: true, EngineGRPCOnly: true, ByteTokenIDs: true, Seed: 3, ITLBase: 3 * time.Millisecond}
		scheme, flags = "grpc", []string{"--service-discovery-protocol", "grpc", "--tokenizer-path", byteTokenizerDir(t)}
	}
	at := func(ip string) string { return scheme + "://" + net.JoinHostPort(ip, strconv.Itoa(port)) }
	engines := map[string]*sim.Engine{}
	for _, ip := range []string{p0, d0, d1, d2, d3} {
		role := sim.RoleDecode
		if ip == p0 {
			role = sim.RolePrefill
		}
		c := cfg
		c.Role, c.Host, c.Port = role, ip, port
		e, err := sim.New(c, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(context.Background()); err != nil {
			t.Fatalf("sim %s on %s:%d: %v", role, ip, port, err)
		}
		t.Cleanup(func() { _ = e.Close() })
		engines[ip] = e
	}
	pods := &kubePods{t: t, client: fake.NewClientset(), ns: "inference"}
	prefill := podTemplate{labels: map[string]string{"app": "llm", "component": "prefill", "model": simModel}}
	if grpc {
		prefill.annotations = map[string]string{"sglang.ai/bootstrap-port": strconv.Itoa(engines[p0].BootstrapPort())}
	}
	decode := podTemplate{labels: map[string]string{"app": "llm", "component": "decode", "model": simModel}}
	gw := startGateway(t, app.Options{KubeClient: pods.client}, append(flags, "--pd-disaggregation", "--service-discovery",
		"--service-discovery-port", strconv.Itoa(port),
		"--prefill-selector", "app=llm,component=prefill", "--decode-selector", "app=llm,component=decode",
		"--service-discovery-namespace", "inference", "--model-id-from", "label:model",
		"--health-check-interval-secs", "0.2")...)
	pods.create(pods.pod("prefill-0", p0, prefill, true))
	pods.create(pods.pod("decode-old-0", d0, decode, true))
	pods.create(pods.pod("decode-old-1", d1, decode, true))
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	waitFor(t, "both old decode pods routed to", 10*time.Second, func() bool {
		return routable(gw, at(d0)) && routable(gw, at(d1))
	})

	prompts := make([]string, 4)
	want := make([]streamedAnswer, len(prompts))
	for i := range prompts {
		prompts[i] = fmt.Sprintf("rolling update %d", i)
		want[i] = streamPrompt(t, gw.URL, prompts[i], 120)
		if want[i].err != nil || want[i].finish != "length" {
			t.Fatalf("uninterrupted answer %d: %+v", i, want[i])
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	streams := 0
	for c := range 6 {
		wg.Go(func() {
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				i := (c + seq) % len(prompts)
				got := streamPrompt(t, gw.URL, prompts[i], 120)
				mu.Lock()
				streams++
				mu.Unlock()
				if got.err != nil || got.text != want[i].text || got.finish != want[i].finish || got.usage.CompletionTokens != want[i].usage.CompletionTokens {
					t.Errorf("stream %q during the rollout: err %v, text %q finish %q; uninterrupted %q finish %q",
						prompts[i], got.err, got.text, got.finish, want[i].text, want[i].finish)
				}
			}
		})
	}
	// The rollout: a new pod first, then the old one goes while it streams.
	for n, step := range []struct{ old, oldIP, new, newIP string }{
		{"decode-old-0", d0, "decode-new-0", d2}, {"decode-old-1", d1, "decode-new-1", d3},
	} {
		pods.create(pods.pod(step.new, step.newIP, decode, true))
		waitFor(t, step.new+" routed to", 10*time.Second, func() bool { return routable(gw, at(step.newIP)) })
		inTheMiddle(t, gw, engines[step.oldIP], at(step.oldIP))
		pods.delete(step.old)
		if kill {
			engines[step.oldIP].Crash(time.Hour) // gone for good: its pod was deleted
		}
		waitFor(t, step.old+"'s streams moved", 10*time.Second, func() bool {
			if kill {
				return migrationCount(t, gw, "migrated") > float64(n)
			}
			return drainMigrations(t, gw) > float64(n)
		})
		if !kill { // the drained engine lives on: the streams it keeps end there
			if err := engines[step.oldIP].SetFaults(sim.Faults{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, "the old decode workers removed", 10*time.Second, func() bool {
		return workerLoad(gw, at(d0)) < 0 && workerLoad(gw, at(d1)) < 0
	})
	close(stop)
	wg.Wait()
	if n := migrationCount(t, gw, "migrated"); n < 2 {
		t.Errorf("sluice_migrations_total{outcome=migrated} = %v after deleting two streaming decode pods, want at least 2", n)
	}
	if n := drainMigrations(t, gw); !kill && n < 2 {
		t.Errorf("%v streams moved by the drains of two streaming decode pods, want at least 2", n)
	}
	t.Logf("%d streams during the rollout, %v migrated", streams, migrationCount(t, gw, "migrated"))
	released(t, gw)
}

// inTheMiddle makes the decode engine at url stall every stream it starts from now on after three
// tokens, and waits until a stream the gateway could move is one of those: none can end before its
// pod goes, however slow the machine, so its drain (or its kill) must move one.
//   - Every stream the gateway has on the engine is stalled there: the engine's stalled count, read
//     first, equals the gateway's load on it (a stalled stream cannot end, so the streams that started
//     before the stall have all ended, at the engine and at the gateway).
//   - Then the gateway has read one's first tokens: Movable counts it.
func inTheMiddle(t *testing.T, gw *gateway, e *sim.Engine, url string) {
	t.Helper()
	if err := e.SetFaults(sim.Faults{StallAfterTokens: 3}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, url+" holding only stalled streams", 10*time.Second, func() bool {
		stalled := e.Stats().Stalled
		return stalled > 0 && workerLoad(gw, url) == stalled
	})
	waitFor(t, "a stream on "+url+" the gateway could move", 10*time.Second, func() bool { return gw.Dispatcher.Movable(url) > 0 })
}

// routable reports whether the gateway routes to the worker at url.
func routable(gw *gateway, url string) bool {
	w, ok := gw.Registry.Snapshot().ByURL(url)
	return ok && w.Routable(time.Now())
}

// freeLoopbackPort is a port free on ip (skips where the address is unusable).
func freeLoopbackPort(t *testing.T, ip string) int {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Skipf("loopback address %s unusable here: %v", ip, err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
