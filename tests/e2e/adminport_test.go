package e2e

import (
	"net"
	"net/http"
	"strconv"
	"testing"

	"github.com/sluicegw/sluice/internal/app"
)

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestSeparateAdminPort: with --admin-port the admin surface lives only on its own listener.
func TestSeparateAdminPort(t *testing.T) {
	gw := startGateway(t, app.Options{}, "--pd-disaggregation", "--admin-port", strconv.Itoa(freePort(t)))
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
