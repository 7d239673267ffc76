package enginerpc

import (
	"errors"
	"sync"
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

// liveStreams are the generations migratable writers read, by engine (scheme://host:port).
type liveStreams struct {
	mu sync.Mutex
	m  map[string]map[*generation]struct{}
}

// add records g as read from engine; the returned func forgets it (once is enough, more is harmless).
func (l *liveStreams) add(engine string, g *generation) (remove func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]map[*generation]struct{}{}
	}
	set := l.m[engine]
	if set == nil {
		set = map[*generation]struct{}{}
		l.m[engine] = set
	}
	set[g] = struct{}{}
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.m[engine], g)
		if len(l.m[engine]) == 0 {
			delete(l.m, engine)
		}
	}
}

// Interrupt cuts the Generate RPC of every migratable stream read from engine (scheme://host:port, as
// EngineKey names a worker URL), so that each continues on another pair; it returns how many. It
// never blocks on the network: each writer sends its own Abort.
func (t *Transport) Interrupt(engine string) int {
	t.live.mu.Lock()
	gs := make([]*generation, 0, len(t.live.m[engine]))
	for g := range t.live.m[engine] {
		gs = append(gs, g)
	}
	t.live.mu.Unlock()
	for _, g := range gs {
		g.interrupt()
	}
	return len(gs)
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
	w.untrack = w.g.t.live.add(engine, g)
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
