package placement

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/worker"
)

// fixedPolicy always picks index 0 and records what it was given.
type fixedPolicy struct{ got []*worker.Worker }

func (*fixedPolicy) Name() string { return "fixed" }
func (p *fixedPolicy) Pick(c []*worker.Worker, _ *Request) int {
	p.got = append(p.got[:0], c...)
	return 0
}

func TestSelectPrefill(t *testing.T) {
	now := time.Now()
	reg := worker.NewRegistry(worker.RegistryOptions{StartReady: true, Breaker: worker.BreakerConfig{FailureThreshold: 1}})
	add := func(url string, role worker.Role, models ...string) *worker.Worker {
		w, err := reg.Add(worker.Spec{URL: url, Role: role, Models: models})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	p0 := add("http://p0:1", worker.RolePrefill, "m")
	p1 := add("http://p1:1", worker.RolePrefill, "m")
	p2 := add("http://p2:1", worker.RolePrefill, "m")
	sick := add("http://s0:1", worker.RolePrefill, "sick")
	d0 := add("http://d0:1", worker.RoleDecode, "m")
	add("http://r0:1", worker.RoleRegular, "m")
	if err := reg.SetHealth(sick.ID(), worker.HealthNotReady); err != nil {
		t.Fatal(err)
	}
	p1.Breaker().RecordFailure() // open: not routable
	snap := reg.Snapshot()

	full := map[*worker.Worker]bool{}
	capOK := func(w *worker.Worker) bool { return !full[w] }

	tests := []struct {
		name     string
		req      Request
		full     []*worker.Worker
		noCap    bool
		want     *worker.Worker
		wantErr  error
		wantRsn  string
		wantCand []*worker.Worker
	}{
		{name: "unknown model", req: Request{Model: "nope", TargetWorker: -1}, wantErr: ErrModelNotFound, wantRsn: "model_not_found"},
		{name: "decode-only model", req: Request{Model: "x", TargetWorker: -1}, wantErr: ErrModelNotFound, wantRsn: "model_not_found"},
		{name: "none healthy", req: Request{Model: "sick", TargetWorker: -1}, wantErr: ErrNoHealthyWorkers, wantRsn: "no_healthy_workers"},
		{name: "filters unroutable", req: Request{Model: "m", TargetWorker: -1}, want: p0, wantCand: []*worker.Worker{p0, p2}},
		{name: "filters full", req: Request{Model: "m", TargetWorker: -1}, full: []*worker.Worker{p0}, want: p2, wantCand: []*worker.Worker{p2}},
		{name: "all full", req: Request{Model: "m", TargetWorker: -1}, full: []*worker.Worker{p0, p2}, wantErr: ErrAtCapacity, wantRsn: "at_capacity"},
		{name: "no admission ignores full", req: Request{Model: "m", TargetWorker: -1}, full: []*worker.Worker{p0, p2}, noCap: true, want: p0},
		{name: "target", req: Request{Model: "m", TargetWorker: 2}, want: p2},
		{name: "target out of range", req: Request{Model: "m", TargetWorker: 3}, wantErr: ErrInvalidTarget, wantRsn: "invalid_target"},
		{name: "target unhealthy", req: Request{Model: "m", TargetWorker: 1}, wantErr: ErrNoHealthyWorkers},
		{name: "target full waits for it", req: Request{Model: "m", TargetWorker: 0}, full: []*worker.Worker{p0}, wantErr: ErrAtCapacity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clear(full)
			for _, w := range tt.full {
				full[w] = true
			}
			hc := capOK
			if tt.noCap {
				hc = nil
			}
			pol := &fixedPolicy{}
			got, err := SelectPrefill(snap, &tt.req, pol, hc, now)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if tt.wantRsn != "" && Reason(err) != tt.wantRsn {
					t.Fatalf("Reason = %q, want %q", Reason(err), tt.wantRsn)
				}
				unavailable := errors.Is(tt.wantErr, ErrNoHealthyWorkers) || errors.Is(tt.wantErr, ErrAtCapacity)
				if errors.Is(err, ErrUnavailable) != unavailable {
					t.Fatalf("errors.Is(%v, ErrUnavailable) = %v, want %v", err, !unavailable, unavailable)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %v, %v; want %s", got, err, tt.want.URL())
			}
			if tt.wantCand != nil {
				if len(pol.got) != len(tt.wantCand) {
					t.Fatalf("policy saw %d candidates, want %d", len(pol.got), len(tt.wantCand))
				}
				for i := range pol.got {
					if pol.got[i] != tt.wantCand[i] {
						t.Fatalf("policy candidate %d = %s, want %s", i, pol.got[i].URL(), tt.wantCand[i].URL())
					}
				}
			}
		})
	}

	if got, err := SelectDecode(snap, &Request{Model: "m", TargetWorker: -1}, &fixedPolicy{}, now); err != nil || got != d0 {
		t.Fatalf("SelectDecode = %v, %v", got, err)
	}
	if _, err := SelectRegular(snap, &Request{Model: "sick", TargetWorker: -1}, &fixedPolicy{}, nil, now); !errors.Is(err, ErrModelNotFound) {
		t.Fatalf("SelectRegular(sick) = %v", err)
	}
	// Once the breaker's timeout passes, p1 is routable again (lazily).
	if got, err := SelectPrefill(snap, &Request{Model: "m", TargetWorker: 1}, &fixedPolicy{}, nil, now.Add(2*time.Minute)); err != nil || got != p1 {
		t.Fatalf("after breaker timeout: %v, %v", got, err)
	}
	if Reason(nil) != "" || Reason(errors.New("x")) != "other" {
		t.Fatal("Reason of nil/other")
	}
}

type badPolicy struct{}

func (badPolicy) Name() string                        { return "bad" }
func (badPolicy) Pick([]*worker.Worker, *Request) int { return 7 }

func TestSelectBadPolicy(t *testing.T) {
	reg, _ := newFleet(t, worker.RolePrefill, "m", 2)
	_, err := SelectPrefill(reg.Snapshot(), &Request{Model: "m", TargetWorker: -1}, badPolicy{}, nil, time.Now())
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
}

func TestSelectAllocations(t *testing.T) {
	reg, cands := newFleet(t, worker.RolePrefill, "m", 100)
	snap := reg.Snapshot()
	pol := mustNew(t, PolicyRoundRobin, DefaultConfig())
	req := &Request{Model: "m", TargetWorker: -1}
	now := time.Now()
	if n := testing.AllocsPerRun(200, func() {
		if _, err := SelectPrefill(snap, req, pol, func(*worker.Worker) bool { return true }, now); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("unfiltered SelectPrefill allocates %v times", n)
	}
	odd := func(w *worker.Worker) bool { return w != cands[0] }
	if n := testing.AllocsPerRun(200, func() {
		if _, err := SelectPrefill(snap, req, pol, odd, now); err != nil {
			t.Fatal(err)
		}
	}); n != 0 && !raceEnabled { // the race detector makes sync.Pool drop items
		t.Errorf("filtered SelectPrefill allocates %v times", n)
	}
}

// A PD pair must share a KV handoff: Handoffs keeps only candidates speaking one of them, and a
// request whose routable candidates all speak others fails as ErrNoCompatibleWorkers (not at capacity:
// waiting would not help).
func TestSelectHandoffs(t *testing.T) {
	now := time.Now()
	reg := worker.NewRegistry(worker.RegistryOptions{StartReady: true})
	add := func(url string, p worker.Protocol) *worker.Worker {
		w, err := reg.Add(worker.Spec{URL: url, Role: worker.RolePrefill, Protocol: p, Models: []string{"m"}})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	sg := add("http://a:1", worker.ProtocolSGLang)
	vl := add("http://b:1", worker.ProtocolVLLM)
	snap := reg.Snapshot()
	only := func(h worker.Handoff) worker.HandoffSet { return worker.HandoffSet(0).Add(h) }
	pol := &fixedPolicy{}

	w, err := SelectPrefill(snap, &Request{Model: "m", TargetWorker: -1, Handoffs: only(worker.HandoffNIXL)}, pol, nil, now)
	if err != nil || w != vl || len(pol.got) != 1 {
		t.Errorf("NIXL only: got %v, %v (candidates %d), want the vLLM worker alone", w, err, len(pol.got))
	}
	_, err = SelectPrefill(snap, &Request{Model: "m", TargetWorker: -1, Handoffs: only(worker.HandoffWorkerRPC)}, pol, nil, now)
	if !errors.Is(err, ErrNoCompatibleWorkers) || !errors.Is(err, ErrUnavailable) || Reason(err) != "no_compatible_workers" {
		t.Errorf("no worker-rpc worker: err = %v, want ErrNoCompatibleWorkers in class ErrUnavailable", err)
	}
	_, err = SelectPrefill(snap, &Request{Model: "m", TargetWorker: 1, Handoffs: only(worker.HandoffBootstrap)}, pol, nil, now)
	if !errors.Is(err, ErrNoCompatibleWorkers) {
		t.Errorf("strict target with another handoff: err = %v, want ErrNoCompatibleWorkers", err)
	}
	if got := RoutableHandoffs(snap, worker.RolePrefill, "m", now); !got.Has(worker.HandoffBootstrap) || !got.Has(worker.HandoffNIXL) || got.Has(worker.HandoffWorkerRPC) {
		t.Errorf("RoutableHandoffs = %b", got)
	}
	if err := reg.SetHealth(sg.ID(), worker.HealthNotReady); err != nil {
		t.Fatal(err)
	}
	if got := RoutableHandoffs(reg.Snapshot(), worker.RolePrefill, "m", now); got != only(worker.HandoffNIXL) {
		t.Errorf("RoutableHandoffs after the SGLang worker went unready = %b, want NIXL only", got)
	}
	if hs := reg.Snapshot().Handoffs(worker.RolePrefill); hs.Single() {
		t.Errorf("snapshot handoffs %b: two handoffs registered, whatever their health", hs)
	}
}

// A data-parallel engine's ranks are candidates: cache_aware keeps its prefix state per rank, so a
// repeated prompt returns to the same rank, and a strict target names the engine while the policy
// picks its rank. IgnoreRanks places on engines only.
func TestSelectRanks(t *testing.T) {
	now := time.Now()
	reg := worker.NewRegistry(worker.RegistryOptions{StartReady: true})
	e, err := reg.Add(worker.Spec{URL: "http://dp:1", Role: worker.RolePrefill, Protocol: worker.ProtocolSGLang, Models: []string{"m"}, DPSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	single, err := reg.Add(worker.Spec{URL: "http://one:1", Role: worker.RolePrefill, Protocol: worker.ProtocolSGLang, Models: []string{"m"}})
	if err != nil {
		t.Fatal(err)
	}
	snap := reg.Snapshot()
	pol, err := New(PolicyCacheAware, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	seen := map[*worker.Worker]bool{}
	for i := range 5 {
		w, err := SelectPrefill(snap, &Request{Model: "m", TargetWorker: -1, Text: "prompt number " + strconv.Itoa(i) + " with a long common tail of words"}, pol, nil, now)
		if err != nil {
			t.Fatal(err)
		}
		if w.Engine() != e && w != single {
			t.Fatalf("picked %s, not a rank of the DP engine nor the single one", w.Key())
		}
		seen[w] = true
	}
	if len(seen) < 3 {
		t.Errorf("new prompts spread over %d candidates, want ranks used as candidates", len(seen))
	}
	text := "a conversation that continues: turn one, turn two"
	first, _ := SelectPrefill(snap, &Request{Model: "m", TargetWorker: -1, Text: text}, pol, nil, now)
	for range 3 {
		again, _ := SelectPrefill(snap, &Request{Model: "m", TargetWorker: -1, Text: text + ", turn three"}, pol, nil, now)
		if again != first {
			t.Fatalf("a continuing conversation moved from %s to %s: the prefix cache is per rank", first.Key(), again.Key())
		}
	}
	w, err := SelectPrefill(snap, &Request{Model: "m", TargetWorker: 0, Text: "x"}, pol, nil, now)
	if err != nil || w.Engine() != e || w.Rank() < 0 {
		t.Errorf("target 0 = %v, %v; want a rank of the DP engine", w, err)
	}
	for range 10 {
		w, err := SelectPrefill(snap, &Request{Model: "m", TargetWorker: -1, Text: "y", IgnoreRanks: true}, pol, nil, now)
		if err != nil || w.Rank() != -1 {
			t.Fatalf("IgnoreRanks picked %v, %v; want an engine", w, err)
		}
	}
	var full *worker.Worker
	capOK := func(w *worker.Worker) bool { return w.Engine() != full }
	full = e
	for range 5 {
		w, err := SelectPrefill(snap, &Request{Model: "m", TargetWorker: -1, Text: "z"}, pol, capOK, now)
		if err != nil || w != single {
			t.Fatalf("with the DP engine at capacity picked %v, %v; want the other engine", w, err)
		}
	}
}

// A retry avoids the workers that failed the request while another candidate remains; when every
// candidate failed it, they are all candidates again.
func TestSelectAvoid(t *testing.T) {
	reg, cands := newFleet(t, worker.RolePrefill, "m", 3)
	snap := reg.Snapshot()
	pol := &fixedPolicy{}
	w, err := SelectPrefill(snap, &Request{Model: "m", TargetWorker: -1, Avoid: []string{cands[0].URL(), cands[1].URL()}}, pol, nil, time.Now())
	if err != nil || w != cands[2] || len(pol.got) != 1 {
		t.Errorf("two of three avoided: got %v, %v (%d candidates), want the third alone", w, err, len(pol.got))
	}
	all := []string{cands[0].URL(), cands[1].URL(), cands[2].URL()}
	if _, err := SelectPrefill(snap, &Request{Model: "m", TargetWorker: -1, Avoid: all}, pol, nil, time.Now()); err != nil || len(pol.got) != 3 {
		t.Errorf("all avoided: %v, %d candidates; want all three", err, len(pol.got))
	}
}
