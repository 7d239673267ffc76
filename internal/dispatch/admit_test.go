package dispatch

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/testkit/poll"
	"github.com/sluicegw/sluice/internal/worker"
)

func TestAdmissionRequestInputs(t *testing.T) {
	x := &Dispatcher{cfg: Config{CharsPerToken: 4}, d: Deps{Policies: mustSet(t, placement.PolicyRoundRobin)}}
	parse := func(route Route, in string) *body.Request {
		br, err := body.ParseRequest(route, []byte(in))
		if err != nil {
			t.Fatal(err)
		}
		return br
	}
	tests := []struct {
		name     string
		route    Route
		body     string
		header   http.Header
		tokens   int64
		prio     int
		maxWait  time.Duration
		wantHook bool
	}{
		{name: "text rounds up", route: RouteChat, body: `{"model":"m","messages":[{"role":"user","content":"abcdefghi"}]}`, tokens: 3},
		{name: "token ids exactly", route: RouteCompletions, body: `{"model":"m","prompt":[[1,2,3],[4,5]]}`, tokens: 5},
		{name: "body priority", route: RouteGenerate, body: `{"text":"abcd","priority":7}`, tokens: 1, prio: 7},
		{name: "header beats body", route: RouteGenerate, body: `{"text":"abcd","priority":7}`, header: http.Header{HeaderPriority: {"-2"}}, tokens: 1, prio: -2},
		{name: "deadline", route: RouteGenerate, body: `{"input_ids":[1]}`, header: http.Header{HeaderDeadlineMS: {"1500"}}, tokens: 1, maxWait: 1500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			br := parse(tt.route, tt.body)
			h := tt.header
			if h == nil {
				h = http.Header{}
			}
			ar := x.admissionRequest(&Request{Header: h}, br, &placement.Request{Model: "m", Text: br.Text})
			if ar.Tokens != tt.tokens || ar.Priority != tt.prio || ar.MaxWait != tt.maxWait || (ar.CachedTokens != nil) != tt.wantHook {
				t.Errorf("admission inputs %+v, want tokens %d priority %d max wait %v hook %v", ar, tt.tokens, tt.prio, tt.maxWait, tt.wantHook)
			}
		})
	}

	// With cache_aware prefill, the hook reports the prefix the tree expects a worker to hold.
	reg := worker.NewRegistry(worker.RegistryOptions{StartReady: true})
	for _, u := range []string{"http://p0:1", "http://p1:1"} {
		if _, err := reg.Add(worker.Spec{URL: u, Role: worker.RolePrefill, Models: []string{"m"}}); err != nil {
			t.Fatal(err)
		}
	}
	x.d.Policies = mustSet(t, placement.PolicyCacheAware)
	cands := reg.Snapshot().Candidates(worker.RolePrefill, "m")
	sys := strings.Repeat("shared system prompt ", 20) // 420 characters
	first := &placement.Request{Model: "m", Text: sys + "one", TargetWorker: -1}
	held := cands[x.d.Policies.Prefill.Pick(cands, first)].URL()
	br := parse(RouteChat, `{"model":"m","messages":[{"role":"user","content":"`+sys+`two"}]}`)
	ar := x.admissionRequest(&Request{Header: http.Header{}}, br, &placement.Request{Model: "m", Text: br.Text})
	if ar.CachedTokens == nil {
		t.Fatal("no cached-prefix hook with cache_aware")
	}
	if got := ar.CachedTokens(held); got != int64(len(sys))/4 {
		t.Errorf("cached tokens on the worker holding the prefix = %d, want %d", got, len(sys)/4)
	}
	for _, c := range cands {
		if c.URL() != held && ar.CachedTokens(c.URL()) != 0 {
			t.Errorf("cached tokens on %s = %d, want 0", c.URL(), ar.CachedTokens(c.URL()))
		}
	}
}

func mustSet(t *testing.T, policy string) *placement.Set {
	t.Helper()
	s, err := placement.NewSet(placement.Config{Settings: placement.Settings{Policy: policy}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestBadAdmissionHeadersAre400(t *testing.T) {
	p := newEngine(t, "prefill", chatAnswer)
	dec := newEngine(t, "decode", chatAnswer)
	d, _ := newPDDispatcher(t, Config{},
		pdWorker{p.srv.URL, worker.RolePrefill, worker.ProtocolSGLang},
		pdWorker{dec.srv.URL, worker.RoleDecode, worker.ProtocolSGLang})
	for _, h := range []http.Header{
		{HeaderPriority: {"high"}}, {HeaderPriority: {"1.5"}}, {HeaderPriority: {"99999999999"}},
		{HeaderDeadlineMS: {"0"}}, {HeaderDeadlineMS: {"-5"}}, {HeaderDeadlineMS: {"soon"}},
	} {
		_, _, err := do(t, d, RouteChat, `{"model":"m","messages":[{"role":"user","content":"x"}]}`, h)
		var ae *apierror.Error
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || (ae.Param != HeaderPriority && ae.Param != HeaderDeadlineMS) {
			t.Errorf("headers %v: err = %v, want 400 naming the header", h, err)
		}
	}
	if n := len(p.recorded()); n != 0 {
		t.Errorf("%d prefill legs sent for invalid requests", n)
	}
}

// Priorities travel from the header or the body to admission: with the only prefill slot held, a
// low, a default and a high request queue; the high one is served first, then default, then low.
func TestPriorityReachesAdmission(t *testing.T) {
	var rv rendezvous
	gate := make(chan struct{})
	open := sync.OnceFunc(func() { close(gate) })
	defer open() // also when the test fails early: the engine must not block its server's Close
	var once sync.Once
	answer := rv.prefill(chatAnswer)
	p := newEngine(t, "prefill", func(w http.ResponseWriter, l leg) {
		once.Do(func() { <-gate }) // the first prefill (and its decode) holds the slot until the others queue
		answer(w, l)
	})
	dec := newEngine(t, "decode", rv.decode(chatAnswer))
	d, _ := newPDDispatcher(t, Config{},
		pdWorker{p.srv.URL, worker.RolePrefill, worker.ProtocolSGLang},
		pdWorker{dec.srv.URL, worker.RoleDecode, worker.ProtocolSGLang})
	if err := d.d.Admission.Update(admission.Settings{MaxInflightPerWorker: 1, QueueSize: 8, QueueTimeout: time.Minute,
		Bands: []admission.Band{{Name: "low", MinPriority: -100}, {Name: "default", MinPriority: 0}, {Name: "high", MinPriority: 10}},
		Aging: time.Hour}); err != nil {
		t.Fatal(err)
	}
	body := func(content, extra string) string {
		return `{"model":"m",` + extra + `"messages":[{"role":"user","content":"` + content + `"}]}`
	}
	var wg sync.WaitGroup
	send := func(b string, h http.Header) {
		wg.Go(func() {
			if _, _, err := do(t, d, RouteChat, b, h); err != nil {
				t.Errorf("%s: %v", b, err)
			}
		})
	}
	waitQueued := func(n int) {
		if !poll.Wait(10*time.Second, func() bool { return d.d.Admission.Status().QueuedTotal == n }) {
			t.Fatalf("queued %d, want %d", d.d.Admission.Status().QueuedTotal, n)
		}
	}
	send(body("first", ""), nil)
	poll.Until(t, "the first request to reach the engine", 10*time.Second, func() bool { return len(p.recorded()) > 0 })
	send(body("low", `"priority":-5,`), nil)
	waitQueued(1)
	send(body("default", ""), nil)
	waitQueued(2)
	send(body("high", ""), http.Header{HeaderPriority: {"20"}})
	waitQueued(3)
	open()
	wg.Wait()
	var order []string
	for _, l := range p.recorded() {
		msgs := l.body["messages"].([]any)
		order = append(order, msgs[0].(map[string]any)["content"].(string))
	}
	if strings.Join(order, ",") != "first,high,default,low" {
		t.Errorf("prefill order %v, want first,high,default,low", order)
	}
	assertReleased(t, d)
}

// An engine reporting more waiting requests than allowed counts as at capacity: with no queue, the
// request is rejected at once instead of piling onto it.
func TestOverloadedEngineIsAtCapacity(t *testing.T) {
	p := newEngine(t, "prefill", chatAnswer)
	dec := newEngine(t, "decode", chatAnswer)
	var rv rendezvous
	p.answer, dec.answer = rv.prefill(chatAnswer), rv.decode(chatAnswer)
	d, _ := newPDDispatcher(t, Config{CheckOverload: true, OverloadWaitingRequests: 2},
		pdWorker{p.srv.URL, worker.RolePrefill, worker.ProtocolSGLang},
		pdWorker{dec.srv.URL, worker.RoleDecode, worker.ProtocolSGLang})
	if err := d.d.Admission.Update(admission.Settings{MaxInflightPerWorker: 4}); err != nil {
		t.Fatal(err)
	}
	waiting := 3
	mon, err := worker.NewLoadMonitor(d.d.Registry, worker.LoadFetcherFunc(func(context.Context, *worker.Worker) (worker.EngineLoad, error) {
		return worker.EngineLoad{Waiting: waiting}, nil
	}), worker.LoadMonitorConfig{Interval: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mon.Poll(t.Context())
	req := `{"model":"m","messages":[{"role":"user","content":"x"}]}`
	if _, _, err := do(t, d, RouteChat, req, nil); !errors.Is(err, admission.ErrQueueFull) {
		var ae *apierror.Error
		if !errors.As(err, &ae) || ae.Code != apierror.CodeQueueFull {
			t.Fatalf("overloaded engine: err = %v, want 429 queue full", err)
		}
	}
	waiting = 2
	mon.Poll(t.Context())
	if _, _, err := do(t, d, RouteChat, req, nil); err != nil {
		t.Fatalf("engine back to 2 waiting: %v", err)
	}
	assertReleased(t, d)
}
