package dispatch

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/backend/enginerpc"
	"github.com/sluicegw/sluice/internal/enginegrpc"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/internal/tokenizer"
	"github.com/sluicegw/sluice/internal/worker"
)

// newEngineDispatcher builds a PD dispatcher over a prefill and a decode engine-gRPC worker (the
// simulator speaking SGLang's protocol with byte token ids, context length ctxLen; faults f on the
// prefill engine) registered as the Detector registers them, with one prefill admission slot and a
// queue of one.
func newEngineDispatcher(t *testing.T, ctxLen int, f sim.Faults) (*Dispatcher, *tokenizer.Tokenizer) {
	t.Helper()
	tk := byteTokenizer(t)
	client := backend.NewHTTPClient(backend.HTTPClientOptions{})
	t.Cleanup(client.CloseIdleConnections)
	det := &Detector{HTTP: client, Tokenizer: func(string) *tokenizer.Tokenizer { return tk }}
	reg := worker.NewRegistry(worker.RegistryOptions{StartReady: true})
	for _, role := range []sim.Role{sim.RolePrefill, sim.RoleDecode} {
		cfg := sim.Config{Mode: sim.ModeInstant, GRPC: true, EngineGRPCOnly: true, ByteTokenIDs: true,
			Protocol: sim.ProtocolSGLang, Role: role, ContextLength: ctxLen}
		if role == sim.RolePrefill {
			cfg.Faults = f
		}
		e, err := sim.New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		spec := worker.Spec{URL: strings.Replace(e.URL(), "http://", "grpc://", 1), Role: worker.Role(role),
			Protocol: worker.ProtocolGRPC, BootstrapPort: e.BootstrapPort()}
		spec, err = det.Complete(t.Context(), spec)
		if err != nil {
			t.Fatal(err)
		}
		if spec.Protocol != worker.ProtocolSGLang {
			t.Fatalf("%s worker not detected as an engine-gRPC worker: %q", role, spec.Protocol)
		}
		if _, err := reg.Add(spec); err != nil {
			t.Fatal(err)
		}
	}
	pols, err := placement.NewSet(placement.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	adm, err := admission.New(admission.Settings{MaxInflightPerWorker: 1, QueueSize: 1, QueueTimeout: time.Minute}, admission.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	x, err := New(Config{PD: true}, Deps{Registry: reg, Policies: pols, Admission: adm, HTTP: client, Tokenizer: det.Tokenizer})
	if err != nil {
		t.Fatal(err)
	}
	return x, tk
}

func rejected(st admission.Status) uint64 {
	var n uint64
	for _, v := range st.Rejections {
		n += v
	}
	return n
}

func inflight(st admission.Status) int {
	n := 0
	for _, v := range st.Inflight {
		n += v
	}
	return n
}

// With the only prefill slot held by a request the engine never answers, a prompt that does not fit the
// model's context is answered 400 context_length_exceeded at once: it neither queues nor takes a slot.
// (A chat is checked alike when the model has a chat template: tests/e2e.)
// Before the check moved ahead of admission it queued behind the held slot (and this test would end
// on the context's deadline, not a 400).
func TestContextLengthExceededBeforeAdmission(t *testing.T) {
	x, _ := newEngineDispatcher(t, 64, sim.Faults{Hang: true})
	holdCtx, release := context.WithCancel(t.Context())
	held := make(chan error, 1)
	go func() {
		resp, err := x.Do(holdCtx, &Request{Route: RouteCompletions, Body: []byte(`{"model":"sim-model","prompt":"hold"}`), Header: http.Header{}})
		if err == nil {
			resp.Body.Close()
		}
		held <- err
	}()
	t.Cleanup(func() {
		release()
		<-held
	})
	deadline := time.Now().Add(10 * time.Second)
	for inflight(x.d.Admission.Status()) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the holding request never took the slot")
		}
		time.Sleep(time.Millisecond)
	}

	long := strings.Repeat("a", 100) // 100 tokens with the byte-level tokenizer
	for _, tt := range []struct {
		route Route
		body  string
		param string
	}{
		{RouteCompletions, `{"model":"sim-model","prompt":"` + long + `"}`, "prompt"},
		{RouteGenerate, `{"model":"sim-model","text":"` + long + `"}`, "text"},
		{RouteCompletions, `{"model":"sim-model","prompt":[` + strings.Repeat("1,", 64) + `1]}`, "prompt"},
	} {
		// The bound only keeps a regression from hanging the test: it is far longer than a refusal takes.
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		resp, err := x.Do(ctx, &Request{Route: tt.route, Body: []byte(tt.body), Header: http.Header{}})
		cancel()
		if err == nil {
			resp.Body.Close()
			t.Fatalf("%s: answered %d, want a 400", tt.route.Path(), resp.Status)
		}
		var ae *apierror.Error
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Code != "context_length_exceeded" || ae.Param != tt.param ||
			!strings.Contains(ae.Message, "maximum context length is 64 tokens") {
			t.Fatalf("%s: err = %v (%+v), want 400 context_length_exceeded naming %q", tt.route.Path(), err, ae, tt.param)
		}
		st := x.d.Admission.Status()
		if st.QueuedTotal != 0 || inflight(st) != 1 || st.Cancelled != 0 || rejected(st) != 0 {
			t.Errorf("%s: admission moved: queued %d, inflight %d, cancelled %d, rejections %v",
				tt.route.Path(), st.QueuedTotal, inflight(st), st.Cancelled, st.Rejections)
		}
	}
}

// A prompt that fits is tokenized once, in prepare, and its ids are handed to the engine transport;
// the engine serves it with them.
func TestEnginePromptTokenizedOnceBeforeAdmission(t *testing.T) {
	x, tk := newEngineDispatcher(t, 64, sim.Faults{})
	r := &Request{Route: RouteCompletions, Body: []byte(`{"model":"sim-model","prompt":"hello","max_tokens":3}`), Header: http.Header{}}
	q, err := x.prepare(t.Context(), r)
	if err != nil {
		t.Fatal(err)
	}
	if q.prompt == nil || q.prompt.Tokenizer != tk || q.prompt.Text != "hello" || !slices.Equal(q.prompt.IDs, tk.EncodeSpecialUint32("hello")) {
		t.Fatalf("prepared prompt %+v, want hello's ids by the engine's tokenizer", q.prompt)
	}
	// Token ids given by the client are checked but need no hand-off: the transport reads them as they are.
	q, err = x.prepare(t.Context(), &Request{Route: RouteCompletions, Body: []byte(`{"model":"sim-model","prompt":[1,2,3]}`), Header: http.Header{}})
	if err != nil || q.prompt != nil {
		t.Fatalf("token-id prompt: %v, prompt %+v", err, q.prompt)
	}
	resp, err := x.Do(t.Context(), r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.Status != http.StatusOK || !strings.Contains(string(b), `"prompt_tokens":5`) {
		t.Fatalf("status %d, %s (%v)", resp.Status, b, err)
	}
}

// Engine workers that do not share one tokenizer give no count of a prompt's tokens to check: the
// transport checks it per engine.
func TestEngineContextNeedsOneTokenizer(t *testing.T) {
	x, tk := newEngineDispatcher(t, 64, sim.Faults{})
	if limit, got := x.engineContext("sim-model"); limit != 64 || got != tk {
		t.Fatalf("engineContext = %d, %p; want 64 and the engines' tokenizer", limit, got)
	}
	et := backend.EngineRPC(x.d.HTTP)
	decode := x.d.Registry.Snapshot().Candidates(worker.RoleDecode, "sim-model")[0].URL()
	if err := et.SetEngine(decode, enginerpc.Engine{Protocol: enginegrpc.SGLang, Tokenizer: byteTokenizer(t), Model: "sim-model", ContextLength: 32}); err != nil {
		t.Fatal(err)
	}
	if limit, got := x.engineContext("sim-model"); got != nil {
		t.Errorf("engineContext with two tokenizers = %d, %p; want none", limit, got)
	}
}
