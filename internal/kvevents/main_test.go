package kvevents_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Subscribers and the ZeroMQ library's goroutines must all end with Run. One exception, in the
// simulator's publisher, not ours: go-zeromq/zmq4 v0.17.0's PUB socket starts a writer goroutine
// (pubMWriter.run) that its Close never stops (socket.Close does not call pubMWriter.Close); it stays
// parked on a sync.Cond, one per closed PUB socket.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"))
}
