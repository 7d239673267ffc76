package e2e

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/internal/testkit/poll"
)

// newApp builds (does not start) a gateway from serve flags.
func newApp(t *testing.T, logger *slog.Logger, args ...string) *app.App {
	t.Helper()
	cfg, err := config.Parse(append([]string{"--host", "127.0.0.1", "--shutdown-grace-period-secs", "5"}, args...), io.Discard)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	a, err := app.New(context.Background(), cfg, app.Options{Logger: logger})
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	return a
}

// A port in use fails the start before any engine is asked anything.
func TestStartupBindsBeforeProbing(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	defer engine.Close()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := strconv.Itoa(busy.Addr().(*net.TCPAddr).Port)

	a := newApp(t, testLogger(t), "--port", port, "--worker-urls", engine.URL)
	err = a.Start(context.Background())
	if err == nil {
		_ = a.Shutdown(context.Background())
		t.Fatal("started on a port in use")
	}
	if !strings.Contains(err.Error(), "--port") || !strings.Contains(err.Error(), port) {
		t.Errorf("error %q does not name --port and the port", err)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the engine was asked %d times before the listener failed", n)
	}
}

// Flag workers get their ids in flag order even when the first engine answers last; a gateway with no
// worker says so in a warning.
func TestStartupWorkerIDsInFlagOrderAndNoWorkerWarning(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.ClusterConfig{Regular: 3, Mode: sim.ModeInstant})
	var gw atomic.Pointer[app.App]
	target, err := url.Parse(c.Engines[0].URL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var once sync.Once
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Hold the first engine's first answer until the others are registered (as the old,
		// completion-ordered registration did) or a bound passes (registration in flag order waits
		// for every engine first).
		once.Do(func() {
			poll.Wait(2*time.Second, func() bool { a := gw.Load(); return a != nil && a.Registry.Snapshot().Len() >= 2 })
		})
		proxy.ServeHTTP(w, r)
	}))
	defer slow.Close()

	a := newApp(t, testLogger(t), "--port", "0", "--worker-urls", slow.URL, c.Engines[1].URL(), c.Engines[2].URL())
	gw.Store(a)
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Shutdown(context.Background()) }()
	for i, u := range []string{slow.URL, c.Engines[1].URL(), c.Engines[2].URL()} {
		w, ok := a.Registry.Snapshot().ByURL(u)
		if !ok {
			t.Errorf("worker %d (%s) not registered", i+1, u)
		} else if want := "w" + strconv.Itoa(i+1); w.ID() != want {
			t.Errorf("worker %d (%s): id %q, want %s", i+1, u, w.ID(), want)
		}
	}

	var logs bytes.Buffer
	empty := newApp(t, slog.New(slog.NewTextHandler(&logs, nil)), "--port", "0")
	if err := empty.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = empty.Shutdown(context.Background())
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "no worker configured") {
		t.Errorf("no warning for a gateway without workers:\n%s", logs.String())
	}
}
