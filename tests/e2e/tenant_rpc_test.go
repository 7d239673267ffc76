package e2e

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	openaiv1 "github.com/sluicegw/sluice/gen/sluice/openai/v1"
	"github.com/sluicegw/sluice/gen/sluice/openai/v1/openaiv1connect"
	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// rpcRejection is what a typed client saw of a refusal: its code, reason, metadata and retry delay.
type rpcRejection struct {
	code   string // the Connect code's name
	reason string // ErrorInfo reason
	meta   http.Header
	retry  time.Duration // RetryInfo delay; 0 when absent
}

func typedChat(tenant string) *openaiv1.CreateChatCompletionRequest {
	return &openaiv1.CreateChatCompletionRequest{Model: simModel, MaxTokens: ptr[int32](1),
		Messages: []*openaiv1.ChatMessage{{Role: "user", Content: structpb.NewStringValue("hi " + tenant)}}}
}

// connectCall calls CreateChatCompletion over Connect as tenant; a nil rejection is a success.
func connectCall(t *testing.T, gwURL, tenant string) *rpcRejection {
	t.Helper()
	cl := openaiv1connect.NewOpenAIServiceClient(http.DefaultClient, gwURL)
	ctx, info := connect.NewClientContext(context.Background())
	info.RequestHeader().Set("X-Tenant", tenant)
	_, err := cl.CreateChatCompletion(ctx, typedChat(tenant))
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("connect: %v is not a connect error", err)
	}
	rej := &rpcRejection{code: ce.Code().String(), meta: ce.Meta()}
	for _, d := range ce.Details() {
		v, err := d.Value()
		if err != nil {
			t.Fatalf("connect: unreadable error detail %s: %v", d.Type(), err)
		}
		switch v := v.(type) {
		case *errdetails.ErrorInfo:
			rej.reason = v.GetReason()
		case *errdetails.RetryInfo:
			rej.retry = v.GetRetryDelay().AsDuration()
		}
	}
	return rej
}

// grpcCall calls CreateChatCompletion with grpc-go as tenant; the metadata is headers and trailers.
func grpcCall(t *testing.T, cc *grpc.ClientConn, tenant string) *rpcRejection {
	t.Helper()
	var hdr, trl metadata.MD
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-tenant", tenant)
	_, err := openaiv1.NewOpenAIServiceClient(cc).CreateChatCompletion(ctx, typedChat(tenant), grpc.Header(&hdr), grpc.Trailer(&trl))
	if err == nil {
		return nil
	}
	st := status.Convert(err)
	rej := &rpcRejection{code: connect.Code(st.Code()).String(), meta: http.Header{}}
	for _, md := range []metadata.MD{hdr, trl} {
		for k, vs := range md {
			for _, v := range vs {
				rej.meta.Add(k, v)
			}
		}
	}
	for _, d := range st.Details() {
		switch v := d.(type) {
		case *errdetails.ErrorInfo:
			rej.reason = v.GetReason()
		case *errdetails.RetryInfo:
			rej.retry = v.GetRetryDelay().AsDuration()
		}
	}
	return rej
}

// checkRejection: resource_exhausted with the reason, Retry-After and RetryInfo agreeing, and the
// x-ratelimit-*-requests metadata of a request budget of limit with remaining left ("" = any number
// below the limit).
func checkRejection(t *testing.T, client string, rej *rpcRejection, reason, limit, remaining string) {
	t.Helper()
	if rej == nil {
		t.Fatalf("%s: answered, want %s", client, reason)
	}
	if rej.code != connect.CodeResourceExhausted.String() || rej.reason != reason {
		t.Fatalf("%s: %s/%q, want resource_exhausted/%s", client, rej.code, rej.reason, reason)
	}
	ra, err := strconv.Atoi(rej.meta.Get("Retry-After"))
	if err != nil || ra < 1 || rej.retry <= 0 || rej.retry > time.Duration(ra)*time.Second {
		t.Errorf("%s: Retry-After %q and RetryInfo %v, want a positive delay within the whole seconds", client, rej.meta.Get("Retry-After"), rej.retry)
	}
	left := rej.meta.Get("X-Ratelimit-Remaining-Requests")
	n, err := strconv.Atoi(left)
	lim, _ := strconv.Atoi(limit)
	if rej.meta.Get("X-Ratelimit-Limit-Requests") != limit || err != nil || n >= lim || (remaining != "" && left != remaining) ||
		rej.meta.Get("X-Ratelimit-Reset-Requests") == "" {
		t.Errorf("%s: metadata %v, want x-ratelimit-*-requests with limit %s, remaining %q", client, rej.meta, limit, remaining)
	}
}

// TestTenantBudgetRPC: a tenant past its request budget is refused on the typed API, over Connect and
// over gRPC, with the same information the REST 429 carries: rate_limit_exceeded, Retry-After,
// Retry-After-Ms and the x-ratelimit-* headers as metadata, and the delay as a RetryInfo detail.
func TestTenantBudgetRPC(t *testing.T) {
	c := startCluster(t, sim.ClusterConfig{Regular: 1, Protocol: sim.ProtocolSGLang})
	gw := startGateway(t, app.Options{}, "--worker-urls", c.Engines[0].URL(), "--disable-retries",
		"--tenant-header", "X-Tenant", "--tenant-budgets", "c=0:1,g=0:1")
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	cc := grpcConn(t, gw.Addr())

	if rej := connectCall(t, gw.URL, "c"); rej != nil {
		t.Fatalf("connect within the budget: %+v", rej)
	}
	rej := connectCall(t, gw.URL, "c")
	checkRejection(t, "connect", rej, "rate_limit_exceeded", "1", "0")
	if ms, err := strconv.Atoi(rej.meta.Get("Retry-After-Ms")); err != nil || ms < 1 || ms > 60000 {
		t.Errorf("connect: Retry-After-Ms %q, want 1..60000", rej.meta.Get("Retry-After-Ms"))
	}

	if rej := grpcCall(t, cc, "g"); rej != nil {
		t.Fatalf("grpc within the budget: %+v", rej)
	}
	rej = grpcCall(t, cc, "g")
	checkRejection(t, "grpc", rej, "rate_limit_exceeded", "1", "0")
	if rej.meta.Get("Retry-After-Ms") == "" {
		t.Errorf("grpc: no retry-after-ms in %v", rej.meta)
	}
	// A tenant without a budget is served, and carries no rate-limit metadata on success.
	if rej := grpcCall(t, cc, "free"); rej != nil {
		t.Fatalf("a tenant without a budget: %+v", rej)
	}
}

// TestTenantQueueFullRPC: a budgeted tenant past --tenant-max-queued gets tenant_queue_full on the
// typed API with its Retry-After, RetryInfo and x-ratelimit-* metadata, over Connect and gRPC.
func TestTenantQueueFullRPC(t *testing.T) {
	c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang,
		Engine: sim.Config{BootstrapTimeout: time.Minute}})
	gw := startGateway(t, app.Options{}, append([]string{"--pd-disaggregation", "--disable-retries",
		"--prefill-max-inflight-requests-per-worker", "1", "--prefill-queue-size", "20", "--prefill-queue-timeout-secs", "60",
		"--tenant-header", "X-Tenant", "--tenant-max-queued", "1", "--tenant-requests-per-minute", "1000"}, pdArgs(c)...)...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	prefill := c.ByRole(sim.RolePrefill)[0]
	if err := prefill.SetFaults(sim.Faults{Hang: true}); err != nil {
		t.Fatal(err)
	}
	// One request of tenant "n" holds the slot (hung in the engine), one more queues: its bound.
	rest := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0),
		option.WithHeader("X-Tenant", "n"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	defer func() {
		cancel()
		<-done
		<-done
	}()
	hold := func() {
		_, err := rest.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: simModel, MaxTokens: openai.Int(1),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hold")}})
		done <- err
	}
	go hold()
	waitFor(t, "the slot held", 10*time.Second, func() bool { return gw.Admission.Status().Inflight[prefill.URL()] == 1 })
	go hold()
	waitFor(t, "one queued", 10*time.Second, func() bool { return gw.Admission.Status().QueuedByTenant["n"] == 1 })

	checkRejection(t, "connect", connectCall(t, gw.URL, "n"), "tenant_queue_full", "1000", "")
	checkRejection(t, "grpc", grpcCall(t, grpcConn(t, gw.Addr()), "n"), "tenant_queue_full", "1000", "")
}
