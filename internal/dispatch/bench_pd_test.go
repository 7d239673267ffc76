package dispatch

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/worker"
)

// BenchmarkPDSeats runs one SGLang PD chat request through the dispatcher per iteration against
// instant engines answering from the client's transport (no sockets, so that the dispatcher's own
// work is what is measured), with decode seats off and on (bounds that never bind, the decode
// engine's KV capacity known as fleet detection reports it for SGLang), so the pair gate's own cost is
// the difference of the two (`sluice-bench scenario overhead` measures the same on whole processes).
func BenchmarkPDSeats(b *testing.B) {
	const prefillURL, decodeURL = "http://prefill.invalid:30000", "http://decode.invalid:30000"
	prefillAnswer := []byte(`{"id":"p","object":"chat.completion","choices":[]}`)
	decodeAnswer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"a b c d e f g h"},"finish_reason":"length"}],"usage":{"prompt_tokens":64,"completion_tokens":8,"total_tokens":72}}`)
	engines := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
		answer := decodeAnswer
		if r.URL.Host == "prefill.invalid:30000" {
			answer = prefillAnswer
		}
		return &http.Response{StatusCode: 200, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Request: r,
			Header: http.Header{"Content-Type": {"application/json"}}, ContentLength: int64(len(answer)),
			Body: io.NopCloser(bytes.NewReader(answer))}, nil
	})
	// A 64-token prompt and 8 output tokens, the overhead scenario's PD JSON load.
	reqBody := []byte(`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"` +
		strings.Repeat("lorem ipsum dolor sit amet, ", 9) + `"}]}`)

	for _, seats := range []bool{false, true} {
		b.Run("seats="+strconv.FormatBool(seats), func(b *testing.B) {
			reg := worker.NewRegistry(worker.RegistryOptions{StartReady: true})
			if _, err := reg.Add(worker.Spec{URL: prefillURL, Role: worker.RolePrefill, Protocol: worker.ProtocolSGLang,
				BootstrapPort: 8998, Models: []string{"m"}}); err != nil {
				b.Fatal(err)
			}
			dw, err := reg.Add(worker.Spec{URL: decodeURL, Role: worker.RoleDecode, Protocol: worker.ProtocolSGLang, Models: []string{"m"}})
			if err != nil {
				b.Fatal(err)
			}
			pols, err := placement.NewSet(placement.Config{Settings: placement.Settings{Policy: placement.PolicyCacheAware}})
			if err != nil {
				b.Fatal(err)
			}
			set := admission.Settings{MaxInflightPerWorker: 1024, QueueSize: 1024, QueueTimeout: time.Minute}
			if seats {
				set.DecodeMaxInflightPerWorker = 1024
			}
			adm, err := admission.New(set, admission.Deps{})
			if err != nil {
				b.Fatal(err)
			}
			if seats {
				adm.SetDecodeCapacity(dw.Key(), admission.DecodeCapacity{KVTokens: 1 << 20})
			}
			d, err := New(Config{PD: true}, Deps{Registry: reg, Policies: pols, Admission: adm, HTTP: &http.Client{Transport: engines}})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				resp, err := d.Do(b.Context(), &Request{Route: RouteChat, Body: reqBody, Header: http.Header{}})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, resp.Body); err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
				if resp.Status != http.StatusOK {
					b.Fatalf("status %d", resp.Status)
				}
			}
			b.StopTimer()
			// The process's CPU is steadier than wall time on a shared machine: the gate's cost is the
			// difference of cpu-ns/op.
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
			if st := adm.Status(); st.Inflight[prefillURL] != 0 {
				b.Fatalf("slots still held: %v", st.Inflight)
			}
		})
	}
}

// processCPU is the process's user + system CPU time so far, in nanoseconds.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// roundTripFunc is an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
