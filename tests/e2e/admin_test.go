package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/gen/sluice/admin/v1/adminv1connect"
	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// adminAPI is the slice of the admin API the scenarios use, implemented by each client type.
type adminAPI interface {
	AddWorker(context.Context, *adminv1.AddWorkerRequest) (*adminv1.AddWorkerResponse, error)
	ListWorkers(context.Context, *adminv1.ListWorkersRequest) (*adminv1.ListWorkersResponse, error)
	GetWorker(context.Context, *adminv1.GetWorkerRequest) (*adminv1.GetWorkerResponse, error)
	DrainWorker(context.Context, *adminv1.DrainWorkerRequest) (*adminv1.DrainWorkerResponse, error)
	RemoveWorker(context.Context, *adminv1.RemoveWorkerRequest) (*adminv1.RemoveWorkerResponse, error)
	GetAdmission(context.Context, *adminv1.GetAdmissionRequest) (*adminv1.GetAdmissionResponse, error)
	UpdateAdmission(context.Context, *adminv1.UpdateAdmissionRequest) (*adminv1.UpdateAdmissionResponse, error)
}

// errCode reduces an error of any client type to the HTTP status it stands for, so one table of
// expectations covers Connect, gRPC and REST.
func errCode(err error) int {
	var he *httpError
	if errors.As(err, &he) {
		return he.status
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return connectToHTTP[ce.Code()]
	}
	if s, ok := status.FromError(err); ok {
		return connectToHTTP[connect.Code(s.Code())]
	}
	return 0
}

var connectToHTTP = map[connect.Code]int{
	connect.CodeInvalidArgument: 400, connect.CodeUnauthenticated: 401, connect.CodeNotFound: 404,
	connect.CodeAlreadyExists: 409, connect.CodeResourceExhausted: 429, connect.CodeUnavailable: 503,
}

// grpcAdmin adapts the grpc-go client (call options, metadata for the key).
type grpcAdmin struct {
	c   adminv1.AdminServiceClient
	key string
}

func (g grpcAdmin) ctx(ctx context.Context) context.Context {
	if g.key == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+g.key)
}
func (g grpcAdmin) AddWorker(ctx context.Context, r *adminv1.AddWorkerRequest) (*adminv1.AddWorkerResponse, error) {
	return g.c.AddWorker(g.ctx(ctx), r)
}
func (g grpcAdmin) ListWorkers(ctx context.Context, r *adminv1.ListWorkersRequest) (*adminv1.ListWorkersResponse, error) {
	return g.c.ListWorkers(g.ctx(ctx), r)
}
func (g grpcAdmin) GetWorker(ctx context.Context, r *adminv1.GetWorkerRequest) (*adminv1.GetWorkerResponse, error) {
	return g.c.GetWorker(g.ctx(ctx), r)
}
func (g grpcAdmin) DrainWorker(ctx context.Context, r *adminv1.DrainWorkerRequest) (*adminv1.DrainWorkerResponse, error) {
	return g.c.DrainWorker(g.ctx(ctx), r)
}
func (g grpcAdmin) RemoveWorker(ctx context.Context, r *adminv1.RemoveWorkerRequest) (*adminv1.RemoveWorkerResponse, error) {
	return g.c.RemoveWorker(g.ctx(ctx), r)
}
func (g grpcAdmin) GetAdmission(ctx context.Context, r *adminv1.GetAdmissionRequest) (*adminv1.GetAdmissionResponse, error) {
	return g.c.GetAdmission(g.ctx(ctx), r)
}
func (g grpcAdmin) UpdateAdmission(ctx context.Context, r *adminv1.UpdateAdmissionRequest) (*adminv1.UpdateAdmissionResponse, error) {
	return g.c.UpdateAdmission(g.ctx(ctx), r)
}

// restAdmin speaks the REST mapping (/admin/v1/...) with plain HTTP and protojson.
type restAdmin struct {
	base, key string
}

type httpError struct {
	status int
	body   string
}

func (e *httpError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.status, e.body) }

var restJSON = protojson.MarshalOptions{UseProtoNames: true}

// call sends body (nil for none) and decodes the response into out, or into out's field named
// responseField when the REST rule has a response_body.
func (r restAdmin) call(ctx context.Context, method, path string, body proto.Message, out proto.Message, responseField string) error {
	var rd io.Reader
	if body != nil {
		b, err := restJSON.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if r.key != "" {
		req.Header.Set("Authorization", "Bearer "+r.key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		var e errorBody
		if json.Unmarshal(b, &e) != nil || e.Error.Code == "" || e.Error.Message == "" {
			return fmt.Errorf("HTTP %d with a body that is not OpenAI-shaped: %s", resp.StatusCode, b)
		}
		return &httpError{status: resp.StatusCode, body: string(b)}
	}
	target := out
	if responseField != "" {
		fd := out.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(responseField))
		target = out.ProtoReflect().Mutable(fd).Message().Interface()
	}
	return protojson.Unmarshal(b, target)
}

func (r restAdmin) AddWorker(ctx context.Context, q *adminv1.AddWorkerRequest) (*adminv1.AddWorkerResponse, error) {
	out := &adminv1.AddWorkerResponse{}
	return out, r.call(ctx, http.MethodPost, "/admin/v1/workers", q.GetWorker(), out, "worker")
}
func (r restAdmin) ListWorkers(ctx context.Context, q *adminv1.ListWorkersRequest) (*adminv1.ListWorkersResponse, error) {
	out := &adminv1.ListWorkersResponse{}
	return out, r.call(ctx, http.MethodGet, "/admin/v1/workers?role="+q.GetRole()+"&model="+q.GetModel()+"&health="+q.GetHealth(), nil, out, "")
}
func (r restAdmin) GetWorker(ctx context.Context, q *adminv1.GetWorkerRequest) (*adminv1.GetWorkerResponse, error) {
	out := &adminv1.GetWorkerResponse{}
	return out, r.call(ctx, http.MethodGet, "/admin/v1/workers/"+q.GetId(), nil, out, "worker")
}
func (r restAdmin) DrainWorker(ctx context.Context, q *adminv1.DrainWorkerRequest) (*adminv1.DrainWorkerResponse, error) {
	out := &adminv1.DrainWorkerResponse{}
	return out, r.call(ctx, http.MethodPost, "/admin/v1/workers/"+q.GetId()+":drain", &adminv1.DrainWorkerRequest{RemoveWhenIdle: q.GetRemoveWhenIdle()}, out, "worker")
}
func (r restAdmin) RemoveWorker(ctx context.Context, q *adminv1.RemoveWorkerRequest) (*adminv1.RemoveWorkerResponse, error) {
	out := &adminv1.RemoveWorkerResponse{}
	return out, r.call(ctx, http.MethodDelete, "/admin/v1/workers/"+q.GetId(), nil, out, "")
}
func (r restAdmin) GetAdmission(ctx context.Context, q *adminv1.GetAdmissionRequest) (*adminv1.GetAdmissionResponse, error) {
	out := &adminv1.GetAdmissionResponse{}
	return out, r.call(ctx, http.MethodGet, "/admin/v1/admission", nil, out, "status")
}
func (r restAdmin) UpdateAdmission(ctx context.Context, q *adminv1.UpdateAdmissionRequest) (*adminv1.UpdateAdmissionResponse, error) {
	out := &adminv1.UpdateAdmissionResponse{}
	return out, r.call(ctx, http.MethodPatch, "/admin/v1/admission", q, out, "status")
}

type adminClient struct {
	name string
	mk   func(t *testing.T, gw *gateway, key string) adminAPI
}

func adminClients() []adminClient {
	return []adminClient{
		{"connect", func(_ *testing.T, gw *gateway, key string) adminAPI {
			var opts []connect.ClientOption
			if key != "" {
				opts = append(opts, connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
					return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
						req.Header().Set("Authorization", "Bearer "+key)
						return next(ctx, req)
					}
				})))
			}
			return adminv1connect.NewAdminServiceClient(http.DefaultClient, gw.URL, opts...)
		}},
		{"grpc", func(t *testing.T, gw *gateway, key string) adminAPI {
			return grpcAdmin{c: adminv1.NewAdminServiceClient(grpcConn(t, gw.Addr())), key: key}
		}},
		{"rest", func(_ *testing.T, gw *gateway, key string) adminAPI { return restAdmin{base: gw.URL, key: key} }},
	}
}

// TestAdminScenarios runs the same admin scenarios through Connect, grpc-go and REST clients.
func TestAdminScenarios(t *testing.T) {
	t.Parallel()
	for _, cl := range adminClients() {
		t.Run(cl.name, func(t *testing.T) {
			ctx := context.Background()
			c := startCluster(t, sim.ClusterConfig{Prefill: 2, Decode: 2, Protocol: sim.ProtocolSGLang,
				Engine: sim.Config{BootstrapTimeout: time.Minute}})
			decodes := c.ByRole(sim.RoleDecode)
			gw := startGateway(t, app.Options{}, "--pd-disaggregation", "--admin-api-key", "adm", "--decode-policy", "round_robin",
				"--prefill-max-inflight-requests-per-worker", "1", "--prefill-queue-size", "10",
				"--decode", decodes[0].URL(), "--health-check-interval-secs", "0.2")
			api := cl.mk(t, gw, "adm")

			// Add a simulated prefill engine: it is detected, becomes healthy and takes traffic.
			p0 := c.ByRole(sim.RolePrefill)[0]
			added, err := api.AddWorker(ctx, &adminv1.AddWorkerRequest{Worker: &adminv1.WorkerSpec{
				Url: p0.URL(), Role: "prefill", BootstrapPort: uint32(p0.BootstrapPort()), ApiKey: "engine-secret"}})
			if err != nil {
				t.Fatalf("add: %v", err)
			}
			w := added.GetWorker()
			if w.GetId() == "" || w.GetProtocol() != "sglang" || len(w.GetModels()) != 1 || w.GetModels()[0] != simModel || !w.GetHasApiKey() {
				t.Fatalf("added worker %v: want an id, the detected protocol and model, has_api_key", w)
			}
			if b, _ := restJSON.Marshal(w); strings.Contains(string(b), "engine-secret") {
				t.Fatalf("the worker's API key was echoed back: %s", b)
			}
			waitFor(t, "added worker ready", 10*time.Second, func() bool {
				got, err := api.GetWorker(ctx, &adminv1.GetWorkerRequest{Id: w.GetId()})
				return err == nil && got.GetWorker().GetHealth() == "ready"
			})
			resp, err := post(ctx, gw.URL+"/v1/chat/completions", shortChat)
			mustOK(t, resp, err)
			if resp.Header.Get("X-Sluice-Prefill-Worker") != p0.URL() {
				t.Fatalf("served by prefill %q, want the added %s", resp.Header.Get("X-Sluice-Prefill-Worker"), p0.URL())
			}

			// Bad inputs and keys get the documented codes.
			bad := []struct {
				name string
				call func(adminAPI) error
				want int
			}{
				{"malformed url", func(a adminAPI) error {
					_, err := a.AddWorker(ctx, &adminv1.AddWorkerRequest{Worker: &adminv1.WorkerSpec{Url: "ftp://x", Role: "prefill"}})
					return err
				}, 400},
				{"unknown role", func(a adminAPI) error {
					_, err := a.AddWorker(ctx, &adminv1.AddWorkerRequest{Worker: &adminv1.WorkerSpec{Url: "http://127.0.0.1:9", Role: "chef"}})
					return err
				}, 400},
				{"duplicate", func(a adminAPI) error {
					_, err := a.AddWorker(ctx, &adminv1.AddWorkerRequest{Worker: &adminv1.WorkerSpec{Url: p0.URL(), Role: "prefill", Models: []string{"m"}}})
					return err
				}, 409},
				{"unknown id", func(a adminAPI) error {
					_, err := a.GetWorker(ctx, &adminv1.GetWorkerRequest{Id: "no-such-worker"})
					return err
				}, 404},
				{"negative queue size", func(a adminAPI) error {
					_, err := a.UpdateAdmission(ctx, &adminv1.UpdateAdmissionRequest{QueueSize: proto.Int32(-1)})
					return err
				}, 400},
				{"missing key", func(adminAPI) error {
					_, err := cl.mk(t, gw, "").ListWorkers(ctx, &adminv1.ListWorkersRequest{})
					return err
				}, 401},
				{"wrong key", func(adminAPI) error {
					_, err := cl.mk(t, gw, "wrong").ListWorkers(ctx, &adminv1.ListWorkersRequest{})
					return err
				}, 401},
			}
			for _, b := range bad {
				if err := b.call(api); errCode(err) != b.want {
					t.Errorf("%s: error %v (code %d), want %d", b.name, err, errCode(err), b.want)
				}
			}

			// Raising the limit while requests are queued admits the head at once.
			if err := p0.SetFaults(sim.Faults{Hang: true}); err != nil {
				t.Fatal(err)
			}
			hctx, cancelHung := context.WithCancel(ctx)
			r1, r2 := goPost(hctx, gw.URL+"/v1/chat/completions", shortChat), goPost(hctx, gw.URL+"/v1/chat/completions", shortChat)
			waitFor(t, "one in flight, one queued", 10*time.Second, func() bool {
				st, err := api.GetAdmission(ctx, &adminv1.GetAdmissionRequest{})
				return err == nil && st.GetStatus().GetQueued() == 1 && len(st.GetStatus().GetWorkers()) == 1 && st.GetStatus().GetWorkers()[0].GetInflight() == 1
			})
			up, err := api.UpdateAdmission(ctx, &adminv1.UpdateAdmissionRequest{MaxInflightPerWorker: proto.Int32(2), QueueTimeout: durationpb.New(30 * time.Second)})
			if err != nil {
				t.Fatal(err)
			}
			if up.GetStatus().GetSettings().GetMaxInflightPerWorker() != 2 {
				t.Fatalf("update returned %v", up.GetStatus())
			}
			waitFor(t, "head admitted, visible in metrics", 5*time.Second, func() bool {
				return scrape(t, gw.URL, "sluice_pd_prefill_admission_inflight")["worker="+p0.URL()] == 2 &&
					scrape(t, gw.URL, "sluice_pd_prefill_admission_queued")["queue=sim-model"] == 0
			})
			cancelHung()
			for _, r := range []<-chan result{r1, r2} {
				if x := <-r; x.err == nil {
					x.resp.Body.Close()
				}
			}
			if err := p0.SetFaults(sim.Faults{}); err != nil {
				t.Fatal(err)
			}

			// Drain a decode worker under load: no request fails, its load reaches 0, then it is gone.
			d1, err := api.AddWorker(ctx, &adminv1.AddWorkerRequest{Worker: &adminv1.WorkerSpec{Url: decodes[1].URL(), Role: "decode"}})
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "second decode ready", 10*time.Second, func() bool { return workerByURL(t, gw, decodes[1].URL()).Health().String() == "ready" })
			var wg sync.WaitGroup
			errs := make(chan error, 6)
			for range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, err := post(ctx, gw.URL+"/v1/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":"drain me"}],"max_tokens":60,"ignore_eos":true}`)
					if err != nil {
						errs <- err
						return
					}
					defer resp.Body.Close()
					if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != http.StatusOK {
						errs <- fmt.Errorf("status %d, read error %w", resp.StatusCode, err)
					}
				}()
			}
			waitFor(t, "load on the decode to drain", 10*time.Second, func() bool { return workerByURL(t, gw, decodes[1].URL()).Load() > 0 })
			drained, err := api.DrainWorker(ctx, &adminv1.DrainWorkerRequest{Id: d1.GetWorker().GetId(), RemoveWhenIdle: true})
			if err != nil {
				t.Fatal(err)
			}
			if drained.GetWorker().GetHealth() != "draining" {
				t.Errorf("drained worker health %q, want draining", drained.GetWorker().GetHealth())
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Errorf("request failed during drain: %v", err)
			}
			waitFor(t, "drained worker removed", 10*time.Second, func() bool {
				_, err := api.GetWorker(ctx, &adminv1.GetWorkerRequest{Id: d1.GetWorker().GetId()})
				return errCode(err) == 404
			})

			// Remove.
			if _, err := api.RemoveWorker(ctx, &adminv1.RemoveWorkerRequest{Id: w.GetId()}); err != nil {
				t.Fatal(err)
			}
			list, err := api.ListWorkers(ctx, &adminv1.ListWorkersRequest{Role: "prefill"})
			if err != nil {
				t.Fatal(err)
			}
			if len(list.GetWorkers()) != 0 {
				t.Fatalf("prefill workers after removal: %v", list.GetWorkers())
			}
			if _, ok := scrape(t, gw.URL, "sluice_pd_prefill_admission_inflight")["worker="+p0.URL()]; ok {
				t.Errorf("removed worker's admission series is still exported")
			}
		})
	}
}

// TestOpenAPICoversEveryAdminRPC: the generated OpenAPI spec has an operation for every RPC.
func TestOpenAPICoversEveryAdminRPC(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../openapi/sluice/admin/v1/admin.swagger.json")
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	ops := map[string]bool{}
	for _, methods := range spec.Paths {
		for _, op := range methods {
			ops[op.OperationID] = true
		}
	}
	methods := adminv1.File_sluice_admin_v1_admin_proto.Services().ByName("AdminService").Methods()
	for i := range methods.Len() {
		if id := "AdminService_" + string(methods.Get(i).Name()); !ops[id] {
			t.Errorf("openapi has no path for %s", id)
		}
	}
}
