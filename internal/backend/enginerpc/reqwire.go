package enginerpc

import (
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	vllmpb "github.com/sluicegw/sluice/gen/vllm/grpc/engine"
)

// The Generate requests are marshalled by hand, as proto.Marshal writes them (fields in number order
// and a oneof after them, proto3's zeros left out, optional fields written when set, ids packed): the generic marshaller's
// reflection, with proto.Size before it, was 1.5% of the gateway's CPU in gRPC PD mode. Only the fields
// the gateway sets are written; TestRequestWireMatchesProto holds the bytes to proto.Marshal's for
// requests built from calls of every shape, so a field set and not written here fails it.

// validStrings reports whether every string is valid UTF-8, as proto3 requires of string fields: a
// request with one that is not is left to proto.Marshal, whose error it is.
func validStrings(ss ...string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

// sglangRequestValid reports whether appendSGLangRequest may write r: its strings are UTF-8.
func sglangRequestValid(r *sglangpb.GenerateRequest) bool {
	p, d := r.GetSamplingParams(), r.GetDisaggregatedParams()
	return validStrings(r.GetRequestId(), r.GetTokenized().GetOriginalText(), d.GetBootstrapHost(), p.GetRegex(),
		p.GetJsonSchema(), p.GetEbnfGrammar()) && validStrings(p.GetStop()...)
}

// vllmRequestValid reports whether appendVLLMRequest may write r: its strings are UTF-8.
func vllmRequestValid(r *vllmpb.GenerateRequest) bool {
	p := r.GetSamplingParams()
	return validStrings(r.GetRequestId(), r.GetTokenized().GetOriginalText(), r.GetKvTransferParamsJson(), p.GetRegex(),
		p.GetJsonSchema(), p.GetGrammar()) && validStrings(p.GetStop()...)
}

// pbuf appends protobuf fields.
type pbuf []byte

func (b pbuf) tag(n protowire.Number, t protowire.Type) pbuf { return protowire.AppendTag(b, n, t) }

func (b pbuf) str(n protowire.Number, s string) pbuf {
	if s == "" {
		return b
	}
	return protowire.AppendString(b.tag(n, protowire.BytesType), s)
}

func (b pbuf) strs(n protowire.Number, ss []string) pbuf {
	for _, s := range ss {
		b = protowire.AppendString(b.tag(n, protowire.BytesType), s)
	}
	return b
}

func (b pbuf) u32(n protowire.Number, v uint32) pbuf {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(b.tag(n, protowire.VarintType), uint64(v))
}

func (b pbuf) i32(n protowire.Number, v int32) pbuf {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(b.tag(n, protowire.VarintType), uint64(int64(v))) // sign-extended, as proto does
}

func (b pbuf) f32(n protowire.Number, v float32) pbuf {
	if math.Float32bits(v) == 0 { // -0 is written: proto3 leaves out only the zero bits
		return b
	}
	return protowire.AppendFixed32(b.tag(n, protowire.Fixed32Type), math.Float32bits(v))
}

func (b pbuf) boolean(n protowire.Number, v bool) pbuf {
	if !v {
		return b
	}
	return protowire.AppendVarint(b.tag(n, protowire.VarintType), 1)
}

// Optional fields: written whenever set, zero included.

func (b pbuf) optU32(n protowire.Number, v *uint32) pbuf {
	if v == nil {
		return b
	}
	return protowire.AppendVarint(b.tag(n, protowire.VarintType), uint64(*v))
}

func (b pbuf) optI32(n protowire.Number, v *int32) pbuf {
	if v == nil {
		return b
	}
	return protowire.AppendVarint(b.tag(n, protowire.VarintType), uint64(int64(*v)))
}

func (b pbuf) optF32(n protowire.Number, v *float32) pbuf {
	if v == nil {
		return b
	}
	return protowire.AppendFixed32(b.tag(n, protowire.Fixed32Type), math.Float32bits(*v))
}

func (b pbuf) optStr(n protowire.Number, v *string) pbuf {
	if v == nil {
		return b
	}
	return protowire.AppendString(b.tag(n, protowire.BytesType), *v)
}

func (b pbuf) packed(n protowire.Number, ids []uint32) pbuf {
	if len(ids) == 0 {
		return b
	}
	size := 0
	for _, id := range ids {
		size += protowire.SizeVarint(uint64(id))
	}
	b = protowire.AppendVarint(b.tag(n, protowire.BytesType), uint64(size))
	for _, id := range ids {
		b = protowire.AppendVarint(b, uint64(id))
	}
	return b
}

// msg appends a submessage written by body: its length is known only after it, so it is written in
// place after a one-byte length and moved when the length needs more bytes.
func (b pbuf) msg(n protowire.Number, body func(pbuf) pbuf) pbuf {
	b = b.tag(n, protowire.BytesType)
	at := len(b)
	b = body(append(b, 0))
	size := len(b) - at - 1
	if size < 0x80 {
		b[at] = byte(size)
		return b
	}
	lenBytes := protowire.SizeVarint(uint64(size))
	b = append(b, make([]byte, lenBytes-1)...)
	copy(b[at+lenBytes:], b[at+1:at+1+size])
	protowire.AppendVarint(b[at:at], uint64(size))
	return b
}

// appendSGLangRequest appends r (SGLang's sglang.grpc.scheduler.GenerateRequest) as proto.Marshal would.
func appendSGLangRequest(dst []byte, r *sglangpb.GenerateRequest) []byte {
	b := pbuf(dst).str(1, r.RequestId)
	if t := r.Tokenized; t != nil {
		b = b.msg(2, func(b pbuf) pbuf { return b.str(1, t.OriginalText).packed(2, t.InputIds) })
	}
	if p := r.SamplingParams; p != nil {
		b = b.msg(4, func(b pbuf) pbuf { return sglangSamplingWire(b, p) })
	}
	b = b.boolean(5, r.ReturnLogprob).i32(6, r.LogprobStartLen).i32(7, r.TopLogprobsNum)
	if d := r.DisaggregatedParams; d != nil {
		b = b.msg(10, func(b pbuf) pbuf { return b.str(1, d.BootstrapHost).i32(2, d.BootstrapPort).i32(3, d.BootstrapRoom) })
	}
	return b.i32(16, r.DataParallelRank).boolean(17, r.Stream)
}

func sglangSamplingWire(b pbuf, p *sglangpb.SamplingParams) pbuf {
	b = b.f32(1, p.Temperature).f32(2, p.TopP).i32(3, p.TopK).f32(4, p.MinP).f32(5, p.FrequencyPenalty).
		f32(6, p.PresencePenalty).f32(7, p.RepetitionPenalty).optU32(8, p.MaxNewTokens).strs(9, p.Stop).
		packed(10, p.StopTokenIds).boolean(11, p.SkipSpecialTokens).boolean(12, p.SpacesBetweenSpecialTokens)
	b = b.u32(17, p.N).u32(18, p.MinNewTokens).boolean(19, p.IgnoreEos).boolean(20, p.NoStopTrim)
	switch c := p.Constraint.(type) { // proto.Marshal writes a oneof after the other fields
	case *sglangpb.SamplingParams_Regex:
		b = protowire.AppendString(b.tag(13, protowire.BytesType), c.Regex)
	case *sglangpb.SamplingParams_JsonSchema:
		b = protowire.AppendString(b.tag(14, protowire.BytesType), c.JsonSchema)
	case *sglangpb.SamplingParams_EbnfGrammar:
		b = protowire.AppendString(b.tag(15, protowire.BytesType), c.EbnfGrammar)
	}
	return b
}

// appendVLLMRequest appends r (vLLM's vllm.grpc.engine.GenerateRequest) as proto.Marshal would.
func appendVLLMRequest(dst []byte, r *vllmpb.GenerateRequest) []byte {
	b := pbuf(dst).str(1, r.RequestId)
	if p := r.SamplingParams; p != nil {
		b = b.msg(4, func(b pbuf) pbuf { return vllmSamplingWire(b, p) })
	}
	b = b.boolean(5, r.Stream).optStr(8, r.KvTransferParamsJson).optI32(9, r.DataParallelRank)
	if in, ok := r.Input.(*vllmpb.GenerateRequest_Tokenized); ok && in.Tokenized != nil { // the oneof input, last
		t := in.Tokenized
		b = b.msg(2, func(b pbuf) pbuf { return b.str(1, t.OriginalText).packed(2, t.InputIds) })
	}
	return b
}

func vllmSamplingWire(b pbuf, p *vllmpb.SamplingParams) pbuf {
	b = b.optF32(1, p.Temperature).f32(2, p.TopP).u32(3, p.TopK).f32(4, p.MinP).f32(5, p.FrequencyPenalty).
		f32(6, p.PresencePenalty).f32(7, p.RepetitionPenalty).optU32(8, p.MaxTokens).u32(9, p.MinTokens).
		strs(10, p.Stop).packed(11, p.StopTokenIds).boolean(12, p.SkipSpecialTokens).
		boolean(13, p.SpacesBetweenSpecialTokens).boolean(14, p.IgnoreEos).u32(15, p.N)
	b = b.optI32(22, p.Logprobs).optI32(23, p.PromptLogprobs).optI32(24, p.Seed).boolean(25, p.IncludeStopStrInOutput)
	switch c := p.Constraint.(type) { // proto.Marshal writes a oneof after the other fields
	case *vllmpb.SamplingParams_JsonSchema:
		b = protowire.AppendString(b.tag(16, protowire.BytesType), c.JsonSchema)
	case *vllmpb.SamplingParams_Regex:
		b = protowire.AppendString(b.tag(17, protowire.BytesType), c.Regex)
	case *vllmpb.SamplingParams_Grammar:
		b = protowire.AppendString(b.tag(18, protowire.BytesType), c.Grammar)
	case *vllmpb.SamplingParams_JsonObject:
		b = protowire.AppendVarint(b.tag(20, protowire.VarintType), protowire.EncodeBool(c.JsonObject))
	}
	return b
}
