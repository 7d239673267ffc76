package placement

import (
	"fmt"
	"testing"

	"github.com/sluicegw/sluice/internal/worker"
)

func TestConsistentHashStability(t *testing.T) {
	reg, cands := newFleet(t, worker.RoleRegular, "m", 10)
	p := mustNew(t, PolicyConsistentHashing, DefaultConfig()).(*ConsistentHash)
	const keys = 10000
	assign := func(cands []*worker.Worker) map[string]string {
		out := make(map[string]string, keys)
		for k := range keys {
			key := fmt.Sprintf("session-%d", k)
			out[key] = cands[p.Pick(cands, &Request{RoutingKey: key, TargetWorker: -1})].URL()
		}
		return out
	}
	before := assign(cands)
	again := assign(cands)
	perWorker := map[string]int{}
	for k, u := range before {
		if again[k] != u {
			t.Fatalf("key %s moved without a membership change", k)
		}
		perWorker[u]++
	}
	for u, n := range perWorker {
		// 150 virtual nodes keep shares within a loose band around 10%.
		if n < keys/20 || n > keys/5 {
			t.Errorf("worker %s got %d/%d keys", u, n, keys)
		}
	}

	// Adding an 11th worker moves about 1/11 of the keys, all to it.
	nw, err := reg.Add(worker.Spec{URL: "http://w9999:8000", Models: []string{"m"}})
	if err != nil {
		t.Fatal(err)
	}
	after := assign(reg.Snapshot().Candidates(worker.RoleRegular, "m"))
	moved := 0
	for k, u := range after {
		if u != before[k] {
			moved++
			if u != nw.URL() {
				t.Fatalf("key %s moved from %s to %s, not to the new worker", k, before[k], u)
			}
		}
	}
	if moved < keys/22 || moved > 2*keys/11 {
		t.Fatalf("%d/%d keys moved, want about %d", moved, keys, keys/11)
	}

	// Removing it (Forget) moves exactly those keys back.
	if err := reg.Remove(nw.ID()); err != nil {
		t.Fatal(err)
	}
	p.Forget(nw.URL())
	back := assign(reg.Snapshot().Candidates(worker.RoleRegular, "m"))
	for k, u := range back {
		if u != before[k] {
			t.Fatalf("after removal key %s on %s, was %s", k, u, before[k])
		}
	}
}

func TestConsistentHashSubsetAndKeys(t *testing.T) {
	_, cands := newFleet(t, worker.RoleRegular, "m", 5)
	p := mustNew(t, PolicyConsistentHashing, DefaultConfig())
	// A worker missing from the candidates (unhealthy, at capacity) only
	// displaces its own keys.
	sub := append([]*worker.Worker{}, cands[:2]...)
	sub = append(sub, cands[3:]...)
	for k := range 2000 {
		req := &Request{RoutingKey: fmt.Sprint(k), TargetWorker: -1}
		full := cands[p.Pick(cands, req)]
		part := sub[p.Pick(sub, req)]
		if full != cands[2] && full != part {
			t.Fatalf("key %d moved from %s to %s though its worker is still a candidate", k, full.URL(), part.URL())
		}
	}

	tests := []struct {
		name string
		req  Request
		want string
	}{
		{"routing key wins", Request{RoutingKey: "rk", Text: "hello", Model: "m"}, "rk"},
		{"text prefix", Request{Text: "hello", Model: "m"}, "hello"},
		{"long text truncated", Request{Text: string(make([]byte, 5000))}, string(make([]byte, implicitKeyBytes))},
		{"model last", Request{Model: "m"}, "m"},
	}
	for _, tt := range tests {
		if got := Key(&tt.req); got != tt.want {
			t.Errorf("%s: Key = %.20q, want %.20q", tt.name, got, tt.want)
		}
	}
}
