package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
)

// Engine is one simulated inference engine. Create it with New, then Start it; Close or Shutdown stops it.
type Engine struct {
	cfg    Config
	logger *slog.Logger
	id     string

	ranks    []*dpRank    // the data-parallel ranks (rank.go)
	kvStore  *recordStore // vLLM NIXL KV records by first block id
	decoding atomic.Int64 // sequences in the (engine-wide) decode batch
	client   *http.Client
	metrics  *engineMetrics
	stats    counters

	roundRobin   atomic.Uint64  // SGLang round_robin rank dispatch
	prefillInfos prefillInfos   // SGLang decode: what prefills' bootstrap servers told it
	mcAgents     mooncakeAgents // vLLM Mooncake decode: engine ids learnt from bootstrap servers

	faults atomic.Pointer[Faults]
	randMu sync.Mutex
	rand   *rand.Rand // fault draws

	nextBlock atomic.Uint32
	nextID    atomic.Uint64

	baseCtx    context.Context
	cancelBase context.CancelFunc
	active     tracker

	crashes atomic.Int64 // Crash calls, for tests

	mu          sync.Mutex // guards the fields below
	started     bool
	closed      bool
	srv         *http.Server
	grpcSrv     *grpc.Server   // gRPC on grpc-go's transport (Config.GRPC, grpcnative.go), else nil
	grpcOld     []*grpc.Server // grpcSrv's predecessors, draining since a refuse
	newGRPC     func() *grpc.Server
	ln          net.Listener // nil while refusing connections
	port        int
	bootSrv     *http.Server
	bootPort    int
	refuseTimer *time.Timer
	// lifeCancel ends the current incarnation's requests: the servers' base context is a child of
	// baseCtx that a Crash cancels (the engine lives on; Close cancels baseCtx).
	lifeCancel context.CancelFunc
	hold       chan struct{} // closed to release held requests (Faults.Hold); nil when not holding
	holdSkip   int           // requests still let through the hold (Faults.HoldSkip)
	stall      chan struct{} // closed to release stalled streams (Faults.StallAfterTokens); nil when none stall
	serveWG    sync.WaitGroup
	kvPubs     []*kvPublisher // per rank, with Config.KVEvents (kvevents.go)
}

// New validates cfg and builds an engine. logger may be nil.
func New(cfg Config, logger *slog.Logger) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Models = append([]string(nil), cfg.Models...)
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	e := &Engine{
		cfg:     cfg,
		logger:  logger,
		ranks:   newRanks(&cfg),
		kvStore: newRecordStore(cfg.RoomTTL, cfg.MaxRooms),
		rand:    rand.New(rand.NewPCG(uint64(cfg.Seed), 0x5eed)),
	}
	e.client = &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}}
	e.storeFaults(cfg.Faults)
	e.stats.perPath = make(map[string]int64)
	e.metrics = newEngineMetrics(e)
	e.baseCtx, e.cancelBase = context.WithCancel(context.Background())
	return e, nil
}

// Config returns the engine's validated configuration (with defaults filled in).
func (e *Engine) Config() Config { return e.cfg }

// ID is the engine id reported in kv_transfer_params and /get_server_info.
func (e *Engine) ID() string { return e.id }

// RankEngineIDs are the KV connector engine ids of the engine's DP ranks, in rank order: the engine id,
// suffixed "_dp<rank>" when there are several ranks, as vLLM names its DP engines. Valid after Start.
func (e *Engine) RankEngineIDs() []string {
	ids := make([]string, len(e.ranks))
	for i, r := range e.ranks {
		ids[i] = r.engineID
	}
	return ids
}

// Start listens on the configured ports (0 picks a free port) and serves until Close or Shutdown. ctx
// bounds only the start itself.
func (e *Engine) Start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started {
		return errors.New("sim: engine already started")
	}
	if e.closed {
		return errors.New("sim: engine closed")
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(e.cfg.Host, strconv.Itoa(e.cfg.Port)))
	if err != nil {
		return fmt.Errorf("sim: listen: %w", err)
	}
	e.port = ln.Addr().(*net.TCPAddr).Port
	e.id = e.cfg.EngineID
	if e.id == "" {
		e.id = "sim-" + string(e.cfg.Role) + "-" + strconv.Itoa(e.port)
	}
	e.setRankEngineIDs()
	if err := e.startKVEventsLocked(); err != nil {
		_ = ln.Close()
		return err
	}
	if e.cfg.hasBootstrapServer() {
		bln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(e.cfg.Host, strconv.Itoa(e.cfg.BootstrapPort)))
		if err != nil {
			_ = ln.Close()
			e.stopKVEventsLocked()
			return fmt.Errorf("sim: listen bootstrap: %w", err)
		}
		e.bootPort = bln.Addr().(*net.TCPAddr).Port
		e.newServersLocked()
		e.serveLocked(e.bootSrv, bln)
	} else {
		e.newServersLocked()
	}
	e.started = true
	if e.faults.Load().RefuseConnections && e.faults.Load().appliesTo(e.cfg.Role) {
		_ = ln.Close() // listen once to own the port, then refuse
	} else {
		e.ln = ln
		e.serveMainLocked(ln)
	}
	e.logger.Info("sim engine started", "role", e.cfg.Role, "protocol", e.cfg.Protocol, "mode", e.cfg.Mode,
		"url", e.urlLocked(), "bootstrap_port", e.bootPort, "dp_size", e.cfg.DPSize, "kv_connector", e.cfg.KVConnector, "grpc", e.cfg.GRPC)
	return nil
}

// newServersLocked makes the HTTP servers of a new incarnation (at Start, and after a Crash): an
// http.Server that was closed cannot serve again.
func (e *Engine) newServersLocked() {
	life, cancel := context.WithCancel(e.baseCtx)
	e.lifeCancel = cancel
	base := func(net.Listener) context.Context { return life }
	if e.cfg.hasBootstrapServer() {
		handler := e.bootstrapHandler()
		if e.cfg.mooncake() {
			handler = e.mooncakeBootstrapHandler()
		}
		e.bootSrv = &http.Server{Handler: e.trackHandler(handler), BaseContext: base, ReadHeaderTimeout: 10 * time.Second}
	}
	h := e.trackHandler(e.routes())
	e.srv = &http.Server{Handler: h, BaseContext: base, ReadHeaderTimeout: 10 * time.Second}
	e.grpcSrv, e.newGRPC = nil, nil
	if e.cfg.GRPC {
		// HTTP/2 connections (gRPC's) go to grpc-go; net/http serves HTTP/1 alone.
		e.newGRPC = func() *grpc.Server { return newGRPCServer(h, life, e.logger) }
		e.grpcSrv = e.newGRPC()
	}
}

// serveMainLocked serves the main port: on net/http, or split between net/http and grpc-go.
func (e *Engine) serveMainLocked(ln net.Listener) {
	if e.grpcSrv == nil {
		e.serveLocked(e.srv, ln)
		return
	}
	m := newPortMux(ln)
	g := e.grpcSrv
	e.serveWG.Add(2)
	go func() {
		defer e.serveWG.Done()
		m.run()
	}()
	go func() {
		defer e.serveWG.Done()
		_ = g.Serve(m.h2) // ends when the port closes or g stops
	}()
	e.serveLocked(e.srv, m.h1)
}

// stopGRPCLocked ends every gRPC call at once.
func (e *Engine) stopGRPCLocked() {
	stopGRPC(e.grpcSrv)
	for _, g := range e.grpcOld {
		g.Stop()
	}
	e.grpcOld = nil
}

func (e *Engine) serveLocked(srv *http.Server, ln net.Listener) {
	e.serveWG.Add(1)
	go func() {
		defer e.serveWG.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			e.logger.Warn("sim serve ended", "err", err)
		}
	}()
}

// URL is the engine's base URL (http://host:port), valid after Start.
func (e *Engine) URL() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.urlLocked()
}

func (e *Engine) urlLocked() string {
	return "http://" + net.JoinHostPort(e.cfg.Host, strconv.Itoa(e.port))
}

// Port is the engine's HTTP (and gRPC) port, valid after Start.
func (e *Engine) Port() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.port
}

// BootstrapPort is the bootstrap server's port of a prefill engine (SGLang, or vLLM with the Mooncake
// connector), 0 if it has none.
func (e *Engine) BootstrapPort() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bootPort
}

// Role is the engine's role.
func (e *Engine) Role() Role { return e.cfg.Role }

// Faults returns the current faults.
func (e *Engine) Faults() Faults { return *e.faults.Load() }

// SetFaults replaces the faults; toggling RefuseConnections closes or reopens the listener.
func (e *Engine) SetFaults(f Faults) error {
	if err := f.validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	f = e.storeFaults(f)
	return e.applyRefuse(f.RefuseConnections && f.appliesTo(e.cfg.Role), 0)
}

// storeFaults makes f (normalised) the engine's faults, opening or closing the hold and stall gates
// to match, and returns what it stored.
func (e *Engine) storeFaults(f Faults) Faults {
	f.normalize()
	e.setHold(f.Hold && f.appliesTo(e.cfg.Role), f.HoldSkip)
	e.setStall(f.StallAfterTokens > 0 && f.appliesTo(e.cfg.Role))
	e.faults.Store(&f)
	return f
}

// setHold opens or closes the gate held requests wait on; clearing it releases every one of them.
// skip is how many requests pass the gate before it holds any.
func (e *Engine) setHold(hold bool, skip int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.holdSkip = skip
	toggleGate(&e.hold, hold)
}

// setStall opens or closes the gate stalled streams wait on; clearing it releases every one of them.
func (e *Engine) setStall(stall bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	toggleGate(&e.stall, stall)
}

// toggleGate makes *gate a channel to wait on when on, and closes it (releasing its waiters) when
// off.
func toggleGate(gate *chan struct{}, on bool) {
	switch {
	case on && *gate == nil:
		*gate = make(chan struct{})
	case !on && *gate != nil:
		close(*gate)
		*gate = nil
	}
}

// stalling is the channel a stalled stream waits on, nil when no stall is set.
func (e *Engine) stalling() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stall
}

// held is the channel a held request waits on, nil when nothing is held or the request is one of
// the HoldSkip let through.
func (e *Engine) held() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.hold != nil && e.holdSkip > 0 {
		e.holdSkip--
		return nil
	}
	return e.hold
}

// applyRefuse closes or reopens the main listener; with refuseFor > 0 it reopens by itself after that.
func (e *Engine) applyRefuse(refuse bool, refuseFor time.Duration) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.started || e.closed {
		return nil
	}
	if e.refuseTimer != nil {
		e.refuseTimer.Stop()
		e.refuseTimer = nil
	}
	if refuse {
		if e.ln != nil {
			_ = e.ln.Close()
			e.ln = nil
			e.srv.SetKeepAlivesEnabled(false) // also closes idle keep-alive connections
			if old := e.grpcSrv; old != nil {
				// gRPC connections are told to go away (GOAWAY) once their calls end; a new server
				// takes the port when it opens again.
				e.grpcOld = append(e.grpcOld, old)
				e.grpcSrv = e.newGRPC()
				e.serveWG.Add(1)
				go func() {
					defer e.serveWG.Done()
					old.GracefulStop()
				}()
			}
		}
		if refuseFor > 0 {
			e.refuseTimer = time.AfterFunc(refuseFor, func() {
				f := *e.faults.Load()
				f.RefuseConnections = false
				e.faults.Store(&f)
				if err := e.applyRefuse(false, 0); err != nil {
					e.logger.Error("sim: listen again after refusing", "err", err)
				}
			})
		}
		return nil
	}
	if e.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(e.cfg.Host, strconv.Itoa(e.port)))
	if err != nil {
		return fmt.Errorf("sim: listen again on port %d: %w", e.port, err)
	}
	e.ln = ln
	e.srv.SetKeepAlivesEnabled(true)
	e.serveMainLocked(ln)
	return nil
}

// Crash kills the engine as a SIGKILL would and restarts it after downFor, as its supervisor would:
// every connection is dropped at once (clients see their requests and streams reset, not answered),
// every request it ran is lost, its prefix caches are empty when it listens again on the same ports,
// and until then dials are refused. A test or the chaos soak kills an in-process engine with it; a
// sluice-sim process is killed the same way through POST /sim/faults {"crash_for_ms": N}.
func (e *Engine) Crash(downFor time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.started || e.closed {
		return
	}
	e.crashes.Add(1)
	if e.refuseTimer != nil {
		e.refuseTimer.Stop()
	}
	// Connections first: a request cancelled before its connection is gone would end its answer
	// cleanly, which a killed process never does.
	_ = e.srv.Close()
	e.stopGRPCLocked()
	if e.bootSrv != nil {
		_ = e.bootSrv.Close()
	}
	e.lifeCancel() // the requests it ran end with the process
	e.ln = nil
	for _, r := range e.ranks {
		r.cache.flush()
	}
	e.newServersLocked()
	e.refuseTimer = time.AfterFunc(downFor, e.restart)
}

// restart listens again after a Crash: the main port, and the bootstrap server's.
func (e *Engine) restart() {
	if err := e.applyRefuse(false, 0); err != nil {
		e.logger.Error("sim: restart after a crash", "err", err)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.bootSrv == nil {
		return
	}
	bln, err := net.Listen("tcp", net.JoinHostPort(e.cfg.Host, strconv.Itoa(e.bootPort)))
	if err != nil {
		e.logger.Error("sim: restart the bootstrap server after a crash", "err", err)
		return
	}
	e.serveLocked(e.bootSrv, bln)
}

// Crashes is how many times the engine was crashed (Crash).
func (e *Engine) Crashes() int64 { return e.crashes.Load() }

// Shutdown stops accepting requests and waits for running ones until ctx ends, then closes everything.
func (e *Engine) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	srv, boot, g := e.srv, e.bootSrv, e.grpcSrv
	e.stopKVEventsLocked()
	e.mu.Unlock()
	var err error
	if srv != nil {
		err = srv.Shutdown(ctx)
	}
	err = errors.Join(err, shutdownGRPC(ctx, g))
	if boot != nil {
		err = errors.Join(err, boot.Shutdown(ctx))
	}
	e.Close()
	return err
}

// Close stops the engine at once: cancels every request, closes listeners and connections, and waits for
// every goroutine the engine owns. It is idempotent.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	if e.refuseTimer != nil {
		e.refuseTimer.Stop()
	}
	srv, boot := e.srv, e.bootSrv
	e.stopKVEventsLocked()
	e.stopGRPCLocked()
	e.mu.Unlock()

	e.cancelBase()
	if srv != nil {
		_ = srv.Close()
	}
	if boot != nil {
		_ = boot.Close()
	}
	e.serveWG.Wait()
	e.active.closeAndWait()
	e.client.CloseIdleConnections()
	return nil
}

// tracker counts running handlers so that Close can wait for them.
type tracker struct {
	mu     sync.Mutex
	n      int
	closed bool
	done   chan struct{}
}

func (t *tracker) enter() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.n++
	return true
}

func (t *tracker) exit() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n--
	if t.closed && t.n == 0 && t.done != nil {
		close(t.done)
		t.done = nil
	}
}

func (t *tracker) closeAndWait() {
	t.mu.Lock()
	t.closed = true
	if t.n == 0 {
		t.mu.Unlock()
		return
	}
	done := make(chan struct{})
	t.done = done
	t.mu.Unlock()
	<-done
}

func (e *Engine) trackHandler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !e.active.enter() {
			writeSimError(w, http.StatusServiceUnavailable, "engine shutting down")
			return
		}
		defer e.active.exit()
		h.ServeHTTP(w, r)
	})
}

func (e *Engine) randFloat() float64 {
	e.randMu.Lock()
	defer e.randMu.Unlock()
	return e.rand.Float64()
}

func (e *Engine) newID(prefix string) string {
	b := make([]byte, 0, 40)
	b = append(b, prefix...)
	b = append(b, e.id...)
	b = append(b, '-')
	b = strconv.AppendUint(b, e.nextID.Add(1), 16)
	return string(b)
}
