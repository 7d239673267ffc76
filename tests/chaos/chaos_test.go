// Package chaos runs a soak: the gateway in PD mode in front of simulated engines, under streaming and
// non-streaming load, while engines are killed, stopped, slowed, made to fail with 5xx, made to flap
// their health and to die mid-stream, clients cancel, and workers are added, drained and removed through
// the admin API. It checks invariants, not timings:
//
//   - every request got a terminal answer (a status, or the client's own cancellation) before the
//     client's timeout, which is well above the gateway's request timeout;
//   - at least 99% of the requests that started outside the fault windows succeeded (a window runs from
//     a fault's start until a few seconds after it ended);
//   - only documented statuses were answered: 200, 429, 502, 503, 504;
//   - every 200 stream ended with [DONE] or an SSE error frame;
//   - afterwards no admission slot, queued request or worker load is left, and (TestMain) no goroutine
//     and no open file outlives the test.
//
// The soak lasts SLUICE_CHAOS_DURATION (a Go duration; default 45s, so that `go test ./...` runs a short
// version; CI runs 3m). The fault schedule is a fixed sequence of phases scaled to that duration, and the
// engines' faults come only through their fault API (POST /sim/faults); requests are n=1.
package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/gen/sluice/admin/v1/adminv1connect"
	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/sim"
)

// TestMain fails the package if a goroutine or an open file outlives the tests.
func TestMain(m *testing.M) {
	fdsBefore := openFiles()
	code := m.Run()
	if code == 0 {
		http.DefaultClient.CloseIdleConnections()
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak: goroutines outlived the tests:", err)
			code = 1
		}
		if after := waitFiles(fdsBefore); after > fdsBefore {
			fmt.Fprintf(os.Stderr, "open files: %d before the tests, %d after\n", fdsBefore, after)
			code = 1
		}
	}
	os.Exit(code)
}

// openFiles counts the process's open file descriptors (Linux /proc; -1 elsewhere).
func openFiles() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

// waitFiles polls until the open file count is back to want, for at most 10 s (closing sockets is
// asynchronous in the runtime poller), and returns the last count.
func waitFiles(want int) int {
	n := openFiles()
	for deadline := time.Now().Add(10 * time.Second); n > want && time.Now().Before(deadline); n = openFiles() {
		time.Sleep(50 * time.Millisecond) // polling interval; the condition is re-checked
	}
	return n
}

func soakDuration(t *testing.T) time.Duration {
	d := 45 * time.Second
	if v := os.Getenv("SLUICE_CHAOS_DURATION"); v != "" {
		parsed, err := time.ParseDuration(v)
		if err != nil || parsed < 10*time.Second {
			t.Fatalf("SLUICE_CHAOS_DURATION=%q: want a Go duration of at least 10s", v)
		}
		d = parsed
	}
	return d
}

// outcome is one request's end.
type outcome struct {
	start, end time.Time
	kind       string // "rest", "rest-stream", "connect"
	status     int    // HTTP status; 0 when the client cancelled or the transport failed
	cancelled  bool   // the client cancelled on purpose
	transport  string // transport error text, when the request never got a status
	ok         bool   // succeeded: 200 with a complete body
	badStream  string // a 200 stream that ended neither with [DONE] nor with an error frame
}

type window struct {
	name       string
	start, end time.Time
}

type recorder struct {
	mu       sync.Mutex
	outcomes []outcome
	windows  []window
}

func (r *recorder) add(o outcome) {
	r.mu.Lock()
	r.outcomes = append(r.outcomes, o)
	r.mu.Unlock()
}

func (r *recorder) window(name string, start, end time.Time) {
	r.mu.Lock()
	r.windows = append(r.windows, window{name, start, end})
	r.mu.Unlock()
}

func (r *recorder) inWindow(t time.Time) bool {
	for _, w := range r.windows {
		if !t.Before(w.start) && !t.After(w.end) {
			return true
		}
	}
	return false
}

const (
	model          = "sim-model"
	requestTimeout = 8 * time.Second  // the gateway's --request-timeout-secs
	clientTimeout  = 25 * time.Second // well above it: hitting it means the gateway did not answer
	grace          = 4 * time.Second  // a fault window ends this long after the fault
)

func TestChaosSoak(t *testing.T) {
	total := soakDuration(t)
	logger := slog.New(slog.DiscardHandler)
	if os.Getenv("SLUICE_TEST_LOG") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	ctx := context.Background()

	cluster, err := sim.StartCluster(ctx, sim.ClusterConfig{Prefill: 4, Decode: 4, Protocol: sim.ProtocolSGLang,
		Engine: sim.Config{Mode: sim.ModeInstant}, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	prefills, decodes := cluster.ByRole(sim.RolePrefill), cluster.ByRole(sim.RoleDecode)
	// The last prefill and decode engines start outside the gateway: the admin API adds them later.
	spareP, spareD := prefills[3], decodes[3]
	prefills, decodes = prefills[:3], decodes[:3]

	args := []string{"--host", "127.0.0.1", "--port", "0", "--pd-disaggregation",
		"--prefill-max-inflight-requests-per-worker", "4", "--prefill-queue-size", "64", "--prefill-queue-timeout-secs", "5",
		"--request-timeout-secs", strconv.Itoa(int(requestTimeout / time.Second)),
		"--health-check-interval-secs", "0.5", "--health-check-timeout-secs", "1",
		"--health-success-threshold", "2", "--health-failure-threshold", "2",
		"--retry-initial-backoff-ms", "20", "--retry-max-backoff-ms", "200", "--shutdown-grace-period-secs", "5"}
	for _, e := range prefills {
		args = append(args, "--prefill", e.URL(), strconv.Itoa(e.BootstrapPort()))
	}
	for _, e := range decodes {
		args = append(args, "--decode", e.URL())
	}
	cfg, err := config.Parse(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := app.New(ctx, cfg, app.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := gw.Shutdown(sctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}()
	base := "http://" + gw.Addr()
	admin := adminv1connect.NewAdminServiceClient(http.DefaultClient, base)
	deadline := time.Now().Add(10 * time.Second)
	for gw.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatal("gateway not ready")
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}

	rec := &recorder{}
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: clientTimeout}

	// Load: six clients until the end, each with its own deterministic random source.
	stop := make(chan struct{})
	var load sync.WaitGroup
	for i := range 6 {
		load.Go(func() { runClient(client, base, i, stop, rec) })
	}

	// The fault schedule: phases at fixed fractions of the soak.
	faultAt := func(frac float64) time.Duration { return time.Duration(frac * float64(total)) }
	step := func(name string, frac, length float64, apply, undo func()) {
		time.Sleep(time.Until(startTime(rec).Add(faultAt(frac)))) // the schedule itself, not synchronisation
		begin := time.Now()
		apply()
		time.Sleep(faultAt(length)) // the fault lasts this long
		if undo != nil {
			undo()
		}
		rec.window(name, begin, time.Now().Add(grace))
	}
	setStart(rec)
	faults := func(e *sim.Engine, body string) func() {
		return func() { postFaults(t, e, body) }
	}
	clear := `{"error_rate":0,"hang":false,"latency_ms":0,"die_after_tokens":0,"fail_health":false}`

	step("kill prefill-0", 0.10, 0.08, func() {
		ms := faultAt(0.08).Milliseconds()
		postFaults(t, prefills[0], `{"refuse_for_ms":`+strconv.FormatInt(ms, 10)+`}`)
	}, nil)
	step("stop decode-0", 0.22, 0.06, faults(decodes[0], `{"hang":true,"fail_health":true}`), faults(decodes[0], clear))
	step("slow prefill-1", 0.32, 0.06, faults(prefills[1], `{"latency_ms":300}`), faults(prefills[1], clear))
	step("5xx decode-1", 0.40, 0.06, faults(decodes[1], `{"error_rate":0.5,"error_status":503}`), faults(decodes[1], clear))
	step("flapping prefill-2", 0.48, 0.06, func() {
		for i := range 6 {
			postFaults(t, prefills[2], `{"fail_health":`+strconv.FormatBool(i%2 == 0)+`}`)
			time.Sleep(faultAt(0.06) / 6) // the flapping period
		}
	}, faults(prefills[2], clear))
	step("die mid-stream decode-2", 0.56, 0.06, faults(decodes[2], `{"die_after_tokens":2}`), faults(decodes[2], clear))
	var addedP, addedD string
	step("add workers", 0.64, 0.02, func() {
		addedP = addWorker(t, admin, spareP, "prefill")
		addedD = addWorker(t, admin, spareD, "decode")
	}, nil)
	step("drain and remove workers", 0.70, 0.06, func() {
		if _, err := admin.DrainWorker(ctx, &adminv1.DrainWorkerRequest{Id: addedP, RemoveWhenIdle: true}); err != nil {
			t.Errorf("drain: %v", err)
		}
		if _, err := admin.RemoveWorker(ctx, &adminv1.RemoveWorkerRequest{Id: addedD}); err != nil {
			t.Errorf("remove: %v", err)
		}
	}, func() {
		addWorker(t, admin, spareD, "decode")
	})
	// The rest (from 0.76 + grace to the end) runs without faults.
	time.Sleep(time.Until(startTime(rec).Add(total))) // the schedule itself: the fault-free tail runs until the soak ends
	close(stop)
	load.Wait()

	checkInvariants(t, rec)
	checkIdle(t, admin, base)
}

// startTime and setStart keep the soak's start in the recorder (the schedule is relative to it).

func setStart(r *recorder) {
	r.mu.Lock()
	r.windows = append(r.windows, window{name: "start", start: time.Now(), end: time.Now()})
	r.mu.Unlock()
}

func startTime(r *recorder) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.windows[0].start
}

func postFaults(t *testing.T, e *sim.Engine, body string) {
	t.Helper()
	resp, err := http.Post(e.URL()+"/sim/faults", "application/json", strings.NewReader(body))
	if err != nil {
		t.Errorf("POST /sim/faults %s: %v", body, err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("POST /sim/faults %s: status %d", body, resp.StatusCode)
	}
}

func addWorker(t *testing.T, admin adminv1connect.AdminServiceClient, e *sim.Engine, role string) string {
	t.Helper()
	spec := &adminv1.WorkerSpec{Url: e.URL(), Role: role, Protocol: "sglang", Models: []string{model}}
	if role == "prefill" {
		spec.BootstrapPort = uint32(e.BootstrapPort())
	}
	resp, err := admin.AddWorker(context.Background(), &adminv1.AddWorkerRequest{Worker: spec})
	if err != nil {
		t.Errorf("add %s worker: %v", role, err)
		return ""
	}
	return resp.GetWorker().GetId()
}

// runClient sends requests until stop: client 0 cancels its requests at random points; the others mix
// non-streaming REST, streaming REST and Connect calls.
func runClient(c *http.Client, base string, id int, stop <-chan struct{}, rec *recorder) {
	rnd := rand.New(rand.NewPCG(uint64(id), 42))
	for seq := 0; ; seq++ {
		select {
		case <-stop:
			return
		default:
		}
		kind := []string{"rest", "rest-stream", "connect"}[(id+seq)%3]
		ctx, cancel := context.WithCancel(context.Background())
		cancelAfter := time.Duration(-1)
		if id == 0 {
			cancelAfter = time.Duration(rnd.IntN(30)) * time.Millisecond
		}
		var timer *time.Timer
		if cancelAfter >= 0 {
			timer = time.AfterFunc(cancelAfter, cancel)
		}
		o := doRequest(ctx, c, base, kind, seq)
		if timer != nil && !timer.Stop() && o.status == 0 {
			o.cancelled = true
		}
		cancel()
		rec.add(o)
	}
}

func doRequest(ctx context.Context, c *http.Client, base, kind string, seq int) outcome {
	o := outcome{start: time.Now(), kind: kind}
	defer func() { o.end = time.Now() }()
	prompt := fmt.Sprintf("chaos request %d", seq%50)
	var url, body string
	switch kind {
	case "connect":
		url = base + "/sluice.openai.v1.OpenAIService/CreateChatCompletion"
		body = `{"model":"` + model + `","messages":[{"role":"user","content":"` + prompt + `"}],"max_tokens":6}`
	default:
		url = base + "/v1/chat/completions"
		body = `{"model":"` + model + `","messages":[{"role":"user","content":"` + prompt + `"}],"max_tokens":6,"stream":` +
			strconv.FormatBool(kind == "rest-stream") + `}`
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		o.transport = err.Error()
		return o
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		o.transport = err.Error()
		o.end = time.Now()
		return o
	}
	defer resp.Body.Close()
	o.status = resp.StatusCode
	data, err := io.ReadAll(resp.Body)
	o.end = time.Now()
	if err != nil {
		if ctx.Err() != nil {
			o.cancelled = true
			return o
		}
		o.transport = "reading body: " + err.Error()
		if kind == "rest-stream" && resp.StatusCode == http.StatusOK {
			o.badStream = "body read failed: " + err.Error()
		}
		return o
	}
	if resp.StatusCode != http.StatusOK {
		return o
	}
	switch kind {
	case "rest-stream":
		last, sawError := lastFrame(data)
		switch {
		case last == "[DONE]" && !sawError:
			o.ok = true
		case last == "[DONE]" || isErrorFrame(last):
			// Ended properly, with an error frame: a failed request, but a terminal one.
		default:
			o.badStream = fmt.Sprintf("stream ended with %.80q", last)
		}
	default:
		var v struct {
			Choices []json.RawMessage `json:"choices"`
		}
		o.ok = json.Unmarshal(data, &v) == nil && len(v.Choices) == 1
	}
	return o
}

// lastFrame returns the last data payload of an SSE body and whether any payload was an error frame.
func lastFrame(body []byte) (string, bool) {
	var last string
	sawError := false
	for frame := range bytes.SplitSeq(body, []byte("\n\n")) {
		for line := range bytes.SplitSeq(frame, []byte("\n")) {
			if p, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
				last = string(p)
				if isErrorFrame(last) {
					sawError = true
				}
			}
		}
	}
	return last, sawError
}

func isErrorFrame(payload string) bool {
	var v struct {
		Error json.RawMessage `json:"error"`
	}
	return json.Unmarshal([]byte(payload), &v) == nil && len(v.Error) > 0 && string(v.Error) != "null"
}

func checkInvariants(t *testing.T, rec *recorder) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	documented := map[int]bool{200: true, 429: true, 502: true, 503: true, 504: true}
	var outside, outsideOK, cancelled, inWindow int
	statuses := map[string]int{}
	var failures []string
	for _, o := range rec.outcomes {
		statuses[strconv.Itoa(o.status)]++
		if o.end.Sub(o.start) >= clientTimeout-time.Second {
			t.Errorf("%s request took %v: no terminal answer before the client's timeout", o.kind, o.end.Sub(o.start))
		}
		if o.badStream != "" {
			t.Errorf("%s 200 stream did not end with [DONE] or an error frame: %s", o.kind, o.badStream)
		}
		if o.cancelled {
			cancelled++
			continue
		}
		if o.status == 0 {
			t.Errorf("%s request got no status: %s", o.kind, o.transport)
			continue
		}
		if !documented[o.status] {
			t.Errorf("%s request got undocumented status %d", o.kind, o.status)
		}
		if rec.inWindow(o.start) || rec.inWindow(o.end) {
			inWindow++
			continue
		}
		outside++
		if o.ok {
			outsideOK++
		} else if len(failures) < 10 {
			failures = append(failures, fmt.Sprintf("%s %d at %s", o.kind, o.status, o.start.Format("15:04:05.000")))
		}
	}
	var names []string
	for _, w := range rec.windows[1:] {
		names = append(names, w.name)
	}
	t.Logf("chaos soak: %d requests (%d cancelled by clients, %d in fault windows, %d outside: %d succeeded); statuses %v; windows %v",
		len(rec.outcomes), cancelled, inWindow, outside, outsideOK, statuses, names)
	if outside < 100 {
		t.Fatalf("only %d requests outside the fault windows: the soak is too short to judge", outside)
	}
	if rate := float64(outsideOK) / float64(outside); rate < 0.99 {
		t.Errorf("success outside fault windows %.2f%% < 99%% (first failures: %v)", 100*rate, failures)
	}
}

// checkIdle waits until the gateway holds nothing: no admission slot, no queued request, no worker load,
// and the matching gauges at zero.
func checkIdle(t *testing.T, admin adminv1connect.AdminServiceClient, base string) {
	ctx := context.Background()
	var last string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) { // polling interval; the condition is re-checked
		st, err := admin.GetAdmission(ctx, &adminv1.GetAdmissionRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ws, err := admin.ListWorkers(ctx, &adminv1.ListWorkersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		held := 0
		for _, w := range st.GetStatus().GetWorkers() {
			held += int(w.GetInflight())
		}
		load := 0
		for _, w := range ws.GetWorkers() {
			load += int(w.GetLoad())
		}
		gauges := gaugeSum(t, base, "sluice_pd_prefill_admission_inflight", "sluice_pd_prefill_admission_queued", "sluice_worker_active_requests")
		last = fmt.Sprintf("slots %d, queued %d, worker load %d, gauges %v", held, st.GetStatus().GetQueued(), load, gauges)
		if held == 0 && st.GetStatus().GetQueued() == 0 && load == 0 && gauges == 0 {
			return
		}
	}
	t.Errorf("gateway not idle after the soak: %s", last)
}

// gaugeSum adds up every sample of the named metrics on /metrics.
func gaugeSum(t *testing.T, base string, names ...string) float64 {
	sum := 0.0
	for _, n := range names {
		sum += metricSum(t, base, n, "")
	}
	return sum
}
