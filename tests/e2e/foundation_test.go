package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/gen/sluice/admin/v1/adminv1connect"
	"github.com/sluicegw/sluice/internal/app"
)

func grpcConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestOnePortServesEveryProtocol checks the foundation: one listener answers Connect, gRPC, REST,
// reflection, gRPC health, /metrics and /readiness.
func TestOnePortServesEveryProtocol(t *testing.T) {
	t.Parallel()
	gw := startGateway(t, app.Options{}, "--pd-disaggregation", "--disable-health-check=false")
	ctx := context.Background()

	// A worker that does not answer: it stays Pending, so the gateway is not ready.
	connectClient := adminv1connect.NewAdminServiceClient(http.DefaultClient, gw.URL)
	added, err := connectClient.AddWorker(ctx, &adminv1.AddWorkerRequest{Worker: &adminv1.WorkerSpec{
		Url: "http://127.0.0.1:9", Role: "prefill", Models: []string{"m"}, Protocol: "sglang",
	}})
	if err != nil {
		t.Fatalf("AddWorker: %v", err)
	}
	if added.GetWorker().GetId() == "" || added.GetWorker().GetHealth() != "pending" {
		t.Fatalf("added worker = %v, want an id and health pending", added.GetWorker())
	}

	t.Run("connect and grpc-go get the same answer", func(t *testing.T) {
		viaConnect, err := connectClient.ListWorkers(ctx, &adminv1.ListWorkersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		viaGRPC, err := adminv1.NewAdminServiceClient(grpcConn(t, gw.Addr())).ListWorkers(ctx, &adminv1.ListWorkersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(viaConnect.GetWorkers()) != 1 || !proto.Equal(viaConnect, viaGRPC) {
			t.Fatalf("connect = %v\ngrpc = %v\nwant the same single worker", viaConnect, viaGRPC)
		}
		grpcWeb := adminv1connect.NewAdminServiceClient(http.DefaultClient, gw.URL, connect.WithGRPCWeb())
		viaWeb, err := grpcWeb.ListWorkers(ctx, &adminv1.ListWorkersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(viaConnect, viaWeb) {
			t.Fatalf("grpc-web = %v, want %v", viaWeb, viaConnect)
		}
	})

	t.Run("REST returns JSON with proto field names", func(t *testing.T) {
		resp, body := get(t, gw.URL+"/admin/v1/workers")
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Fatalf("status %d, content type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		var got struct {
			Workers []map[string]any `json:"workers"`
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("not JSON: %v: %s", err, body)
		}
		if len(got.Workers) != 1 || got.Workers[0]["url"] != "http://127.0.0.1:9" || got.Workers[0]["role"] != "prefill" ||
			got.Workers[0]["id"] != added.GetWorker().GetId() || got.Workers[0]["health"] != "pending" {
			t.Fatalf("workers = %v", got.Workers)
		}
		if _, ok := got.Workers[0]["bootstrap_port"]; !ok {
			t.Errorf("want snake_case field bootstrap_port in %v", got.Workers[0])
		}
	})

	t.Run("reflection lists the services", func(t *testing.T) {
		stream, err := reflectpb.NewServerReflectionClient(grpcConn(t, gw.Addr())).ServerReflectionInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		_ = stream.CloseSend()
		var names []string
		for _, s := range resp.GetListServicesResponse().GetService() {
			names = append(names, s.GetName())
		}
		for _, want := range []string{"sluice.openai.v1.OpenAIService", "sluice.admin.v1.AdminService", "grpc.health.v1.Health"} {
			if !slices.Contains(names, want) {
				t.Errorf("reflection lists %v, missing %s", names, want)
			}
		}
	})

	t.Run("grpc health", func(t *testing.T) {
		hc := healthpb.NewHealthClient(grpcConn(t, gw.Addr()))
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("server health = %v, want SERVING", resp.GetStatus())
		}
		resp, err = hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "sluice.openai.v1.OpenAIService"})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("inference service health = %v, want NOT_SERVING (no healthy workers)", resp.GetStatus())
		}
	})

	t.Run("metrics parse as prometheus text", func(t *testing.T) {
		resp, body := get(t, gw.URL+"/metrics")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("parse: %v", err)
		}
		for _, want := range []string{"go_goroutines", "process_cpu_seconds_total", "sluice_gateway_info", "sluice_workers"} {
			if _, ok := families[want]; !ok {
				t.Errorf("missing metric family %s", want)
			}
		}
	})

	t.Run("readiness is 503 in PD mode without healthy workers", func(t *testing.T) {
		resp, body := get(t, gw.URL+"/readiness")
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("readiness = %d %s, want 503", resp.StatusCode, body)
		}
		resp, _ = get(t, gw.URL+"/health")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("health = %d, want 200", resp.StatusCode)
		}
	})
}
