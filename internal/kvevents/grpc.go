package kvevents

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	smgcommonpb "github.com/sluicegw/sluice/gen/smg/grpc/common"
	vllmpb "github.com/sluicegw/sluice/gen/vllm/grpc/engine"
)

// The engines' gRPC carries the same events as ZeroMQ: SubscribeKvEvents (SGLang's scheduler,
// vLLM's engine; smg-project/smg crates/grpc_client/proto/common.proto KvEventBatch) streams every DP
// rank's batches, the rank on each, under the stream's own contiguous sequence numbers. Recovery is
// the servicer's (smg grpc_servicer/smg_grpc_servicer/kv_relay.py): it fills a rank's gap from that
// rank's replay socket, and ends the stream with DATA_LOSS when it cannot; start_sequence_number
// resumes after a number where the servicer keeps history, and is OUT_OF_RANGE where it does not.

// KVStream is one SubscribeKvEvents call.
type KVStream interface {
	Recv() (*smgcommonpb.KvEventBatch, error)
}

// SubscribeFunc opens SubscribeKvEvents, resuming after start (0: live from now).
type SubscribeFunc func(ctx context.Context, start uint64) (KVStream, error)

// EngineSubscribe is the SubscribeFunc of an engine's gRPC protocol ("sglang" or "vllm") on conn.
func EngineSubscribe(conn grpc.ClientConnInterface, protocol string) (SubscribeFunc, error) {
	switch protocol {
	case "sglang":
		c := sglangpb.NewSglangSchedulerClient(conn)
		return func(ctx context.Context, start uint64) (KVStream, error) {
			return c.SubscribeKvEvents(ctx, &smgcommonpb.SubscribeKvEventsRequest{StartSequenceNumber: start})
		}, nil
	case "vllm":
		c := vllmpb.NewVllmEngineClient(conn)
		return func(ctx context.Context, start uint64) (KVStream, error) {
			return c.SubscribeKvEvents(ctx, &smgcommonpb.SubscribeKvEventsRequest{StartSequenceNumber: start})
		}, nil
	}
	return nil, fmt.Errorf("%w: no engine gRPC KV events for protocol %q", ErrConfig, protocol)
}

// ErrNoKVEvents means the engine does not stream KV events (UNIMPLEMENTED, or FAILED_PRECONDITION:
// started without --kv-events-config): the subscriber stops rather than ask again and again.
var ErrNoKVEvents = errors.New("kvevents: the engine streams no KV events")

// GRPCSubscriberConfig configures a GRPCSubscriber.
type GRPCSubscriberConfig struct {
	Worker    string // worker key (URL)
	Index     *Index
	Subscribe SubscribeFunc
	// RetryInterval is the longest pause between subscription attempts while the engine is away
	// (they start at once and double from 5ms); default 50ms.
	RetryInterval time.Duration
	Logger        *slog.Logger     // default: discard
	Metrics       Metrics          // default: none
	Now           func() time.Time // clock for lag; default time.Now
}

// GRPCSubscriber follows an engine's KV events over its gRPC into an Index: every rank's shard of
// one worker, from one stream.
type GRPCSubscriber struct {
	worker    string
	index     *Index
	subscribe SubscribeFunc
	retry     time.Duration
	log       *slog.Logger
	metrics   Metrics
	now       func() time.Time

	// Owned by Run's goroutine: the stream's number applied last, 0 before the first.
	last uint64
}

// NewGRPCSubscriber validates cfg and returns a subscriber; Run starts it.
func NewGRPCSubscriber(cfg GRPCSubscriberConfig) (*GRPCSubscriber, error) {
	switch {
	case cfg.Worker == "":
		return nil, fmt.Errorf("%w: endpoint without a worker", ErrConfig)
	case cfg.Index == nil:
		return nil, fmt.Errorf("%w: no index", ErrConfig)
	case cfg.Subscribe == nil:
		return nil, fmt.Errorf("%w: no subscribe call", ErrConfig)
	case cfg.RetryInterval < 0:
		return nil, fmt.Errorf("%w: negative retry interval", ErrConfig)
	}
	s := &GRPCSubscriber{worker: cfg.Worker, index: cfg.Index, subscribe: cfg.Subscribe, retry: cfg.RetryInterval,
		log: cfg.Logger, metrics: cfg.Metrics, now: cfg.Now}
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
	s.log = s.log.With("worker", s.worker, "transport", "grpc")
	return s, nil
}

// Run subscribes and applies batches until ctx ends, then returns ctx's error; it returns
// ErrNoKVEvents early when the engine has no KV events. A lost stream is resumed after the batch
// applied last; a servicer that cannot resume (OUT_OF_RANGE) or lost batches itself (DATA_LOSS)
// has the worker's index cleared and is subscribed to afresh.
func (s *GRPCSubscriber) Run(ctx context.Context) error {
	pause := time.Duration(0)
	for {
		applied, err := s.session(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		switch status.Code(err) {
		case codes.Unimplemented, codes.FailedPrecondition:
			s.log.Info("kv events: the engine streams none", "err", err)
			return fmt.Errorf("%w: %w", ErrNoKVEvents, err)
		case codes.DataLoss, codes.OutOfRange:
			s.log.Warn("kv events: the engine's stream cannot continue; clearing the worker's index and subscribing afresh", "err", err)
			s.clear("gap")
			pause = 0
			continue // at once: the index is empty until the new stream fills it
		}
		if applied > 0 {
			pause = 0 // a stream that delivered is redialled at once; only failures back off
		}
		pause = min(max(2*pause, firstRedial), s.retry)
		s.log.Debug("kv events: stream ended; subscribing again", "err", err, "resume_after", s.last)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
	}
}

// session runs one stream: resumes after s.last (when there is one) and applies its batches until it
// ends, reporting how many. A batch out of sequence clears the index: the servicer repairs rank gaps itself, so a hole
// in its own numbering cannot be filled.
func (s *GRPCSubscriber) session(ctx context.Context) (applied int, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := s.subscribe(ctx, s.last)
	if err != nil {
		return 0, err
	}
	s.log.Info("kv events subscribed", "resume_after", s.last)
	for ; ; applied++ {
		b, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return applied, io.ErrUnexpectedEOF // the servicer never ends a healthy stream
		}
		if err != nil {
			return applied, err
		}
		seq := b.GetSequenceNumber()
		switch {
		case s.last == 0:
		case seq <= s.last:
			s.log.Warn("kv events: sequence went back, engine restarted; clearing its index", "last", s.last, "seq", seq)
			s.clear("restart")
		case seq > s.last+1:
			s.metrics.IncGap(s.worker, false)
			s.log.Warn("kv events: sequence gap; cleared the worker's index", "missing_from", s.last+1, "missing_to", seq-1)
			s.clear("gap")
		}
		s.apply(b)
		s.last = seq
	}
}

// clear drops every rank's blocks of the worker and forgets the stream position.
func (s *GRPCSubscriber) clear(reason string) {
	s.index.RemoveWorker(s.worker)
	s.metrics.IncCleared(s.worker, reason)
	s.last = 0
}

func (s *GRPCSubscriber) apply(pb *smgcommonpb.KvEventBatch) {
	b, err := batchFromProto(pb)
	if err != nil {
		s.metrics.IncMalformed(s.worker)
		s.log.Warn("kv events: dropped a batch", "err", err)
		return
	}
	s.index.Apply(s.worker, b.DPRank, b)
	if b.TS > 0 && b.TS < math.MaxInt64/1e9 {
		sec := int64(b.TS)
		s.metrics.ObserveLag(s.worker, max(0, s.now().Sub(time.Unix(sec, int64((b.TS-float64(sec))*1e9)))))
	}
}

// batchFromProto converts a KvEventBatch to the ZeroMQ path's Batch. Each stored block becomes its
// own BlockStored (parent: the block before it), so blocks of differing sizes stay exact; hashes
// are the proto's int64 as the 64-bit pattern an integer ZeroMQ hash has; a cache_level above 0 is
// a lower tier's medium.
func batchFromProto(pb *smgcommonpb.KvEventBatch) (*Batch, error) {
	b := &Batch{TS: pb.GetTimestamp()}
	if pb.DpRank != nil {
		if pb.GetDpRank() < 0 {
			return nil, fmt.Errorf("dp_rank %d < 0", pb.GetDpRank())
		}
		b.DPRank, b.HasRank = int(pb.GetDpRank()), true
	}
	for _, ev := range pb.GetEvents() {
		switch d := ev.GetData().(type) {
		case *smgcommonpb.KvCacheEvent_Stored:
			parent, hasParent := EngineHash(""), d.Stored.ParentBlockHash != nil
			if hasParent {
				parent = IntHash(uint64(d.Stored.GetParentBlockHash()))
			}
			for _, blk := range d.Stored.GetBlocks() {
				if len(blk.GetTokenIds()) == 0 {
					return nil, fmt.Errorf("stored block %d without tokens", blk.GetBlockHash())
				}
				h := IntHash(uint64(blk.GetBlockHash()))
				b.Events = append(b.Events, Event{Kind: BlockStored, BlockHashes: []EngineHash{h}, Parent: parent, HasParent: hasParent,
					TokenIDs: blk.GetTokenIds(), BlockSize: len(blk.GetTokenIds()), Medium: cacheLevelMedium(blk.CacheLevel), LoRA: blk.LoraId != nil})
				parent, hasParent = h, true
			}
		case *smgcommonpb.KvCacheEvent_Removed:
			hs := make([]EngineHash, len(d.Removed.GetBlockHashes()))
			for i, h := range d.Removed.GetBlockHashes() {
				hs[i] = IntHash(uint64(h))
			}
			b.Events = append(b.Events, Event{Kind: BlockRemoved, BlockHashes: hs, Medium: cacheLevelMedium(d.Removed.CacheLevel)})
		case *smgcommonpb.KvCacheEvent_Cleared:
			b.Events = append(b.Events, Event{Kind: AllBlocksCleared})
		}
	}
	return b, nil
}

// cacheLevelMedium names a cache level as the ZeroMQ events' medium: unset or 0 is the device (GPU),
// 1 host memory, 2 disk, higher external storage (the levels of smg's relay _CACHE_LEVEL).
func cacheLevelMedium(level *int32) string {
	switch {
	case level == nil || *level <= 0:
		return ""
	case *level == 1:
		return "CPU"
	case *level == 2:
		return "DISK"
	}
	return "EXTERNAL"
}
