package sim

import (
	"context"
	"errors"
	"sync"
	"time"

	"connectrpc.com/connect"

	smgcommonpb "github.com/sluicegw/sluice/gen/smg/grpc/common"
)

// SubscribeKvEvents over the engines' gRPC, as the servicers' relay serves it (smg-project/smg
// grpc_servicer/smg_grpc_servicer/kv_relay.py): every DP rank's batches on one stream, numbered by
// the stream from 1 with the rank on each batch; a rank's batch the relay cannot deliver (lost for
// good: the DropKVEvents fault without replay, or a subscriber that falls kvStreamBuffer batches
// behind) ends the stream with DATA_LOSS, which a gateway answers by clearing the worker and
// subscribing again; a non-zero start_sequence_number is OUT_OF_RANGE (the numbering is per call,
// nothing is kept between calls). Block hashes are the cache's 64-bit keys as the proto's int64.

// kvStreamBuffer bounds the batches waiting for one stream's sender.
const kvStreamBuffer = 1024

// kvStream is one SubscribeKvEvents call's feed from the rank publishers.
type kvStream struct {
	batches  chan kvStreamBatch
	lost     chan struct{} // closed when a batch could not be delivered
	lostOnce sync.Once
}

type kvStreamBatch struct {
	rank int
	ts   float64
	evs  []kvEvent
}

func (s *kvStream) markLost() { s.lostOnce.Do(func() { close(s.lost) }) }

// relayLocked hands a numbered batch to every stream (p.mu held); delivered is false when the batch
// is lost for good.
func (p *kvPublisher) relayLocked(evs []kvEvent, delivered bool) {
	for s := range p.streams {
		if !delivered {
			s.markLost()
			continue
		}
		select {
		case s.batches <- kvStreamBatch{rank: p.rank, ts: float64(time.Now().UnixNano()) / 1e9, evs: evs}:
		default:
			s.markLost()
		}
	}
}

func (p *kvPublisher) addStream(s *kvStream) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.streams == nil {
		p.streams = map[*kvStream]struct{}{}
	}
	p.streams[s] = struct{}{}
}

func (p *kvPublisher) removeStream(s *kvStream) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.streams, s)
}

// streamKVEvents serves one SubscribeKvEvents call until the client goes away or a batch is lost.
func (e *Engine) streamKVEvents(ctx context.Context, req *smgcommonpb.SubscribeKvEventsRequest, send func(*smgcommonpb.KvEventBatch) error) error {
	if req.GetStartSequenceNumber() != 0 {
		return connect.NewError(connect.CodeOutOfRange, errors.New("start_sequence_number must be 0: the relay keeps no history between calls"))
	}
	e.mu.Lock()
	pubs := append([]*kvPublisher(nil), e.kvPubs...)
	closing := e.baseCtx.Done() // the engine stopping ends the stream, as a server shutdown does
	e.mu.Unlock()
	if len(pubs) == 0 {
		return connect.NewError(connect.CodeFailedPrecondition, errors.New("KV events are not enabled (--kv-events-config)"))
	}
	s := &kvStream{batches: make(chan kvStreamBatch, kvStreamBuffer), lost: make(chan struct{})}
	for _, p := range pubs {
		p.addStream(s)
		defer p.removeStream(s)
	}
	blockSize := e.cfg.BlockSize
	for seq := uint64(1); ; seq++ {
		select {
		case <-ctx.Done():
			return nil
		case <-closing:
			return connect.NewError(connect.CodeUnavailable, errors.New("engine shutting down"))
		case <-s.lost:
			return connect.NewError(connect.CodeDataLoss, errors.New("a KV event batch was lost; resubscribe from 0"))
		case b := <-s.batches:
			rank := int32(b.rank)
			out := &smgcommonpb.KvEventBatch{SequenceNumber: seq, Timestamp: b.ts, DpRank: &rank}
			for i, ev := range b.evs {
				out.Events = append(out.Events, kvEventProto(uint64(i+1), ev, blockSize))
			}
			if err := send(out); err != nil {
				return err
			}
		}
	}
}

// kvEventProto converts one cache event: a stored run becomes its blocks, each with its tokens.
func kvEventProto(id uint64, ev kvEvent, blockSize int) *smgcommonpb.KvCacheEvent {
	out := &smgcommonpb.KvCacheEvent{EventId: id}
	switch ev.kind {
	case 's':
		st := &smgcommonpb.KvBlocksStored{}
		if ev.hasParent {
			parent := int64(ev.parent)
			st.ParentBlockHash = &parent
		}
		for i, k := range ev.keys {
			lo, hi := min(i*blockSize, len(ev.ids)), min((i+1)*blockSize, len(ev.ids))
			st.Blocks = append(st.Blocks, &smgcommonpb.KvBlock{BlockHash: int64(k), TokenIds: ev.ids[lo:hi], BlockSize: int32(blockSize)})
		}
		out.Data = &smgcommonpb.KvCacheEvent_Stored{Stored: st}
	case 'r':
		hashes := make([]int64, len(ev.keys))
		for i, k := range ev.keys {
			hashes[i] = int64(k)
		}
		out.Data = &smgcommonpb.KvCacheEvent_Removed{Removed: &smgcommonpb.KvBlocksRemoved{BlockHashes: hashes}}
	default:
		out.Data = &smgcommonpb.KvCacheEvent_Cleared{Cleared: &smgcommonpb.KvCacheCleared{}}
	}
	return out
}

// SubscribeKvEvents streams the engine's KV events (SGLang's servicer).
func (s sglangServicer) SubscribeKvEvents(ctx context.Context, req *smgcommonpb.SubscribeKvEventsRequest, stream *connect.ServerStream[smgcommonpb.KvEventBatch]) error {
	return s.g.e.streamKVEvents(ctx, req, stream.Send)
}

// SubscribeKvEvents streams the engine's KV events (vLLM's servicer).
func (s vllmServicer) SubscribeKvEvents(ctx context.Context, req *smgcommonpb.SubscribeKvEventsRequest, stream *connect.ServerStream[smgcommonpb.KvEventBatch]) error {
	return s.g.e.streamKVEvents(ctx, req, stream.Send)
}
