package kvevents_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/kvevents"
	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/tests/testenv/eventsim"
)

// startGRPCSim starts an engine of 8 blocks that serves its engine gRPC (and HTTP, for the prompts)
// with KV events on.
func startGRPCSim(t *testing.T, proto sim.Protocol, events bool) (*sim.Engine, string) {
	t.Helper()
	e, err := sim.New(sim.Config{
		Protocol: proto, GRPC: true, BlockSize: eventsim.BlockSize, PrefixCacheTokens: 8 * eventsim.BlockSize,
		PrefillTokensPerSec: 1e7, ITLBase: time.Microsecond, ITLPerSeq: time.Nanosecond,
		KVEvents: sim.KVEventsConfig{Enabled: events},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e, strings.Replace(e.URL(), "http://", "grpc://", 1)
}

// TestSimulatorEventsOverEngineGRPC follows the simulator's events on its engine gRPC
// (SubscribeKvEvents, through the Manager as the gateway runs it) into the index: stores and LRU
// evictions as over ZeroMQ, and a batch lost for good (the servicer ends the stream with DATA_LOSS)
// clears the worker's index, which then follows a fresh stream.
func TestSimulatorEventsOverEngineGRPC(t *testing.T) {
	for _, proto := range []sim.Protocol{sim.ProtocolVLLM, sim.ProtocolSGLang} {
		t.Run(string(proto), func(t *testing.T) {
			e, url := startGRPCSim(t, proto, true)
			idx, err := kvevents.NewIndex(kvevents.IndexConfig{})
			if err != nil {
				t.Fatal(err)
			}
			m := newCountingMetrics()
			mgr, err := kvevents.NewManager(kvevents.ManagerConfig{Index: idx, Metrics: m, RetryInterval: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(mgr.Close)
			const w = "grpc://sim:1"
			if err := mgr.Set([]kvevents.Endpoint{{Worker: w, Publisher: url, Engine: string(proto)}}); err != nil {
				t.Fatal(err)
			}
			blocks := func(ids []uint32) int { b, _ := idx.MatchedPrefix(w, 0, ids); return b }
			// The stream is live only: one-block prompts until one is seen, after each (re)subscription.
			warmUp := func(base uint32) {
				t.Helper()
				for i := uint32(0); ; i++ {
					warm := []uint32{base + i, base + i, base + i, base + i}
					complete(t, e, warm)
					if within(200*time.Millisecond, func() bool { return blocks(warm) == 1 }) {
						return
					}
					if i > 100 {
						t.Fatal("subscriber never saw the simulator's events")
					}
				}
			}
			warmUp(5000)

			p1 := seqTokens(1, 16)
			p2 := append(seqTokens(1, 8), seqTokens(100, 107)...)
			p3 := seqTokens(200, 215)
			complete(t, e, p1)
			eventually(t, "p1 indexed", func() bool { return blocks(p1) == 4 })
			complete(t, e, p2)
			eventually(t, "p2 indexed", func() bool { return blocks(p2) == 4 })
			complete(t, e, p3)
			eventually(t, "p3 indexed", func() bool { return blocks(p3) == 4 })
			eventually(t, "evictions applied", func() bool { return blocks(p1) == 2 })
			if st := idx.Stats(w, 0); st.Blocks != 8 || st.BlockSize != 4 {
				t.Errorf("index holds %+v, want the cache's 8 blocks of 4", st)
			}

			// A batch lost for good: DATA_LOSS, the index is cleared, and a new stream follows.
			if err := e.DropKVEvents(0, 1, false); err != nil {
				t.Fatal(err)
			}
			completeOneBatch(t, e, seqTokens(500, 507))
			eventually(t, "index cleared", func() bool { return blocks(p3) == 0 })
			warmUp(6000)
			p7 := seqTokens(600, 607)
			complete(t, e, p7)
			eventually(t, "p7 indexed", func() bool { return blocks(p7) == 2 })
			if _, c, bad := m.snapshot(); c["gap"] != 1 || bad != 0 {
				t.Errorf("clears %v, malformed %d; want one clear for the lost batch", c, bad)
			}
		})
	}
}

// An engine started without KV events answers FAILED_PRECONDITION: the subscriber stops with
// ErrNoKVEvents instead of asking again and again.
func TestEngineGRPCWithoutEvents(t *testing.T) {
	_, url := startGRPCSim(t, sim.ProtocolSGLang, false)
	idx, err := kvevents.NewIndex(kvevents.IndexConfig{})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpcDial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	subscribe, err := kvevents.EngineSubscribe(conn, "sglang")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := kvevents.NewGRPCSubscriber(kvevents.GRPCSubscriberConfig{Worker: "w", Index: idx, Subscribe: subscribe})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sub.Run(ctx); !errors.Is(err, kvevents.ErrNoKVEvents) {
		t.Fatalf("Run: %v, want ErrNoKVEvents", err)
	}
}
