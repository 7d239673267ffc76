package dispatch

import (
	"context"
	"errors"
	"io"
	"math"
	"slices"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/backend/enginerpc"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/worker"
)

// How a stream whose decode engine broke off goes on (mid-stream migration, docs/migration.md). In
// engine-gRPC mode the transport holds every token id, so a streamed PD request (n = 1) gets a
// migrator in its context (withMigration). When the decode's Generate stream fails after the client
// got the head of the answer, the transport's stream writer calls it with the prompt + generated ids;
// the migrator runs a new PD attempt (resumeAttempt): admission marks it Resumed (it already waited
// once: it takes a free slot ahead of the waiters, else waits in the top band), placement excludes
// the decode engines that failed it, and the chosen pair's adapter sends the legs with the Resume in
// their context, so the transport prefills the whole prefix and hands the decode's stream to the
// writer instead of rendering it. The continuation's Response is the writer's to close: its guards
// (prefill slot, decode seat, load guards) are released as any attempt's are, when the writer moves on
// to another continuation or the client's stream ends. The guards an attempt holds on its decode
// worker (seat, load) are also in the request's decodeGuards: a migration gives the failed worker's
// back as it leaves it, not when the client's stream ends (each is a once-only release, so the
// Response's close that comes later releases nothing twice).
//
// Migrations are bounded per request by Config.MaxMigrations (--max-migrations; a continuation that
// could not start counts too), counted in sluice_migrations_total{reason,outcome} and in the tokens
// prefilled again, and noted as a sluice.migration event on the request's span.

// Migration outcomes (sluice_migrations_total's outcome label).
const (
	OutcomeMigrated  = "migrated"  // the stream goes on on another pair
	OutcomeFailed    = "failed"    // the continuation could not start (no pair, an error before its first token)
	OutcomeExhausted = "exhausted" // no migration left: the stream ends with its error frame
)

// MigrationMetrics are the instruments of migration; the dispatcher's Metrics implement them when
// they can (telemetry's do).
type MigrationMetrics interface {
	IncMigration(reason, outcome string)
	AddMigrationPrefill(tokens int)
}

// migrator is one request's migrations; the stream's writer goroutine calls it, one call at a time.
type migrator struct {
	x      *Dispatcher
	q      *prepared
	span   trace.Span // the request's
	guards *decodeGuards
	done   int
	// failed are the engines (scheme://host:port) whose streams broke off: a continuation avoids them
	// while another candidate remains (an engine restarted on its port serves again), and never goes
	// to the one that broke the stream last (until its probe fails it looks the least loaded).
	failed []string
	http   *httpPlan // the state of a stream that can migrate in HTTP mode, nil when it cannot
}

// withMigration gives a request that can migrate its migrator: a streamed request of one sample,
// with migrations on. The engine transport asks it (engine-gRPC workers, PD or regular); in HTTP
// mode the response's reader does (migrate_http.go).
func (x *Dispatcher) withMigration(ctx context.Context, q *prepared) context.Context {
	if x.cfg.MaxMigrations <= 0 || !canMigrate(q.br) {
		return ctx
	}
	m := &migrator{x: x, q: q, span: trace.SpanFromContext(ctx), guards: &decodeGuards{}}
	m.http, q.br = x.prepareHTTPMigration(q.br)
	ctx = context.WithValue(ctx, decodeGuardsKey{}, m.guards)
	ctx = context.WithValue(ctx, migratorCtxKey{}, m)
	if backend.EngineRPC(x.d.HTTP) != nil {
		ctx = enginerpc.WithMigrator(ctx, m.migrate)
	}
	return ctx
}

type migratorCtxKey struct{}

// servesVLLMOverHTTP says whether a vLLM engine over HTTP is registered: only they give a chat's token
// ids, so only then does a chat ask for them. The answer is kept per registry version (version 0 is
// never cached: a snapshot's version counts from 1).
func (x *Dispatcher) servesVLLMOverHTTP() bool {
	snap := x.d.Registry.Snapshot()
	v := snap.Version()
	if c := x.vllmHTTP.Load(); c>>1 == v && v != 0 {
		return c&1 == 1
	}
	yes := false
	for _, w := range snap.All() {
		if w.Protocol() == worker.ProtocolVLLM && strings.HasPrefix(w.URL(), "http") {
			yes = true
			break
		}
	}
	c := v << 1
	if yes {
		c |= 1
	}
	x.vllmHTTP.Store(c)
	return yes
}

// migratorOf is the request's migrator, nil when it may not migrate.
func migratorOf(ctx context.Context) *migrator {
	m, _ := ctx.Value(migratorCtxKey{}).(*migrator)
	return m
}

// decodeGuards are the releases of the guards a migrating request's attempts hold on their decode
// workers; the migrator runs them when the stream leaves its decode worker.
type decodeGuards struct {
	mu   sync.Mutex
	held []func()
}

type decodeGuardsKey struct{}

// holdDecode makes release once-only and, when the request can migrate, lets a migration run it
// first. Register a guard only once the attempt holds it for its answer: a failed attempt releases
// its own. An answer that is not a stream cannot migrate (canMigrate): its release is returned as it
// is, for a caller that runs it once, and the context is not searched for guards it cannot hold.
func holdDecode(ctx context.Context, stream bool, release func()) func() {
	if !stream {
		return release
	}
	once := sync.OnceFunc(release)
	if g, ok := ctx.Value(decodeGuardsKey{}).(*decodeGuards); ok {
		g.mu.Lock()
		g.held = append(g.held, once)
		g.mu.Unlock()
	}
	return once
}

// releaseAll gives back every decode guard held so far: the stream has left their worker.
func (g *decodeGuards) releaseAll() {
	g.mu.Lock()
	held := g.held
	g.held = nil
	g.mu.Unlock()
	for _, release := range held {
		release()
	}
}

// canMigrate reports a request whose stream a continuation can carry on (the transport checks the
// rest: guided decoding, logprobs).
func canMigrate(br *body.Request) bool {
	switch br.Route {
	case body.RouteChat, body.RouteCompletions, body.RouteGenerate:
	default:
		return false
	}
	return br.Stream && br.N <= 1 && br.BatchSize <= 1 && !br.ReturnLogprob
}

func (m *migrator) metrics() MigrationMetrics {
	if mm, ok := m.x.d.Metrics.(MigrationMetrics); ok {
		return mm
	}
	return nopMigrationMetrics{}
}

type nopMigrationMetrics struct{}

func (nopMigrationMetrics) IncMigration(string, string) {}
func (nopMigrationMetrics) AddMigrationPrefill(int)     {}

// migrate is the engine transport's Migrator: one continuation whose legs carry r; it returns the
// continuation's response body.
func (m *migrator) migrate(ctx context.Context, r *enginerpc.Resume) (io.Closer, error) {
	resp, err := m.continueOn(ctx, r, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// continueOn runs one continuation of r: enginerpc.ErrNoMigration when the bound is reached, the
// attempt's error when it failed, else the continuation's response. br is the continuation's own
// body in HTTP mode (nil: the engine transport builds the legs from r).
func (m *migrator) continueOn(ctx context.Context, r *enginerpc.Resume, br *body.Request) (*Response, error) {
	x := m.x
	m.guards.releaseAll() // the failed decode's seat and load, whether or not the stream goes on
	if m.done >= x.cfg.MaxMigrations {
		m.note(r, OutcomeExhausted, nil)
		return nil, enginerpc.ErrNoMigration
	}
	m.done++
	if !slices.Contains(m.failed, r.Failed) {
		m.failed = append(m.failed, r.Failed)
	}
	resp, err := m.start(ctx, r, br)
	if err != nil {
		m.note(r, OutcomeFailed, err)
		x.d.Logger.Debug("migration failed", "request_id", m.q.RequestID, "from", r.Failed, "err", err)
		return nil, err
	}
	m.note(r, OutcomeMigrated, nil)
	m.metrics().AddMigrationPrefill(len(r.IDs))
	x.d.Logger.Debug("stream migrated", "request_id", m.q.RequestID, "from", r.Failed, "to", resp.Worker,
		"reason", r.Reason, "generated", r.Produced)
	return resp, nil
}

// start runs the continuation's attempt, retried as any request's attempt is (--retry-max-retries,
// with backoff) while it fails before its first token: the stream has not moved yet, and in a rolling
// restart the pair it was given may be the next engine going down.
func (m *migrator) start(ctx context.Context, r *enginerpc.Resume, br *body.Request) (*Response, error) {
	x := m.x
	for attempt := 0; ; attempt++ {
		r.Retry()
		resp, err := x.resumeAttempt(ctx, m.q, r, m.failed, br)
		if err == nil && br == nil && !r.Continued() {
			resp.Body.Close()
			return nil, errNotContinued
		}
		if err == nil || ctx.Err() != nil || attempt+1 >= x.cfg.Retry.MaxAttempts || !isRetryable(err) {
			return resp, err
		}
		if err := x.backoff(ctx, m.q, attempt, err); err != nil {
			return nil, err
		}
	}
}

// errNotContinued: the continuation's decode was not served by the engine transport.
var errNotContinued = errors.New("dispatch: the continuation's decode worker does not speak an engine's gRPC")

func (m *migrator) note(r *enginerpc.Resume, outcome string, err error) {
	m.metrics().IncMigration(r.Reason, outcome)
	if !m.span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{attribute.String("sluice.migration.reason", r.Reason),
		attribute.String("sluice.migration.outcome", outcome), attribute.String("sluice.migration.from", r.Failed),
		attribute.Int("sluice.migration.generated_tokens", r.Produced), attribute.Int("sluice.migration.count", m.done)}
	if err != nil {
		attrs = append(attrs, attribute.String("error.type", errorType(err)))
	}
	m.span.AddEvent("sluice.migration", trace.WithAttributes(attrs...))
}

// notFailedKey reports a worker key that names none of the failed engines (nor one of their ranks).
func notFailedKey(failed []string) func(key string) bool {
	return func(key string) bool {
		return !slices.ContainsFunc(failed, func(f string) bool { return key == f || strings.HasPrefix(key, f+"@") })
	}
}

// resumeRegular runs a continuation on a regular worker other than the one that failed it: its one
// Generate carries the whole prefix (regular workers have no prefill slots to take).
func (x *Dispatcher) resumeRegular(ctx context.Context, q *prepared, r *enginerpc.Resume, failed []string, br *body.Request) (*Response, error) {
	preq := *q.preq
	preq.TargetWorker = -1 // a pin named the worker that failed
	preq.TokenIDs = r.IDs
	preq.Avoid = append(slices.Clip(preq.Avoid), failed...)
	ok := notFailedKey([]string{r.Failed})
	return x.regularOn(enginerpc.WithResume(ctx, r, ""), &q.Request, br, &preq, func(w *worker.Worker) bool { return ok(w.Key()) })
}

// resumeAttempt runs a continuation's PD attempt: admitted as Resumed at the top priority, on a pair
// whose decode is not the engine that failed it (and none of the earlier failed ones while another
// remains), with r in the legs' context; own is the
// continuation's (HTTP mode), nil for the request's own. In regular mode it is resumeRegular.
func (x *Dispatcher) resumeAttempt(ctx context.Context, q *prepared, r *enginerpc.Resume, failed []string, own *body.Request) (*Response, error) {
	br := own
	if br == nil {
		var err error
		if br, err = q.withJSON(q.br); err != nil {
			return nil, err
		}
	}
	if !x.cfg.PD {
		return x.resumeRegular(ctx, q, r, failed, br)
	}
	snap := x.d.Registry.Snapshot()
	allowed := snap.Handoffs(worker.RolePrefill) & snap.Handoffs(worker.RoleDecode) & routeHandoffs(br.Route) &^
		worker.HandoffSet(0).Add(worker.HandoffWorkerRPC)
	preq := *q.preq
	preq.TargetWorker = -1 // a pin named the pair that failed
	preq.TokenIDs = r.IDs  // kv_aware matches the whole prefix
	preq.Avoid = append(slices.Clip(preq.Avoid), failed...)
	ar := x.admissionRequest(&q.Request, br, &preq)
	if len(r.IDs) > 0 { // else a restart whose prompt's ids are unknown: the request's estimate stands
		ar.Tokens = int64(len(r.IDs))
	}
	ar.Priority, ar.Resumed = math.MaxInt32, true
	notFailed := notFailedKey([]string{r.Failed})
	// No decode engine but the one that failed: fail now rather than wait in the queue for a seat
	// that only it could give.
	only := preq
	only.Handoffs = allowed
	if _, err := placement.Select(snap, worker.RoleDecode, &only, firstPolicy{},
		func(w *worker.Worker) bool { return notFailed(w.Key()) }, x.now()); err != nil {
		return nil, err
	}
	slot, pw, dw, err := x.admitResumed(ctx, &preq, allowed, ar, notFailed)
	if err != nil {
		return nil, err
	}
	ctx = enginerpc.WithResume(ctx, r, pw.URL())
	return holdSeat(ctx, slot.Seat(), func() (*Response, error) {
		if dw == nil {
			p := preq
			p.Handoffs = worker.HandoffSet(0).Add(pw.Handoff())
			if dw, err = placement.Select(x.d.Registry.Snapshot(), worker.RoleDecode, &p, x.d.Policies.Decode,
				func(w *worker.Worker) bool { return notFailed(w.Key()) }, x.now()); err != nil {
				slot.Release(admission.ReleaseFailed)
				return nil, err
			}
		}
		ad := x.adapter(pw.Handoff())
		if ad == nil {
			slot.Release(admission.ReleaseFailed)
			return nil, errors.New("dispatch: no PD flow for handoff " + pw.Handoff().String())
		}
		return ad.run(ctx, &pdAttempt{r: &q.Request, br: br, preq: &preq, slot: slot, pw: pw, dw: dw})
	})
}

// admitResumed is admitPrefill for a continuation: always a PD pair (no local prefill), its decode
// one that ok accepts.
func (x *Dispatcher) admitResumed(ctx context.Context, preq *placement.Request, allowed worker.HandoffSet, ar admission.Request,
	ok func(key string) bool) (slot *admission.Slot, pw, dw *worker.Worker, err error) {
	ar.Queue = preq.Model
	ar.Select = func(hasCapacity func(string) bool) (string, error) {
		w, err := x.selectPrefill(preq, allowed, hasCapacity)
		if err != nil {
			return "", err
		}
		pw = w
		return w.URL(), nil
	}
	ar.SelectPair = func(hasSlot, hasSeat func(string) bool) (string, string, error) {
		p, d, err := x.selectPair(preq, allowed, hasSlot, func(key string) bool { return ok(key) && hasSeat(key) })
		if err != nil {
			return "", "", err
		}
		pw, dw = p, d
		return p.URL(), d.Key(), nil
	}
	slot, err = x.d.Admission.Acquire(ctx, ar)
	if err != nil {
		return nil, nil, nil, err
	}
	if slot.Seat() == nil {
		dw = nil // prefill-only selection (seats off, or turned off while waiting)
	}
	return slot, pw, dw, nil
}
