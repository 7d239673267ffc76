package enginerpc

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/enginegrpc"
)

var protocols = []enginegrpc.Protocol{enginegrpc.SGLang, enginegrpc.VLLM}

// genProtocols are the protocols whose Generate serves logprobs and n > 1: TensorRT-LLM's too.
var genProtocols = []enginegrpc.Protocol{enginegrpc.SGLang, enginegrpc.VLLM, enginegrpc.TRTLLM}

type chatLP struct {
	Token       string  `json:"token"`
	Logprob     float64 `json:"logprob"`
	Bytes       []byte  `json:"bytes"`
	TopLogprobs []struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
	} `json:"top_logprobs"`
}

type lpAnswer struct {
	Choices []struct {
		Text     string `json:"text"`
		Logprobs *struct {
			Content       []chatLP             `json:"content"`
			Tokens        []string             `json:"tokens"`
			TokenLogprobs []*float64           `json:"token_logprobs"`
			TopLogprobs   []map[string]float64 `json:"top_logprobs"`
			TextOffset    []int                `json:"text_offset"`
		} `json:"logprobs"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Error *struct {
		Param string `json:"param"`
	} `json:"error"`
}

// wantTokens is the fake's reply as logprobs show it: one entry per byte token, then the EOS, which
// TensorRT-LLM leaves out of its output.
func wantTokens(p enginegrpc.Protocol, reply string) []string {
	var out []string
	for i := range len(reply) {
		out = append(out, reply[i:i+1])
	}
	if p == enginegrpc.TRTLLM {
		return out
	}
	return append(out, "<|im_end|>")
}

// Chat logprobs reach each engine's fields and come back as OpenAI's logprobs.content: token strings
// from the gateway's tokenizer, their bytes, the engine's values and k alternatives; streamed chunks
// carry their own tokens' entries, which join to the whole answer's.
func TestChatLogprobs(t *testing.T) {
	const body = `{"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":2`
	for _, p := range genProtocols {
		f := newFake("hi")
		tr, url := setup(t, p, f)
		got := decode[lpAnswer](t, post(t, tr, t.Context(), url, "/v1/chat/completions", body+`}`))
		lp := got.Choices[0].Logprobs
		if lp == nil {
			t.Fatalf("%s: no logprobs in %+v", p, got)
		}
		var toks []string
		for i, e := range lp.Content {
			toks = append(toks, e.Token)
			if want := float64(fakeLP(i)); !close32(e.Logprob, want) {
				t.Errorf("%s: entry %d logprob %v, want %v", p, i, e.Logprob, want)
			}
			if string(e.Bytes) != e.Token || len(e.TopLogprobs) != 2 || e.TopLogprobs[0].Token != e.Token {
				t.Errorf("%s: entry %d = %+v", p, i, e)
			}
		}
		if !slices.Equal(toks, wantTokens(p, "hi")) {
			t.Errorf("%s: tokens %q, want %q", p, toks, wantTokens(p, "hi"))
		}
		switch p {
		case enginegrpc.SGLang:
			if r := f.sglang[0]; !r.GetReturnLogprob() || r.GetTopLogprobsNum() != 2 || r.GetLogprobStartLen() != -1 {
				t.Errorf("sglang request: return_logprob %v top %d start %d", r.GetReturnLogprob(), r.GetTopLogprobsNum(), r.GetLogprobStartLen())
			}
		case enginegrpc.VLLM:
			if sp := f.vllm[0].GetSamplingParams(); sp.Logprobs == nil || sp.GetLogprobs() != 2 || sp.PromptLogprobs != nil {
				t.Errorf("vllm sampling params: %v", sp)
			}
		case enginegrpc.TRTLLM:
			if oc := f.trtllmRequests()[0].GetOutputConfig(); oc.Logprobs == nil || oc.GetLogprobs() != 2 || oc.PromptLogprobs != nil {
				t.Errorf("trtllm output config: %v", oc)
			}
		}

		var streamed []string
		for _, ev := range sseEvents(t, post(t, tr, t.Context(), url, "/v1/chat/completions", body+`,"stream":true}`)) {
			if ev == "[DONE]" {
				continue
			}
			var c lpAnswer
			if err := json.Unmarshal([]byte(ev), &c); err != nil {
				t.Fatal(err)
			}
			if l := c.Choices[0].Logprobs; l != nil {
				for _, e := range l.Content {
					streamed = append(streamed, e.Token)
				}
			}
		}
		if !slices.Equal(streamed, toks) {
			t.Errorf("%s: streamed tokens %q, want %q", p, streamed, toks)
		}
	}
}

func close32(a, b float64) bool { d := a - b; return d < 1e-6 && d > -1e-6 }

// Without logprobs the engines are not asked for them and choices say null.
func TestNoLogprobsAsked(t *testing.T) {
	for _, p := range genProtocols {
		f := newFake("hi")
		tr, url := setup(t, p, f)
		resp := post(t, tr, t.Context(), url, "/v1/chat/completions", chatBody)
		if got := decode[lpAnswer](t, resp); got.Choices[0].Logprobs != nil {
			t.Errorf("%s: logprobs %+v", p, got.Choices[0].Logprobs)
		}
		if p == enginegrpc.SGLang && f.sglang[0].GetReturnLogprob() {
			t.Error("sglang asked for logprobs")
		}
		if p == enginegrpc.VLLM && f.vllm[0].GetSamplingParams().Logprobs != nil {
			t.Error("vllm asked for logprobs")
		}
		if oc := f.trtllmRequests(); p == enginegrpc.TRTLLM && (oc[0].GetOutputConfig().Logprobs != nil || oc[0].GetOutputConfig().PromptLogprobs != nil) {
			t.Error("trtllm asked for logprobs")
		}
	}
}

// Completions' logprobs: vLLM's tokens, token_logprobs, top_logprobs maps and text offsets; with echo
// the prompt's text and logprobs come first (its first token has none), whole and streamed.
func TestCompletionLogprobsEcho(t *testing.T) {
	const body = `{"model":"m","prompt":"ab","logprobs":1,"echo":true,"max_tokens":2`
	for _, p := range genProtocols {
		f := newFake("xyz")
		tr, url := setup(t, p, f)
		got := decode[lpAnswer](t, post(t, tr, t.Context(), url, "/v1/completions", body+`}`))
		c := got.Choices[0]
		if c.Text != "abxy" || c.Logprobs == nil {
			t.Fatalf("%s: choice %+v", p, c)
		}
		lp := c.Logprobs
		if !slices.Equal(lp.Tokens, []string{"a", "b", "x", "y"}) || !slices.Equal(lp.TextOffset, []int{0, 1, 2, 3}) {
			t.Errorf("%s: tokens %q offsets %v", p, lp.Tokens, lp.TextOffset)
		}
		if lp.TokenLogprobs[0] != nil || *lp.TokenLogprobs[1] != -0.5 || !close32(*lp.TokenLogprobs[2], -0.1) ||
			lp.TopLogprobs[0] != nil || len(lp.TopLogprobs[2]) != 1 || lp.TopLogprobs[2]["x"] == 0 {
			t.Errorf("%s: token_logprobs %v top %v", p, lp.TokenLogprobs, lp.TopLogprobs)
		}
		if p == enginegrpc.SGLang && f.sglang[0].GetLogprobStartLen() != 0 {
			t.Errorf("sglang logprob_start_len = %d, want 0 for echo", f.sglang[0].GetLogprobStartLen())
		}
		if p == enginegrpc.VLLM && f.vllm[0].GetSamplingParams().GetPromptLogprobs() != 1 {
			t.Errorf("vllm prompt_logprobs = %v", f.vllm[0].GetSamplingParams().PromptLogprobs)
		}
		if p == enginegrpc.TRTLLM {
			if oc := f.trtllmRequests()[0].GetOutputConfig(); oc.GetLogprobs() != 1 || oc.GetPromptLogprobs() != 1 {
				t.Errorf("trtllm output config = %v", oc)
			}
			// Its prompt logprobs come with the Complete, after every chunk: a streamed echo with
			// logprobs is a 400 naming echo, before any engine call.
			resp := post(t, tr, t.Context(), url, "/v1/completions", body+`,"stream":true}`)
			if got := decode[lpAnswer](t, resp); resp.StatusCode != http.StatusBadRequest || got.Error == nil || got.Error.Param != "echo" || len(f.trtllmRequests()) != 1 {
				t.Errorf("trtllm streamed echo with logprobs: status %d, %+v", resp.StatusCode, got.Error)
			}
			continue
		}

		var text strings.Builder
		var toks []string
		var offsets []int
		for _, ev := range sseEvents(t, post(t, tr, t.Context(), url, "/v1/completions", body+`,"stream":true}`)) {
			if ev == "[DONE]" {
				continue
			}
			var ch lpAnswer
			if err := json.Unmarshal([]byte(ev), &ch); err != nil {
				t.Fatal(err)
			}
			text.WriteString(ch.Choices[0].Text)
			if l := ch.Choices[0].Logprobs; l != nil {
				toks, offsets = append(toks, l.Tokens...), append(offsets, l.TextOffset...)
			}
		}
		if text.String() != "abxy" || !slices.Equal(toks, lp.Tokens) || !slices.Equal(offsets, lp.TextOffset) {
			t.Errorf("%s: streamed %q tokens %q offsets %v", p, text.String(), toks, offsets)
		}
	}
}

// Echo with logprobs from an engine that sends no prompt logprobs is a 400 naming echo; echo alone is
// the prompt before the answer.
func TestEchoWithoutPromptLogprobs(t *testing.T) {
	for _, p := range genProtocols {
		f := newFake("z")
		f.noInLP = true
		tr, url := setup(t, p, f)
		resp := post(t, tr, t.Context(), url, "/v1/completions", `{"model":"m","prompt":"ab","logprobs":0,"echo":true}`)
		if got := decode[lpAnswer](t, resp); resp.StatusCode != http.StatusBadRequest || got.Error == nil || got.Error.Param != "echo" {
			t.Errorf("%s: status %d, %+v", p, resp.StatusCode, got)
		}
		resp = post(t, tr, t.Context(), url, "/v1/completions", `{"model":"m","prompt":"ab","echo":true}`)
		if got := decode[lpAnswer](t, resp); resp.StatusCode != 200 || got.Choices[0].Text != "abz" || got.Choices[0].Logprobs != nil {
			t.Errorf("%s: echo alone: status %d, %+v", p, resp.StatusCode, got)
		}
	}
}

// SGLang's /generate with return_logprob: meta_info's input and output token logprobs as
// [logprob, id, null], the prompt's from logprob_start_len 0, top alternatives when asked.
func TestGenerateLogprobs(t *testing.T) {
	f := newFake("ok")
	tr, url := setup(t, enginegrpc.SGLang, f)
	resp := post(t, tr, t.Context(), url, "/generate", `{"text":"abc","return_logprob":true,"top_logprobs_num":1}`)
	got := decode[struct {
		Meta struct {
			In   [][]any   `json:"input_token_logprobs"`
			Out  [][]any   `json:"output_token_logprobs"`
			OTop [][][]any `json:"output_top_logprobs"`
		} `json:"meta_info"`
	}](t, resp)
	m := got.Meta
	if len(m.In) != 3 || m.In[0][0] != nil || m.In[1][0] != -0.5 || m.In[1][1] != float64('b') {
		t.Errorf("input_token_logprobs = %v", m.In)
	}
	if len(m.Out) != 3 || m.Out[0][1] != float64('o') || !close32(m.Out[1][0].(float64), -0.2) || len(m.OTop) != 3 || len(m.OTop[0]) != 1 {
		t.Errorf("output_token_logprobs = %v, top %v", m.Out, m.OTop)
	}
	if r := f.sglang[0]; r.GetLogprobStartLen() != 0 || r.GetTopLogprobsNum() != 1 {
		t.Errorf("logprob_start_len %d top %d", r.GetLogprobStartLen(), r.GetTopLogprobsNum())
	}
}

// Bad logprobs fields are 400s naming them, before any engine call.
func TestLogprobsRefusals(t *testing.T) {
	f := newFake("x")
	tr, url := setup(t, enginegrpc.VLLM, f)
	for body, param := range map[string]string{
		`{"model":"m","messages":[{"role":"user","content":"x"}],"top_logprobs":2}`:                  "top_logprobs",
		`{"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21}`: "top_logprobs",
		`{"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":3}`:                      "logprobs",
		`{"model":"m","messages":[{"role":"user","content":"x"}],"echo":true}`:                       "echo",
		`{"model":"m","prompt":"x","logprobs":-1}`:                                                   "logprobs",
	} {
		path := "/v1/chat/completions"
		if strings.Contains(body, `"prompt"`) {
			path = "/v1/completions"
		}
		resp := post(t, tr, t.Context(), url, path, body)
		if got := decode[lpAnswer](t, resp); resp.StatusCode != 400 || got.Error == nil || got.Error.Param != param {
			t.Errorf("%s: status %d, %+v, want param %q", body, resp.StatusCode, got.Error, param)
		}
	}
	if len(f.vllm) != 0 {
		t.Errorf("%d requests reached the engine", len(f.vllm))
	}
}
