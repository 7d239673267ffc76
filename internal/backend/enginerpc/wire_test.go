package enginerpc

import (
	"math"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	vllmpb "github.com/sluicegw/sluice/gen/vllm/grpc/engine"
)

// The reference for the hand decoder (wire.go): the events the generated messages give, as the
// transport read them before it decoded by hand.

func sglangEvent(m *sglangpb.GenerateResponse) event {
	if ch := m.GetChunk(); ch != nil {
		o, in := ch.GetOutputLogprobs(), ch.GetInputLogprobs()
		return event{ids: ch.GetTokenIds(), prompt: ch.GetPromptTokens(), completion: ch.GetCompletionTokens(), cached: ch.GetCachedTokens(),
			outLP: outputLPs(o.GetTokenLogprobs(), o.GetTokenIds(), o.GetTopLogprobs()), inLP: sglangInputLPs(in), index: ch.GetIndex()}
	}
	d := m.GetComplete()
	o := d.GetOutputLogprobs()
	ev := event{ids: d.GetOutputIds(), complete: true, finish: d.GetFinishReason(), prompt: d.GetPromptTokens(),
		completion: d.GetCompletionTokens(), cached: d.GetCachedTokens(),
		outLP: outputLPs(o.GetTokenLogprobs(), o.GetTokenIds(), o.GetTopLogprobs()), inLP: sglangInputLPs(d.GetInputLogprobs()), index: d.GetIndex()}
	switch ms := d.GetMatchedStop().(type) {
	case *sglangpb.GenerateComplete_MatchedTokenId:
		ev.matchedID = &ms.MatchedTokenId
	case *sglangpb.GenerateComplete_MatchedStopStr:
		ev.matchedStr = &ms.MatchedStopStr
	}
	return ev
}

func vllmEvent(m *vllmpb.GenerateResponse) event {
	if ch := m.GetChunk(); ch != nil {
		o, in := ch.GetOutputLogprobs(), ch.GetInputLogprobs()
		return event{ids: ch.GetTokenIds(), prompt: ch.GetPromptTokens(), completion: ch.GetCompletionTokens(), cached: ch.GetCachedTokens(),
			outLP: outputLPs(o.GetTokenLogprobs(), o.GetTokenIds(), o.GetTopLogprobs()), inLP: vllmInputLPs(in), index: ch.GetIndex()}
	}
	d := m.GetComplete()
	o := d.GetOutputLogprobs()
	ev := event{ids: d.GetOutputIds(), complete: true, finish: d.GetFinishReason(), prompt: d.GetPromptTokens(),
		completion: d.GetCompletionTokens(), cached: d.GetCachedTokens(),
		outLP: outputLPs(o.GetTokenLogprobs(), o.GetTokenIds(), o.GetTopLogprobs()), inLP: vllmInputLPs(d.GetInputLogprobs()), index: d.GetIndex()}
	if d != nil { // the transport's own reading dereferenced a nil Complete: a response with neither member panicked
		ev.kvTransfer = d.KvTransferParamsJson
	}
	switch ms := d.GetMatchedStop().(type) {
	case *vllmpb.GenerateComplete_MatchedTokenId:
		ev.matchedID = &ms.MatchedTokenId
	case *vllmpb.GenerateComplete_MatchedStopStr:
		ev.matchedStr = &ms.MatchedStopStr
	}
	return ev
}

// genericEvent decodes b with the generated message of layout l's protocol.
func genericEvent(l *wireLayout, b []byte) (event, error) {
	if l == sglangLayout {
		var m sglangpb.GenerateResponse
		err := proto.Unmarshal(b, &m)
		return sglangEvent(&m), err
	}
	var m vllmpb.GenerateResponse
	err := proto.Unmarshal(b, &m)
	return vllmEvent(&m), err
}

// sameEvent compares events, an empty id list equal to none (the generic decoder may give either).
func sameEvent(a, b event) bool {
	if len(a.ids) == 0 && len(b.ids) == 0 {
		a.ids, b.ids = nil, nil
	}
	// Logprobs compare by their bits: the fuzzer sends NaNs, and NaN != NaN (both decoders read the
	// same four bytes).
	if !reflect.DeepEqual(lpBits(a.outLP), lpBits(b.outLP)) || !reflect.DeepEqual(lpBits(a.inLP), lpBits(b.inLP)) {
		return false
	}
	a.outLP, a.inLP, b.outLP, b.inLP = nil, nil, nil, nil
	return reflect.DeepEqual(a, b)
}

// lpBitsOf is a tokenLP with its logprobs as bits.
type lpBitsOf struct {
	id, lp uint32
	has    bool
	top    [][2]uint32
}

func lpBits(lps []tokenLP) []lpBitsOf {
	out := make([]lpBitsOf, len(lps))
	for i, l := range lps {
		out[i] = lpBitsOf{id: l.id, lp: math.Float32bits(l.lp), has: l.has}
		for _, t := range l.top {
			out[i].top = append(out[i].top, [2]uint32{t.id, math.Float32bits(t.lp)})
		}
	}
	return out
}

func sglangCases() map[string]proto.Message {
	lps := &sglangpb.OutputLogProbs{TokenLogprobs: []float32{-0.5, -1.25}, TokenIds: []uint32{7, 300},
		TopLogprobs: []*sglangpb.TopLogProbs{{Values: []float32{-0.5, -2}, TokenIds: []uint32{7, 8}}, {Values: []float32{-1.25}, TokenIds: []uint32{300}}}}
	in := &sglangpb.InputLogProbs{TokenLogprobs: []*sglangpb.InputTokenLogProb{{}, {Value: ptr(float32(-3))}}, TokenIds: []uint32{1, 2},
		TopLogprobs: []*sglangpb.TopLogProbs{{}, {Values: []float32{-3}, TokenIds: []uint32{2}}}}
	return map[string]proto.Message{
		"chunk": &sglangpb.GenerateResponse{RequestId: "r1", Response: &sglangpb.GenerateResponse_Chunk{Chunk: &sglangpb.GenerateStreamChunk{
			TokenIds: []uint32{1, 200, 70000, 1 << 31}, PromptTokens: 12, CompletionTokens: 4, CachedTokens: 3, ReasoningTokens: 5,
			OutputLogprobs: lps, HiddenStates: []float32{0.5}, InputLogprobs: in, Index: 2}}},
		"empty chunk": &sglangpb.GenerateResponse{Response: &sglangpb.GenerateResponse_Chunk{Chunk: &sglangpb.GenerateStreamChunk{}}},
		"complete, stop id": &sglangpb.GenerateResponse{RequestId: "r1", Response: &sglangpb.GenerateResponse_Complete{Complete: &sglangpb.GenerateComplete{
			OutputIds: []uint32{5, 6}, FinishReason: "stop", PromptTokens: 12, CompletionTokens: 6, CachedTokens: 3, ReasoningTokens: 1,
			OutputLogprobs: lps, AllHiddenStates: []*sglangpb.HiddenStates{{}}, MatchedStop: &sglangpb.GenerateComplete_MatchedTokenId{MatchedTokenId: 0},
			InputLogprobs: in, Index: 1}}},
		"complete, stop string": &sglangpb.GenerateResponse{Response: &sglangpb.GenerateResponse_Complete{Complete: &sglangpb.GenerateComplete{
			FinishReason: "stop", MatchedStop: &sglangpb.GenerateComplete_MatchedStopStr{MatchedStopStr: "\n\nÜ"}}}},
		"abort":    &sglangpb.GenerateResponse{Response: &sglangpb.GenerateResponse_Complete{Complete: &sglangpb.GenerateComplete{FinishReason: "abort"}}},
		"nothing":  &sglangpb.GenerateResponse{},
		"id only":  &sglangpb.GenerateResponse{RequestId: "x"},
		"complete": &sglangpb.GenerateResponse{Response: &sglangpb.GenerateResponse_Complete{Complete: &sglangpb.GenerateComplete{}}},
	}
}

func vllmCases() map[string]proto.Message {
	lps := &vllmpb.OutputLogProbs{TokenLogprobs: []float32{-0.5}, TokenIds: []uint32{7},
		TopLogprobs: []*vllmpb.TopLogProbs{{Values: []float32{-0.5, -2}, TokenIds: []uint32{7, 8}}}}
	in := &vllmpb.InputLogProbs{TokenLogprobs: []*vllmpb.InputTokenLogProb{{}, {Value: ptr(float32(-3))}}, TokenIds: []uint32{1, 2}}
	return map[string]proto.Message{
		"chunk": &vllmpb.GenerateResponse{Response: &vllmpb.GenerateResponse_Chunk{Chunk: &vllmpb.GenerateStreamChunk{
			TokenIds: []uint32{1, 200, 70000}, PromptTokens: 12, CompletionTokens: 3, CachedTokens: 3,
			OutputLogprobs: lps, InputLogprobs: in, Index: 3}}},
		"complete, stop id, kv": &vllmpb.GenerateResponse{Response: &vllmpb.GenerateResponse_Complete{Complete: &vllmpb.GenerateComplete{
			OutputIds: []uint32{5}, FinishReason: "length", PromptTokens: 12, CompletionTokens: 1, CachedTokens: 2,
			OutputLogprobs: lps, InputLogprobs: in, Index: 1, KvTransferParams: &vllmpb.KvTransferParams{RemoteHost: "h", RemotePort: 9},
			MatchedStop: &vllmpb.GenerateComplete_MatchedTokenId{MatchedTokenId: 151645}, KvTransferParamsJson: ptr(`{"do_remote_decode":true}`)}}},
		"complete, stop string, empty kv": &vllmpb.GenerateResponse{Response: &vllmpb.GenerateResponse_Complete{Complete: &vllmpb.GenerateComplete{
			FinishReason: "stop", MatchedStop: &vllmpb.GenerateComplete_MatchedStopStr{MatchedStopStr: "END"}, KvTransferParamsJson: ptr("")}}},
		"nothing": &vllmpb.GenerateResponse{},
	}
}

// TestWireEventMatchesGeneric: every field either protocol's messages carry gives the same event
// decoded by hand as through the generated messages.
func TestWireEventMatchesGeneric(t *testing.T) {
	for _, tc := range []struct {
		l     *wireLayout
		cases map[string]proto.Message
	}{{sglangLayout, sglangCases()}, {vllmLayout, vllmCases()}} {
		for name, m := range tc.cases {
			b, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			want, err := genericEvent(tc.l, b)
			if err != nil {
				t.Fatal(err)
			}
			var got event
			if err := tc.l.decode(b, &got); err != nil {
				t.Fatalf("%T %s: %v", m, name, err)
			}
			if !sameEvent(got, want) {
				t.Errorf("%T %s:\n got %+v\nwant %+v", m, name, got, want)
			}
		}
	}
}

// nonCanonical are encodings a protobuf encoder may produce other than Go's: unpacked ids, a
// submessage in two parts (merged), a oneof given twice (the last wins), unknown fields, a known
// field of an unexpected wire type (read as unknown), invalid UTF-8 (refused).
func nonCanonical() map[string][]byte {
	tag := protowire.AppendTag
	chunk := func(fields ...[]byte) []byte {
		var body []byte
		for _, f := range fields {
			body = append(body, f...)
		}
		return protowire.AppendBytes(tag(nil, 2, protowire.BytesType), body)
	}
	complete := func(body []byte) []byte {
		return protowire.AppendBytes(tag(nil, 3, protowire.BytesType), body)
	}
	varint := func(n protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(tag(nil, n, protowire.VarintType), v)
	}
	str := func(n protowire.Number, s string) []byte {
		return protowire.AppendString(tag(nil, n, protowire.BytesType), s)
	}
	packed := protowire.AppendBytes(tag(nil, 1, protowire.BytesType), protowire.AppendVarint(protowire.AppendVarint(nil, 9), 300))
	return map[string][]byte{
		"unpacked ids":          chunk(varint(1, 4), varint(1, 5), packed, varint(3, 3)),
		"chunk in two parts":    append(chunk(varint(1, 4), varint(2, 10)), chunk(varint(1, 5), varint(3, 2))...),
		"chunk then complete":   append(chunk(varint(1, 4)), complete(str(2, "stop"))...),
		"complete then chunk":   append(complete(str(2, "stop")), chunk(varint(1, 4))...),
		"unknown fields":        append(append(varint(99, 1), chunk(varint(1, 4), str(77, "x"), varint(100, 2))...), str(50, "y")...),
		"wrong wire type":       chunk(str(2, "no"), varint(1, 4)),
		"matched id then str":   complete(append(varint(8, 7), str(9, "s")...)),
		"matched str then id":   complete(append(str(9, "s"), varint(8, 7)...)),
		"finish twice":          complete(append(str(2, "length"), str(2, "stop")...)),
		"invalid utf-8":         complete(str(2, "\xff")),
		"bad request id":        str(1, "\xfe"),
		"truncated":             chunk(varint(1, 4))[:3],
		"logprobs in two parts": chunk(protowire.AppendBytes(tag(nil, 5, protowire.BytesType), []byte{0x0d, 0, 0, 0x80, 0xbf}), protowire.AppendBytes(tag(nil, 5, protowire.BytesType), []byte{0x10, 7})),
	}
}

// TestWireEventNonCanonical: the same for encodings other than Go's, and the same refusals.
func TestWireEventNonCanonical(t *testing.T) {
	for name, b := range nonCanonical() {
		want, werr := genericEvent(sglangLayout, b)
		var got event
		gerr := sglangLayout.decode(b, &got)
		if (werr == nil) != (gerr == nil) {
			t.Errorf("%s: error %v, the generated message's %v", name, gerr, werr)
			continue
		}
		if werr == nil && !sameEvent(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, got, want)
		}
	}
}

// FuzzWireEvent: whatever the generated messages read, the hand decoder reads the same. (It may refuse
// less: it does not check fields it does not read, such as vLLM's kv_transfer_params.)
func FuzzWireEvent(f *testing.F) {
	for _, m := range sglangCases() {
		b, _ := proto.Marshal(m)
		f.Add(b, false)
	}
	for _, m := range vllmCases() {
		b, _ := proto.Marshal(m)
		f.Add(b, true)
	}
	for _, b := range nonCanonical() {
		f.Add(b, false)
	}
	f.Fuzz(func(t *testing.T, b []byte, vllm bool) {
		l := sglangLayout
		if vllm {
			l = vllmLayout
		}
		want, werr := genericEvent(l, b)
		if werr != nil {
			return
		}
		var got event
		if err := l.decode(b, &got); err != nil {
			t.Fatalf("hand decoder refused what the generated message read: %v", err)
		}
		if !sameEvent(got, want) {
			t.Fatalf("\n got %+v\nwant %+v", got, want)
		}
	})
}

// BenchmarkWireEvent decodes a typical streamed chunk (a few ids and the counts) with the generated
// message and the transport's reading of it (generic), and by hand.
func BenchmarkWireEvent(b *testing.B) {
	raw, err := proto.Marshal(&sglangpb.GenerateResponse{RequestId: "0123456789abcdef01234567",
		Response: &sglangpb.GenerateResponse_Chunk{Chunk: &sglangpb.GenerateStreamChunk{
			TokenIds: []uint32{791, 4062, 14198, 39935}, PromptTokens: 64, CompletionTokens: 12, CachedTokens: 48}}})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("generic", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if ev, err := genericEvent(sglangLayout, raw); err != nil || len(ev.ids) != 4 {
				b.Fatal(ev, err)
			}
		}
	})
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var ev event
			if err := sglangLayout.decode(raw, &ev); err != nil || len(ev.ids) != 4 {
				b.Fatal(ev, err)
			}
		}
	})
}
