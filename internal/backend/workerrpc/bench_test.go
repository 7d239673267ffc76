package workerrpc

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	workerv1 "github.com/sluicegw/sluice/gen/sluice/worker/v1"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/benchcpu"
)

// The worker-RPC leg's CPU per request, the figure a typed leg (#23: dispatch handing this package
// messages instead of JSON bodies) is measured against. BenchmarkGRPCLeg is a whole leg through
// RoundTrip against a loopback worker (the worker's CPU is in it, alike for any transport);
// BenchmarkGRPCConversion is only the JSON -> proto step a typed leg would not make. Compare with
//
//	go test -run '^$' -bench 'GRPC(Leg|Conversion)' -count 8 ./internal/backend/workerrpc/ | benchstat -

// benchChatBody is a chat request as the decode leg sends it: the client's body with the bootstrap
// fields dispatch injects.
var benchChatBody = `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"` +
	strings.Repeat("Write one short sentence about rivers. ", 8) + `"}],"max_tokens":16,"temperature":0.7,` +
	`"stream":true,"stream_options":{"include_usage":true},"bootstrap_host":"10.0.0.5","bootstrap_port":8998,"bootstrap_room":42}`

func BenchmarkGRPCLeg(b *testing.B) {
	f := &fakeWorker{
		prefill: func(context.Context, *workerv1.PrefillRequest) (*workerv1.PrefillResponse, error) {
			return &workerv1.PrefillResponse{PromptTokens: 90, CachedTokens: 0}, nil
		},
		decode: tokens(strings.Split(strings.Repeat("tok ", 16), " ")[:16]...),
	}
	addr := startWorker(b, f)
	for _, role := range []string{RolePrefill, RoleDecode} {
		for _, path := range []string{"json", "typed"} {
			b.Run("role="+role+"/path="+path, func(b *testing.B) {
				rt := newTestTransport(b, role)
				buf := make([]byte, 8<<10)
				b.ReportAllocs()
				defer benchcpu.Start(b)()
				for b.Loop() {
					var resp *http.Response
					var err error
					if path == "typed" {
						resp, err = rt.Send(b.Context(), "grpc://"+addr, role, benchTypedCall(b))
					} else {
						req, rerr := http.NewRequestWithContext(b.Context(), http.MethodPost, "grpc://"+addr+"/v1/chat/completions", strings.NewReader(benchChatBody))
						if rerr != nil {
							b.Fatal(rerr)
						}
						resp, err = rt.RoundTrip(req)
					}
					if err != nil {
						b.Fatal(err)
					}
					n := 0
					for {
						k, err := resp.Body.Read(buf)
						n += k
						if err == io.EOF {
							break
						}
						if err != nil {
							b.Fatal(err)
						}
					}
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK || n == 0 {
						b.Fatalf("status %d, %d bytes", resp.StatusCode, n)
					}
				}
				f.mu.Lock()
				f.prefills, f.decodes = nil, nil // the fake keeps every request; drop them between runs
				f.mu.Unlock()
			})
		}
	}
}

// benchClientBody is benchChatBody as the client sent it, before dispatch adds the bootstrap fields.
var benchClientBody = strings.Replace(benchChatBody, `,"bootstrap_host":"10.0.0.5","bootstrap_port":8998,"bootstrap_room":42`, "", 1)

// benchTypedCall is what dispatch's worker-RPC adapter builds per request for both legs.
func benchTypedCall(b *testing.B) *Call {
	c, err := BuildCall(body.RouteChat, []byte(benchClientBody), "req-1")
	if err == nil {
		c, err = c.WithBootstrap("10.0.0.5", 8998, []uint64{42}, false)
	}
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkPDConversion is the per-request conversion work of one worker-RPC PD request (both legs):
// json splices the bootstrap fields into the body and each leg parses it again (dispatch before the
// typed leg); typed converts the client's body once and sets the handshake on the messages.
func BenchmarkPDConversion(b *testing.B) {
	raw := []byte(benchClientBody)
	b.Run("path=json", func(b *testing.B) {
		b.ReportAllocs()
		defer benchcpu.Start(b)()
		for b.Loop() {
			withRooms, err := body.InjectBootstrap(raw, "10.0.0.5", 8998, []uint64{42}, false)
			if err != nil {
				b.Fatal(err)
			}
			for range 2 {
				if _, err := buildCall(body.RouteChat, withRooms, "req-1"); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("path=typed", func(b *testing.B) {
		b.ReportAllocs()
		defer benchcpu.Start(b)()
		for b.Loop() {
			benchTypedCall(b)
		}
	})
}

func BenchmarkGRPCConversion(b *testing.B) {
	raw := []byte(benchChatBody)
	b.ReportAllocs()
	defer benchcpu.Start(b)()
	for b.Loop() {
		if _, err := buildCall(body.RouteChat, raw, "req-1"); err != nil {
			b.Fatal(err)
		}
	}
}
