package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// rtFunc is an in-memory http.RoundTripper (it lets synctest control time end to end).
type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// frame is one SSE write after a delay.
type frame struct {
	after time.Duration
	data  string
}

// streamingRT answers every request with an SSE body written frame by frame with the given delays.
func streamingRT(frames []frame) rtFunc {
	return func(r *http.Request) (*http.Response, error) {
		_, _ = io.Copy(io.Discard, r.Body)
		pr, pw := io.Pipe()
		go func() {
			for _, f := range frames {
				time.Sleep(f.after)
				if _, err := io.WriteString(pw, f.data); err != nil {
					return
				}
			}
			pw.Close()
		}()
		h := http.Header{"Content-Type": {"text/event-stream"}, HeaderWorker: {"http://w1"}}
		return &http.Response{StatusCode: 200, Status: "200 OK", Header: h, Body: pr, Request: r}, nil
	}
}

func chatChunk(content string) string {
	return fmt.Sprintf("data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", content)
}

func TestReadSSETimings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		frames := []frame{
			{0, "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"},
			{50 * time.Millisecond, chatChunk("one")},
			{10 * time.Millisecond, chatChunk(" two")},
			{20 * time.Millisecond, chatChunk(" three") + chatChunk(" four")}, // two frames in one write
			{30 * time.Millisecond, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":4,\"total_tokens\":9}}\n\n"},
			{0, "data: [DONE]\n\n"},
		}
		q := newRequester(&http.Client{Transport: streamingRT(frames)}, "http://sim", EndpointChat, "", true)
		var rec Record
		q.do(context.Background(), []byte(`{}`), nil, &rec)
		want := Record{Status: 200, TTFTMS: 50, E2EMS: 110, ITLMS: []float64{10, 20, 0}, OutputTokens: 4, Worker: "http://w1", done: true}
		if diff := cmp.Diff(want, rec, cmp.AllowUnexported(Record{})); diff != "" {
			t.Fatalf("record (-want +got):\n%s", diff)
		}
	})
}

func TestReadSSEOutcomes(t *testing.T) {
	tests := []struct {
		name       string
		frames     []frame
		wantCode   string
		wantTokens int
		wantITLs   int // content chunks after the first
	}{
		{"no usage counts chunks", []frame{{0, chatChunk("a") + chatChunk("b") + "data: [DONE]\n\n"}}, "", 2, 1},
		{"truncated", []frame{{0, chatChunk("a")}}, CodeTruncated, 1, 0},
		{"error frame", []frame{{0, chatChunk("a") + "data: {\"error\":{\"message\":\"boom\",\"code\":\"bootstrap_timeout\"}}\n\ndata: [DONE]\n\n"}}, "bootstrap_timeout", 1, 0},
		{"error frame without code", []frame{{0, "data: {\"error\":{\"message\":\"boom\"}}\n\ndata: [DONE]\n\n"}}, CodeStreamError, 0, 0},
		{"completions text", []frame{{0, "data: {\"choices\":[{\"text\":\"hi\"}]}\n\ndata: {\"choices\":[{\"text\":\"\"}],\"usage\":{\"completion_tokens\":1}}\n\ndata: [DONE]\n\n"}}, "", 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := newRequester(&http.Client{Transport: streamingRT(tt.frames)}, "http://sim", EndpointChat, "", true)
				var rec Record
				q.do(context.Background(), []byte(`{}`), nil, &rec)
				if rec.Code != tt.wantCode || rec.OutputTokens != tt.wantTokens || len(rec.ITLMS) != tt.wantITLs {
					t.Fatalf("code %q tokens %d itls %d, want %q %d %d", rec.Code, rec.OutputTokens, len(rec.ITLMS), tt.wantCode, tt.wantTokens, tt.wantITLs)
				}
				if rec.OK() != (tt.wantCode == "") {
					t.Fatalf("OK() = %v with code %q", rec.OK(), rec.Code)
				}
			})
		})
	}
}

func TestHasContent(t *testing.T) {
	tests := []struct {
		name string
		data string
		want bool
	}{
		{"role only", `{"choices":[{"delta":{"role":"assistant"}}]}`, false},
		{"empty content", `{"choices":[{"delta":{"role":"assistant","content":""}}]}`, false},
		{"null content", `{"choices":[{"delta":{"content":null}}]}`, false},
		{"content", `{"choices":[{"delta":{"content":"x"}}]}`, true},
		{"spaced", `{"choices":[{"delta":{"content": "x"}}]}`, true},
		{"reasoning only", `{"choices":[{"delta":{"reasoning_content":"think"}}]}`, false},
		{"text", `{"choices":[{"text":"x"}]}`, true},
		{"usage", `{"choices":[],"usage":{"completion_tokens":3}}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hasContent([]byte(tt.data)); got != tt.want {
				t.Fatalf("hasContent(%s) = %v, want %v", tt.data, got, tt.want)
			}
		})
	}
}

func TestErrorCode(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"string code", `{"error":{"message":"full","type":"rate_limit_exceeded","param":null,"code":"pd_prefill_queue_full"}}`, "pd_prefill_queue_full"},
		{"numeric code", `{"error":{"message":"x","code":503}}`, "503"},
		{"null code falls back to type", `{"error":{"message":"x","type":"server_error","code":null}}`, "server_error"},
		{"not json", `<html>bad gateway</html>`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errorCode([]byte(tt.body)); got != tt.want {
				t.Fatalf("errorCode = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestRequesterHTTP runs the requester against a real HTTP server: statuses, error codes, usage and
// the worker header (no timings asserted).
func TestRequesterHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, "wrong path or key", http.StatusBadRequest)
			return
		}
		w.Header().Set(HeaderWorker, "http://w9")
		switch {
		case strings.Contains(string(body), "reject"):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"error":{"message":"queue full","type":"rate_limit_exceeded","param":null,"code":"pd_prefill_queue_full"}}`)
		case strings.Contains(string(body), `"stream":true`):
			w.Header().Set("Content-Type", "text/event-stream")
			for _, c := range []string{"a", "b", "c"} {
				io.WriteString(w, chatChunk(c))
				w.(http.Flusher).Flush()
			}
			io.WriteString(w, "data: [DONE]\n\n")
		default:
			io.WriteString(w, `{"id":"x","choices":[{"message":{"role":"assistant","content":"hello"}}],"usage":{"prompt_tokens":3,"completion_tokens":17,"total_tokens":20}}`)
		}
	}))
	defer srv.Close()
	tr := NewTransport(4)
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	tests := []struct {
		name       string
		stream     bool
		body       string
		wantStatus int
		wantCode   string
		wantTokens int
		wantITLs   int
	}{
		{"unary", false, `{"stream":false}`, 200, "", 17, 0},
		{"stream", true, `{"stream":true}`, 200, "", 3, 2},
		{"rejected", false, `{"x":"reject"}`, 429, "pd_prefill_queue_full", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := newRequester(hc, srv.URL+"/", EndpointChat, "k", tt.stream)
			var rec Record
			q.do(context.Background(), []byte(tt.body), nil, &rec)
			if rec.Status != tt.wantStatus || rec.Code != tt.wantCode || rec.OutputTokens != tt.wantTokens || len(rec.ITLMS) != tt.wantITLs || rec.Worker != "http://w9" {
				t.Fatalf("got status %d code %q tokens %d itls %d worker %q (error %q)", rec.Status, rec.Code, rec.OutputTokens, len(rec.ITLMS), rec.Worker, rec.Error)
			}
		})
	}
	t.Run("refused", func(t *testing.T) {
		dead := httptest.NewServer(http.NotFoundHandler())
		url := dead.URL
		dead.Close()
		q := newRequester(hc, url, EndpointChat, "", false)
		var rec Record
		q.do(context.Background(), []byte(`{}`), nil, &rec)
		if rec.Code != CodeConnRefused || rec.OK() {
			t.Fatalf("code %q (error %q), want %q", rec.Code, rec.Error, CodeConnRefused)
		}
	})
}
