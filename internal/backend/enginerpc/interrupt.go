package enginerpc

import (
	"errors"
)

// Draining an engine moves its streams (docs/migration.md): dispatch calls Interrupt when a decode or
// regular worker is drained or removed, and every migratable stream a writer is reading from that
// engine has its Generate RPC cut alone (not the request: the writer's context lives on). The writer
// then sees the stream break off for reason "drain", sends the engine its Abort (the engine is alive
// and would go on generating for nobody) and continues the generation on another pair.

// ReasonDrain is a stream moved off an engine being drained or removed.
const ReasonDrain = "drain"

// errDrained is the cause of a Generate RPC cut by Interrupt.
var errDrained = errors.New("enginerpc: the engine is being drained")

// Interrupt cuts the Generate RPC of every migratable stream read from engine (scheme://host:port, as
// EngineKey names a worker URL), so that each continues on another pair; it returns how many. It
// never blocks on the network: each writer sends its own Abort.
func (t *Transport) Interrupt(engine string) int {
	gs := t.live.Of(engine)
	for _, g := range gs {
		g.interrupt()
	}
	return len(gs)
}

// Live is how many migratable streams are read from engine now: what Interrupt would cut.
func (t *Transport) Live(engine string) int {
	return t.live.Len(engine)
}

// interrupt cuts the generation's RPC for a drain.
func (g *generation) interrupt() {
	g.drained.Store(true)
	g.rpcCancel(errDrained)
}

// track records the stream the writer reads now (the first or a continuation's) in the transport's
// live streams, when it can migrate; the previous one is forgotten.
func (w *sseWriter) track() {
	if w.untrack != nil {
		w.untrack()
		w.untrack = nil
	}
	if mig, _ := w.g.ctx.Value(migratorKey{}).(Migrator); mig == nil || !w.migratable() {
		return
	}
	g, engine := w.current()
	w.untrack = w.g.t.live.Add(engine, g)
}

// current is the generation the writer reads now and its engine.
func (w *sseWriter) current() (*generation, string) {
	if w.mig.cur != nil {
		return w.mig.cur.g, w.mig.cur.engine
	}
	return w.g, w.engine
}

// brokeOff is why the stream the writer reads ended with err: errDrained when Interrupt cut it.
func (w *sseWriter) brokeOff(err error) error {
	if g, _ := w.current(); g.drained.Load() {
		return errDrained
	}
	return err
}
