package baseline

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Frames is an instant OpenAI-style upstream for the overhead scenario. POST /v1/chat/completions
// answers at once with max_tokens output tokens (default 16): a chat completion, or with "stream":true
// one chunk per token, then the usage chunk when stream_options.include_usage asks for it, then
// [DONE]. Two extra request fields shape a stream: "bench_gap_us" spaces the token chunks that many
// microseconds apart, each in its own write and flush, as an engine emits tokens (0, the default,
// writes all of them in one write, so they arrive together); "bench_hold":true sends the first chunk
// and then holds the stream open until the client goes away. GET /v1/models names it a vLLM engine.
type Frames struct {
	// Model is the served model id (default "sim-model").
	Model string
}

func (f *Frames) model() string {
	if f.Model == "" {
		return "sim-model"
	}
	return f.Model
}

// frameRequest is what Frames reads from a request.
type frameRequest struct {
	MaxTokens     *int `json:"max_tokens"`
	Stream        bool `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	GapUS int  `json:"bench_gap_us"`
	Hold  bool `json:"bench_hold"`
}

// maxFrames bounds a stream's length.
const maxFrames = 1 << 16

func (f *Frames) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/health" || r.URL.Path == "/readiness":
		w.WriteHeader(http.StatusOK)
	case r.URL.Path == "/v1/models" && r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":`+strconv.Quote(f.model())+`,"object":"model","created":0,"owned_by":"vllm"}]}`)
	case r.URL.Path == "/v1/chat/completions" && r.Method == http.MethodPost:
		f.chat(w, r)
	default:
		http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error","code":404}}`, http.StatusNotFound)
	}
}

func (f *Frames) chat(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		return
	}
	var req frameRequest
	if err := json.Unmarshal(body, &req); err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":{"message":"bad JSON","type":"invalid_request_error","code":400}}`)
		return
	}
	n := 16
	if req.MaxTokens != nil {
		n = min(max(*req.MaxTokens, 1), maxFrames)
	}
	prompt := len(body) / 8 // about a token per 8 bytes: only the usage's shape matters
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		b := make([]byte, 0, 256+4*n)
		b = append(b, `{"id":"chatcmpl-bench","object":"chat.completion","created":1735689600,"model":`...)
		b = strconv.AppendQuote(b, f.model())
		b = append(b, `,"choices":[{"index":0,"message":{"role":"assistant","content":"`...)
		for i := range n {
			b = append(b, word(i)...)
		}
		b = append(b, `"},"logprobs":null,"finish_reason":"length"}],`...)
		b = appendUsage(b, prompt, n)
		b = append(b, '}')
		_, _ = w.Write(b)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	gap := time.Duration(req.GapUS) * time.Microsecond
	buf := make([]byte, 0, 512)
	if req.Hold {
		buf = f.chunk(buf, 0, n)
		_, _ = w.Write(buf)
		_ = rc.Flush()
		<-r.Context().Done()
		return
	}
	var t *time.Timer
	next := time.Now()
	for i := range n {
		buf = f.chunk(buf, i, n)
		if gap <= 0 {
			continue // back to back: everything goes out in one write below
		}
		if i == n-1 {
			break // the last token goes out with the usage and [DONE], as engines send them
		}
		if _, err := w.Write(buf); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		buf = buf[:0]
		// Pace from the schedule, not from the last wake-up, so the gaps do not drift.
		next = next.Add(gap)
		if t == nil {
			t = time.NewTimer(time.Until(next))
			defer t.Stop()
		} else {
			t.Reset(time.Until(next))
		}
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		}
	}
	if req.StreamOptions.IncludeUsage {
		buf = append(buf, `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1735689600,"model":`...)
		buf = strconv.AppendQuote(buf, f.model())
		buf = append(buf, `,"choices":[],`...)
		buf = appendUsage(buf, prompt, n)
		buf = append(buf, "}\n\n"...)
	}
	buf = append(buf, "data: [DONE]\n\n"...)
	_, _ = w.Write(buf)
	_ = rc.Flush()
}

// chunk appends token i's chunk (vLLM's shape, about 200 bytes); the last one carries the finish
// reason.
func (f *Frames) chunk(b []byte, i, n int) []byte {
	b = append(b, `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1735689600,"model":`...)
	b = strconv.AppendQuote(b, f.model())
	b = append(b, `,"choices":[{"index":0,"delta":{`...)
	if i == 0 {
		b = append(b, `"role":"assistant",`...)
	}
	b = append(b, `"content":"`...)
	b = append(b, word(i)...)
	b = append(b, `"},"logprobs":null,"finish_reason":`...)
	if i == n-1 {
		b = append(b, `"length"`...)
	} else {
		b = append(b, "null"...)
	}
	return append(b, "}]}\n\n"...)
}

var words = [...]string{" the", " river", " runs", " to", " a", " sea", " far", " away"}

func word(i int) string { return words[i%len(words)] }

func appendUsage(b []byte, prompt, completion int) []byte {
	b = append(b, `"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt+completion), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(completion), 10)
	return append(b, '}')
}
