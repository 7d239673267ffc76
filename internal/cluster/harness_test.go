package cluster

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
)

// fakeLocal is a replica's admission: slots held per worker, requests waiting, the configured limit and
// the caps cluster admission sets. admit obeys min(limit, cap) as the controller does. Keys made with
// DecodeKey are decode seats, bounded by decLimit instead.
type fakeLocal struct {
	mu       sync.Mutex
	limit    int
	decLimit int
	inflight map[string]int
	waiting  map[string]int
	caps     map[string]int
	other    int
	capsSet  bool
	// prefill, when set, is how long an admitted request holds its slot: expire releases it then.
	prefill func() time.Duration
	ends    map[string][]time.Time
}

func newFakeLocal(limit int, workers ...string) *fakeLocal {
	f := &fakeLocal{limit: limit, inflight: map[string]int{}, waiting: map[string]int{}}
	for _, w := range workers {
		f.inflight[w] = 0
	}
	return f
}

func (f *fakeLocal) Usage() (Limits, map[string]Use) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]Use{}
	for w, n := range f.inflight {
		out[w] = Use{Inflight: n, Demand: n + f.waiting[w]}
	}
	return Limits{Prefill: f.limit, Decode: f.decLimit}, out
}

func (f *fakeLocal) SetCaps(caps map[string]int, other int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.caps, f.other, f.capsSet = maps.Clone(caps), other, true
}

func (f *fakeLocal) capLocked(w string) int {
	if !f.capsSet {
		return limitOf(w, f.limit, f.decLimit)
	}
	if c, ok := f.caps[w]; ok {
		return c
	}
	return f.other
}

// admit admits one waiting request on w if there is one and the limit and the cap allow.
func (f *fakeLocal) admit(w string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.waiting[w] > 0 && f.inflight[w] < limitOf(w, f.limit, f.decLimit) && f.inflight[w] < f.capLocked(w) {
		f.waiting[w]--
		f.inflight[w]++
		if f.prefill != nil {
			if f.ends == nil {
				f.ends = map[string][]time.Time{}
			}
			f.ends[w] = append(f.ends[w], time.Now().Add(f.prefill()))
		}
		return true
	}
	return false
}

// expire releases the slots whose prefill has ended.
func (f *fakeLocal) expire() {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	for w, ends := range f.ends {
		kept := ends[:0]
		for _, e := range ends {
			if e.After(now) {
				kept = append(kept, e)
			} else if f.inflight[w] > 0 {
				f.inflight[w]--
			}
		}
		f.ends[w] = kept
	}
}

func (f *fakeLocal) release(w string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inflight[w] > 0 {
		f.inflight[w]--
		if n := len(f.ends[w]); n > 0 {
			f.ends[w] = f.ends[w][:n-1]
		}
	}
}

func (f *fakeLocal) setWaiting(w string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waiting[w] = n
}

func (f *fakeLocal) waitingOn(w string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waiting[w]
}

func (f *fakeLocal) held(w string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inflight[w]
}

func (f *fakeLocal) cap(w string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.capLocked(w)
}

// kill drops every slot: the process is gone.
func (f *fakeLocal) kill() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for w := range f.inflight {
		f.inflight[w] = 0
		f.waiting[w] = 0
	}
	clear(f.ends)
	f.caps, f.other, f.capsSet = nil, 0, false
}

// memNet is an in-memory network of replicas' admin handlers, so that tests run inside a synctest bubble:
// a stopped replica refuses connections; a cut link black-holes (the caller waits for its deadline).
type memNet struct {
	mu       sync.Mutex
	handlers map[string]http.Handler // by replica id
	cut      map[[2]string]bool      // from, to
}

func newMemNet() *memNet {
	return &memNet{handlers: map[string]http.Handler{}, cut: map[[2]string]bool{}}
}

func (n *memNet) serve(id string, h http.Handler) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if h == nil {
		delete(n.handlers, id)
	} else {
		n.handlers[id] = h
	}
}

// partition cuts id off from every other replica both ways (twoWay) or only its own calls out.
func (n *memNet) partition(id string, ids []string, twoWay bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, o := range ids {
		if o != id {
			n.cut[[2]string{id, o}] = true
			if twoWay {
				n.cut[[2]string{o, id}] = true
			}
		}
	}
}

func (n *memNet) heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.cut)
}

func (n *memNet) client(from string) *http.Client {
	return &http.Client{Transport: memTransport{n: n, from: from}}
}

type memTransport struct {
	n    *memNet
	from string
}

func (t memTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	to := "http://" + req.URL.Host
	t.n.mu.Lock()
	h := t.n.handlers[to]
	out, back := t.n.cut[[2]string{t.from, to}], t.n.cut[[2]string{to, t.from}]
	t.n.mu.Unlock()
	if out {
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	if h == nil {
		if req.Body != nil {
			_, _ = io.Copy(io.Discard, req.Body)
			req.Body.Close()
		}
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if back { // the callee acted, but its answer is lost
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	return rec.Result(), nil
}

// fleet is a set of replicas over one memNet.
type fleet struct {
	t     *testing.T
	net   *memNet
	ids   []string
	cfg   Config
	kube  kubernetes.Interface
	nodes map[string]*node
	// budgets, when set, gives each replica started its Deps.Budgets.
	budgets func(id string) TenantBudgets
}

type node struct {
	id     string
	local  *fakeLocal
	r      *Replica
	cancel context.CancelFunc
	done   chan struct{}
}

func newFleet(t *testing.T, n int, cfg Config) *fleet {
	f := &fleet{t: t, net: newMemNet(), cfg: cfg, nodes: map[string]*node{}}
	for i := range n {
		f.ids = append(f.ids, fmt.Sprintf("http://10.0.0.%d:9000", i+1))
	}
	if f.cfg.Mode == "" {
		f.cfg.Mode = ModeStatic
	}
	if f.cfg.Mode == ModeStatic {
		f.cfg.Peers = f.ids
	}
	return f
}

// start runs replica i with a fresh process (new incarnation, no slots).
func (f *fleet) start(i int, limit int, workers ...string) *node {
	f.t.Helper()
	return f.startDec(i, limit, 0, workers...)
}

// startDec is start with decode seats on: decLimit bounds the keys made with DecodeKey.
func (f *fleet) startDec(i int, limit, decLimit int, workers ...string) *node {
	f.t.Helper()
	id := f.ids[i]
	local := newFakeLocal(limit, workers...)
	local.decLimit = decLimit
	nd := &node{id: id, local: local, done: make(chan struct{})}
	d := Deps{Local: nd.local, HTTP: f.net.client(id), Kube: f.kube}
	if f.budgets != nil {
		d.Budgets = f.budgets(id)
	}
	r, err := New(f.cfg, d)
	if err != nil {
		f.t.Fatal(err)
	}
	nd.r = r
	_, h := r.Handler()
	f.net.serve(id, h)
	ctx, cancel := context.WithCancel(context.Background())
	nd.cancel = cancel
	go func() {
		defer close(nd.done)
		if err := r.Run(ctx, id); err != nil {
			f.t.Errorf("run %s: %v", id, err)
		}
	}()
	f.nodes[id] = nd
	return nd
}

// kill stops replica i at once: its listener is gone and its slots with it.
func (f *fleet) kill(i int) {
	nd := f.nodes[f.ids[i]]
	f.net.serve(nd.id, nil)
	nd.cancel()
	<-nd.done
	nd.local.kill()
	delete(f.nodes, nd.id)
}

func (f *fleet) stopAll() {
	for i := range f.ids {
		if f.nodes[f.ids[i]] != nil {
			f.kill(i)
		}
	}
}

func (f *fleet) node(i int) *node { return f.nodes[f.ids[i]] }

// held sums the slots held on w over the running replicas.
func (f *fleet) held(w string) int {
	n := 0
	for _, nd := range f.nodes {
		n += nd.local.held(w)
	}
	return n
}

// fill admits on every running replica as many waiting requests as its cap allows on w.
func (f *fleet) fill(w string) {
	for _, nd := range f.nodes {
		for nd.local.admit(w) {
		}
	}
}

// coordinators lists the replicas that consider themselves coordinator.
func (f *fleet) coordinators() []string {
	var out []string
	for _, nd := range f.nodes {
		if _, self := nd.r.elect.coordinator(); self {
			out = append(out, nd.id)
		}
	}
	return out
}

// step lets the fleet run for d (fake time inside a synctest bubble).
func step(d time.Duration) { time.Sleep(d) }
