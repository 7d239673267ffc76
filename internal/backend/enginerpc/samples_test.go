package enginerpc

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/sluicegw/sluice/internal/enginegrpc"
)

type nAnswer struct {
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		Delta struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"delta"`
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

// n > 1 is one Generate with n; the engine's samples (sent out of order) become choices by their
// index, whole and streamed (each choice's role chunk first, each its own finish), and usage counts
// the prompt once and every sample's tokens.
func TestNSamples(t *testing.T) {
	const chat = `{"model":"m","messages":[{"role":"user","content":"x"}],"n":3`
	for _, p := range genProtocols {
		f := newFake("hi")
		tr, url := setup(t, p, f)
		resp := post(t, tr, t.Context(), url, "/v1/chat/completions", chat+`}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d", p, resp.StatusCode)
		}
		got := decode[nAnswer](t, resp)
		if len(got.Choices) != 3 {
			t.Fatalf("%s: %d choices", p, len(got.Choices))
		}
		for i, c := range got.Choices {
			if c.Index != i || c.Message.Content != fmt.Sprintf("hi%d", i) || *c.FinishReason != "stop" {
				t.Errorf("%s: choice %d = %+v", p, i, c)
			}
		}
		prompt := len(testTokenizer(t).Encode("<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"))
		perSample := 4 // "hi", the index, the EOS; TensorRT-LLM's output leaves the EOS out
		if p == enginegrpc.TRTLLM {
			perSample = 3
		}
		if u := got.Usage; u.PromptTokens != prompt || u.CompletionTokens != 3*perSample || u.TotalTokens != prompt+3*perSample {
			t.Errorf("%s: usage %+v, want %d prompt and %d completion tokens", p, u, prompt, 3*perSample)
		}
		if p == enginegrpc.SGLang && f.sglang[0].GetSamplingParams().GetN() != 3 || p == enginegrpc.VLLM && f.vllm[0].GetSamplingParams().GetN() != 3 {
			t.Errorf("%s: n not sent", p)
		}
		if sc := f.trtllmRequests(); p == enginegrpc.TRTLLM && (sc[0].GetSamplingConfig().GetNumReturnSequences() != 3 || sc[0].GetSamplingConfig().GetBeamWidth() != 1) {
			t.Errorf("trtllm: sampling config %v, want 3 sequences of one beam", sc[0].GetSamplingConfig())
		}

		texts := make([]string, 3)
		roles, finishes := 0, 0
		var usage *struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
			TotalTokens      int `json:"total_tokens"`
		}
		for _, ev := range sseEvents(t, post(t, tr, t.Context(), url, "/v1/chat/completions", chat+`,"stream":true,"stream_options":{"include_usage":true}}`)) {
			if ev == "[DONE]" {
				continue
			}
			var ch nAnswer
			if err := json.Unmarshal([]byte(ev), &ch); err != nil {
				t.Fatal(err)
			}
			if ch.Usage != nil {
				usage = ch.Usage
			}
			for _, c := range ch.Choices {
				texts[c.Index] += c.Delta.Content
				if c.Delta.Role == "assistant" {
					roles++
				}
				if c.FinishReason != nil {
					finishes++
				}
			}
		}
		for i, text := range texts {
			if text != fmt.Sprintf("hi%d", i) {
				t.Errorf("%s: streamed choice %d %q", p, i, text)
			}
		}
		if roles != 3 || finishes != 3 || usage == nil || *usage != *got.Usage {
			t.Errorf("%s: %d role chunks, %d finishes, usage %+v; want 3, 3 and %+v", p, roles, finishes, usage, got.Usage)
		}

		comp := decode[nAnswer](t, post(t, tr, t.Context(), url, "/v1/completions", `{"model":"m","prompt":"a","n":2,"echo":true}`))
		if len(comp.Choices) != 2 || comp.Choices[0].Text != "ahi0" || comp.Choices[1].Text != "ahi1" || comp.Choices[1].Index != 1 {
			t.Errorf("%s: completions choices %+v", p, comp.Choices)
		}
	}
}

// SGLang's /generate with n > 1 answers a list of objects, one per sample.
func TestGenerateN(t *testing.T) {
	f := newFake("yo")
	tr, url := setup(t, enginegrpc.SGLang, f)
	got := decode[[]struct {
		Index int    `json:"index"`
		Text  string `json:"text"`
	}](t, post(t, tr, t.Context(), url, "/generate", `{"text":"x","sampling_params":{"n":2}}`))
	if len(got) != 2 || got[0].Text != "yo0" || got[1].Text != "yo1" || got[1].Index != 1 {
		t.Errorf("generate n=2: %+v", got)
	}
}

// A prompt that fills the model's context is a 400 context_length_exceeded naming the prompt's field,
// and the engine never hears of it; a shorter one is served.
func TestContextLengthExceeded(t *testing.T) {
	f := newFake("ok")
	tr, url := setupEngine(t, f, Engine{Protocol: enginegrpc.VLLM, Tokenizer: testTokenizer(t), EOS: []int{imEnd}, Model: "m", ContextLength: 4})
	for path, body := range map[string]string{
		"/v1/chat/completions": `{"model":"m","messages":[{"role":"user","content":"x"}]}`,
		"/v1/completions":      `{"model":"m","prompt":"abcd"}`,
		"/generate":            `{"input_ids":[1,2,3,4,5]}`,
	} {
		resp := post(t, tr, t.Context(), url, path, body)
		got := decode[struct {
			Error struct {
				Param string `json:"param"`
				Code  string `json:"code"`
			} `json:"error"`
		}](t, resp)
		if resp.StatusCode != http.StatusBadRequest || got.Error.Code != "context_length_exceeded" || got.Error.Param == "" {
			t.Errorf("%s: status %d, error %+v", path, resp.StatusCode, got.Error)
		}
	}
	if len(f.vllm) != 0 {
		t.Errorf("%d requests reached the engine", len(f.vllm))
	}
	if resp := post(t, tr, t.Context(), url, "/v1/completions", `{"model":"m","prompt":"abc"}`); resp.StatusCode != http.StatusOK {
		t.Errorf("a 3-token prompt in a 4-token context: status %d", resp.StatusCode)
	} else {
		resp.Body.Close()
	}
}
