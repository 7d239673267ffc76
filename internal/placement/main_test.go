package placement

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicegw/sluice/internal/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// seededRand returns a deterministic, concurrency-safe Config.Rand.
func seededRand(seed uint64) func() uint64 {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Uint64()
	}
}

// newFleet registers n Ready workers of role serving model (URLs sorted in
// index order) and returns the registry and the candidate list.
func newFleet(tb testing.TB, role worker.Role, model string, n int) (*worker.Registry, []*worker.Worker) {
	tb.Helper()
	reg := worker.NewRegistry(worker.RegistryOptions{StartReady: true})
	for i := range n {
		spec := worker.Spec{URL: fmt.Sprintf("http://w%04d:8000", i), Role: role, Models: []string{model}}
		if _, err := reg.Add(spec); err != nil {
			tb.Fatal(err)
		}
	}
	return reg, reg.Snapshot().Candidates(role, model)
}

// setLoad holds n load units on w until the test ends.
func setLoad(tb testing.TB, w *worker.Worker, n int) {
	tb.Helper()
	for range n {
		g := w.AcquireLoad()
		tb.Cleanup(g.Release)
	}
}

func mustNew(tb testing.TB, name string, cfg Config) Policy {
	tb.Helper()
	p, err := New(name, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}
