// Package tsclient proves that clients in other languages can be generated from sluice's protos: it starts
// a real gateway in-process and runs admin.test.mjs, which calls sluice.admin.v1.AdminService through the
// TypeScript/JavaScript client that protoc-gen-es generated into gen/ts (buf.gen.ts.yaml), using
// @connectrpc/connect-node over Connect (HTTP/1.1) and gRPC (h2c).
//
// It needs node (20+) and `npm ci` in this folder. Without them the test skips, unless env CI is set:
// CI installs both, so there a missing toolchain is a failure, not a silent skip.
package tsclient

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/gen/sluice/admin/v1/adminv1connect"
	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/config"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// net/http's idle keep-alive connections close on their own timers.
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

const adminKey = "k"

// requireNode returns the node binary, skipping the test when node or the npm packages are missing
// (failing instead when env CI is set, because CI installs them).
func requireNode(t *testing.T) string {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") != "" {
			t.Fatalf(format+" (CI is set, so this is a failure)", args...)
		}
		t.Skipf(format+"; skipping (run `npm ci` in tests/tsclient; set CI to make this fatal)", args...)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node not found in PATH: %v", err)
	}
	if _, err := os.Stat(filepath.Join("node_modules", "@connectrpc", "connect-node", "package.json")); err != nil {
		missing("tests/tsclient/node_modules is not installed: %v", err)
	}
	// gen/ts is committed generated code, not an install step: its absence is always a failure.
	if _, err := os.Stat(filepath.Join("..", "..", "gen", "ts", "sluice", "admin", "v1", "admin_pb.js")); err != nil {
		t.Fatalf("generated TypeScript client missing (run buf generate --template buf.gen.ts.yaml): %v", err)
	}
	return node
}

// closedPortURL returns an http URL on loopback where nothing listens, so registered workers never
// answer and the test depends on no engine.
func closedPortURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return "http://" + addr
}

func bearer(key string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+key)
			return next(ctx, req)
		}
	}
}

func TestGeneratedTypeScriptClient(t *testing.T) {
	node := requireNode(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	cfg, err := config.Parse([]string{
		"--host", "127.0.0.1", "--port", "0",
		"--pd-disaggregation",
		"--admin-api-key", adminKey,
		"--prefill-max-inflight-requests-per-worker", "2",
		"--shutdown-grace-period-secs", "5",
	}, io.Discard)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	a, err := app.New(ctx, cfg, app.Options{})
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer scancel()
		if err := a.Shutdown(sctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}()
	baseURL := "http://" + a.Addr()

	hc := &http.Client{Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	admin := adminv1connect.NewAdminServiceClient(hc, baseURL, connect.WithInterceptors(bearer(adminKey)))

	var want []string
	for _, role := range []string{"prefill", "decode"} {
		url := closedPortURL(t)
		if _, err := admin.AddWorker(ctx, &adminv1.AddWorkerRequest{Worker: &adminv1.WorkerSpec{
			Url: url, Role: role, Models: []string{"m"}, Protocol: "sglang",
		}}); err != nil {
			t.Fatalf("AddWorker %s %s: %v", role, url, err)
		}
		want = append(want, url)
	}
	slices.Sort(want)

	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "admin.test.mjs")
	cmd.Env = append(os.Environ(),
		"SLUICE_URL="+baseURL,
		"SLUICE_ADMIN_API_KEY="+adminKey,
		"SLUICE_EXPECT_WORKERS="+strings.Join(want, ","),
		"SLUICE_EXPECT_LIMIT=2",
		"NO_COLOR=1",
	)
	// node --test runs the file in a child process; if the deadline kills node, do not wait forever for
	// that child to close the output pipe.
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatalf("node test timed out: %v\n%s", err, out)
		}
		t.Fatalf("node --test admin.test.mjs failed: %v\n%s", err, out)
	}
	t.Logf("node --test admin.test.mjs passed in %s:\n%s", time.Since(start).Round(time.Millisecond), out)

	// The JS client's UpdateAdmission really changed the gateway: read back over Go, and in the controller.
	res, err := admin.GetAdmission(ctx, &adminv1.GetAdmissionRequest{})
	if err != nil {
		t.Fatalf("GetAdmission: %v", err)
	}
	if got := res.GetStatus().GetSettings().GetMaxInflightPerWorker(); got != 7 {
		t.Errorf("max_inflight_per_worker after the JS client = %d, want 7", got)
	}
	if got := res.GetStatus().GetSettings().GetQueueTimeout().AsDuration(); got != 2500*time.Millisecond {
		t.Errorf("queue_timeout after the JS client = %s, want 2.5s", got)
	}
	if got := a.Admission.Settings().MaxInflightPerWorker; got != 7 {
		t.Errorf("admission controller limit = %d, want 7", got)
	}
	// The JS client only read the worker list: both workers are still registered.
	lw, err := admin.ListWorkers(ctx, &adminv1.ListWorkersRequest{})
	if err != nil {
		t.Fatalf("ListWorkers: %v", err)
	}
	var got []string
	for _, w := range lw.GetWorkers() {
		got = append(got, w.GetUrl())
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("workers after the JS client = %v, want %v", got, want)
	}
}
