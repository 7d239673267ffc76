package kvevents_test

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	smgcommonpb "github.com/sluicegw/sluice/gen/smg/grpc/common"
	"github.com/sluicegw/sluice/internal/kvevents"
)

func grpcDial(url string) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+strings.TrimPrefix(url, "grpc://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// scriptedStream answers Recv from a list, then err.
type scriptedStream struct {
	batches []*smgcommonpb.KvEventBatch
	err     error
}

func (s *scriptedStream) Recv() (*smgcommonpb.KvEventBatch, error) {
	if len(s.batches) == 0 {
		return nil, s.err
	}
	b := s.batches[0]
	s.batches = s.batches[1:]
	return b, nil
}

func stored(seq uint64, rank int32, parent *int64, hashes []int64, from uint32) *smgcommonpb.KvEventBatch {
	st := &smgcommonpb.KvBlocksStored{ParentBlockHash: parent}
	for i, h := range hashes {
		base := from + uint32(i)*4
		st.Blocks = append(st.Blocks, &smgcommonpb.KvBlock{BlockHash: h, TokenIds: []uint32{base, base + 1, base + 2, base + 3}, BlockSize: 4})
	}
	return &smgcommonpb.KvEventBatch{SequenceNumber: seq, DpRank: &rank,
		Events: []*smgcommonpb.KvCacheEvent{{EventId: 1, Data: &smgcommonpb.KvCacheEvent_Stored{Stored: st}}}}
}

// The stream's batches land in their rank's shard, chained by parent hash (negative int64 hashes
// included); a stream lost part way is resumed after the batch applied last, and a gap in the
// stream's numbering clears the worker.
func TestGRPCSubscriberSequence(t *testing.T) {
	parent := int64(-7)
	sessions := []*scriptedStream{
		{batches: []*smgcommonpb.KvEventBatch{stored(1, 0, nil, []int64{-7}, 1), stored(2, 1, nil, []int64{9}, 100), stored(3, 0, &parent, []int64{-8}, 5)},
			err: status.Error(codes.Unavailable, "connection reset")},
		// Resumed after 3; then a hole (5 missing).
		{batches: []*smgcommonpb.KvEventBatch{stored(4, 0, nil, []int64{40}, 200), stored(6, 0, nil, []int64{60}, 300)},
			err: status.Error(codes.Unavailable, "connection reset")},
	}
	var mu sync.Mutex
	var starts []uint64
	idx, err := kvevents.NewIndex(kvevents.IndexConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	sub, err := kvevents.NewGRPCSubscriber(kvevents.GRPCSubscriberConfig{Worker: "w", Index: idx, Metrics: newCountingMetrics(),
		Subscribe: func(_ context.Context, start uint64) (kvevents.KVStream, error) {
			mu.Lock()
			defer mu.Unlock()
			starts = append(starts, start)
			if len(starts) > len(sessions) {
				close(done)
				return &scriptedStream{err: io.EOF}, nil
			}
			return sessions[len(starts)-1], nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- sub.Run(ctx) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the subscriber did not subscribe three times")
	}
	cancel()
	<-ran
	mu.Lock()
	defer mu.Unlock()
	if starts[0] != 0 || starts[1] != 3 || starts[2] != 6 {
		t.Errorf("subscribed from %v, want 0, then after 3, then after 6", starts)
	}
	blocks := func(rank int, ids ...uint32) int { b, _ := idx.MatchedPrefix("w", rank, ids); return b }
	if n := blocks(0, seqTokens(200, 203)...); n != 0 {
		t.Errorf("batch 4 survived the gap before 6: %d blocks", n)
	}
	if n := blocks(0, seqTokens(300, 303)...); n != 1 {
		t.Errorf("batch 6, after the gap, has %d blocks indexed, want 1", n)
	}
	if n := blocks(0, seqTokens(1, 8)...); n != 0 {
		t.Errorf("rank 0's chain from before the gap has %d blocks, want it cleared", n)
	}
}

// Before the gap, the chain and ranks are as the stream said.
func TestGRPCSubscriberApplies(t *testing.T) {
	parent := int64(-7)
	idx, err := kvevents.NewIndex(kvevents.IndexConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	applied := make(chan struct{})
	sub, err := kvevents.NewGRPCSubscriber(kvevents.GRPCSubscriberConfig{Worker: "w", Index: idx,
		Subscribe: func(context.Context, uint64) (kvevents.KVStream, error) {
			select {
			case <-applied:
				<-ctx.Done()
				return nil, ctx.Err()
			default:
				close(applied)
			}
			return &scriptedStream{batches: []*smgcommonpb.KvEventBatch{stored(1, 0, nil, []int64{-7}, 1), stored(2, 1, nil, []int64{9}, 100), stored(3, 0, &parent, []int64{-8}, 5)},
				err: status.Error(codes.Unavailable, "gone")}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- sub.Run(ctx) }()
	eventually(t, "the chain indexed", func() bool { b, _ := idx.MatchedPrefix("w", 0, seqTokens(1, 8)); return b == 2 })
	if b, _ := idx.MatchedPrefix("w", 1, seqTokens(100, 103)); b != 1 {
		t.Errorf("rank 1 has %d blocks, want its batch's 1", b)
	}
	cancel()
	<-ran
}
