package dispatch

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/worker"
)

// topoFleet is a registry of ready SGLang PD workers of model m, each with the reserved labels given.
type topoFleet struct {
	t   *testing.T
	reg *worker.Registry
}

func newTopoFleet(t *testing.T) *topoFleet {
	return &topoFleet{t: t, reg: worker.NewRegistry(worker.RegistryOptions{})}
}

func (f *topoFleet) add(url string, role worker.Role, labels map[string]string) *worker.Worker {
	f.t.Helper()
	spec := worker.Spec{URL: url, Role: role, Protocol: worker.ProtocolSGLang, Models: []string{"m"}, Labels: labels}
	if role == worker.RolePrefill {
		spec.BootstrapPort = 9000
	}
	w, err := f.reg.Add(spec)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.reg.SetHealth(w.ID(), worker.HealthReady); err != nil {
		f.t.Fatal(err)
	}
	return w
}

// dispatcher builds a dispatcher over the fleet with the pairing rules and prefill policy given.
func (f *topoFleet) dispatcher(p placement.Pairing, prefillPolicy string, m Metrics) *Dispatcher {
	f.t.Helper()
	cfg := placement.DefaultConfig()
	cfg.PrefillPolicy, cfg.DecodePolicy = prefillPolicy, placement.PolicyRoundRobin
	pols, err := placement.NewSet(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	if m == nil {
		m = nopMetrics{}
	}
	return &Dispatcher{cfg: Config{PD: true, Pairing: p.Clamped()}, d: Deps{Registry: f.reg, Policies: pols, Metrics: m}}
}

func place(zone, node, revision string) map[string]string {
	l := map[string]string{}
	for k, v := range map[string]string{worker.LabelZone: zone, worker.LabelNode: node, worker.LabelRevision: revision} {
		if v != "" {
			l[k] = v
		}
	}
	return l
}

var yes = func(string) bool { return true }

// pick forms one pair the way a request does: with decode seats in admission's selection
// (selectPair), without them the prefill in admission and its partner in the adapter (decodeOf).
func pick(x *Dispatcher, seats bool, key string) (*worker.Worker, *worker.Worker, error) {
	preq := &placement.Request{Model: "m", TargetWorker: -1, Text: key, RoutingKey: key}
	if seats {
		pw, dw, err := x.selectPair(preq, allHandoffs, yes, yes)
		if err == nil {
			x.notePair(pw, dw)
		}
		return pw, dw, err
	}
	pw, err := x.selectPrefill(preq, allHandoffs, yes)
	if err != nil {
		return nil, nil, err
	}
	dw, err := x.decodeOf(&pdAttempt{preq: preq, pw: pw}, pw.Handoff())
	return pw, dw, err
}

// TestPairPrefersCloseUntilPenaltyIsPaid: the same-node decode wins until it carries more in-flight
// requests than the cross-zone penalty; then the far one does. With and without decode seats.
func TestPairPrefersCloseUntilPenaltyIsPaid(t *testing.T) {
	for _, seats := range []bool{false, true} {
		t.Run(fmt.Sprint("seats=", seats), func(t *testing.T) {
			f := newTopoFleet(t)
			f.add("http://p:1", worker.RolePrefill, place("a", "n1", ""))
			near := f.add("http://d:1", worker.RoleDecode, place("a", "n1", ""))
			f.add("http://d:2", worker.RoleDecode, place("b", "n9", ""))
			var p placement.Pairing
			if err := p.SetPenalties("cross_zone=10"); err != nil {
				t.Fatal(err)
			}
			x := f.dispatcher(p, placement.PolicyRoundRobin, nil)
			var guards []*worker.LoadGuard
			defer func() {
				for _, g := range guards {
					g.Release()
				}
			}()
			for load := range 10 {
				_, dw, err := pick(x, seats, "k")
				if err != nil || dw != near {
					t.Fatalf("load %d on the near decode: got %v, %v; want the near one", load, dw, err)
				}
				guards = append(guards, near.AcquireLoad())
			}
			// Equal cost (10 + 0 = 0 + 10): both are offered; one more and only the far one is.
			guards = append(guards, near.AcquireLoad())
			if _, dw, err := pick(x, seats, "k"); err != nil || dw.URL() != "http://d:2" {
				t.Fatalf("near decode 11 requests ahead: got %v, %v; want the far d:2", dw, err)
			}
		})
	}
}

// TestPairForbiddenLevelNeverCrossed: with zone forbidden, every pair stays in its zone whatever the
// load and prefill policy, and a request with only cross-zone pairs is refused with its own code.
func TestPairForbiddenLevelNeverCrossed(t *testing.T) {
	for _, pol := range placement.PolicyNames() {
		for _, seats := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/seats=%v", pol, seats), func(t *testing.T) {
				f := newTopoFleet(t)
				f.add("http://p:1", worker.RolePrefill, place("a", "n1", ""))
				f.add("http://p:2", worker.RolePrefill, place("b", "n2", ""))
				da := f.add("http://d:1", worker.RoleDecode, place("a", "n3", ""))
				f.add("http://d:2", worker.RoleDecode, place("b", "n4", ""))
				f.add("http://d:3", worker.RoleDecode, place("b", "n5", ""))
				var p placement.Pairing
				if err := p.SetForbid("zone"); err != nil {
					t.Fatal(err)
				}
				x := f.dispatcher(p, pol, nil)
				for i := range 100 {
					g := da.AcquireLoad() // the zone-a decode gets ever busier: no reason to leave
					defer g.Release()
					pw, dw, err := pick(x, seats, fmt.Sprint("k", i))
					if err != nil {
						t.Fatal(err)
					}
					if pw.Place().Zone != dw.Place().Zone {
						t.Fatalf("request %d paired %s (zone %s) with %s (zone %s)", i, pw.URL(), pw.Place().Zone, dw.URL(), dw.Place().Zone)
					}
				}
				// Zone b's decode workers leave: p:2 has no partner, p:1 still has one.
				for _, u := range []string{"http://d:2", "http://d:3"} {
					w, _ := f.reg.Snapshot().ByURL(u)
					if err := f.reg.SetHealth(w.ID(), worker.HealthNotReady); err != nil {
						t.Fatal(err)
					}
				}
				for i := range 20 {
					pw, _, err := pick(x, seats, fmt.Sprint("k", i))
					if err != nil || pw.URL() != "http://p:1" {
						t.Fatalf("got prefill %v, %v; want p:1, the one with a same-zone partner", pw, err)
					}
				}
				// And zone a's prefill leaves: only cross-zone pairs are left.
				w, _ := f.reg.Snapshot().ByURL("http://p:1")
				if err := f.reg.SetHealth(w.ID(), worker.HealthNotReady); err != nil {
					t.Fatal(err)
				}
				_, _, err := pick(x, seats, "k")
				wantRefusal(t, err, placement.ErrTopologyForbidden, CodeTopologyForbidden)
			})
		}
	}
}

func wantRefusal(t *testing.T, err, sentinel error, code string) {
	t.Helper()
	if !errors.Is(err, sentinel) || !errors.Is(err, placement.ErrUnavailable) {
		t.Fatalf("err = %v, want %v", err, sentinel)
	}
	if errors.Is(err, admission.ErrNoCapacity) || errors.Is(err, admission.ErrNoSeat) {
		t.Fatalf("err = %v: a refusal must not be a wait", err)
	}
	ae := apierror.From(err)
	if ae.Status != http.StatusServiceUnavailable || ae.Code != code {
		t.Fatalf("wire error %d %s, want 503 %s", ae.Status, ae.Code, code)
	}
}

// pairCounter records IncPDPair.
type pairCounter struct {
	nopMetrics
	mu    sync.Mutex
	pairs map[string]int
}

func (c *pairCounter) IncPDPair(distance, revision string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pairs[distance+"/"+revision]++
}

// TestPairRevisionsNeverMix: over a two-revision fleet every pair is of one revision, with every
// prefill policy, with and without seats; the metric counts pairs by revision; a model whose only
// pairs would mix revisions is refused with its own code.
func TestPairRevisionsNeverMix(t *testing.T) {
	for _, pol := range placement.PolicyNames() {
		for _, seats := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/seats=%v", pol, seats), func(t *testing.T) {
				f := newTopoFleet(t)
				f.add("http://p:1", worker.RolePrefill, place("", "", "v1"))
				f.add("http://p:2", worker.RolePrefill, place("", "", "v2"))
				f.add("http://d:1", worker.RoleDecode, place("", "", "v1"))
				f.add("http://d:2", worker.RoleDecode, place("", "", "v2"))
				f.add("http://d:3", worker.RoleDecode, place("", "", "v2"))
				m := &pairCounter{pairs: map[string]int{}}
				x := f.dispatcher(placement.DefaultPairing(), pol, m)
				for i := range 200 {
					pw, dw, err := pick(x, seats, fmt.Sprint("k", i))
					if err != nil {
						t.Fatal(err)
					}
					if pw.Place().Revision != dw.Place().Revision {
						t.Fatalf("request %d paired %s (%s) with %s (%s)", i, pw.URL(), pw.Place().Revision, dw.URL(), dw.Place().Revision)
					}
				}
				if m.pairs["unknown/v1"]+m.pairs["unknown/v2"] != 200 || len(m.pairs) > 2 {
					t.Fatalf("pairs counted %v, want 200 under unknown/v1 and unknown/v2", m.pairs)
				}
				// v1's decode and v2's prefill leave: a v1 prefill and v2 decodes cannot pair.
				for _, u := range []string{"http://d:1", "http://p:2"} {
					w, _ := f.reg.Snapshot().ByURL(u)
					if err := f.reg.SetHealth(w.ID(), worker.HealthNotReady); err != nil {
						t.Fatal(err)
					}
				}
				_, _, err := pick(x, seats, "k")
				wantRefusal(t, err, placement.ErrNoSameRevisionPair, CodeNoSameRevisionPair)
			})
		}
	}
}

// TestPairUnknownTopology: workers without topology pair freely unless unknown is forbidden.
func TestPairUnknownTopology(t *testing.T) {
	f := newTopoFleet(t)
	f.add("http://p:1", worker.RolePrefill, place("a", "", ""))
	f.add("http://d:1", worker.RoleDecode, nil)
	var p placement.Pairing
	if err := p.SetForbid("zone"); err != nil {
		t.Fatal(err)
	}
	if _, dw, err := pick(f.dispatcher(p, placement.PolicyRandom, nil), false, "k"); err != nil || dw.URL() != "http://d:1" {
		t.Fatalf("forbid zone with an unplaced decode: %v, %v; want d:1", dw, err)
	}
	if err := p.SetForbid("unknown"); err != nil {
		t.Fatal(err)
	}
	_, _, err := pick(f.dispatcher(p, placement.PolicyRandom, nil), false, "k")
	wantRefusal(t, err, placement.ErrTopologyForbidden, CodeTopologyForbidden)
}

// TestPairStrictTarget: a strict target names the candidates by index; pairing still refuses a pair
// across a forbidden level and accepts an allowed one, with and without seats.
func TestPairStrictTarget(t *testing.T) {
	for _, seats := range []bool{false, true} {
		f := newTopoFleet(t)
		f.add("http://p:1", worker.RolePrefill, place("a", "", ""))
		f.add("http://p:2", worker.RolePrefill, place("b", "", ""))
		f.add("http://d:1", worker.RoleDecode, place("a", "", ""))
		f.add("http://d:2", worker.RoleDecode, place("a", "", ""))
		var p placement.Pairing
		if err := p.SetForbid("zone"); err != nil {
			t.Fatal(err)
		}
		x := f.dispatcher(p, placement.PolicyRoundRobin, nil)
		preq := &placement.Request{Model: "m", TargetWorker: 0}
		var pw, dw *worker.Worker
		var err error
		if seats {
			pw, dw, err = x.selectPair(preq, allHandoffs, yes, yes)
		} else if pw, err = x.selectPrefill(preq, allHandoffs, yes); err == nil {
			dw, err = x.decodeOf(&pdAttempt{preq: preq, pw: pw}, pw.Handoff())
		}
		if err != nil || pw.URL() != "http://p:1" || dw.URL() != "http://d:1" {
			t.Fatalf("seats=%v target 0: %v, %v, %v; want p:1 with d:1", seats, pw, dw, err)
		}
		// Target 1 is p:2 (zone b) and d:2 (zone a): the pair would cross.
		preq.TargetWorker = 1
		if seats {
			_, _, err = x.selectPair(preq, allHandoffs, yes, yes)
		} else if pw, err = x.selectPrefill(preq, allHandoffs, yes); err == nil {
			_, err = x.decodeOf(&pdAttempt{preq: preq, pw: pw}, pw.Handoff())
		}
		wantRefusal(t, err, placement.ErrTopologyForbidden, CodeTopologyForbidden)
	}
}
