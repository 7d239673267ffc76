package sim

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicegw/sluice/internal/zmqnet"
)

// KV-cache events, published as the engine the simulator imitates publishes them: vLLM's
// ZmqEventPublisher (vllm/distributed/kv_events.py; enabled by --kv-events-config, whose fields are in
// vllm/config/kv_events.py) and SGLang's copy of it (python/sglang/srt/disaggregation/kv_events.py,
// fed by python/sglang/srt/mem_cache/events.py). Per DP rank: a PUB socket sending [topic, seq
// (8-byte big-endian, from 0), msgpack KVEventBatch] and a ROUTER replay socket answering
// [identity, "", start_seq] with [identity, "", seq, payload] for each buffered batch with seq >=
// start_seq, then [identity, "", -1, ""]. Rank r listens on the configured ports + r, as
// offset_endpoint_port does.
//
// Encoding: a vLLM engine sends msgspec's map form (current vllm/distributed/kv_events.py declares
// its Structs without array_like), an SGLang engine the array_like form (its Structs declare
// array_like=True): see encodeKVBatch. Events come from the rank's prefix cache: one BlockStored per
// run of newly cached blocks (parent_block_hash linking it to the block before), one BlockRemoved per
// evicted block, AllBlocksCleared on /flush_cache. Block hashes are the cache's own chained 64-bit
// keys (vLLM hashes with sha256 by default; an int is what its older releases and SGLang send).
//
// Simplifications: a batch is published as soon as events are pending (engines publish once per
// scheduler step), and the queue is unbounded (vLLM's max_queue_size blocks the scheduler when full).

// KVEventsConfig turns on the KV-event publisher (vLLM --kv-events-config, SGLang --kv-events-config).
type KVEventsConfig struct {
	Enabled bool
	// Port is rank 0's PUB port (vLLM's default endpoint is tcp://*:5557); rank r uses Port + r. 0 picks
	// free ports.
	Port int
	// ReplayPort is rank 0's ROUTER replay port; 0 picks free ports; -1: no replay socket.
	ReplayPort int
	Topic      string // default "" (every subscriber receives every batch)
	// BufferSteps is how many batches the replay socket keeps (vLLM's buffer_steps), default 10000.
	BufferSteps int
	// DropEvery is a fault: every DropEvery-th batch is buffered for replay but not sent on PUB, as a
	// PUB high-water mark drops it; 0 never.
	DropEvery int
}

func (c *KVEventsConfig) applyDefaults() {
	if c.BufferSteps == 0 {
		c.BufferSteps = 10000
	}
}

func (c *KVEventsConfig) validate() error {
	if !c.Enabled {
		return nil
	}
	switch {
	case c.Port < 0 || c.Port > 65535 || c.ReplayPort < -1 || c.ReplayPort > 65535:
		return fmt.Errorf("kv events ports %d/%d out of range", c.Port, c.ReplayPort)
	case c.BufferSteps < 1:
		return fmt.Errorf("kv events buffer steps %d < 1", c.BufferSteps)
	case c.DropEvery < 0:
		return fmt.Errorf("kv events drop-every %d < 0", c.DropEvery)
	}
	return nil
}

// KVEventsEndpoint is where one rank publishes, as a subscriber dials it.
type KVEventsEndpoint struct {
	Rank      int
	Publisher string // tcp://host:port
	Replay    string // "" without a replay socket
}

// KVEventsEndpoints lists each rank's endpoints once started; nil when events are off.
func (e *Engine) KVEventsEndpoints() []KVEventsEndpoint {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []KVEventsEndpoint
	for _, p := range e.kvPubs {
		ep := KVEventsEndpoint{Rank: p.rank, Publisher: "tcp://" + p.pubAddr}
		if p.replayAddr != "" {
			ep.Replay = "tcp://" + p.replayAddr
		}
		out = append(out, ep)
	}
	return out
}

// DropKVEvents is a fault for tests: rank's next n batches are not sent on PUB; with replayable they
// are still buffered for replay (a PUB drop), without they are lost for good (the replay buffer
// rolled over).
func (e *Engine) DropKVEvents(rank, n int, replayable bool) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if rank < 0 || rank >= len(e.kvPubs) {
		return fmt.Errorf("sim: no kv events publisher for rank %d", rank)
	}
	p := e.kvPubs[rank]
	p.mu.Lock()
	p.dropNext, p.dropReplayable = n, replayable
	p.mu.Unlock()
	return nil
}

// KVEventsBatches reports how many batches rank has numbered so far (its next sequence number),
// published or dropped; tests wait on it to keep one request's events in one batch.
func (e *Engine) KVEventsBatches(rank int) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if rank < 0 || rank >= len(e.kvPubs) {
		return 0
	}
	p := e.kvPubs[rank]
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seq
}

// startKVEventsLocked opens every rank's sockets and hooks the publishers to the ranks' caches.
func (e *Engine) startKVEventsLocked() error {
	kc := e.cfg.KVEvents
	if !kc.Enabled {
		return nil
	}
	for _, r := range e.ranks {
		port := func(base int) int {
			if base <= 0 {
				return 0
			}
			return base + r.index
		}
		p, err := newKVPublisher(e.baseCtx, r.index, e.cfg.BlockSize, e.cfg.Host, port(kc.Port), port(kc.ReplayPort), kc, e.cfg.Protocol == ProtocolSGLang)
		if err != nil {
			e.stopKVEventsLocked()
			return err
		}
		e.kvPubs = append(e.kvPubs, p)
		r.cache.setEvents(p)
		e.logger.Info("sim kv events", "rank", r.index, "publisher", "tcp://"+p.pubAddr, "replay", p.replayAddr)
	}
	return nil
}

// stopKVEventsLocked detaches and closes the publishers and waits for their goroutines.
func (e *Engine) stopKVEventsLocked() {
	for i, p := range e.kvPubs {
		e.ranks[i].cache.setEvents(nil)
		p.close()
	}
	e.kvPubs = nil
}

// kvEvent is one event awaiting publication.
type kvEvent struct {
	kind      byte // 's' stored, 'r' removed, 'c' cleared
	keys      []uint64
	parent    uint64
	hasParent bool
	ids       []uint32
}

type bufferedBatch struct {
	seq     int64
	payload []byte
}

// kvPublisher is one rank's PUB and ROUTER sockets, its pending events and its replay buffer.
type kvPublisher struct {
	rank       int
	blockSize  int
	topic      []byte
	sglang     bool
	dropEvery  int
	pub        zmq4.Socket
	router     zmq4.Socket
	pubAddr    string
	replayAddr string
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	wake       chan struct{}

	mu             sync.Mutex // guards the fields below
	pending        []kvEvent
	buf            []bufferedBatch // ring of cap BufferSteps
	head           int             // oldest entry of buf once full
	seq            int64
	dropNext       int
	dropReplayable bool
	streams        map[*kvStream]struct{} // the engine gRPC's SubscribeKvEvents calls (grpc_kvevents.go)
}

func newKVPublisher(parent context.Context, rank, blockSize int, host string, pubPort, replayPort int, kc KVEventsConfig, sglang bool) (*kvPublisher, error) {
	ctx, cancel := context.WithCancel(parent)
	quiet := zmq4.WithLogger(log.New(io.Discard, "", 0))
	p := &kvPublisher{
		rank: rank, blockSize: blockSize, topic: []byte(kc.Topic), sglang: sglang, dropEvery: kc.DropEvery,
		cancel: cancel, wake: make(chan struct{}, 1),
		buf: make([]bufferedBatch, 0, min(kc.BufferSteps, 1024)),
	}
	p.pub = zmq4.NewPub(ctx, quiet)
	pubEP, err := zmqnet.Endpoint("tcp://" + net.JoinHostPort(host, strconv.Itoa(pubPort)))
	if err == nil {
		err = p.pub.Listen(pubEP)
	}
	if err != nil {
		cancel()
		_ = p.pub.Close()
		return nil, fmt.Errorf("sim: kv events PUB: %w", err)
	}
	p.pubAddr = p.pub.Addr().String()
	if kc.ReplayPort >= 0 {
		p.router = zmq4.NewRouter(ctx, quiet)
		replayEP, err := zmqnet.Endpoint("tcp://" + net.JoinHostPort(host, strconv.Itoa(replayPort)))
		if err == nil {
			err = p.router.Listen(replayEP)
		}
		if err != nil {
			cancel()
			_ = p.pub.Close()
			_ = p.router.Close()
			return nil, fmt.Errorf("sim: kv events ROUTER: %w", err)
		}
		p.replayAddr = p.router.Addr().String()
		p.wg.Add(1)
		go p.serveReplay(ctx)
	}
	p.wg.Add(1)
	go p.run(ctx, kc.BufferSteps)
	return p, nil
}

func (p *kvPublisher) close() {
	p.cancel()
	_ = p.pub.Close()
	if p.router != nil {
		_ = p.router.Close()
	}
	p.wg.Wait()
}

// The cache calls these under its own lock, in the order the changes happen.

func (p *kvPublisher) stored(parent uint64, hasParent bool, keys []uint64, ids []uint32) {
	p.push(kvEvent{kind: 's', parent: parent, hasParent: hasParent, keys: keys, ids: ids})
}
func (p *kvPublisher) removed(keys []uint64) { p.push(kvEvent{kind: 'r', keys: keys}) }
func (p *kvPublisher) cleared()              { p.push(kvEvent{kind: 'c'}) }

func (p *kvPublisher) push(ev kvEvent) {
	p.mu.Lock()
	p.pending = append(p.pending, ev)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// run publishes pending events as one batch each time it wakes.
func (p *kvPublisher) run(ctx context.Context, bufferSteps int) {
	defer p.wg.Done()
	var enc bytes.Buffer
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		}
		p.mu.Lock()
		evs := p.pending
		p.pending = nil
		p.mu.Unlock()
		if len(evs) == 0 {
			continue
		}
		enc.Reset()
		if err := encodeKVBatch(&enc, evs, p.blockSize, p.rank, p.sglang); err != nil {
			continue // cannot happen with a bytes.Buffer
		}
		payload := bytes.Clone(enc.Bytes())

		p.mu.Lock()
		seq := p.seq
		p.seq++
		send, keep := true, true
		switch {
		case p.dropNext > 0:
			p.dropNext--
			send, keep = false, p.dropReplayable
		case p.dropEvery > 0 && (seq+1)%int64(p.dropEvery) == 0:
			send = false
		}
		if keep {
			p.bufferLocked(bufferedBatch{seq, payload}, bufferSteps)
		}
		p.relayLocked(evs, send || keep)
		p.mu.Unlock()
		if send {
			_ = p.pub.Send(zmq4.NewMsgFrom(p.topic, seqFrame(seq), payload))
		}
	}
}

func (p *kvPublisher) bufferLocked(b bufferedBatch, steps int) {
	if len(p.buf) < steps {
		p.buf = append(p.buf, b)
		return
	}
	p.buf[p.head] = b
	p.head = (p.head + 1) % steps
}

// serveReplay answers replay requests from the buffer, as _service_replay does.
func (p *kvPublisher) serveReplay(ctx context.Context) {
	defer p.wg.Done()
	for {
		msg, err := p.router.Recv()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, context.Canceled) {
				return
			}
			continue
		}
		f := msg.Frames
		if len(f) != 3 || len(f[2]) != 8 {
			continue // vLLM logs "Invalid replay request" and ignores it
		}
		id, start := f[0], int64(binary.BigEndian.Uint64(f[2]))
		p.mu.Lock()
		var out []bufferedBatch
		for i := range p.buf {
			b := p.buf[(p.head+i)%len(p.buf)]
			if b.seq >= start {
				out = append(out, b)
			}
		}
		p.mu.Unlock()
		for _, b := range out {
			if err := p.router.Send(zmq4.NewMsgFrom(id, []byte{}, seqFrame(b.seq), b.payload)); err != nil {
				break
			}
		}
		_ = p.router.Send(zmq4.NewMsgFrom(id, []byte{}, seqFrame(-1), []byte{}))
	}
}

func seqFrame(seq int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(seq)) }

// encodeKVBatch writes a KVEventBatch as msgspec would: the array_like form for SGLang ([ts, events,
// attn_dp_rank], events [tag, fields...]), the map form for vLLM ({"ts", "events",
// "data_parallel_rank"}, events {"type": tag, fields...}).
func encodeKVBatch(w io.Writer, evs []kvEvent, blockSize, rank int, arrays bool) error {
	enc := msgpack.NewEncoder(w)
	ts := float64(time.Now().UnixNano()) / 1e9
	var err error
	put := func(f func() error) {
		if err == nil {
			err = f()
		}
	}
	key := func(k string) {
		if !arrays {
			put(func() error { return enc.EncodeString(k) })
		}
	}
	if arrays {
		put(func() error { return enc.EncodeArrayLen(3) })
	} else {
		put(func() error { return enc.EncodeMapLen(3) })
	}
	key("ts")
	put(func() error { return enc.EncodeFloat64(ts) })
	key("events")
	put(func() error { return enc.EncodeArrayLen(len(evs)) })
	for i := range evs {
		ev := &evs[i]
		switch ev.kind {
		case 's':
			bs := blockSize
			if len(ev.keys) > 0 {
				bs = len(ev.ids) / len(ev.keys)
			}
			if arrays {
				put(func() error { return enc.EncodeArrayLen(8) })
				put(func() error { return enc.EncodeString("BlockStored") })
			} else {
				put(func() error { return enc.EncodeMapLen(8) })
				put(func() error { return enc.EncodeString("type") })
				put(func() error { return enc.EncodeString("BlockStored") })
			}
			key("block_hashes")
			put(func() error { return encodeKeys(enc, ev.keys) })
			key("parent_block_hash")
			if ev.hasParent {
				put(func() error { return enc.EncodeUint(ev.parent) })
			} else {
				put(enc.EncodeNil)
			}
			key("token_ids")
			put(func() error { return enc.EncodeArrayLen(len(ev.ids)) })
			for _, id := range ev.ids {
				put(func() error { return enc.EncodeUint(uint64(id)) })
			}
			key("block_size")
			put(func() error { return enc.EncodeInt(int64(bs)) })
			key("lora_id")
			put(enc.EncodeNil)
			key("medium")
			put(func() error { return enc.EncodeString("GPU") })
			key("lora_name")
			put(enc.EncodeNil)
		case 'r':
			if arrays {
				put(func() error { return enc.EncodeArrayLen(3) })
				put(func() error { return enc.EncodeString("BlockRemoved") })
			} else {
				put(func() error { return enc.EncodeMapLen(3) })
				put(func() error { return enc.EncodeString("type") })
				put(func() error { return enc.EncodeString("BlockRemoved") })
			}
			key("block_hashes")
			put(func() error { return encodeKeys(enc, ev.keys) })
			key("medium")
			put(func() error { return enc.EncodeString("GPU") })
		case 'c':
			if arrays {
				put(func() error { return enc.EncodeArrayLen(1) })
				put(func() error { return enc.EncodeString("AllBlocksCleared") })
			} else {
				put(func() error { return enc.EncodeMapLen(1) })
				put(func() error { return enc.EncodeString("type") })
				put(func() error { return enc.EncodeString("AllBlocksCleared") })
			}
		}
	}
	if arrays {
		put(func() error { return enc.EncodeInt(int64(rank)) })
	} else {
		put(func() error { return enc.EncodeString("data_parallel_rank") })
		put(func() error { return enc.EncodeInt(int64(rank)) })
	}
	return err
}

func encodeKeys(enc *msgpack.Encoder, keys []uint64) error {
	if err := enc.EncodeArrayLen(len(keys)); err != nil {
		return err
	}
	for _, k := range keys {
		if err := enc.EncodeUint(k); err != nil {
			return err
		}
	}
	return nil
}
