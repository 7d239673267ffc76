package kube

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/tests/testenv"
)

// TestDrainOnSIGTERM runs `sluice serve` as a process, as the Deployment's container runs, and sends it
// SIGTERM, as the kubelet does on a rolling update, with one of each kind of request at the gateway: a
// stream in decode (its prefill slot already given back), a request holding the prefill slot (its
// prefill slowed by a fault) and one queued behind it. The queued request gets 503 shutting_down with
// Retry-After at once, the other two finish whole, new connections are refused, and the process exits 0
// within the grace period. The drain needs no control plane: the workers are static.
func TestDrainOnSIGTERM(t *testing.T) {
	needBinaries(t)
	c, err := sim.StartCluster(context.Background(), sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang,
		Engine: sim.Config{BootstrapTimeout: time.Minute, ContextLength: 1 << 20}, Logger: testenv.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	prefill, decode := c.ByRole(sim.RolePrefill)[0], c.ByRole(sim.RoleDecode)[0]
	const grace = 30 * time.Second
	port := testenv.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	p := startProcess(t, "sluice-drain", bins.sluice, "serve", "--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"--pd-disaggregation", "--disable-retries", "--prefill-max-inflight-requests-per-worker", "1",
		"--prefill-queue-size", "4", "--prefill-queue-timeout-secs", "120",
		"--shutdown-grace-period-secs", strconv.Itoa(int(grace/time.Second)),
		"--prefill", prefill.URL(), strconv.Itoa(prefill.BootstrapPort()), "--decode", decode.URL())
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Log(p.tail())
		}
	})
	eventually(t, 30*time.Second, "gateway ready", func() error {
		r, err := http.Get(base + "/readiness")
		if err != nil {
			return err
		}
		r.Body.Close()
		if r.StatusCode != http.StatusOK {
			return fmt.Errorf("readiness %d", r.StatusCode)
		}
		return nil
	})
	chat := base + "/v1/chat/completions"

	// A: a long stream; once its first chunk arrived its prefill is done and the slot is free.
	respA, err := http.Post(chat, "application/json", strings.NewReader(
		`{"model":"sim-model","messages":[{"role":"user","content":"stream"}],"max_tokens":1000,"ignore_eos":true,"stream":true}`))
	if err != nil || respA.StatusCode != http.StatusOK {
		t.Fatalf("stream A: %v %v", err, respA)
	}
	defer respA.Body.Close()
	streamA := bufio.NewReader(respA.Body)
	if line, err := streamA.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("stream A first line %q, %v", line, err)
	}
	eventually(t, 10*time.Second, "A's prefill slot given back", func() error { return gauge(base, "sluice_pd_prefill_admission_inflight", 0) })

	// C holds the only prefill slot for a while; B queues behind it.
	if err := prefill.SetFaults(sim.Faults{LatencyMS: 3000}); err != nil {
		t.Fatal(err)
	}
	short := `{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`
	resC := goPostRaw(chat, short)
	eventually(t, 10*time.Second, "C holds the slot", func() error { return gauge(base, "sluice_pd_prefill_admission_inflight", 1) })
	resB := goPostRaw(chat, short)
	eventually(t, 10*time.Second, "B queued", func() error { return gauge(base, "sluice_pd_prefill_admission_queued", 1) })

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}

	// B: answered by the drain, not by its 120 s queue timeout nor after C.
	b := <-resB
	if b.err != nil || b.status != http.StatusServiceUnavailable || b.retryAfter != "1" {
		t.Fatalf("queued B: status %d, Retry-After %q, err %v, body %s; want 503 with Retry-After 1", b.status, b.retryAfter, b.err, b.body)
	}
	var e struct {
		Error struct{ Code, Type string } `json:"error"`
	}
	if err := json.Unmarshal(b.body, &e); err != nil || e.Error.Code != "shutting_down" || e.Error.Type != "service_unavailable_error" {
		t.Errorf("queued B body %s (%v), want code shutting_down", b.body, err)
	}
	select {
	case cr := <-resC:
		t.Fatalf("C ended (status %d) before the queued B was answered: the drain waited for the slot", cr.status)
	default:
	}

	eventually(t, 10*time.Second, "new connections refused", func() error {
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
		if err != nil {
			return nil
		}
		conn.Close()
		return fmt.Errorf("still accepting")
	})

	// C and A: in flight at SIGTERM, finished whole.
	if cr := <-resC; cr.err != nil || cr.status != http.StatusOK {
		t.Errorf("in-flight C: status %d, err %v, body %s; want 200", cr.status, cr.err, cr.body)
	}
	rest, err := io.ReadAll(streamA)
	if err != nil {
		t.Fatalf("stream A broken by the drain: %v", err)
	}
	if s := strings.TrimSpace(string(rest)); !strings.HasSuffix(s, "data: [DONE]") || !strings.Contains(s, `"finish_reason":"length"`) {
		t.Errorf("stream A did not finish whole: ...%q", tail(s, 200))
	}

	if err := p.wait(grace); err != nil {
		t.Fatalf("exit after SIGTERM: %v (want 0 within the %v grace period)", err, grace)
	}
}

type rawResult struct {
	status     int
	retryAfter string
	body       []byte
	err        error
}

// goPostRaw posts body on a connection of its own and delivers the outcome.
func goPostRaw(url, body string) <-chan rawResult {
	ch := make(chan rawResult, 1)
	go func() {
		hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := hc.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			ch <- rawResult{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		ch <- rawResult{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: b, err: err}
	}()
	return ch
}

// gauge checks that the unlabelled-or-single series of name on /metrics sums to want.
func gauge(base, name string, want float64) error {
	r, err := http.Get(base + "/metrics")
	if err != nil {
		return err
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	sum := 0.0
	for line := range strings.SplitSeq(string(b), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return err
		}
		sum += f
	}
	if sum != want {
		return fmt.Errorf("%s = %v, want %v", name, sum, want)
	}
	return nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
