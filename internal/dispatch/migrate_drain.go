package dispatch

import (
	"context"
	"errors"

	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/backend/enginerpc"
)

// How a drain moves streams (docs/migration.md): when a decode or regular worker is drained or
// removed, MigrateFrom cuts every migratable stream read from its engine, and each continues on
// another pair as a broken stream does (reason "drain"), instead of holding the drained engine until
// its answers end. The engine-gRPC transport keeps its own streams (enginerpc.Transport.Interrupt);
// the HTTP-mode streams (migrate_http.go) are in the dispatcher's book: each stream's current attempt
// runs under a context of its own, whose cancellation with errDrained breaks the body's Read.

// errDrained is the cause of an HTTP-mode attempt cut by MigrateFrom.
var errDrained = errors.New("dispatch: the worker is being drained")

// MigrateFrom moves the migratable streams served by the worker at workerURL elsewhere and returns
// how many it cut. It never blocks: call it when the worker starts draining or is removed.
func (x *Dispatcher) MigrateFrom(workerURL string) int {
	engine := enginerpc.EngineKey(workerURL)
	n := 0
	for _, s := range x.live.Of(engine) {
		if s.interrupt() {
			n++
		}
	}
	if t := backend.EngineRPC(x.d.HTTP); t != nil {
		n += t.Interrupt(engine)
	}
	if n > 0 {
		x.d.Logger.Info("moving streams off a draining worker", "worker", workerURL, "streams", n)
	}
	return n
}

// Movable is how many streams served by the worker at workerURL a drain would move now (what
// MigrateFrom would return, without cutting anything): an operator's or a test's view of a drain
// before it starts.
func (x *Dispatcher) Movable(workerURL string) int {
	engine := enginerpc.EngineKey(workerURL)
	n := 0
	for _, s := range x.live.Of(engine) {
		if s.canMove() {
			n++
		}
	}
	if t := backend.EngineRPC(x.d.HTTP); t != nil {
		n += t.Live(engine)
	}
	return n
}

// interruptible is the context of an HTTP-mode stream's attempt: the request's, cut alone by a drain.
// Its cancel must be called when the attempt's answer is done with.
func interruptible(ctx context.Context) (context.Context, context.CancelCauseFunc) {
	return context.WithCancelCause(ctx)
}
