package backend

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/benchcpu"
)

// BenchmarkUpstreamTransport compares the two ways a leg reaches an http:// engine: net/http's
// Transport (a writer and a reader goroutine per connection) and h1.Transport (the round trip in the
// calling goroutine), on the same loopback engine in the same run, serial and 16 in parallel. The
// engine's CPU is in both figures alike; the difference is the transports'. Compare with
//
//	go test -run '^$' -bench UpstreamTransport -count 8 ./internal/backend/ | benchstat -col /transport -
func BenchmarkUpstreamTransport(b *testing.B) {
	const chunk = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" the"}}]}` + "\n\n"
	json := `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("word ", 8) + `"},"finish_reason":"length"}],"usage":{"prompt_tokens":64,"completion_tokens":8,"total_tokens":72}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if strings.HasSuffix(r.URL.Path, "/stream") {
			w.Header().Set("Content-Type", "text/event-stream")
			for range 16 {
				_, _ = io.WriteString(w, chunk)
				w.(http.Flusher).Flush()
			}
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, json)
	}))
	defer srv.Close()
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"Write one short sentence about rivers."}],"max_tokens":8}`)
	o := HTTPClientOptions{}.withDefaults()
	ut := NewHTTPClient(o).Transport.(*upstreamTransport)
	std, h1 := ut.http, ut.h1
	defer h1.CloseIdleConnections()
	defer std.CloseIdleConnections()
	for _, path := range []string{"/json", "/stream"} {
		for _, par := range []bool{false, true} {
			for _, tc := range []struct {
				name string
				rt   http.RoundTripper
			}{{"nethttp", std}, {"h1", h1}} {
				name := "path=" + path[1:] + "/parallel=" + map[bool]string{false: "1", true: "16"}[par] + "/transport=" + tc.name
				b.Run(name, func(b *testing.B) {
					c := &http.Client{Transport: tc.rt}
					one := func(buf []byte) bool {
						req, err := NewPostRequest(b.Context(), srv.URL, path, body)
						if err != nil {
							b.Error(err)
							return false
						}
						resp, err := RoundTrip(c, req)
						if err != nil {
							b.Error(err)
							return false
						}
						for {
							if _, err := resp.Body.Read(buf); err != nil {
								break
							}
						}
						resp.Body.Close()
						if resp.StatusCode != http.StatusOK {
							b.Errorf("status %d", resp.StatusCode)
							return false
						}
						return true
					}
					b.ReportAllocs()
					defer benchcpu.Start(b)()
					if par {
						b.SetParallelism(8) // x GOMAXPROCS
						b.RunParallel(func(pb *testing.PB) {
							buf := make([]byte, 8<<10)
							for pb.Next() {
								if !one(buf) {
									return
								}
							}
						})
						return
					}
					buf := make([]byte, 8<<10)
					for b.Loop() {
						if !one(buf) {
							return
						}
					}
				})
			}
		}
	}
}
