// Package testenv starts real gateways on loopback for the end-to-end suites: the same config
// parsing and app wiring as `sluice serve`, a free port, and a shutdown when the test ends.
package testenv

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/config"
)

// Gateway is a running in-process gateway.
type Gateway struct {
	*app.App
	// URL is the main listener's base URL (http://127.0.0.1:port).
	URL string

	killed atomic.Bool
}

// Kill stops the gateway at once, as close to a crash as a process can do to itself: listeners and client
// connections are closed without waiting (Shutdown with an expired context). Its shutdown error is then
// expected, and the test's cleanup does not report it.
func (g *Gateway) Kill() {
	g.killed.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = g.Shutdown(ctx)
}

// Logger discards, unless SLUICE_TEST_LOG is set: then it logs at debug level to stderr.
func Logger() *slog.Logger {
	if os.Getenv("SLUICE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// StartGateway parses args as `sluice serve` flags (after --host 127.0.0.1 --port 0) and starts the
// gateway; it is shut down when the test ends.
func StartGateway(t testing.TB, o app.Options, args ...string) *Gateway {
	t.Helper()
	all := append([]string{"--host", "127.0.0.1", "--port", "0", "--shutdown-grace-period-secs", "5"}, args...)
	cfg, err := config.Parse(all, io.Discard)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	if o.Logger == nil {
		o.Logger = Logger()
	}
	ctx := context.Background()
	a, err := app.New(ctx, cfg, o)
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	g := &Gateway{App: a, URL: "http://" + a.Addr()}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Shutdown(sctx); err != nil && !g.killed.Load() {
			t.Errorf("shutdown: %v", err)
		}
	})
	return g
}
