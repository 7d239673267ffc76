package enginerpc

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"
)

// drawCall draws a call of any shape the transport builds: every field the engines' requests carry,
// set or not, zero or not, long enough that a submessage's length takes two bytes.
func drawCall(t *rapid.T) *call {
	opt := func(name string) bool { return rapid.Bool().Draw(t, name) }
	f32 := func(name string) *float32 {
		if !opt(name + "?") {
			return nil
		}
		v := rapid.SampledFrom([]float32{0, 1, -1, 0.5, 2e-8, 1e30}).Draw(t, name)
		return &v
	}
	c := &call{
		requestID:   rapid.StringMatching(`[a-z0-9-]{0,40}`).Draw(t, "rid"),
		ids:         rapid.SliceOfN(rapid.Uint32Range(0, 300000), 0, 200).Draw(t, "ids"),
		text:        rapid.String().Draw(t, "text"),
		stream:      opt("stream"),
		temperature: f32("temperature"), topP: f32("top_p"), minP: f32("min_p"),
		freqPen: f32("freq"), presPen: f32("pres"), repPen: f32("rep"),
		stops:     rapid.SliceOfN(rapid.String(), 0, 3).Draw(t, "stops"),
		stopIDs:   rapid.SliceOfN(rapid.Uint32(), 0, 4).Draw(t, "stop_ids"),
		minTokens: rapid.Uint32Range(0, 5).Draw(t, "min_tokens"),
		ignoreEOS: opt("ignore_eos"), includeStop: opt("include_stop"),
		n: rapid.IntRange(1, 4).Draw(t, "n"),
		lp: lpRequest{output: opt("lp"), top: rapid.Int32Range(0, 5).Draw(t, "lp_top"), prompt: opt("lp_prompt"),
			start: rapid.Int32Range(-1, 10).Draw(t, "lp_start")},
	}
	if opt("top_k?") {
		k := rapid.Int32Range(-1, 100).Draw(t, "top_k")
		c.topK = &k
	}
	if opt("max?") {
		m := rapid.IntRange(0, 1<<20).Draw(t, "max")
		c.maxTokens = &m
	}
	if opt("seed?") {
		s := rapid.Int64().Draw(t, "seed")
		c.seed = &s
	}
	if opt("constraint?") {
		c.constraint = &constraint{rapid.SampledFrom([]string{"regex", "ebnf", "json_schema", "json_object"}).Draw(t, "kind"),
			rapid.String().Draw(t, "constraint")}
	}
	if opt("bootstrap?") {
		c.bootstrap = &bootstrap{host: rapid.StringMatching(`[a-z0-9.]{0,20}`).Draw(t, "host"),
			port: rapid.Int32Range(0, 65535).Draw(t, "port"), room: rapid.Int32().Draw(t, "room")}
	}
	if opt("dp?") {
		r := rapid.Int32Range(-1, 8).Draw(t, "dp")
		c.dpRank = &r
	}
	if opt("kv?") {
		kv := rapid.String().Draw(t, "kv")
		c.kvTransfer = &kv
	}
	return c
}

// TestRequestWireMatchesProto: the hand-written Generate requests are proto.Marshal's bytes exactly,
// for both protocols and calls of every shape. It fails on a field the builders set that the writers
// leave out, a wrong number or type, and a zero written or an optional zero left out.
func TestRequestWireMatchesProto(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := drawCall(t)
		sg := sglangRequest(c)
		want, err := proto.Marshal(sg)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendSGLangRequest(nil, sg); !bytes.Equal(got, want) {
			t.Fatalf("SGLang request:\n got %x\nwant %x", got, want)
		}
		vl := vllmRequest(c)
		if want, err = proto.Marshal(vl); err != nil {
			t.Fatal(err)
		}
		if got := appendVLLMRequest(nil, vl); !bytes.Equal(got, want) {
			t.Fatalf("vLLM request:\n got %x\nwant %x", got, want)
		}
	})
}

// TestRequestWireInvalidUTF8: a request with a string proto3 refuses is proto.Marshal's to refuse, not
// written.
func TestRequestWireInvalidUTF8(t *testing.T) {
	c := &call{requestID: "r", ids: []uint32{1}, stops: []string{"ok", "\xff"}, n: 1}
	if sglangRequestValid(sglangRequest(c)) || vllmRequestValid(vllmRequest(c)) {
		t.Error("a stop string of invalid UTF-8 passed as valid")
	}
	c.stops = []string{"ok"}
	if !sglangRequestValid(sglangRequest(c)) || !vllmRequestValid(vllmRequest(c)) {
		t.Error("a valid request refused")
	}
}
