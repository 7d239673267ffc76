package bench

import (
	"testing"

	"go.uber.org/goleak"
)

// One exception, in the simulator's KV-event publisher (kv-events scenario), not ours: go-zeromq/zmq4
// v0.17.0's PUB socket starts a writer goroutine (pubMWriter.run) that its Close never stops; it stays
// parked on a sync.Cond, one per closed PUB socket (internal/kvevents ignores it alike).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"))
}
