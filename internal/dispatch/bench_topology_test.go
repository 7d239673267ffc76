package dispatch

import (
	"fmt"
	"testing"

	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/worker"
)

// BenchmarkPairPlacement forms one PD pair per iteration — the prefill policy's pick and its decode
// partner — over 8 prefill and 16 decode workers, without topology (the checks skipped) and with
// every worker placed in one of two zones and two revisions (compatibility and penalty checks on
// every candidate), with decode seats off and on. The ratio topology/plain is pairing's cost.
func BenchmarkPairPlacement(b *testing.B) {
	for _, seats := range []bool{false, true} {
		for _, placed := range []bool{false, true} {
			b.Run(fmt.Sprintf("seats=%v/topology=%v", seats, placed), func(b *testing.B) {
				f := &topoFleet{reg: worker.NewRegistry(worker.RegistryOptions{StartReady: true})}
				add := func(url string, role worker.Role, i int) {
					var labels map[string]string
					if placed {
						labels = place(fmt.Sprint("z", i%2), fmt.Sprint("n", i%4), fmt.Sprint("v", i/2%2))
					}
					spec := worker.Spec{URL: url, Role: role, Protocol: worker.ProtocolSGLang, Models: []string{"m"}, Labels: labels}
					if role == worker.RolePrefill {
						spec.BootstrapPort = 9000
					}
					if _, err := f.reg.Add(spec); err != nil {
						b.Fatal(err)
					}
				}
				for i := range 8 {
					add(fmt.Sprintf("http://p%d:1", i), worker.RolePrefill, i)
				}
				for i := range 16 {
					add(fmt.Sprintf("http://d%d:1", i), worker.RoleDecode, i)
				}
				cfg := placement.DefaultConfig()
				pols, err := placement.NewSet(cfg)
				if err != nil {
					b.Fatal(err)
				}
				x := &Dispatcher{cfg: Config{PD: true, Pairing: placement.DefaultPairing()}, d: Deps{Registry: f.reg, Policies: pols, Metrics: nopMetrics{}}}
				b.ReportAllocs()
				for b.Loop() {
					if _, _, err := pick(x, seats, "a prompt of a few words"); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
