package enginerpc

import (
	"encoding/base64"
	"net/http"
	"slices"
	"testing"

	"github.com/sluicegw/sluice/internal/enginegrpc"
)

// /v1/embeddings is one Embed per input, tokenized by the gateway; the answer is OpenAI's list in
// input order with usage, float or base64; dimensions, which Embed cannot carry, is a 400.
func TestEmbeddings(t *testing.T) {
	type answer struct {
		ID     string `json:"id"`
		Object string `json:"object"`
		Data   []struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
		Error *struct {
			Param string `json:"param"`
		} `json:"error"`
	}
	for _, p := range protocols {
		f := newFake("")
		tr, url := setup(t, p, f)
		resp := post(t, tr, t.Context(), url, "/v1/embeddings", `{"model":"m","input":["ab","xyz"]}`)
		got := decode[answer](t, resp)
		if resp.StatusCode != http.StatusOK || got.Object != "list" || len(got.Data) != 2 || got.Usage.PromptTokens != 5 {
			t.Fatalf("%s: status %d, %+v", p, resp.StatusCode, got)
		}
		if !slices.Equal(got.Data[0].Embedding, []float32{2, 'a', 0.5}) || !slices.Equal(got.Data[1].Embedding, []float32{3, 'x', 0.5}) || got.Data[1].Index != 1 {
			t.Errorf("%s: data %+v", p, got.Data)
		}
		if (p == enginegrpc.VLLM) != (got.ID == "embd-r1") {
			t.Errorf("%s: id %q", p, got.ID)
		}
		b64 := decode[struct {
			Data []struct {
				Embedding string `json:"embedding"`
			} `json:"data"`
		}](t, post(t, tr, t.Context(), url, "/v1/embeddings", `{"model":"m","input":[7,8],"encoding_format":"base64"}`))
		if raw, err := base64.StdEncoding.DecodeString(b64.Data[0].Embedding); err != nil || len(raw) != 12 {
			t.Errorf("%s: base64 embedding %q (%v)", p, b64.Data[0].Embedding, err)
		}
		resp = post(t, tr, t.Context(), url, "/v1/embeddings", `{"model":"m","input":"a","dimensions":2}`)
		if got := decode[answer](t, resp); resp.StatusCode != 400 || got.Error == nil || got.Error.Param != "dimensions" {
			t.Errorf("%s: dimensions: status %d, %+v", p, resp.StatusCode, got.Error)
		}
	}
}
