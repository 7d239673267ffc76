// Package e2e holds end-to-end suites: the gateway and simulated engines run on loopback, in-process,
// with real listeners, and real clients (openai-go, Connect, grpc-go, plain HTTP) talk to them.
package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/internal/testkit/poll"
	"github.com/sluicegw/sluice/tests/testenv"
)

// TestMain fails the suite if any goroutine outlives the tests. The clients' idle keep-alive connections
// (http.DefaultTransport, used by the OpenAI SDK and the plain HTTP calls) are closed first: they are the
// test's, not the gateway's. Every gateway and simulator was shut down by its test's cleanup.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		http.DefaultClient.CloseIdleConnections()
		// go-zeromq/zmq4 v0.17.0's PUB socket (the simulators' KV event publishers) starts a writer
		// goroutine that its Close never stops (internal/kvevents/main_test.go says more).
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak: goroutines outlived the tests:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func testLogger(*testing.T) *slog.Logger { return testenv.Logger() }

// gateway is a running in-process gateway.
type gateway = testenv.Gateway

// startGateway parses args as `sluice serve` flags (with --host 127.0.0.1 --port 0 prepended) and starts
// the gateway; it is shut down when the test ends.
func startGateway(t *testing.T, o app.Options, args ...string) *gateway {
	t.Helper()
	return testenv.StartGateway(t, o, args...)
}

// startCluster starts simulated engines, closed when the test ends.
func startCluster(t *testing.T, cc sim.ClusterConfig) *sim.Cluster {
	t.Helper()
	cc.Logger = testLogger(t)
	c, err := sim.StartCluster(context.Background(), cc)
	if err != nil {
		t.Fatalf("sim cluster: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// pdArgs returns the serve flags registering a cluster's engines as PD workers.
func pdArgs(c *sim.Cluster) []string {
	var args []string
	for _, e := range c.ByRole(sim.RolePrefill) {
		args = append(args, "--prefill", e.URL())
		if p := e.BootstrapPort(); p > 0 {
			args = append(args, strconv.Itoa(p))
		}
	}
	for _, e := range c.ByRole(sim.RoleDecode) {
		args = append(args, "--decode", e.URL())
	}
	return args
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	poll.Until(t, what, timeout, cond)
}

func get(t *testing.T, url string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}
