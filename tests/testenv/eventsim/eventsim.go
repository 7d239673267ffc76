// Package eventsim starts simulated engines that publish their KV-cache events, for the tests of the
// event subscriber (internal/kvevents) and of kv_aware routing end to end (tests/e2e): a fast engine
// with small blocks, events on, and a restart on the same ports (a new process with an empty cache).
package eventsim

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/sim"
)

// BlockSize is the engines' KV block size in tokens: a prompt of 4n tokens fills n blocks.
const BlockSize = 4

// Config says which engine to start; the zero value is a vLLM engine on free ports.
type Config struct {
	Protocol sim.Protocol // default vLLM
	// Port is the HTTP port, PubPort and ReplayPort the event ports (rank 0); 0 picks free ones.
	Port, PubPort, ReplayPort int
	// CacheBlocks bounds the prefix cache, in blocks (small caches make evictions); 0: the simulator's
	// default.
	CacheBlocks int
	Logger      *slog.Logger // default: discard
}

// Start starts an engine publishing its KV-cache events; it is closed when the test ends.
func Start(t testing.TB, c Config) *sim.Engine {
	t.Helper()
	if c.Protocol == "" {
		c.Protocol = sim.ProtocolVLLM
	}
	e, err := sim.New(sim.Config{
		Protocol: c.Protocol, Port: c.Port, BlockSize: BlockSize, PrefixCacheTokens: int64(c.CacheBlocks * BlockSize),
		PrefillTokensPerSec: 1e7, ITLBase: time.Microsecond, ITLPerSeq: time.Nanosecond,
		KVEvents: sim.KVEventsConfig{Enabled: true, Port: c.PubPort, ReplayPort: c.ReplayPort},
	}, c.Logger)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// Restart closes e and starts, as c says, a new engine on e's HTTP and event ports: what an engine
// restart looks like to the gateway (the same addresses, an empty cache, sequence numbers from 0).
func Restart(t testing.TB, e *sim.Engine, c Config) *sim.Engine {
	t.Helper()
	ep := e.KVEventsEndpoints()[0]
	c.Port, c.PubPort, c.ReplayPort = e.Port(), PortOf(t, ep.Publisher), PortOf(t, ep.Replay)
	if err := e.Close(); err != nil {
		t.Fatalf("closing the engine to restart: %v", err)
	}
	return Start(t, c)
}

// PortOf is the port of a tcp://host:port endpoint.
func PortOf(t testing.TB, endpoint string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(strings.TrimPrefix(endpoint, "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
