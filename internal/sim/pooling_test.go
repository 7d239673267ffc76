package sim

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestEmbeddingsShapes(t *testing.T) {
	t.Parallel()
	for _, proto := range []Protocol{ProtocolSGLang, ProtocolVLLM} {
		t.Run(string(proto), func(t *testing.T) {
			e := startEngine(t, Config{Mode: ModeInstant, Protocol: proto, Models: []string{"e5"}})
			c := testClient(t)
			status, body := post(t, c, e.URL()+"/v1/embeddings", `{"model":"e5","input":["hello world","hello world","other"]}`)
			if status != 200 {
				t.Fatalf("status %d: %s", status, body)
			}
			type resp struct {
				ID     string `json:"id"`
				Object string `json:"object"`
				Model  string `json:"model"`
				Data   []struct {
					Object    string    `json:"object"`
					Index     int       `json:"index"`
					Embedding []float64 `json:"embedding"`
				} `json:"data"`
				Usage struct {
					PromptTokens int `json:"prompt_tokens"`
					TotalTokens  int `json:"total_tokens"`
				} `json:"usage"`
			}
			r := decodeJSON[resp](t, body)
			if r.Object != "list" || r.Model != "e5" || len(r.Data) != 3 || r.Usage.PromptTokens != 10 || r.Usage.TotalTokens != 10 {
				t.Fatalf("response %s", body)
			}
			if (proto == ProtocolVLLM) != (r.ID != "") {
				t.Errorf("id %q: vLLM's EmbeddingResponse has one, SGLang's none", r.ID)
			}
			var norm float64
			for _, x := range r.Data[0].Embedding {
				norm += x * x
			}
			if len(r.Data[0].Embedding) != EmbeddingDim || math.Abs(norm-1) > 1e-9 {
				t.Errorf("embedding of %d values, norm %v; want %d values of norm 1", len(r.Data[0].Embedding), norm, EmbeddingDim)
			}
			if !slices.Equal(r.Data[0].Embedding, r.Data[1].Embedding) || slices.Equal(r.Data[0].Embedding, r.Data[2].Embedding) {
				t.Error("the same input must give the same vector, another input another one")
			}
			// base64: little-endian float32s of the same vector, shortened by dimensions.
			status, body = post(t, c, e.URL()+"/v1/embeddings", `{"model":"e5","input":"hello world","encoding_format":"base64","dimensions":4}`)
			if status != 200 {
				t.Fatalf("base64: %d %s", status, body)
			}
			b64 := decodeJSON[struct {
				Data []struct {
					Embedding string `json:"embedding"`
				} `json:"data"`
			}](t, body)
			raw, err := base64.StdEncoding.DecodeString(b64.Data[0].Embedding)
			if err != nil || len(raw) != 16 {
				t.Fatalf("base64 embedding %q: %v", b64.Data[0].Embedding, err)
			}
			if got := math.Float32frombits(binary.LittleEndian.Uint32(raw)); got == 0 {
				t.Error("zero first value")
			}
			status, body = post(t, c, e.URL()+"/v1/embeddings", `{"model":"nope","input":"x"}`)
			if status != 404 {
				t.Errorf("unknown model: %d %s", status, body)
			}
			status, body = post(t, c, e.URL()+"/v1/embeddings", `{"model":"e5"}`)
			if status != 400 || !strings.Contains(string(body), "input") {
				t.Errorf("missing input: %d %s", status, body)
			}
		})
	}
}

func TestRerankScoreClassifyShapes(t *testing.T) {
	t.Parallel()
	docs := `["paris is the capital of france","bananas are yellow","the capital of france"]`
	sg := startEngine(t, Config{Mode: ModeInstant, Protocol: ProtocolSGLang, Models: []string{"r"}})
	vl := startEngine(t, Config{Mode: ModeInstant, Protocol: ProtocolVLLM, Models: []string{"r"}})
	c := testClient(t)

	// SGLang: a bare list, highest score first (serving_rerank.py).
	status, body := post(t, c, sg.URL()+"/v1/rerank", `{"query":"capital of france","documents":`+docs+`,"top_n":2}`)
	if status != 200 {
		t.Fatalf("sglang rerank %d: %s", status, body)
	}
	sgr := decodeJSON[[]struct {
		Score    float64 `json:"score"`
		Document string  `json:"document"`
		Index    int     `json:"index"`
	}](t, body)
	if len(sgr) != 2 || sgr[0].Score < sgr[1].Score || sgr[0].Score != 1 || strings.Contains(sgr[0].Document, "banana") {
		t.Errorf("sglang rerank %s", body)
	}
	// vLLM: {"results": [{"index","document":{"text"},"relevance_score"}]} (Jina/Cohere style), at /rerank.
	status, body = post(t, c, vl.URL()+"/rerank", `{"model":"r","query":"capital of france","documents":`+docs+`}`)
	if status != 200 {
		t.Fatalf("vllm rerank %d: %s", status, body)
	}
	vr := decodeJSON[struct {
		Results []struct {
			Index    int `json:"index"`
			Document struct {
				Text string `json:"text"`
			} `json:"document"`
			RelevanceScore float64 `json:"relevance_score"`
		} `json:"results"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}](t, body)
	if len(vr.Results) != 3 || vr.Results[2].Index != 1 || vr.Results[0].RelevanceScore != 1 || vr.Usage.PromptTokens == 0 {
		t.Errorf("vllm rerank %s", body)
	}
	if status, _ := post(t, c, sg.URL()+"/rerank", `{"query":"q","documents":["d"]}`); status != 404 {
		t.Errorf("SGLang serves rerank only at /v1/rerank, got %d at /rerank", status)
	}

	status, body = post(t, c, sg.URL()+"/v1/score", `{"query":"is it","items":["yes","no"],"label_token_ids":[1,2],"apply_softmax":true}`)
	sgs := decodeJSON[struct {
		Scores [][]float64 `json:"scores"`
		Object string      `json:"object"`
	}](t, body)
	if status != 200 || sgs.Object != "scoring" || len(sgs.Scores) != 2 || math.Abs(sgs.Scores[0][0]+sgs.Scores[0][1]-1) > 1e-9 {
		t.Errorf("sglang score %d %s", status, body)
	}
	status, body = post(t, c, vl.URL()+"/score", `{"model":"r","text_1":"capital","text_2":["capital city","banana"]}`)
	vs := decodeJSON[struct {
		Data []struct {
			Score float64 `json:"score"`
		} `json:"data"`
	}](t, body)
	if status != 200 || len(vs.Data) != 2 || vs.Data[0].Score != 1 || vs.Data[1].Score != 0 {
		t.Errorf("vllm score %d %s", status, body)
	}

	for path, e := range map[string]*Engine{"/v1/classify": sg, "/classify": vl} {
		status, body = post(t, c, e.URL()+path, `{"model":"r","input":["good","bad"]}`)
		cl := decodeJSON[struct {
			Object string `json:"object"`
			Data   []struct {
				Label      string    `json:"label"`
				Probs      []float64 `json:"probs"`
				NumClasses int       `json:"num_classes"`
			} `json:"data"`
		}](t, body)
		if status != 200 || cl.Object != "list" || len(cl.Data) != 2 || cl.Data[0].NumClasses != 2 || len(cl.Data[0].Probs) != 2 {
			t.Errorf("%s %d %s", path, status, body)
		}
	}
}

func TestTokenizeShapes(t *testing.T) {
	t.Parallel()
	sg := startEngine(t, Config{Mode: ModeInstant, Protocol: ProtocolSGLang, Models: []string{"m"}, ContextLength: 4096})
	vl := startEngine(t, Config{Mode: ModeInstant, Protocol: ProtocolVLLM, Models: []string{"m"}, ContextLength: 4096})
	c := testClient(t)
	type tok struct {
		Tokens      []uint32 `json:"tokens"`
		Count       int      `json:"count"`
		MaxModelLen int      `json:"max_model_len"`
	}
	status, body := post(t, c, sg.URL()+"/v1/tokenize", `{"model":"m","prompt":"hello, world"}`)
	st := decodeJSON[tok](t, body)
	if status != 200 || st.Count != 5 || len(st.Tokens) != 5 || st.MaxModelLen != 4096 { // hell o , worl d
		t.Fatalf("sglang tokenize %d %s", status, body)
	}
	status, body = post(t, c, vl.URL()+"/tokenize", `{"model":"m","prompt":"hello, world"}`)
	if vt := decodeJSON[tok](t, body); status != 200 || !slices.Equal(vt.Tokens, st.Tokens) {
		t.Fatalf("vllm tokenize %d %s", status, body)
	}
	if status, _ := post(t, c, vl.URL()+"/v1/tokenize", `{"prompt":"x"}`); status != 404 {
		t.Errorf("vLLM serves tokenize at /tokenize only, got %d at /v1/tokenize", status)
	}
	ids, _ := json.Marshal(st.Tokens)
	status, body = post(t, c, sg.URL()+"/v1/detokenize", `{"model":"m","tokens":`+string(ids)+`}`)
	if dt := decodeJSON[struct{ Text string }](t, body); status != 200 || dt.Text != "hell o , worl d" {
		t.Errorf("sglang detokenize %d %s", status, body)
	}
	status, body = post(t, c, vl.URL()+"/detokenize", `{"model":"m","tokens":`+string(ids)+`}`)
	if dt := decodeJSON[struct{ Prompt string }](t, body); status != 200 || dt.Prompt == "" {
		t.Errorf("vllm detokenize %d %s", status, body)
	}
	status, body = post(t, c, sg.URL()+"/v1/tokenize", `{"model":"m"}`)
	if status != 400 || !strings.Contains(string(body), "Exactly one of 'prompt' or 'messages'") {
		t.Errorf("tokenize without input: %d %s", status, body)
	}
}
