package conformance

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/tests/testenv"
)

// Upstream sources of the engines' non-generation routes.
const (
	srcVLLMTokenize = "vllm-project/vllm vllm/entrypoints/serve/tokenize/api_router.py (/tokenize, /detokenize without /v1)"
	srcVLLMClassify = "vllm-project/vllm vllm/entrypoints/pooling/classify/api_router.py (/classify)"
	srcVLLMScore    = "vllm-project/vllm vllm/entrypoints/pooling/score/api_router.py (/score and /rerank; /v1/score and /v1/rerank are deprecated aliases)"
	srcVLLMEmbed    = "vllm-project/vllm vllm/entrypoints/pooling/embed/api_router.py (/v1/embeddings)"
	srcSGLangHTTP   = "sgl-project/sglang python/sglang/srt/entrypoints/http_server.py (the OpenAI-style routes under /v1)"
)

// TestAuxRoutePaths: in regular mode each non-generation route reaches the engine at the path that
// engine serves it on, with the client's body unchanged, one request per client request.
func TestAuxRoutePaths(t *testing.T) {
	type row struct {
		protocol, client, engine, source string
	}
	rows := []row{
		{"vllm", "/v1/tokenize", "/tokenize", srcVLLMTokenize},
		{"vllm", "/v1/detokenize", "/detokenize", srcVLLMTokenize},
		{"vllm", "/v1/classify", "/classify", srcVLLMClassify},
		{"vllm", "/v1/score", "/score", srcVLLMScore},
		{"vllm", "/v1/rerank", "/rerank", srcVLLMScore},
		{"vllm", "/rerank", "/rerank", srcVLLMScore},
		{"vllm", "/v1/embeddings", "/v1/embeddings", srcVLLMEmbed},
		{"sglang", "/v1/tokenize", "/v1/tokenize", srcSGLangHTTP},
		{"sglang", "/v1/detokenize", "/v1/detokenize", srcSGLangHTTP},
		{"sglang", "/v1/classify", "/v1/classify", srcSGLangHTTP},
		{"sglang", "/v1/score", "/v1/score", srcSGLangHTTP},
		{"sglang", "/v1/rerank", "/v1/rerank", srcSGLangHTTP},
		{"sglang", "/v1/embeddings", "/v1/embeddings", srcSGLangHTTP},
	}
	for _, proto := range []string{"vllm", "sglang"} {
		served := map[string]bool{}
		for _, r := range rows {
			if r.protocol == proto {
				served[r.engine] = true
			}
		}
		e := startEngine(t, &recordingEngine{kind: proto, role: "regular", auxPaths: served}, "")
		gw := testenv.StartGateway(t, app.Options{}, "--worker-urls", e.srv.URL, "--disable-retries")
		for _, r := range rows {
			if r.protocol != proto {
				continue
			}
			t.Run(proto+r.client, func(t *testing.T) {
				t.Logf("written from %s", r.source)
				before := len(e.recorded())
				body := `{"model":"m","input":"x","query":"q","documents":["d"],"prompt":"p","tokens":[1,2]}`
				resp, err := http.Post(gw.URL+r.client, "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("%s: %d %s", r.client, resp.StatusCode, b)
				}
				legs := e.recorded()[before:]
				if len(legs) != 1 || legs[0].Path != r.engine {
					t.Fatalf("%s reached the engine as %+v, want one request at %s", r.client, legs, r.engine)
				}
				if legs[0].Body["query"] != "q" || legs[0].Body["input"] != "x" {
					t.Errorf("body changed on the way: %v", legs[0].Body)
				}
			})
		}
	}
}
