package backend_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/backend"
)

type keyed string

func (k keyed) APIKey() string { return string(k) }

// TestFanout: every worker is called at once (each call waits for all the others to have started),
// with its own API key, the client given and a deadline of the timeout; results come in the
// workers' order.
func TestFanout(t *testing.T) {
	t.Parallel()
	ws := []keyed{"k0", "k1", "k2", "k3"}
	client := &http.Client{}
	var started sync.WaitGroup
	started.Add(len(ws))
	allStarted := make(chan struct{})
	go func() { started.Wait(); close(allStarted) }()

	before := time.Now()
	got := backend.Fanout(t.Context(), client, time.Minute, ws, func(ctx context.Context, w keyed, u *backend.Upstream) string {
		started.Done()
		select {
		case <-allStarted:
		case <-ctx.Done():
			return "not parallel"
		}
		dl, ok := ctx.Deadline()
		if !ok || dl.Before(before.Add(time.Minute)) || dl.After(time.Now().Add(time.Minute)) {
			return "no deadline of the timeout"
		}
		if u.Client != client || u.APIKey != w.APIKey() {
			return "wrong upstream"
		}
		return string(w)
	})
	for i, w := range ws {
		if got[i] != string(w) {
			t.Errorf("result %d = %q, want %q", i, got[i], w)
		}
	}
}
