package kvevents

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// The wire format, as vLLM's ZmqEventPublisher writes it (vllm/distributed/kv_events.py,
// _publisher_thread and _service_replay; SGLang's python/sglang/srt/disaggregation/kv_events.py is the
// same code):
//
//   - PUB socket, one multipart message per batch: [topic, seq, payload]. topic is the configured
//     `topic` (default ""), seq an 8-byte big-endian counter starting at 0 per publisher process,
//     payload one msgspec-msgpack encoded KVEventBatch.
//   - ROUTER replay socket (`replay_endpoint`): a request [identity, "", start_seq] (an 8-byte
//     big-endian start) is answered with [identity, "", seq, payload] for every buffered batch whose
//     seq >= start_seq (the last `buffer_steps`, default 10000), then [identity, "", -1 as 8 signed
//     big-endian bytes, ""]. A DEALER sends ["", start_seq] and reads ["", seq, payload].
//   - Data-parallel rank r publishes on the configured port + r (offset_endpoint_port).
//
// The payload's encoding depends on the engine's version. msgspec encodes a Struct declared with
// array_like=True as an array of its fields in order, a tagged one (tag=True) with the class name
// first, and with omit_defaults=True drops trailing fields equal to their defaults; without
// array_like it encodes a map from field names, the tag under "type". SGLang and vLLM up to its
// array_like removal declare array_like=True:
//
//	KVEventBatch     [ts float, events [...], data_parallel_rank int?]   (SGLang: attn_dp_rank)
//	BlockStored      ["BlockStored", block_hashes [...], parent_block_hash, token_ids [...],
//	                  block_size, lora_id, medium?, lora_name?, ...]
//	BlockRemoved     ["BlockRemoved", block_hashes [...], medium?, ...]
//	AllBlocksCleared ["AllBlocksCleared"]
//
// Current vLLM (vllm/distributed/kv_events.py without array_like) sends maps with the same field
// names. Both are accepted. Block hashes are ints (vLLM before ExternalBlockHash, SGLang) or bytes
// (vLLM's sha256 hashes); both are kept as opaque engine hashes. Fields we do not use (lora_id,
// extra_keys, group_idx, kv_cache_spec_*, cache_salt, session_id) are skipped.

// EventKind is the type of one KV-cache event.
type EventKind uint8

// The event kinds, as their msgspec tags name them.
const (
	BlockStored EventKind = iota + 1
	BlockRemoved
	AllBlocksCleared
)

func (k EventKind) String() string {
	switch k {
	case BlockStored:
		return "BlockStored"
	case BlockRemoved:
		return "BlockRemoved"
	case AllBlocksCleared:
		return "AllBlocksCleared"
	}
	return "unknown"
}

// EngineHash is an engine's block hash, opaque: an int or a byte string, kept as bytes with a type
// prefix so an int and a byte string never compare equal.
type EngineHash string

// IntHash is the EngineHash of an integer block hash (signed or unsigned 64-bit, as msgpack carries it).
func IntHash(h uint64) EngineHash {
	var b [9]byte
	b[0] = 'i'
	binary.BigEndian.PutUint64(b[1:], h)
	return EngineHash(b[:])
}

// BytesHash is the EngineHash of a byte-string block hash.
func BytesHash(h []byte) EngineHash { return EngineHash("b" + string(h)) }

// Event is one decoded KV-cache event.
type Event struct {
	Kind        EventKind
	BlockHashes []EngineHash
	// Parent is the engine hash of the block before the first of BlockHashes; HasParent is false when
	// the blocks start at the root (parent_block_hash None).
	Parent    EngineHash
	HasParent bool
	TokenIDs  []uint32 // BlockStored: the tokens of all BlockHashes, BlockSize per block
	BlockSize int
	Medium    string // "" when absent (GPU)
	LoRA      bool   // stored under a LoRA adapter (lora_id or lora_name set)
}

// Batch is one decoded KVEventBatch.
type Batch struct {
	TS      float64 // publisher wall clock, seconds since the epoch
	Events  []Event
	DPRank  int
	HasRank bool
}

// ParseFrames splits a PUB message into its sequence number and payload.
func ParseFrames(frames [][]byte) (seq int64, payload []byte, err error) {
	if len(frames) != 3 {
		return 0, nil, fmt.Errorf("%w: %w (got %d)", ErrMalformed, ErrFrameCount, len(frames))
	}
	if len(frames[1]) != 8 {
		return 0, nil, fmt.Errorf("%w: %w (got %d)", ErrMalformed, ErrSeqLength, len(frames[1]))
	}
	return int64(binary.BigEndian.Uint64(frames[1])), frames[2], nil
}

// SeqBytes is seq as the 8-byte big-endian frame the protocol uses.
func SeqBytes(seq int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(seq))
}

// DecodeBatch decodes a KVEventBatch payload in either msgspec encoding (see the top of this file).
func DecodeBatch(payload []byte) (*Batch, error) {
	d := msgpack.NewDecoder(bytes.NewReader(payload))
	b, err := decodeBatch(d)
	if err != nil {
		return nil, fmt.Errorf("%w: %w: %w", ErrMalformed, ErrPayload, err)
	}
	return b, nil
}

func decodeBatch(d *msgpack.Decoder) (*Batch, error) {
	c, err := d.PeekCode()
	if err != nil {
		return nil, err
	}
	b := &Batch{}
	if isMap(c) {
		n, err := d.DecodeMapLen()
		if err != nil {
			return nil, err
		}
		for range n {
			k, err := d.DecodeString()
			if err != nil {
				return nil, err
			}
			switch k {
			case "ts":
				b.TS, err = d.DecodeFloat64()
			case "events":
				b.Events, err = decodeEvents(d)
			case "data_parallel_rank", "attn_dp_rank":
				b.DPRank, b.HasRank, err = decodeOptInt(d)
			default:
				err = d.Skip()
			}
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", k, err)
			}
		}
		return b, nil
	}
	n, err := d.DecodeArrayLen()
	if err != nil {
		return nil, err
	}
	if n < 2 {
		return nil, fmt.Errorf("batch array of %d fields, want [ts, events, rank?]", n)
	}
	if b.TS, err = d.DecodeFloat64(); err != nil {
		return nil, fmt.Errorf("ts: %w", err)
	}
	if b.Events, err = decodeEvents(d); err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	if n > 2 {
		if b.DPRank, b.HasRank, err = decodeOptInt(d); err != nil {
			return nil, fmt.Errorf("data_parallel_rank: %w", err)
		}
	}
	for range n - 3 {
		if err := d.Skip(); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func decodeEvents(d *msgpack.Decoder) ([]Event, error) {
	n, err := d.DecodeArrayLen()
	if err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, nil
	}
	evs := make([]Event, 0, min(n, maxPrealloc))
	for i := range n {
		ev, err := decodeEvent(d)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// storedFields and removedFields are the positional field orders of array_like events, after the tag.
var (
	storedFields  = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"}
	removedFields = []string{"block_hashes", "medium"}
)

func decodeEvent(d *msgpack.Decoder) (Event, error) {
	var ev Event
	c, err := d.PeekCode()
	if err != nil {
		return ev, err
	}
	if isMap(c) {
		n, err := d.DecodeMapLen()
		if err != nil {
			return ev, err
		}
		for range n {
			k, err := d.DecodeString()
			if err != nil {
				return ev, err
			}
			if k == "type" {
				tag, err := d.DecodeString()
				if err != nil {
					return ev, err
				}
				if ev.Kind, err = kindOf(tag); err != nil {
					return ev, err
				}
				continue
			}
			if err := decodeField(d, &ev, k); err != nil {
				return ev, fmt.Errorf("field %q: %w", k, err)
			}
		}
		if ev.Kind == 0 {
			return ev, fmt.Errorf("%w: no \"type\"", ErrUnknownEvent)
		}
		return ev, validateEvent(&ev)
	}
	n, err := d.DecodeArrayLen()
	if err != nil {
		return ev, err
	}
	if n < 1 {
		return ev, fmt.Errorf("%w: empty event array", ErrUnknownEvent)
	}
	tag, err := d.DecodeString()
	if err != nil {
		return ev, fmt.Errorf("tag: %w", err)
	}
	if ev.Kind, err = kindOf(tag); err != nil {
		return ev, err
	}
	var fields []string
	switch ev.Kind {
	case BlockStored:
		fields = storedFields
	case BlockRemoved:
		fields = removedFields
	}
	for i := range n - 1 {
		name := ""
		if i < len(fields) {
			name = fields[i]
		}
		if err := decodeField(d, &ev, name); err != nil {
			return ev, fmt.Errorf("field %d (%s): %w", i+1, name, err)
		}
	}
	return ev, validateEvent(&ev)
}

func kindOf(tag string) (EventKind, error) {
	switch tag {
	case "BlockStored":
		return BlockStored, nil
	case "BlockRemoved":
		return BlockRemoved, nil
	case "AllBlocksCleared":
		return AllBlocksCleared, nil
	}
	return 0, fmt.Errorf("%w %q", ErrUnknownEvent, tag)
}

func decodeField(d *msgpack.Decoder, ev *Event, name string) error {
	var err error
	switch name {
	case "block_hashes":
		ev.BlockHashes, err = decodeHashes(d)
	case "parent_block_hash":
		var isNil bool
		if isNil, err = peekNil(d); err == nil && !isNil {
			ev.Parent, err = decodeHash(d)
			ev.HasParent = err == nil
		}
	case "token_ids":
		ev.TokenIDs, err = decodeTokens(d)
	case "block_size":
		var n int64
		n, err = d.DecodeInt64()
		if err == nil && (n < 1 || n > math.MaxInt32) {
			err = fmt.Errorf("block_size %d out of range", n)
		}
		ev.BlockSize = int(n)
	case "medium":
		ev.Medium, err = decodeMedium(d)
	case "lora_id":
		var set bool
		_, set, err = decodeOptInt(d)
		ev.LoRA = ev.LoRA || set
	case "lora_name":
		var s string
		s, err = decodeOptString(d)
		ev.LoRA = ev.LoRA || s != ""
	default:
		err = d.Skip()
	}
	return err
}

func validateEvent(ev *Event) error {
	if ev.Kind != BlockStored {
		return nil
	}
	if ev.BlockSize < 1 {
		return fmt.Errorf("BlockStored without block_size")
	}
	if len(ev.TokenIDs) != len(ev.BlockHashes)*ev.BlockSize {
		return fmt.Errorf("BlockStored with %d token ids for %d blocks of %d", len(ev.TokenIDs), len(ev.BlockHashes), ev.BlockSize)
	}
	return nil
}

func decodeHashes(d *msgpack.Decoder) ([]EngineHash, error) {
	n, err := d.DecodeArrayLen()
	if err != nil || n <= 0 {
		return nil, err
	}
	hs := make([]EngineHash, 0, min(n, maxPrealloc))
	for range n {
		h, err := decodeHash(d)
		if err != nil {
			return nil, err
		}
		hs = append(hs, h)
	}
	return hs, nil
}

func decodeHash(d *msgpack.Decoder) (EngineHash, error) {
	c, err := d.PeekCode()
	if err != nil {
		return "", err
	}
	switch {
	case c == msgpcode.Bin8 || c == msgpcode.Bin16 || c == msgpcode.Bin32 || msgpcode.IsString(c):
		b, err := d.DecodeBytes()
		return BytesHash(b), err
	case c == msgpcode.Uint64:
		u, err := d.DecodeUint64()
		return IntHash(u), err
	default:
		i, err := d.DecodeInt64()
		return IntHash(uint64(i)), err
	}
}

func decodeTokens(d *msgpack.Decoder) ([]uint32, error) {
	n, err := d.DecodeArrayLen()
	if err != nil || n <= 0 {
		return nil, err
	}
	ids := make([]uint32, 0, min(n, maxPrealloc))
	for i := range n {
		v, err := d.DecodeInt64()
		if err != nil {
			// SGLang's bigram (EAGLE) pages carry tuples: not token ids we can match.
			return nil, fmt.Errorf("token %d: %w", i, err)
		}
		if v < 0 || v > math.MaxUint32 {
			return nil, fmt.Errorf("token %d: id %d out of range", i, v)
		}
		ids = append(ids, uint32(v))
	}
	return ids, nil
}

func peekNil(d *msgpack.Decoder) (bool, error) {
	c, err := d.PeekCode()
	if err != nil {
		return false, err
	}
	if c == msgpcode.Nil {
		return true, d.DecodeNil()
	}
	return false, nil
}

func decodeOptInt(d *msgpack.Decoder) (int, bool, error) {
	if isNil, err := peekNil(d); err != nil || isNil {
		return 0, false, err
	}
	v, err := d.DecodeInt64()
	if err != nil {
		return 0, false, err
	}
	if v < math.MinInt32 || v > math.MaxInt32 {
		return 0, false, fmt.Errorf("%d out of range", v)
	}
	return int(v), true, nil
}

// decodeMedium reads a medium name; an integer (an IntEnum, should an engine send one) becomes
// "medium:<n>", an unknown tier, rather than failing the batch.
func decodeMedium(d *msgpack.Decoder) (string, error) {
	c, err := d.PeekCode()
	if err != nil {
		return "", err
	}
	if msgpcode.IsFixedNum(c) || (c >= msgpcode.Uint8 && c <= msgpcode.Int64) {
		n, err := d.DecodeInt64()
		return "medium:" + strconv.FormatInt(n, 10), err
	}
	return decodeOptString(d)
}

func decodeOptString(d *msgpack.Decoder) (string, error) {
	if isNil, err := peekNil(d); err != nil || isNil {
		return "", err
	}
	return d.DecodeString()
}

// maxPrealloc caps what a length prefix can make us allocate before the elements arrive: a
// malformed frame claiming 2^32 elements must fail on its missing bytes, not on memory.
const maxPrealloc = 4096

func isMap(c byte) bool {
	return msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32
}
