package dispatch

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/worker"
)

// BenchmarkMigrationReady is what being ready to migrate costs a stream that never breaks: one
// streamed PD request (32 tokens) per iteration through the dispatcher against instant engines
// answering from the client's transport, a frame per read, with --max-migrations 0 and 2. The cases: a chat with a text
// prompt to SGLang (only the request's migrator), and to vLLM, SGLang's /generate with input_ids and
// vLLM's completions with a token-id prompt (the HTTP-mode reader of every chunk, and for vLLM the ids
// asked for and taken out).
// Compare cpu-ns/op of the two settings of one case, measured in the same run.
func BenchmarkMigrationReady(b *testing.B) {
	const tokens = 32
	cases := []struct {
		name     string
		protocol worker.Protocol
		route    Route
		body     string
	}{
		{"chat-sglang", worker.ProtocolSGLang, RouteChat,
			`{"model":"m","max_tokens":32,"stream":true,"messages":[{"role":"user","content":"lorem ipsum dolor sit amet"}]}`},
		{"chat-vllm", worker.ProtocolVLLM, RouteChat,
			`{"model":"m","max_tokens":32,"stream":true,"messages":[{"role":"user","content":"lorem ipsum dolor sit amet"}]}`},
		{"generate-ids-sglang", worker.ProtocolSGLang, RouteGenerate,
			`{"input_ids":[1,2,3,4,5,6,7,8],"sampling_params":{"max_new_tokens":32,"temperature":0},"stream":true}`},
		{"completions-ids-vllm", worker.ProtocolVLLM, RouteCompletions,
			`{"model":"m","prompt":[1,2,3,4,5,6,7,8],"max_tokens":32,"temperature":0,"stream":true}`},
	}
	for _, c := range cases {
		for _, maxMig := range []int{0, 2} {
			b.Run(c.name+"/max-migrations="+strconv.Itoa(maxMig), func(b *testing.B) {
				d, adm := benchStreamDispatcher(b, c.protocol, maxMig, tokens)
				body := []byte(c.body)
				b.ReportAllocs()
				cpu0 := processCPU(b)
				for b.Loop() {
					resp, err := d.Do(b.Context(), &Request{Route: c.route, Body: body, Header: http.Header{}})
					if err != nil {
						b.Fatal(err)
					}
					n, err := io.Copy(io.Discard, resp.Body)
					if err != nil || n == 0 {
						b.Fatal(n, err)
					}
					resp.Body.Close()
				}
				b.StopTimer()
				b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
				if st := adm.Status(); st.Inflight["http://prefill.invalid:30000"] != 0 {
					b.Fatalf("slots still held: %v", st.Inflight)
				}
			})
		}
	}
}

// benchStreamDispatcher is a PD dispatcher whose engines answer from the transport: the prefill's
// JSON, and a decode stream of tokens chunks in the engine's own shape.
func benchStreamDispatcher(b *testing.B, protocol worker.Protocol, maxMigrations, tokens int) (*Dispatcher, *admission.Controller) {
	const prefillURL, decodeURL = "http://prefill.invalid:30000", "http://decode.invalid:30000"
	prefillAnswer := []byte(`{"id":"p","object":"text_completion","choices":[{"index":0,"text":"a","finish_reason":"length"}],` +
		`"kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"e","remote_block_ids":[1],"remote_host":"h","remote_port":1}}`)
	// The answers are made once: the engines' own cost is not the dispatcher's.
	streams := map[string][]byte{}
	for _, path := range []string{"/generate", "/v1/chat/completions", "/v1/completions"} {
		streams[path] = benchStream(path, false, tokens)
		streams[path+"+ids"] = benchStream(path, true, tokens)
	}
	engines := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		reqBody, _ := io.ReadAll(r.Body)
		r.Body.Close()
		answer := prefillAnswer
		if r.URL.Host == "decode.invalid:30000" {
			key := r.URL.Path
			if bytes.Contains(reqBody, []byte(`"return_token_ids":true`)) {
				key += "+ids"
			}
			answer = streams[key]
		}
		return &http.Response{StatusCode: 200, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Request: r,
			Header: http.Header{"Content-Type": {"text/event-stream"}}, ContentLength: -1,
			Body: io.NopCloser(&frameReader{b: answer})}, nil
	})
	reg := worker.NewRegistry(worker.RegistryOptions{StartReady: true})
	ps := worker.Spec{URL: prefillURL, Role: worker.RolePrefill, Protocol: protocol, Models: []string{"m"}}
	if protocol == worker.ProtocolSGLang {
		ps.BootstrapPort = 8998
	}
	if _, err := reg.Add(ps); err != nil {
		b.Fatal(err)
	}
	if _, err := reg.Add(worker.Spec{URL: decodeURL, Role: worker.RoleDecode, Protocol: protocol, Models: []string{"m"}}); err != nil {
		b.Fatal(err)
	}
	pols, err := placement.NewSet(placement.Config{Settings: placement.Settings{Policy: placement.PolicyCacheAware}})
	if err != nil {
		b.Fatal(err)
	}
	adm, err := admission.New(admission.Settings{MaxInflightPerWorker: 1024, QueueSize: 1024, QueueTimeout: time.Minute}, admission.Deps{})
	if err != nil {
		b.Fatal(err)
	}
	d, err := New(Config{PD: true, MaxMigrations: maxMigrations}, Deps{Registry: reg, Policies: pols, Admission: adm,
		HTTP: &http.Client{Transport: engines}})
	if err != nil {
		b.Fatal(err)
	}
	return d, adm
}

// benchStream is a decode engine's SSE answer of tokens chunks for path: SGLang's /generate
// (cumulative text and output_ids), else OpenAI chunks (completions, with token_ids when asked).
func benchStream(path string, ids bool, tokens int) []byte {
	var sb strings.Builder
	var text strings.Builder
	var out []string
	for i := range tokens {
		text.WriteString(" w")
		out = append(out, strconv.Itoa(100+i))
		fin := "null"
		switch path {
		case "/generate":
			if i == tokens-1 {
				fin = fmt.Sprintf(`{"type":"length","length":%d}`, tokens)
			}
			fmt.Fprintf(&sb, `data: {"text":%q,"output_ids":[%s],"meta_info":{"id":"r1","finish_reason":%s,"prompt_tokens":8,"completion_tokens":%d,"cached_tokens":0},"index":0}`+"\n\n",
				text.String(), strings.Join(out, ","), fin, i+1)
		case "/v1/chat/completions":
			head := `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,`
			if i == 0 {
				sb.WriteString(head + `"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]`)
				if ids {
					sb.WriteString(`,"prompt_token_ids":[1,2,3,4,5,6,7,8]`)
				}
				sb.WriteString("}\n\n")
			}
			if i == tokens-1 {
				fin = `"length"`
			}
			extra := ""
			if ids {
				extra = fmt.Sprintf(`,"token_ids":[%d]`, 100+i)
			}
			fmt.Fprintf(&sb, head+`"delta":{"content":" w"},"logprobs":null,"finish_reason":%s%s}]}`+"\n\n", fin, extra)
		default:
			if i == tokens-1 {
				fin = `"length"`
			}
			extra := ""
			if ids {
				extra = fmt.Sprintf(`,"token_ids":[%d]`, 100+i)
				if i == 0 {
					extra += `,"prompt_token_ids":[1,2,3,4,5,6,7,8]`
				}
			}
			fmt.Fprintf(&sb, `data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" w","logprobs":null,"finish_reason":%s%s}]}`+"\n\n", fin, extra)
		}
	}
	sb.WriteString("data: [DONE]\n\n")
	return []byte(sb.String())
}

// frameReader gives an SSE body one frame per Read, as an engine's flushed stream reaches the gateway.
type frameReader struct{ b []byte }

func (r *frameReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	end := len(r.b)
	if i := bytes.Index(r.b, []byte("\n\n")); i >= 0 {
		end = i + 2
	}
	n := copy(p, r.b[:end])
	r.b = r.b[n:]
	return n, nil
}
