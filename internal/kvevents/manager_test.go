package kvevents_test

import (
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/kvevents"
	"github.com/sluicegw/sluice/internal/sim"
)

// TestManager subscribes to two simulated engines, then to one: the dropped worker leaves the index
// and its subscriber ends (goleak checks the rest at exit).
func TestManager(t *testing.T) {
	idx, err := kvevents.NewIndex(kvevents.IndexConfig{})
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := kvevents.NewManager(kvevents.ManagerConfig{Index: idx, RetryInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Close()
	a, b := startSim(t, sim.ProtocolVLLM), startSim(t, sim.ProtocolSGLang)
	ep := func(name string, e *sim.Engine) kvevents.Endpoint {
		x := e.KVEventsEndpoints()[0]
		return kvevents.Endpoint{Worker: name, Publisher: x.Publisher, Replay: x.Replay}
	}
	if err := mgr.Set([]kvevents.Endpoint{ep("a", a), ep("b", b), {Worker: "bad", Publisher: "tcp://*:1"}}); err == nil {
		t.Error("Set accepted a bind address")
	}
	if n := len(mgr.Endpoints()); n != 2 {
		t.Fatalf("%d endpoints subscribed, want 2", n)
	}
	// Until each subscriber is connected PUB drops: send distinct one-block prompts until seen.
	for _, w := range []struct {
		name string
		e    *sim.Engine
	}{{"a", a}, {"b", b}} {
		for i := uint32(0); ; i++ {
			p := []uint32{7000 + i, 1, 2, 3}
			complete(t, w.e, p)
			if within(200*time.Millisecond, func() bool { n, _ := idx.MatchedPrefix(w.name, 0, p); return n == 1 }) {
				break
			}
			if i > 100 {
				t.Fatalf("worker %s never indexed", w.name)
			}
		}
	}
	if err := mgr.Set([]kvevents.Endpoint{ep("b", b)}); err != nil {
		t.Fatal(err)
	}
	if idx.Tracks("a") || !idx.Tracks("b") {
		t.Errorf("after dropping a: tracks a %v, b %v", idx.Tracks("a"), idx.Tracks("b"))
	}
	mgr.Close()
	if err := mgr.Set([]kvevents.Endpoint{ep("a", a)}); err != nil || len(mgr.Endpoints()) != 0 {
		t.Error("Set after Close subscribed")
	}
}
