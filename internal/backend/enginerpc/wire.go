package enginerpc

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	vllmpb "github.com/sluicegw/sluice/gen/vllm/grpc/engine"
)

// The Generate stream's messages are decoded by hand, straight into an event: the generic decoder
// built a GenerateResponse, its oneof wrapper and its chunk for every streamed token, and its
// reflection was the largest part of the gateway's own CPU per streamed frame after the HTTP/2 reads
// (issue #35). The decoding keeps protobuf's semantics (TestWireEventMatchesGeneric, FuzzWireEvent
// compare it with the generic decoder): unknown fields and fields of an unexpected wire type are
// skipped, repeated ids packed or not, the last of a oneof wins, a submessage given twice is merged,
// strings must be UTF-8. Logprobs, asked for rarely, go through the generic decoder of their
// submessage.

// wireLayout is one protocol's field numbers of GenerateResponse, its chunk and its Complete (the
// numbers the conformance test pins in internal/enginegrpc).
type wireLayout struct {
	requestID, chunk, complete protowire.Number // GenerateResponse (requestID 0: none)

	// GenerateStreamChunk's
	chIDs, chPrompt, chCompletion, chCached, chOutLP, chInLP, chIndex protowire.Number
	// GenerateComplete's (kvJSON 0: none)
	coIDs, coFinish, coPrompt, coCompletion, coCached, coOutLP, coInLP, coIndex,
	coMatchedID, coMatchedStr, coKVJSON protowire.Number

	// outLP and inLP decode an OutputLogProbs and an InputLogProbs.
	outLP, inLP func([]byte) ([]tokenLP, error)
}

var sglangLayout = &wireLayout{
	requestID: 1, chunk: 2, complete: 3,
	chIDs: 1, chPrompt: 2, chCompletion: 3, chCached: 4, chOutLP: 5, chInLP: 7, chIndex: 8,
	coIDs: 1, coFinish: 2, coPrompt: 3, coCompletion: 4, coCached: 5, coOutLP: 6, coInLP: 10, coIndex: 11,
	coMatchedID: 8, coMatchedStr: 9,
	outLP: func(b []byte) ([]tokenLP, error) {
		var o sglangpb.OutputLogProbs
		if err := proto.Unmarshal(b, &o); err != nil {
			return nil, err
		}
		return outputLPs(o.GetTokenLogprobs(), o.GetTokenIds(), o.GetTopLogprobs()), nil
	},
	inLP: func(b []byte) ([]tokenLP, error) {
		var in sglangpb.InputLogProbs
		if err := proto.Unmarshal(b, &in); err != nil {
			return nil, err
		}
		return sglangInputLPs(&in), nil
	},
}

var vllmLayout = &wireLayout{
	chunk: 1, complete: 2,
	chIDs: 1, chPrompt: 2, chCompletion: 3, chCached: 4, chOutLP: 5, chInLP: 6, chIndex: 7,
	coIDs: 1, coFinish: 2, coPrompt: 3, coCompletion: 4, coCached: 5, coOutLP: 6, coInLP: 7, coIndex: 8,
	coMatchedID: 10, coMatchedStr: 11, coKVJSON: 12,
	outLP: func(b []byte) ([]tokenLP, error) {
		var o vllmpb.OutputLogProbs
		if err := proto.Unmarshal(b, &o); err != nil {
			return nil, err
		}
		return outputLPs(o.GetTokenLogprobs(), o.GetTokenIds(), o.GetTopLogprobs()), nil
	},
	inLP: func(b []byte) ([]tokenLP, error) {
		var in vllmpb.InputLogProbs
		if err := proto.Unmarshal(b, &in); err != nil {
			return nil, err
		}
		return vllmInputLPs(&in), nil
	},
}

var errWire = errors.New("malformed GenerateResponse")

// decode reads one GenerateResponse into ev. Without a chunk it is a Complete, as GetComplete of a
// response without either is an empty Complete.
func (l *wireLayout) decode(b []byte, ev *event) error {
	var member protowire.Number // the oneof's last member seen
	var body []byte             // its bytes, every occurrence's joined (protobuf merges them)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errWire
		}
		b = b[n:]
		if typ == protowire.BytesType && (num == l.chunk || num == l.complete || (num == l.requestID && l.requestID != 0)) {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errWire
			}
			b = b[n:]
			switch num {
			case l.requestID:
				if !utf8.Valid(v) {
					return errWire
				}
			case member:
				body = append(body[:len(body):len(body)], v...) // copies: never writes into b
			default:
				member, body = num, v
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return errWire
		}
		b = b[n:]
	}
	*ev = event{}
	if member == l.chunk {
		return l.decodeMember(body, ev, false)
	}
	ev.complete = true
	return l.decodeMember(body, ev, true)
}

// decodeMember reads a GenerateStreamChunk (complete false) or a GenerateComplete.
func (l *wireLayout) decodeMember(b []byte, ev *event, complete bool) error {
	f := memberFields{l.chIDs, l.chPrompt, l.chCompletion, l.chCached, l.chOutLP, l.chInLP, l.chIndex, 0, 0, 0, 0}
	if complete {
		f = memberFields{l.coIDs, l.coPrompt, l.coCompletion, l.coCached, l.coOutLP, l.coInLP, l.coIndex,
			l.coFinish, l.coMatchedID, l.coMatchedStr, l.coKVJSON}
	}
	var outLP, inLP []byte
	var hasOut, hasIn bool
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errWire
		}
		b = b[n:]
		var err error
		switch {
		case num == f.ids && typ == protowire.BytesType:
			var v []byte
			if v, n = protowire.ConsumeBytes(b); n >= 0 {
				ev.ids, err = appendPacked(ev.ids, v)
			}
		case typ == protowire.VarintType && num != 0 && (num == f.ids || num == f.prompt || num == f.completion || num == f.cached || num == f.index || num == f.matchedID):
			var v uint64
			if v, n = protowire.ConsumeVarint(b); n >= 0 {
				f.setVarint(ev, num, uint32(v))
			}
		case typ == protowire.BytesType && num != 0 && (num == f.finish || num == f.matchedStr || num == f.kvJSON):
			var v []byte
			if v, n = protowire.ConsumeBytes(b); n >= 0 {
				err = f.setString(ev, num, v)
			}
		case typ == protowire.BytesType && (num == f.outLP || num == f.inLP):
			var v []byte
			if v, n = protowire.ConsumeBytes(b); n >= 0 {
				if num == f.outLP {
					outLP, hasOut = append(outLP, v...), true
				} else {
					inLP, hasIn = append(inLP, v...), true
				}
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 || err != nil {
			return errWire
		}
		b = b[n:]
	}
	var err error
	if hasOut {
		if ev.outLP, err = l.outLP(outLP); err != nil {
			return fmt.Errorf("%w: %w", errWire, err)
		}
	}
	if hasIn {
		if ev.inLP, err = l.inLP(inLP); err != nil {
			return fmt.Errorf("%w: %w", errWire, err)
		}
	}
	return nil
}

// memberFields are the field numbers of a chunk or a Complete (0: the member has no such field).
type memberFields struct {
	ids, prompt, completion, cached, outLP, inLP, index protowire.Number
	finish, matchedID, matchedStr, kvJSON               protowire.Number
}

func (f *memberFields) setVarint(ev *event, num protowire.Number, v uint32) {
	switch num {
	case f.ids:
		ev.ids = append(ev.ids, v)
	case f.prompt:
		ev.prompt = v
	case f.completion:
		ev.completion = v
	case f.cached:
		ev.cached = v
	case f.index:
		ev.index = v
	case f.matchedID: // the oneof's last member wins
		id := new(uint32) // not &v: that would put every count's v on the heap
		*id = v
		ev.matchedID, ev.matchedStr = id, nil
	}
}

func (f *memberFields) setString(ev *event, num protowire.Number, v []byte) error {
	if !utf8.Valid(v) {
		return errWire
	}
	switch num {
	case f.finish:
		ev.finish = string(v)
	case f.matchedStr:
		ev.matchedStr, ev.matchedID = stringPtr(v), nil
	case f.kvJSON:
		ev.kvTransfer = stringPtr(v)
	}
	return nil
}

func stringPtr(b []byte) *string {
	s := string(b)
	return &s
}

// appendPacked appends a packed run of uint32 varints.
func appendPacked(ids []uint32, b []byte) ([]uint32, error) {
	if ids == nil {
		ids = make([]uint32, 0, len(b)) // at least one byte an id
	}
	for len(b) > 0 {
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return nil, errWire
		}
		ids = append(ids, uint32(v))
		b = b[n:]
	}
	return ids, nil
}
