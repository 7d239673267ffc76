package enginerpc

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/benchcpu"
	"github.com/sluicegw/sluice/internal/enginegrpc"
)

// The gateway's cost per request and per streamed frame in engine-gRPC mode, against the fake engine
// over a real h2c connection (issue #35's cost goal). The fake engine runs in this process, so
// cpu-ns/op counts its side too: compare the figures between builds of this package, not with HTTP
// mode's.

// benchReply is 50 ASCII bytes: 50 chunks of one id each, then the EOS's.
const benchReply = "The quick brown fox jumps over the lazy dog again."

func benchTransport(b *testing.B, p enginegrpc.Protocol) (*Transport, string) {
	b.Helper()
	url := startEngine(b, newFake(benchReply), p)
	h2c := newH2CClient()
	b.Cleanup(h2c.CloseIdleConnections)
	tr := NewTransport(h2c, nil)
	if err := tr.SetEngine(url, Engine{Protocol: p, Tokenizer: testTokenizer(b), EOS: []int{imEnd}, Model: "m"}); err != nil {
		b.Fatal(err)
	}
	return tr, url
}

// roundTrip sends one request and reads the whole answer, returning its SSE frames (0 for JSON).
func roundTrip(b *testing.B, tr http.RoundTripper, url, path, reqBody string) int {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url+path, strings.NewReader(reqBody))
	if err != nil {
		b.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		b.Fatalf("status %d: %s", resp.StatusCode, msg)
	}
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		body, err := io.ReadAll(resp.Body)
		if err != nil || !bytes.Contains(body, []byte(benchReply)) {
			b.Fatalf("answer %s, %v", body, err)
		}
		return 0
	}
	frames := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if bytes.HasPrefix(sc.Bytes(), []byte("data: ")) {
			frames++
		}
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	return frames
}

func benchRequests(b *testing.B, p enginegrpc.Protocol, path, reqBody string) {
	tr, url := benchTransport(b, p)
	roundTrip(b, tr, url, path, reqBody) // the connection, set up once as the gateway's pool does
	b.ReportAllocs()
	b.ResetTimer()
	start := benchcpu.Now()
	frames := 0
	for range b.N {
		frames += roundTrip(b, tr, url, path, reqBody)
	}
	cpu := float64(benchcpu.Now() - start)
	b.StopTimer()
	b.ReportMetric(cpu/float64(b.N), "cpu-ns/op")
	if frames > 0 {
		b.ReportMetric(float64(frames)/float64(b.N), "frames/op")
		b.ReportMetric(cpu/float64(frames), "cpu-ns/frame")
	}
}

const (
	benchChat   = `{"model":"m","messages":[{"role":"user","content":"Tell me about foxes."}],"max_tokens":64`
	benchStream = `,"stream":true,"stream_options":{"include_usage":true}`
)

// BenchmarkStreamFrames is a streamed chat of 51 tokens: the role frame, 50 content frames, the
// final, the usage and [DONE].
func BenchmarkStreamFrames(b *testing.B) {
	for _, p := range []enginegrpc.Protocol{enginegrpc.SGLang, enginegrpc.VLLM} {
		b.Run(string(p), func(b *testing.B) {
			benchRequests(b, p, "/v1/chat/completions", benchChat+benchStream+"}")
		})
	}
}

// BenchmarkWhole is the same chat answered as one JSON object.
func BenchmarkWhole(b *testing.B) {
	for _, p := range []enginegrpc.Protocol{enginegrpc.SGLang, enginegrpc.VLLM} {
		b.Run(string(p), func(b *testing.B) {
			benchRequests(b, p, "/v1/chat/completions", benchChat+"}")
		})
	}
}
