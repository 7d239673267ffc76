package workerrpc

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	workerv1 "github.com/sluicegw/sluice/gen/sluice/worker/v1"
	"github.com/sluicegw/sluice/internal/backend/body"
)

// TestTypedLegMatchesRoundTrip: Send with BuildCall + WithBootstrap makes the same RPCs and gives the
// same answer as RoundTrip with the body dispatch used to send (bootstrap fields injected into it).
func TestTypedLegMatchesRoundTrip(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		route body.Route
		body  string
	}{
		{"chat stream n=2", body.RouteChat, `{"model":"m","stream":true,"stream_options":{"include_usage":true},"n":2,"messages":[{"role":"user","content":"q"}],"temperature":0.5,"custom":{"a":1}}`},
		{"chat unary", body.RouteChat, `{"model":"m","messages":[{"role":"user","content":"q"}],"max_tokens":4,"bootstrap_room":"client's"}`},
		{"completions batch", body.RouteCompletions, `{"model":"m","prompt":["a","b"],"max_tokens":3}`},
		{"generate", body.RouteGenerate, `{"text":"hello","sampling_params":{"max_new_tokens":2,"temperature":0}}`},
	}
	for _, tc := range cases {
		for _, role := range []string{RolePrefill, RoleDecode} {
			t.Run(tc.name+"/"+role, func(t *testing.T) {
				br, err := body.ParseRequest(tc.route, []byte(tc.body))
				if err != nil {
					t.Fatal(err)
				}
				count, asList := body.WorkerRPCRooms(br)
				rooms := make([]uint64, count)
				for i := range rooms {
					rooms[i] = uint64(1000 + i)
				}
				injected, err := body.InjectBootstrap(br.Body, "10.0.0.5", 8998, rooms, asList)
				if err != nil {
					t.Fatal(err)
				}
				newWorker := func() (*fakeWorker, string) {
					f := &fakeWorker{
						prefill: func(context.Context, *workerv1.PrefillRequest) (*workerv1.PrefillResponse, error) {
							return &workerv1.PrefillResponse{PromptTokens: 5, CachedTokens: 1}, nil
						},
						decode: tokens("a", "b"),
					}
					return f, startWorker(t, f)
				}
				fj, addrJ := newWorker()
				resp, err := post(t, newTestTransport(t, role), t.Context(), addrJ, tc.route.Path(), string(injected), http.Header{"X-Request-Id": {"req-7"}})
				if err != nil {
					t.Fatal(err)
				}
				wantBody := readBody(t, resp)

				ft, addrT := newWorker()
				call, err := BuildCall(tc.route, br.Body, "req-7")
				if err == nil {
					call, err = call.WithBootstrap("10.0.0.5", 8998, rooms, asList)
				}
				if tc.name == "chat unary" {
					// A client's own bootstrap_room is not a number: the typed leg refuses what the
					// JSON path overwrites, and dispatch falls back to the JSON path.
					if err == nil {
						t.Fatal("BuildCall accepted a string bootstrap_room")
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				resp, err = newTestTransport(t, role).Send(t.Context(), "grpc://"+addrT, role, call)
				if err != nil {
					t.Fatal(err)
				}
				// n > 1 streams interleave their frames as the sub-streams deliver: compare frames as a set.
				if got := readBody(t, resp); !slices.Equal(frameSet(got), frameSet(wantBody)) || resp.StatusCode != http.StatusOK {
					t.Errorf("typed answer %d\n%s\nwant\n%s", resp.StatusCode, got, wantBody)
				}
				// Sub-requests run concurrently: compare them in request-id order.
				if d := cmp.Diff(sortedP(fj.prefillRequests()), sortedP(ft.prefillRequests()), protocmp.Transform()); d != "" {
					t.Errorf("prefill RPCs differ (-json +typed):\n%s", d)
				}
				if d := cmp.Diff(sortedD(fj.decodeRequests()), sortedD(ft.decodeRequests()), protocmp.Transform()); d != "" {
					t.Errorf("decode RPCs differ (-json +typed):\n%s", d)
				}
				if len(ft.prefillRequests())+len(ft.decodeRequests()) == 0 {
					t.Error("no RPC reached the worker")
				}
			})
		}
	}
}

// TestTypedLegRefusals: a call that cannot carry the handshake is refused with the 400 RoundTrip gives.
func TestTypedLegRefusals(t *testing.T) {
	t.Parallel()
	call, err := BuildCall(body.RouteChat, []byte(`{"model":"m","n":2,"messages":[{"role":"user","content":"q"}]}`), "r")
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func() (*Call, error){
		"one room, two samples": func() (*Call, error) { return call.WithBootstrap("h", 1, []uint64{1}, false) },
		"too few rooms":         func() (*Call, error) { return call.WithBootstrap("h", 1, []uint64{1}, true) },
		"negative port":         func() (*Call, error) { return call.WithBootstrap("h", -1, []uint64{1, 2}, true) },
	} {
		if _, err := f(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := BuildCall(body.RouteChat, []byte(`{"model":"m"}`), "r"); err == nil {
		t.Error("BuildCall accepted a chat request without messages")
	}
}

func sortedP(rs []*workerv1.PrefillRequest) []*workerv1.PrefillRequest {
	slices.SortFunc(rs, func(a, b *workerv1.PrefillRequest) int { return strings.Compare(a.GetRequestId(), b.GetRequestId()) })
	return rs
}

func sortedD(rs []*workerv1.DecodeRequest) []*workerv1.DecodeRequest {
	slices.SortFunc(rs, func(a, b *workerv1.DecodeRequest) int { return strings.Compare(a.GetRequestId(), b.GetRequestId()) })
	return rs
}

func frameSet(sse string) []string {
	fs := strings.Split(sse, "\n\n")
	slices.Sort(fs)
	return fs
}
