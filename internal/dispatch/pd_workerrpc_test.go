package dispatch

import (
	"net/http"
	"testing"

	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/worker"
)

// TestWorkerRPCTypedLeg: over the gateway's own client, a worker-RPC PD request goes to both legs as
// one typed call; an injected client, a body the conversion refuses, or a non-RPC worker keeps the
// JSON body (whose answers, the transport's 400 included, are what they always were).
func TestWorkerRPCTypedLeg(t *testing.T) {
	reg := worker.NewRegistry(worker.RegistryOptions{StartReady: true})
	add := func(url string, role worker.Role, p worker.Protocol) *worker.Worker {
		w, err := reg.Add(worker.Spec{URL: url, Role: role, Protocol: p, Models: []string{"m"}})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	pw := add("grpc://127.0.0.1:1", worker.RolePrefill, worker.ProtocolGRPC)
	dw := add("grpc://127.0.0.1:2", worker.RoleDecode, worker.ProtocolGRPC)
	hw := add("http://127.0.0.1:3", worker.RoleDecode, worker.ProtocolSGLang)
	own := backend.NewHTTPClient(backend.HTTPClientOptions{})
	t.Cleanup(own.CloseIdleConnections)

	attempt := func(raw string) *pdAttempt {
		br, err := body.ParseRequest(body.RouteChat, []byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		return &pdAttempt{r: &Request{Route: RouteChat, Body: br.Body, RequestID: "req-1"}, br: br, pw: pw}
	}
	good := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name   string
		client *http.Client
		a      *pdAttempt
		dw     *worker.Worker
		typed  bool
	}{
		{"gateway client", own, attempt(good), dw, true},
		{"injected client", &http.Client{}, attempt(good), dw, false},
		{"refused body", own, attempt(`{"model":"m","messages":[{"role":"user","content":"hi"}],"bootstrap_room":"x"}`), dw, false},
		{"http decode worker", own, attempt(good), hw, false},
	} {
		p := workerRPCPD{x: &Dispatcher{d: Deps{HTTP: tc.client}}}
		got := p.typed(tc.a, tc.dw, "127.0.0.1", 8998, []uint64{7}, false)
		if (got != nil) != tc.typed {
			t.Errorf("%s: typed leg %v, want %v", tc.name, got != nil, tc.typed)
		}
		if got != nil && got.body() != nil {
			t.Errorf("%s: the typed leg carries a JSON body too", tc.name)
		}
	}
}
