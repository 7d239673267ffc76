package enginerpc

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	"github.com/sluicegw/sluice/gen/sglang/grpc/scheduler/sglangpbconnect"
	trtllmpb "github.com/sluicegw/sluice/gen/trtllm"
	"github.com/sluicegw/sluice/gen/trtllm/trtllmpbconnect"
	vllmpb "github.com/sluicegw/sluice/gen/vllm/grpc/engine"
	"github.com/sluicegw/sluice/gen/vllm/grpc/engine/vllmpbconnect"
	"github.com/sluicegw/sluice/internal/enginegrpc"
	"github.com/sluicegw/sluice/internal/tokenizer"
)

// A tiny byte-level BPE model written here: ids 0-255 are the bytes (so ASCII text is its own ids), two
// merges, and ChatML's added tokens, <|im_end|> the EOS.
const (
	imStart = 258
	imEnd   = 259 // EOS
)

func byteLevel(b byte) string {
	n := 0
	for c := range 256 {
		printable := c >= '!' && c <= '~' || c >= 0xA1 && c <= 0xAC || c >= 0xAE
		if c == int(b) {
			if printable {
				return string(rune(c))
			}
			return string(rune(256 + n))
		}
		if !printable {
			n++
		}
	}
	panic("unreachable")
}

const chatML = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}" +
	"{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"

func testTokenizer(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	vocab := map[string]int{}
	for b := range 256 {
		vocab[byteLevel(byte(b))] = b
	}
	merges := [][2]string{{"h", "e"}, {"l", "l"}}
	vocab["he"], vocab["ll"] = 256, 257
	tj := map[string]any{
		"added_tokens": []map[string]any{
			{"id": imStart, "content": "<|im_start|>", "special": true},
			{"id": imEnd, "content": "<|im_end|>", "special": true},
		},
		"normalizer": map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "ByteLevel"},
		"decoder":        map[string]any{"type": "ByteLevel"},
		"model":          map[string]any{"type": "BPE", "vocab": vocab, "merges": merges},
	}
	dir := t.TempDir()
	writeJSON(t, filepath.Join(dir, "tokenizer.json"), tj)
	writeJSON(t, filepath.Join(dir, "tokenizer_config.json"), map[string]any{"chat_template": chatML, "eos_token": "<|im_end|>"})
	tk, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func writeJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// fakeEngine serves both engine protocols from one script: it answers every Generate with reply (then
// the EOS, unless max tokens cut it), one chunk per id when streaming, with each protocol's counts
// (SGLang's cumulative, vLLM's per chunk) and a Complete that repeats the last chunk's ids, as the
// servicers do.
type fakeEngine struct {
	sglangpbconnect.UnimplementedSglangSchedulerHandler
	reply    []uint32
	err      error // returned by Generate instead of answering
	hold     bool  // after the first chunk, wait for the RPC's end or an Abort
	kvReturn string
	cached   uint32
	eos      uint32 // 0: imEnd
	noInLP   bool   // send no prompt logprobs even when asked
	abortAll bool   // end every sample at once with the engine's own abort (SGLang: a failed PD peer)

	mu      sync.Mutex
	sglang  []*sglangpb.GenerateRequest
	vllm    []*vllmpb.GenerateRequest
	trtllm  []*trtllmpb.GenerateRequest // trtllm_test.go
	aborted []string
	abortCh chan struct{}
}

func newFake(reply string) *fakeEngine {
	ids := make([]uint32, len(reply))
	for i := range len(reply) {
		ids[i] = uint32(reply[i])
	}
	return &fakeEngine{reply: ids, abortCh: make(chan struct{})}
}

func (f *fakeEngine) recordAbort(ids ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	first := len(f.aborted) == 0
	f.aborted = append(f.aborted, ids...)
	if first {
		close(f.abortCh)
	}
}

func (f *fakeEngine) aborts() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.aborted...)
}

// output is the ids the engine generates for max tokens (nil: none), for sample index of n.
func (f *fakeEngine) output(max *uint32, index, n int) (ids []uint32, finish string) {
	eos := uint32(imEnd)
	if f.eos != 0 {
		eos = f.eos
	}
	ids = append(ids, f.reply...)
	if n > 1 {
		ids = append(ids, uint32('0'+index)) // each sample of n > 1 its own text
	}
	ids = append(ids, eos)
	if max != nil && int(*max) < len(ids) {
		return ids[:*max], "length"
	}
	return ids, "stop"
}

type chunkFn func(ids []uint32, n int) error

// run streams ids through send and waits when holding.
func (f *fakeEngine) run(ctx context.Context, stream bool, ids []uint32, send chunkFn) error {
	if !stream {
		return nil
	}
	for i, id := range ids {
		if err := send([]uint32{id}, i+1); err != nil {
			return err
		}
		if f.hold {
			select {
			case <-ctx.Done():
			case <-f.abortCh:
			}
			return connect.NewError(connect.CodeCanceled, context.Canceled)
		}
	}
	return nil
}

func (f *fakeEngine) Generate(ctx context.Context, req *sglangpb.GenerateRequest, st *connect.ServerStream[sglangpb.GenerateResponse]) error {
	f.mu.Lock()
	f.sglang = append(f.sglang, req)
	f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	// n > 1: the samples one after the other, the last index first, so that a client must sort them.
	n := max(int(req.GetSamplingParams().GetN()), 1)
	for i := n - 1; i >= 0; i-- {
		if err := f.sglangSample(ctx, req, st, uint32(i), n); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeEngine) sglangSample(ctx context.Context, req *sglangpb.GenerateRequest, st *connect.ServerStream[sglangpb.GenerateResponse], index uint32, n int) error {
	prompt := uint32(len(req.GetTokenized().GetInputIds()))
	if f.abortAll {
		done := &sglangpb.GenerateComplete{FinishReason: "abort", PromptTokens: prompt, Index: index}
		return st.Send(&sglangpb.GenerateResponse{RequestId: req.GetRequestId(), Response: &sglangpb.GenerateResponse_Complete{Complete: done}})
	}
	ids, finish := f.output(req.GetSamplingParams().MaxNewTokens, int(index), n)
	lp, k := req.GetReturnLogprob(), int(req.GetTopLogprobsNum())
	inLP := lp && req.GetLogprobStartLen() >= 0 && !f.noInLP && index == 0
	err := f.run(ctx, req.GetStream(), ids, func(c []uint32, n int) error {
		ch := &sglangpb.GenerateStreamChunk{TokenIds: c, PromptTokens: prompt, CompletionTokens: uint32(n), CachedTokens: f.cached, Index: index}
		if lp {
			ch.OutputLogprobs = sglangOutLP(c, n-len(c), k)
		}
		if inLP && n == 1 {
			ch.InputLogprobs = sglangInLP(req.GetTokenized().GetInputIds())
		}
		return st.Send(&sglangpb.GenerateResponse{RequestId: req.GetRequestId(), Response: &sglangpb.GenerateResponse_Chunk{Chunk: ch}})
	})
	if err != nil {
		return err
	}
	done := &sglangpb.GenerateComplete{OutputIds: ids, FinishReason: finish, PromptTokens: prompt,
		CompletionTokens: uint32(len(ids)), CachedTokens: f.cached, Index: index}
	if req.GetStream() {
		done.OutputIds = ids[len(ids)-1:]
	} else if lp {
		done.OutputLogprobs = sglangOutLP(ids, 0, k)
		if inLP {
			done.InputLogprobs = sglangInLP(req.GetTokenized().GetInputIds())
		}
	}
	if finish == "stop" {
		done.MatchedStop = &sglangpb.GenerateComplete_MatchedTokenId{MatchedTokenId: imEnd}
	}
	return st.Send(&sglangpb.GenerateResponse{RequestId: req.GetRequestId(), Response: &sglangpb.GenerateResponse_Complete{Complete: done}})
}

func (f *fakeEngine) Abort(_ context.Context, req *sglangpb.AbortRequest) (*sglangpb.AbortResponse, error) {
	f.recordAbort(req.GetRequestId())
	return &sglangpb.AbortResponse{Success: true}, nil
}

// vllmFake is the same engine behind vLLM's service.
type vllmFake struct {
	vllmpbconnect.UnimplementedVllmEngineHandler
	f *fakeEngine
}

func (v vllmFake) Generate(ctx context.Context, req *vllmpb.GenerateRequest, st *connect.ServerStream[vllmpb.GenerateResponse]) error {
	f := v.f
	f.mu.Lock()
	f.vllm = append(f.vllm, req)
	f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	n := max(int(req.GetSamplingParams().GetN()), 1)
	for i := n - 1; i >= 0; i-- {
		if err := v.sample(ctx, req, st, uint32(i), n); err != nil {
			return err
		}
	}
	return nil
}

func (v vllmFake) sample(ctx context.Context, req *vllmpb.GenerateRequest, st *connect.ServerStream[vllmpb.GenerateResponse], index uint32, n int) error {
	f := v.f
	prompt := uint32(len(req.GetTokenized().GetInputIds()))
	p := req.GetSamplingParams()
	ids, finish := f.output(p.MaxTokens, int(index), n)
	inLP := p.PromptLogprobs != nil && !f.noInLP
	err := f.run(ctx, req.GetStream(), ids, func(c []uint32, n int) error {
		ch := &vllmpb.GenerateStreamChunk{TokenIds: c, PromptTokens: prompt, CompletionTokens: uint32(len(c)), CachedTokens: f.cached, Index: index}
		if p.Logprobs != nil {
			ch.OutputLogprobs = vllmOutLP(c, n-len(c), int(p.GetLogprobs()))
		}
		if inLP && n == 1 {
			ch.InputLogprobs = vllmInLP(req.GetTokenized().GetInputIds())
		}
		return st.Send(&vllmpb.GenerateResponse{Response: &vllmpb.GenerateResponse_Chunk{Chunk: ch}})
	})
	if err != nil {
		return err
	}
	done := &vllmpb.GenerateComplete{OutputIds: ids, FinishReason: finish, PromptTokens: prompt,
		CompletionTokens: uint32(len(ids)), CachedTokens: f.cached, Index: index}
	if req.GetStream() {
		done.OutputIds, done.CompletionTokens = ids[len(ids)-1:], 1
	} else if p.Logprobs != nil {
		done.OutputLogprobs = vllmOutLP(ids, 0, int(p.GetLogprobs()))
		if inLP {
			done.InputLogprobs = vllmInLP(req.GetTokenized().GetInputIds())
		}
	}
	if f.kvReturn != "" {
		done.KvTransferParamsJson = &f.kvReturn
	}
	return st.Send(&vllmpb.GenerateResponse{Response: &vllmpb.GenerateResponse_Complete{Complete: done}})
}

func (v vllmFake) Abort(_ context.Context, req *vllmpb.AbortRequest) (*vllmpb.AbortResponse, error) {
	v.f.recordAbort(req.GetRequestIds()...)
	return &vllmpb.AbortResponse{}, nil
}

// startEngine serves f over h2c with protocol p and returns its grpc:// URL.
func startEngine(t testing.TB, f *fakeEngine, p enginegrpc.Protocol) string {
	t.Helper()
	mux := http.NewServeMux()
	switch p {
	case enginegrpc.VLLM:
		mux.Handle(vllmpbconnect.NewVllmEngineHandler(vllmFake{f: f}))
	case enginegrpc.TRTLLM:
		mux.Handle(trtllmpbconnect.NewTrtllmServiceHandler(trtllmFake{f: f}))
	default:
		mux.Handle(sglangpbconnect.NewSglangSchedulerHandler(f))
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return "grpc://" + srv.Listener.Addr().String()
}

func newH2CClient() *http.Client {
	tr := &http.Transport{DisableCompression: true}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr}
}

// setup starts a fake engine of protocol p and a transport that knows it.
func setup(t *testing.T, p enginegrpc.Protocol, f *fakeEngine) (*Transport, string) {
	t.Helper()
	return setupEngine(t, f, Engine{Protocol: p, Tokenizer: testTokenizer(t), EOS: []int{imEnd}, Model: "m"})
}

// setupEngine is setup with the engine's model described by e.
func setupEngine(t *testing.T, f *fakeEngine, e Engine) (*Transport, string) {
	t.Helper()
	url := startEngine(t, f, e.Protocol)
	h2c := newH2CClient()
	t.Cleanup(h2c.CloseIdleConnections)
	tr := NewTransport(h2c, nil, WithClock(func() time.Time { return time.Unix(1700000000, 0) }),
		WithIDSource(func() string { return "gen" }))
	if err := tr.SetEngine(url, e); err != nil {
		t.Fatal(err)
	}
	return tr, url
}

// The fake's logprobs: output position i has -(i+1)/10 and k alternatives, the token itself first and
// then the ids after it at -(i+1)/10 - j; a prompt's tokens -0.5 each but the first, which has none.
func fakeLP(pos int) float32 { return -float32(pos+1) / 10 }

func fakeTop(id uint32, pos, k int) (vals []float32, ids []uint32) {
	for j := range k {
		vals = append(vals, fakeLP(pos)-float32(j))
		ids = append(ids, id+uint32(j))
	}
	return vals, ids
}

func sglangOutLP(ids []uint32, from, k int) *sglangpb.OutputLogProbs {
	o := &sglangpb.OutputLogProbs{}
	for i, id := range ids {
		o.TokenLogprobs = append(o.TokenLogprobs, fakeLP(from+i))
		o.TokenIds = append(o.TokenIds, id)
		if k > 0 {
			v, t := fakeTop(id, from+i, k)
			o.TopLogprobs = append(o.TopLogprobs, &sglangpb.TopLogProbs{Values: v, TokenIds: t})
		}
	}
	return o
}

func vllmOutLP(ids []uint32, from, k int) *vllmpb.OutputLogProbs {
	o := &vllmpb.OutputLogProbs{}
	for i, id := range ids {
		o.TokenLogprobs = append(o.TokenLogprobs, fakeLP(from+i))
		o.TokenIds = append(o.TokenIds, id)
		if k > 0 {
			v, t := fakeTop(id, from+i, k)
			o.TopLogprobs = append(o.TopLogprobs, &vllmpb.TopLogProbs{Values: v, TokenIds: t})
		}
	}
	return o
}

func sglangInLP(ids []uint32) *sglangpb.InputLogProbs {
	in := &sglangpb.InputLogProbs{TokenIds: ids}
	for i := range ids {
		v := &sglangpb.InputTokenLogProb{}
		if i > 0 {
			x := float32(-0.5)
			v.Value = &x
		}
		in.TokenLogprobs = append(in.TokenLogprobs, v)
	}
	return in
}

func vllmInLP(ids []uint32) *vllmpb.InputLogProbs {
	in := &vllmpb.InputLogProbs{TokenIds: ids}
	for i := range ids {
		v := &vllmpb.InputTokenLogProb{}
		if i > 0 {
			x := float32(-0.5)
			v.Value = &x
		}
		in.TokenLogprobs = append(in.TokenLogprobs, v)
	}
	return in
}

// The fake's embedding of an input: its length and first id, so that a test can tell inputs apart.
func fakeEmbedding(ids []uint32) []float32 { return []float32{float32(len(ids)), float32(ids[0]), 0.5} }

func (f *fakeEngine) Embed(_ context.Context, req *sglangpb.EmbedRequest) (*sglangpb.EmbedResponse, error) {
	ids := req.GetTokenized().GetInputIds()
	return &sglangpb.EmbedResponse{Embedding: fakeEmbedding(ids), EmbeddingDim: 3, PromptTokens: uint32(len(ids))}, nil
}

func (v vllmFake) Embed(_ context.Context, req *vllmpb.EmbedRequest) (*vllmpb.EmbedResponse, error) {
	ids := req.GetTokenized().GetInputIds()
	return &vllmpb.EmbedResponse{Embedding: fakeEmbedding(ids), EmbeddingDim: 3, PromptTokens: uint32(len(ids))}, nil
}
