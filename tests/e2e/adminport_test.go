package e2e

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/sluicegw/sluice/tests/testenv"

	"github.com/sluicegw/sluice/internal/app"
)

// TestSeparateAdminPort: with --admin-port the admin surface lives only on its own listener.
func TestSeparateAdminPort(t *testing.T) {
	t.Parallel()
	gw := startGateway(t, app.Options{}, "--pd-disaggregation", "--admin-port", strconv.Itoa(testenv.FreePort(t)))
	if gw.AdminAddr() == gw.Addr() {
		t.Fatalf("admin shares the main address %s", gw.Addr())
	}
	resp, body := get(t, "http://"+gw.AdminAddr()+"/admin/v1/workers")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("admin port: %d %s", resp.StatusCode, body)
	}
	resp, _ = get(t, gw.URL+"/admin/v1/workers")
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("main port still serves the admin API: %d", resp.StatusCode)
	}
	resp, _ = get(t, gw.URL+"/health")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("main port health: %d", resp.StatusCode)
	}
}
