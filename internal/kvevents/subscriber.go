package kvevents

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/go-zeromq/zmq4"

	"github.com/sluicegw/sluice/internal/kvevents/kvspec"
	"github.com/sluicegw/sluice/internal/zmqnet"
)

// Endpoint is one engine rank's event stream (kvspec.Endpoint: the spec is read and checked in a
// leaf, so the registry validates it without linking this package).
type Endpoint = kvspec.Endpoint

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	Endpoint Endpoint
	Index    *Index
	// ReplayTimeout bounds one replay exchange, connection included; default 2s. A replay that times
	// out counts as unrepaired.
	ReplayTimeout time.Duration
	// RetryInterval is the longest pause between connection attempts while a publisher stays away
	// (they start at once and double from 5ms); default 50ms: a refused dial costs next to nothing,
	// and a restarted engine's index is stale until the redial.
	RetryInterval time.Duration
	Logger        *slog.Logger     // default: discard
	Metrics       Metrics          // default: none
	Now           func() time.Time // clock for lag; default time.Now
}

// Subscriber follows one engine rank's KV events into an Index.
type Subscriber struct {
	ep      Endpoint
	index   *Index
	timeout time.Duration
	retry   time.Duration
	log     *slog.Logger
	metrics Metrics
	now     func() time.Time

	// Owned by Run's goroutine.
	started bool
	last    int64
	lastFP  uint64 // fingerprint of the payload applied at last, to tell a restart from a gap
}

// NewSubscriber validates cfg and returns a subscriber; Run starts it.
func NewSubscriber(cfg SubscriberConfig) (*Subscriber, error) {
	if err := cfg.Endpoint.Validate(); err != nil {
		return nil, err
	}
	if cfg.Index == nil {
		return nil, fmt.Errorf("%w: no index", ErrConfig)
	}
	if cfg.ReplayTimeout < 0 || cfg.RetryInterval < 0 {
		return nil, fmt.Errorf("%w: negative timeout", ErrConfig)
	}
	s := &Subscriber{
		ep: cfg.Endpoint, index: cfg.Index, timeout: cfg.ReplayTimeout, retry: cfg.RetryInterval,
		log: cfg.Logger, metrics: cfg.Metrics, now: cfg.Now,
	}
	if s.timeout == 0 {
		s.timeout = 2 * time.Second
	}
	if s.retry == 0 {
		s.retry = 50 * time.Millisecond
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.metrics == nil {
		s.metrics = noopMetrics{}
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.log = s.log.With("worker", s.ep.Worker, "rank", s.ep.Rank, "endpoint", s.ep.Publisher)
	return s, nil
}

// socketOptions silence the library's own logger (it writes to stderr by default): what matters is
// logged by the subscriber.
func (s *Subscriber) socketOptions(extra ...zmq4.Option) []zmq4.Option {
	return append([]zmq4.Option{zmq4.WithLogger(log.New(io.Discard, "", 0)), zmq4.WithDialerRetry(s.retry)}, extra...)
}

// firstRedial is the pause after the first failed redial; it doubles on each further failure up to
// the retry interval. A lost publisher is redialled at once (an engine restarting on the same host is
// often back within milliseconds), and a publisher that stays away costs a dial per retry interval.
const firstRedial = 5 * time.Millisecond

// Run subscribes and applies batches until ctx ends, then returns ctx's error; it returns early only
// when the subscription cannot be set up. It redials a lost publisher itself (the library's automatic
// reconnect waits a whole retry interval before each attempt), and on each reconnection asks the
// replay socket whether the engine is still the one it indexed, so a restart is noticed as soon as
// the new engine listens, not at its first batch.
func (s *Subscriber) Run(ctx context.Context) error {
	ep, err := zmqnet.Endpoint(s.ep.Publisher)
	if err != nil {
		return err
	}
	pause := time.Duration(0)
	for connected := false; ; {
		sub, err := s.dial(ctx, ep)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !errors.Is(err, ErrDial) {
				return err
			}
			pause = min(max(2*pause, firstRedial), s.retry)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(pause):
			}
			continue
		}
		pause = 0
		if !connected {
			s.log.Info("kv events subscribed", "replay", s.ep.Replay != "")
			connected = true
		} else {
			s.log.Info("kv events: reconnected")
			s.resume(ctx)
		}
		err = s.follow(ctx, sub)
		_ = sub.Close()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.log.Info("kv events: connection lost; reconnecting", "err", err)
	}
}

// dial makes one connection attempt and subscribes.
func (s *Subscriber) dial(ctx context.Context, ep string) (zmq4.Socket, error) {
	sub := zmq4.NewSub(ctx, s.socketOptions(zmq4.WithDialerMaxRetries(0))...)
	if err := sub.SetOption(zmq4.OptionSubscribe, s.ep.Topic); err != nil {
		_ = sub.Close()
		return nil, fmt.Errorf("kvevents: subscribe: %w", err)
	}
	if err := sub.Dial(ep); err != nil {
		_ = sub.Close()
		return nil, fmt.Errorf("%w: dial %s: %w", ErrDial, s.ep.Publisher, err)
	}
	return sub, nil
}

// follow applies the publisher's messages until the connection is lost (the library reports a
// dropped connection once, as a receive error) or ctx ends.
func (s *Subscriber) follow(ctx context.Context, sub zmq4.Socket) error {
	for {
		msg, err := sub.Recv()
		if err != nil {
			return err
		}
		s.handle(ctx, msg.Frames)
	}
}

// handle applies one PUB message, repairing a gap before it.
func (s *Subscriber) handle(ctx context.Context, frames [][]byte) {
	seq, payload, err := ParseFrames(frames)
	if err != nil {
		s.malformed(err)
		return
	}
	b, err := DecodeBatch(payload)
	if err != nil {
		s.malformed(err)
		return
	}
	switch {
	case !s.started:
		// Joining a running engine: whatever it published before is only in its replay buffer.
		s.started = true
		if seq > 0 && s.ep.Replay != "" {
			if err := s.repair(ctx, 0, seq); err != nil {
				s.log.Info("kv events: joined mid-stream; earlier blocks not indexed", "seq", seq, "err", err)
			}
		}
	case seq <= s.last:
		// PUB sends each sequence number once and numbers restart with the publisher: a new engine
		// process, with an empty cache.
		s.log.Warn("kv events: sequence went back, engine restarted; clearing its index", "last", s.last, "seq", seq)
		s.restarted(ctx, seq)
	case seq > s.last+1:
		err := s.repair(ctx, s.last+1, seq)
		if errors.Is(err, ErrRestarted) {
			// A new engine whose sequence passed ours while we were away: not a gap.
			s.log.Warn("kv events: engine restarted; clearing its index", "last", s.last, "seq", seq)
			s.restarted(ctx, seq)
			break
		}
		if err != nil {
			s.metrics.IncGap(s.ep.Worker, false)
			s.metrics.IncCleared(s.ep.Worker, "gap")
			s.index.Clear(s.ep.Worker, s.ep.Rank)
			s.log.Warn("kv events: sequence gap not repaired; cleared the worker's index",
				"missing_from", s.last+1, "missing_to", seq-1, "err", err)
		} else {
			s.metrics.IncGap(s.ep.Worker, true)
			s.log.Debug("kv events: sequence gap repaired", "missing_from", s.last+1, "missing_to", seq-1)
		}
	}
	s.apply(b)
	s.last, s.lastFP = seq, xxhash.Sum64(payload)
}

// restarted clears the worker's index and replays the new engine's batches before seq.
func (s *Subscriber) restarted(ctx context.Context, seq int64) {
	s.index.Clear(s.ep.Worker, s.ep.Rank)
	s.metrics.IncCleared(s.ep.Worker, "restart")
	s.last = -1
	if seq > 0 && s.ep.Replay != "" {
		if err := s.repair(ctx, 0, seq); err != nil {
			s.log.Warn("kv events: could not replay the new engine's first batches", "err", err)
		}
	}
}

func (s *Subscriber) malformed(err error) {
	s.metrics.IncMalformed(s.ep.Worker)
	s.log.Warn("kv events: dropped a frame", "err", err)
}

func (s *Subscriber) apply(b *Batch) {
	// The endpoint's rank, not the batch's: one endpoint is one rank's publisher (vLLM annotates
	// the same rank), and clears must hit the shard applies fill.
	s.index.Apply(s.ep.Worker, s.ep.Rank, b)
	if b.TS > 0 && b.TS < math.MaxInt64/1e9 {
		sec := int64(b.TS)
		ts := time.Unix(sec, int64((b.TS-float64(sec))*1e9))
		s.metrics.ObserveLag(s.ep.Worker, max(0, s.now().Sub(ts)))
	}
}

// resume runs on each reconnection: it asks the replay socket for the batch applied last. Only a new
// engine process lacks it (the buffer always keeps the newest batch): one whose sequence is behind
// ours, or whose batch at our number is another. Its blocks are then cleared at once, and the next
// batch is taken as a join (earlier ones from the replay buffer). When the batch is there and ours,
// nothing changes and the next batch repairs any gap as usual. Without a replay socket, or when it
// does not answer, the next batch decides (a sequence that went back is a restart).
func (s *Subscriber) resume(ctx context.Context) {
	if !s.started || s.ep.Replay == "" || s.last < 0 {
		return
	}
	same, err := s.sameEngine(ctx)
	if err != nil {
		s.log.Info("kv events: could not check the engine on reconnection; its next batch will", "err", err)
		return
	}
	if same {
		return
	}
	s.log.Warn("kv events: engine restarted while disconnected; clearing its index", "last", s.last)
	s.index.Clear(s.ep.Worker, s.ep.Rank)
	s.metrics.IncCleared(s.ep.Worker, "restart")
	s.started, s.last = false, -1
}

// sameEngine reports whether the replay socket still holds the batch applied last, unchanged.
func (s *Subscriber) sameEngine(ctx context.Context) (bool, error) {
	rctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	dealer, err := s.dialReplay(rctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = dealer.Close() }()
	if err := dealer.Send(zmq4.NewMsgFrom([]byte{}, SeqBytes(s.last))); err != nil {
		return false, fmt.Errorf("%w: send: %w", ErrReplay, err)
	}
	same := false
	for first := true; ; first = false {
		seq, payload, err := s.replayReply(rctx, dealer)
		if err != nil {
			return false, err
		}
		if seq == -1 {
			return same, nil
		}
		if first {
			same = seq == s.last && xxhash.Sum64(payload) == s.lastFP
		}
	}
}

// repair fetches batches [from, to) from the replay socket and applies them, all or none: a replay
// that cannot give every missing batch applies nothing, and the caller clears. From 0 (an empty
// index to fill) it applies whatever contiguous run the buffer still holds up to to.
func (s *Subscriber) repair(ctx context.Context, from, to int64) error {
	batches, err := s.replay(ctx, from, to)
	if err != nil {
		return err
	}
	for _, b := range batches {
		s.apply(b)
	}
	return nil
}

func (s *Subscriber) replay(ctx context.Context, from, to int64) ([]*Batch, error) {
	rctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	dealer, err := s.dialReplay(rctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = dealer.Close() }()
	// Ask from the batch we applied last (when there is one) to check it is still ours.
	start, verify := from, from > 0 && s.last == from-1
	if verify {
		start = from - 1
	}
	// A DEALER sends the empty delimiter a REQ would, so the ROUTER reads [identity, "", start].
	if err := dealer.Send(zmq4.NewMsgFrom([]byte{}, SeqBytes(start))); err != nil {
		return nil, fmt.Errorf("%w: send: %w", ErrReplay, err)
	}
	var out []*Batch
	next := from
	for {
		seq, payload, err := s.replayReply(rctx, dealer)
		if err != nil {
			return nil, err
		}
		if seq == -1 {
			break
		}
		if verify {
			verify = false
			if seq != from-1 {
				return nil, fmt.Errorf("%w: %w (wanted %d, oldest %d)", ErrReplay, ErrReplayIncomplete, from-1, seq)
			}
			if xxhash.Sum64(payload) != s.lastFP {
				return nil, fmt.Errorf("%w: %w", ErrReplay, ErrRestarted)
			}
			continue
		}
		if seq < next || seq >= to {
			continue // before the gap (the buffer answers from start) or after it (live copies follow)
		}
		if seq > next {
			if from != 0 || len(out) > 0 {
				return nil, fmt.Errorf("%w: %w (wanted %d, oldest %d)", ErrReplay, ErrReplayIncomplete, next, seq)
			}
			// Filling an empty index (joining, or after a restart): the buffer's oldest batches on
			// are better than nothing; blocks whose parents are gone are dropped as orphans.
			next = seq
		}
		b, err := DecodeBatch(payload)
		if err != nil {
			return nil, fmt.Errorf("%w: batch %d: %w", ErrReplay, seq, err)
		}
		out = append(out, b)
		next++
	}
	if next < to {
		return nil, fmt.Errorf("%w: %w (got up to %d of %d)", ErrReplay, ErrReplayIncomplete, next, to)
	}
	return out, nil
}

// dialReplay connects a DEALER to the replay socket; ctx bounds the attempts.
func (s *Subscriber) dialReplay(ctx context.Context) (zmq4.Socket, error) {
	if s.ep.Replay == "" {
		return nil, fmt.Errorf("%w: %w", ErrReplay, ErrNoReplayEndpoint)
	}
	dealer := zmq4.NewDealer(ctx, s.socketOptions(zmq4.WithDialerMaxRetries(int(s.timeout/s.retry)+1))...)
	ep, err := zmqnet.Endpoint(s.ep.Replay)
	if err != nil {
		_ = dealer.Close()
		return nil, fmt.Errorf("%w: %w", ErrReplay, err)
	}
	if err := dealer.Dial(ep); err != nil {
		_ = dealer.Close()
		return nil, fmt.Errorf("%w: dial %s: %w", ErrReplay, s.ep.Replay, err)
	}
	return dealer, nil
}

// replayReply reads one reply of the replay socket: a batch, or seq -1 at the end.
func (s *Subscriber) replayReply(ctx context.Context, dealer zmq4.Socket) (int64, []byte, error) {
	msg, err := dealer.Recv()
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = ctx.Err()
		}
		return 0, nil, fmt.Errorf("%w: receive: %w", ErrReplay, err)
	}
	f := msg.Frames
	if len(f) == 3 && len(f[0]) == 0 {
		f = f[1:]
	}
	if len(f) != 2 || len(f[0]) != 8 {
		return 0, nil, fmt.Errorf("%w: %w: replay reply of %d frames", ErrReplay, ErrMalformed, len(msg.Frames))
	}
	seq, payload, _ := ParseFrames([][]byte{nil, f[0], f[1]})
	return seq, payload, nil
}
