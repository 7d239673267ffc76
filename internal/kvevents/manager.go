package kvevents

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// ManagerConfig configures a Manager; the subscriber settings apply to every endpoint.
type ManagerConfig struct {
	Index         *Index
	ReplayTimeout time.Duration
	RetryInterval time.Duration
	Logger        *slog.Logger
	Metrics       Metrics
	Now           func() time.Time
}

// Manager runs one Subscriber per endpoint of a changing set (the workers with events configured,
// as the registry or discovery reports them). It owns the subscribers' goroutines.
type Manager struct {
	cfg ManagerConfig

	mu     sync.Mutex
	subs   map[Endpoint]*runningSub
	closed bool
}

type runningSub struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// NewManager returns a manager with no subscribers.
func NewManager(cfg ManagerConfig) (*Manager, error) {
	if cfg.Index == nil {
		return nil, fmt.Errorf("%w: no index", ErrConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Manager{cfg: cfg, subs: make(map[Endpoint]*runningSub)}, nil
}

// Set makes the running subscribers exactly eps: new endpoints are subscribed, the others stopped,
// and a worker with no endpoint left is dropped from the index. It returns the first invalid
// endpoint's error after applying the valid ones. Set after Close does nothing.
func (m *Manager) Set(eps []Endpoint) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	want := make(map[Endpoint]bool, len(eps))
	var firstErr error
	for _, ep := range eps {
		if err := ep.Validate(); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		want[ep] = true
	}
	left := make(map[string]bool)
	for ep, rs := range m.subs {
		if !want[ep] {
			rs.stop()
			delete(m.subs, ep)
			left[ep.Worker] = true
		}
	}
	for ep := range want {
		if _, ok := m.subs[ep]; ok {
			continue
		}
		sub, err := m.newRunner(ep)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		rs := &runningSub{cancel: cancel, done: make(chan struct{})}
		go func() {
			defer close(rs.done)
			if err := sub.Run(ctx); err != nil && ctx.Err() == nil {
				m.cfg.Logger.Warn("kv events subscriber stopped", "worker", ep.Worker, "rank", ep.Rank, "err", err)
			}
		}()
		m.subs[ep] = rs
	}
	for w := range left {
		if !m.hasWorkerLocked(w) {
			m.cfg.Index.RemoveWorker(w)
		}
	}
	return firstErr
}

// runner is a subscriber of either transport.
type runner interface {
	Run(ctx context.Context) error
}

// newRunner makes ep's subscriber: ZeroMQ, or the engine gRPC's stream (grpcsource.go) when ep names
// an engine.
func (m *Manager) newRunner(ep Endpoint) (runner, error) {
	if ep.Engine != "" {
		return newEngineRunner(ep, m.cfg)
	}
	return NewSubscriber(SubscriberConfig{
		Endpoint: ep, Index: m.cfg.Index, ReplayTimeout: m.cfg.ReplayTimeout, RetryInterval: m.cfg.RetryInterval,
		Logger: m.cfg.Logger, Metrics: m.cfg.Metrics, Now: m.cfg.Now,
	})
}

func (m *Manager) hasWorkerLocked(w string) bool {
	for ep := range m.subs {
		if ep.Worker == w {
			return true
		}
	}
	return false
}

// Endpoints lists the endpoints subscribed.
func (m *Manager) Endpoints() []Endpoint {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Endpoint, 0, len(m.subs))
	for ep := range m.subs {
		out = append(out, ep)
	}
	return out
}

// Close stops every subscriber and waits for them.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	subs := m.subs
	m.subs = nil
	m.mu.Unlock()
	for _, rs := range subs {
		rs.stop()
	}
}

func (rs *runningSub) stop() {
	rs.cancel()
	<-rs.done
}
