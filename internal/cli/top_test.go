package cli_test

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"

	"github.com/sluicegw/sluice/gen/sluice/admin/v1/adminv1connect"
	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/cli"
	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/internal/testkit/poll"
	"github.com/sluicegw/sluice/tests/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestTopAgainstLiveGateway: with the only prefill slot held (the engine hangs) and one request
// queued, `sluice top` shows the worker's slots full, the queue, and — on a terminal — redraws in
// place; a rejection between two refreshes shows as a rate.
func TestTopAgainstLiveGateway(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := sim.StartCluster(ctx, sim.ClusterConfig{Prefill: 1, Decode: 1, Mode: sim.ModeInstant, Logger: testenv.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	p, d := c.ByRole(sim.RolePrefill)[0], c.ByRole(sim.RoleDecode)[0]
	gw := testenv.StartGateway(t, app.Options{}, "--pd-disaggregation", "--admin-api-key", "adm",
		"--prefill-max-inflight-requests-per-worker", "1", "--prefill-queue-size", "1",
		"--prefill", p.URL(), strconv.Itoa(p.BootstrapPort()), "--decode", d.URL())
	waitUntil(t, "gateway ready", func() bool { return gw.Ready() == nil })
	if err := p.SetFaults(sim.Faults{Hang: true}); err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	post := func() {
		req, _ := http.NewRequestWithContext(rctx, http.MethodPost, gw.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`))
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
		}
		done <- struct{}{}
	}
	defer func() {
		cancel()
		<-done
		<-done
	}()
	go post() // holds the slot
	waitUntil(t, "slot held", func() bool { return gw.Admission.Status().Inflight[p.URL()] == 1 })
	go post() // waits
	waitUntil(t, "request queued", func() bool { return gw.Admission.Status().QueuedTotal == 1 })

	// Not a terminal: one plain snapshot.
	var out, errOut bytes.Buffer
	if code := cli.Main(ctx, []string{"top", "--server", gw.URL, "--admin-api-key", "adm", "--loads"}, &out, &errOut); code != 0 {
		t.Fatalf("sluice top: exit %d: %s", code, errOut.String())
	}
	plain := out.String()
	for _, want := range []string{
		"admission on: limit 1 per prefill worker, queue 1/1",
		"PREFILL WORKER", p.URL(), "1/1 [##########]", "DECODE WORKER", d.URL(),
		"QUEUE (MODEL)", "sim-model", "waits (recent)", "rejected  queue_full 0  queue_timeout 0", "ENGINE RUN/WAIT/KV",
	} {
		if !strings.Contains(plain, want) {
			t.Errorf("plain output lacks %q:\n%s", want, plain)
		}
	}
	if strings.Contains(plain, "\x1b[") || strings.Count(plain, "sluice top") != 1 {
		t.Errorf("plain output is not one plain snapshot:\n%q", plain)
	}

	// A terminal: two frames, each drawn over the previous one; a queue-full 429 in between shows as
	// a count and a rate.
	api := adminv1connect.NewAdminServiceClient(client, gw.URL, connect.WithInterceptors(cli.BearerInterceptor("adm")))
	var term bytes.Buffer
	rejected := make(chan struct{})
	w := &afterFirstFrame{buf: &term, hook: func() {
		resp, err := client.Post(gw.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"sim-model","messages":[{"role":"user","content":"hi"}]}`))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusTooManyRequests {
				t.Errorf("overflow status %d, want 429", resp.StatusCode)
			}
		}
		close(rejected)
	}}
	if err := cli.RunTopTerm(ctx, api, w, gw.URL, 50*time.Millisecond, 2); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rejected:
	case <-time.After(10 * time.Second):
		t.Fatal("the overflow request between the frames did not run")
	}
	got := term.String()
	if strings.Count(got, "\x1b[H\x1b[2J") != 2 || !strings.HasPrefix(got, "\x1b[?25l") || !strings.HasSuffix(got, "\x1b[?25h") {
		t.Errorf("terminal output does not redraw in place:\n%q", got)
	}
	last := got[strings.LastIndex(got, "\x1b[H\x1b[2J"):]
	if !strings.Contains(last, "queue_full 1 (+") || !strings.Contains(last, "1/1 [##########]") {
		t.Errorf("second frame lacks the rejection and its rate, or the full slots:\n%s", last)
	}
}

// afterFirstFrame runs hook once, after the first frame was written.
type afterFirstFrame struct {
	buf    *bytes.Buffer
	hook   func()
	frames int
}

func (a *afterFirstFrame) Write(p []byte) (int, error) {
	n, err := a.buf.Write(p)
	if bytes.Contains(p, []byte("sluice top")) {
		a.frames++
		if a.frames == 1 {
			a.hook()
		}
	}
	return n, err
}

// waitUntil polls cond until it holds, failing after 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, what, 10*time.Second, cond)
}
