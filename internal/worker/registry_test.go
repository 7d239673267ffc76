package worker

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

type eventLog struct {
	mu  sync.Mutex
	evs []string
}

func (l *eventLog) record(e Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := fmt.Sprintf("%s %s %s", e.Kind, e.Worker.ID(), e.Worker.URL())
	if e.Kind == EventHealthChanged {
		s += fmt.Sprintf(" %s->%s", e.Old, e.New)
	}
	if e.Prev != nil {
		s += " prev=" + e.Prev.URL()
	}
	l.evs = append(l.evs, s)
}

func (l *eventLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.evs
	l.evs = nil
	return out
}

func TestRegistryLifecycleAndEvents(t *testing.T) {
	t.Parallel()
	reg := NewRegistry(RegistryOptions{})
	var log eventLog
	unsub := reg.Subscribe(log.record)

	a := addWorker(t, reg, Spec{URL: "http://a:1/", Role: RolePrefill, BootstrapPort: 8998, Models: []string{"m"}})
	b := addWorker(t, reg, Spec{URL: "http://b:1", Role: RoleDecode})
	if a.ID() == b.ID() || a.ID() == "" {
		t.Fatalf("ids not distinct: %q %q", a.ID(), b.ID())
	}
	if a.URL() != "http://a:1" {
		t.Fatalf("URL not normalised: %q", a.URL())
	}
	if a.Health() != HealthPending {
		t.Fatalf("new worker health = %v, want pending", a.Health())
	}

	if _, err := reg.Add(Spec{URL: "http://a:1"}); !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("duplicate Add error = %v, want ErrAlreadyExists", err)
	}
	if _, err := reg.Add(Spec{URL: "bogus"}); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("invalid Add error = %v, want ErrInvalidSpec", err)
	}

	if err := reg.SetHealth(a.ID(), HealthReady); err != nil {
		t.Fatal(err)
	}
	if err := reg.SetHealth(a.ID(), HealthReady); err != nil { // no change, no event
		t.Fatal(err)
	}

	if err := reg.Update(a.ID(), func(s *Spec) {
		s.BootstrapPort = 9000
		s.Labels = map[string]string{"zone": "a"}
	}); err != nil {
		t.Fatal(err)
	}
	if got := a.Spec(); got.BootstrapPort != 9000 || got.Labels["zone"] != "a" {
		t.Fatalf("spec after Update = %+v", got)
	}
	if err := reg.Update(a.ID(), func(s *Spec) { s.URL = "http://z:1" }); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("Update of URL error = %v, want ErrInvalidSpec", err)
	}
	if err := reg.Update(b.ID(), func(s *Spec) { s.BootstrapPort = 1 }); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("bootstrap port on decode: error = %v, want ErrInvalidSpec", err)
	}

	a2, err := reg.Replace(a.ID(), Spec{URL: "http://a2:1", Role: RolePrefill, Models: []string{"m"}})
	if err != nil {
		t.Fatal(err)
	}
	if a2.ID() != a.ID() || a2 == a || !a.Removed() || a.Routable(timeNow()) {
		t.Fatalf("Replace: id %q vs %q, old removed=%v", a2.ID(), a.ID(), a.Removed())
	}
	if _, err := reg.Replace(a.ID(), Spec{URL: "http://b:1"}); !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("Replace onto another worker's URL: %v", err)
	}
	if _, err := reg.Replace("nope", Spec{URL: "http://c:1"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Replace unknown: %v", err)
	}

	if err := reg.Remove(b.ID()); err != nil {
		t.Fatal(err)
	}
	if err := reg.Remove(b.ID()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Remove error = %v, want ErrNotFound", err)
	}
	if _, ok := reg.Get(b.ID()); ok {
		t.Fatal("removed worker still found")
	}

	want := []string{
		"added w1 http://a:1",
		"added w2 http://b:1",
		"health_changed w1 http://a:1 pending->ready",
		"updated w1 http://a:1",
		"replaced w1 http://a2:1 prev=http://a:1",
		"removed w2 http://b:1",
	}
	if diff := cmp.Diff(want, log.take()); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}

	unsub()
	unsub() // idempotent
	addWorker(t, reg, Spec{URL: "http://c:1"})
	if got := log.take(); len(got) != 0 {
		t.Fatalf("events after unsubscribe: %v", got)
	}
}

func TestRegistryStartReady(t *testing.T) {
	t.Parallel()
	reg := NewRegistry(RegistryOptions{StartReady: true})
	w := addWorker(t, reg, Spec{URL: "http://a:1"})
	if !w.Routable(timeNow()) {
		t.Fatalf("StartReady worker not routable (health %v)", w.Health())
	}
}

func TestSnapshotImmutableAndCandidates(t *testing.T) {
	t.Parallel()
	reg := NewRegistry(RegistryOptions{})
	addWorker(t, reg, Spec{URL: "http://p2:1", Role: RolePrefill, Models: []string{"llama"}})
	addWorker(t, reg, Spec{URL: "http://p1:1", Role: RolePrefill, Models: []string{"llama", "qwen"}})
	addWorker(t, reg, Spec{URL: "http://p0:1", Role: RolePrefill}) // any model
	addWorker(t, reg, Spec{URL: "http://d1:1", Role: RoleDecode, Models: []string{"qwen"}})

	s1 := reg.Snapshot()
	urls := func(ws []*Worker) []string {
		var out []string
		for _, w := range ws {
			out = append(out, w.URL())
		}
		return out
	}
	tests := []struct {
		role  Role
		model string
		want  []string
	}{
		{RolePrefill, "llama", []string{"http://p0:1", "http://p1:1", "http://p2:1"}},
		{RolePrefill, "qwen", []string{"http://p0:1", "http://p1:1"}},
		{RolePrefill, "unknown", []string{"http://p0:1"}},
		{RolePrefill, "", []string{"http://p0:1", "http://p1:1", "http://p2:1"}},
		{RoleDecode, "qwen", []string{"http://d1:1"}},
		{RoleDecode, "llama", nil},
		{RoleRegular, "qwen", nil},
		{Role("bogus"), "qwen", nil},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, urls(s1.Candidates(tt.role, tt.model))); diff != "" {
			t.Errorf("Candidates(%s, %q) (-want +got):\n%s", tt.role, tt.model, diff)
		}
	}
	if diff := cmp.Diff([]string{"llama", "qwen"}, s1.Models()); diff != "" {
		t.Errorf("Models (-want +got):\n%s", diff)
	}
	if got := len(s1.ByRole(RolePrefill)); got != 4-1 {
		t.Errorf("ByRole(prefill) = %d workers, want 3", got)
	}

	// Changes publish a new snapshot; the old one does not move.
	before := urls(s1.All())
	v1 := s1.Version()
	addWorker(t, reg, Spec{URL: "http://p3:1", Role: RolePrefill, Models: []string{"llama"}})
	if err := reg.Remove(s1.All()[0].ID()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, urls(s1.All())); diff != "" {
		t.Fatalf("old snapshot changed (-before +after):\n%s", diff)
	}
	if got := len(s1.Candidates(RolePrefill, "llama")); got != 3 {
		t.Fatalf("old snapshot candidates = %d, want 3", got)
	}
	s2 := reg.Snapshot()
	if s2.Version() <= v1 || s2.Len() != 4 {
		t.Fatalf("new snapshot version %d (old %d), len %d", s2.Version(), v1, s2.Len())
	}
	if _, ok := s2.ByURL("http://p3:1"); !ok {
		t.Fatal("new worker missing from new snapshot")
	}
}

// Writers from many goroutines: every subscriber sees the same order, and
// the final snapshot agrees with the events.
func TestRegistryConcurrentWriters(t *testing.T) {
	t.Parallel()
	reg := NewRegistry(RegistryOptions{})
	var l1, l2 eventLog
	defer reg.Subscribe(l1.record)()
	defer reg.Subscribe(l2.record)()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 20 {
				w, err := reg.Add(Spec{URL: fmt.Sprintf("http://w%d-%d:1", i, j)})
				if err != nil {
					t.Error(err)
					return
				}
				_ = reg.SetHealth(w.ID(), HealthReady)
				_ = reg.Snapshot().Candidates(RoleRegular, "")
				if j%2 == 0 {
					_ = reg.Remove(w.ID())
				}
			}
		})
	}
	wg.Wait()
	e1, e2 := l1.take(), l2.take()
	if diff := cmp.Diff(e1, e2); diff != "" {
		t.Fatalf("subscribers saw different orders:\n%s", diff)
	}
	if len(e1) != 8*20*2+8*10 {
		t.Fatalf("got %d events, want %d", len(e1), 8*20*2+8*10)
	}
	if got := reg.Snapshot().Len(); got != 8*10 {
		t.Fatalf("snapshot has %d workers, want 80", got)
	}
}

func timeNow() time.Time { return time.Now() }
