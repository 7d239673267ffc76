package e2e

import (
	"context"
	"net/http"
	"testing"

	"github.com/sluicegw/sluice/tests/testenv"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/gen/sluice/admin/v1/adminv1connect"
	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// TestLoadsAndFlushReportEachWorker: loads and cache flush fan out to every worker, and a worker that
// cannot answer is reported as such instead of hiding behind the others.
func TestLoadsAndFlushReportEachWorker(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.ClusterConfig{Regular: 2, Engine: instantEngine()})
	gw := startGateway(t, app.Options{}, "--worker-urls", c.Engines[0].URL()+","+c.Engines[1].URL())
	ctx := context.Background()
	admin := adminv1connect.NewAdminServiceClient(http.DefaultClient, gw.URL)
	dead := "http://127.0.0.1:" + itoa(testenv.FreePort(t))
	if _, err := admin.AddWorker(ctx, &adminv1.AddWorkerRequest{Worker: &adminv1.WorkerSpec{Url: dead, Role: "regular", Protocol: "sglang", Models: []string{simModel}}}); err != nil {
		t.Fatal(err)
	}

	loads, err := admin.GetLoads(ctx, &adminv1.GetLoadsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(loads.GetLoads()) != 3 {
		t.Fatalf("loads for %d workers, want 3: %v", len(loads.GetLoads()), loads)
	}
	for _, l := range loads.GetLoads() {
		if (l.GetUrl() == dead) != (l.GetError() != "") {
			t.Errorf("load of %s: error %q (want an error exactly for the dead worker)", l.GetUrl(), l.GetError())
		}
	}

	flush, err := admin.FlushCache(ctx, &adminv1.FlushCacheRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range flush.GetResults() {
		if r.GetOk() == (r.GetUrl() == dead) {
			t.Errorf("flush of %s: ok=%v error %q", r.GetUrl(), r.GetOk(), r.GetError())
		}
	}
	if len(flush.GetResults()) != 3 {
		t.Fatalf("flush results %v", flush.GetResults())
	}
	for _, e := range c.Engines {
		if n := e.Stats().PerPath["/flush_cache"]; n != 1 {
			t.Errorf("engine %s saw %d flushes, want 1 (per path: %v)", e.URL(), n, e.Stats().PerPath)
		}
	}
}
