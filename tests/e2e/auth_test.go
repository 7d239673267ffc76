package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/gen/sluice/admin/v1/adminv1connect"
	openaiv1 "github.com/sluicegw/sluice/gen/sluice/openai/v1"
	"github.com/sluicegw/sluice/gen/sluice/openai/v1/openaiv1connect"
	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/internal/telemetry"
)

// logBuffer collects JSON log lines from the gateway.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// lines returns the decoded log lines whose msg is msg.
func (b *logBuffer) lines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for l := range strings.SplitSeq(b.String(), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", l)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// jwtIssuer is a local OpenID provider on loopback: discovery and a JWKS with one EC key made here.
type jwtIssuer struct {
	srv    *httptest.Server
	signer jose.Signer
}

func newJWTIssuer(t *testing.T) *jwtIssuer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	jwk := jose.JSONWebKey{Key: key, KeyID: "test-key", Algorithm: string(jose.ES256), Use: "sig"}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jwk}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	iss := &jwtIssuer{signer: signer}
	iss.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			_ = json.NewEncoder(w).Encode(map[string]string{"issuer": iss.srv.URL, "jwks_uri": iss.srv.URL + "/jwks"})
		case "/jwks":
			_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{jwk.Public()}})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(iss.srv.Close)
	return iss
}

func (i *jwtIssuer) token(t *testing.T, sub string, roles ...string) string {
	t.Helper()
	c := struct {
		jwt.Claims
		Roles []string `json:"roles"`
	}{jwt.Claims{Issuer: i.srv.URL, Subject: sub, Audience: jwt.Audience{"sluice"},
		Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour))}, roles}
	tok, err := jwt.Signed(i.signer).Claims(c).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestJWTAndKeysFile: a JWT without the admin role is refused on every admin surface (403, logged with
// the caller's id), one with it is allowed and its mutations are audited; API keys from the file work
// for inference; no credential ever reaches the logs.
func TestJWTAndKeysFile(t *testing.T) {
	t.Parallel()
	iss := newJWTIssuer(t)
	keysPath := filepath.Join(t.TempDir(), "api-keys")
	const teamKey, opsKey = "sk-team-a-0123456789", "sk-ops-abcdefghij"
	if err := os.WriteFile(keysPath, []byte("# inference keys\nteam-a "+teamKey+"\nops "+opsKey+" admin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := startCluster(t, sim.ClusterConfig{Regular: 1, Engine: instantEngine()})
	gw := startGateway(t, app.Options{Logger: logger}, "--worker-urls", c.Engines[0].URL(),
		"--api-keys-file", keysPath, "--jwt-issuer", iss.srv.URL, "--jwt-audience", "sluice")
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	ctx := context.Background()

	user := iss.token(t, "alice", "user")
	admin := iss.token(t, "root", "admin", "user")

	// Inference: JWTs (any role) and file keys.
	for _, cred := range []string{user, admin, teamKey, opsKey} {
		cl := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey(cred), option.WithMaxRetries(0))
		if _, err := cl.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: simModel,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(2)}); err != nil {
			t.Errorf("inference with %s: %v", cred[:6], err)
		}
	}
	cl := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("sk-unknown"), option.WithMaxRetries(0))
	_, err := cl.Models.List(ctx)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized {
		t.Errorf("unknown key: %v, want 401", err)
	}

	// Admin with the user JWT: 403 on REST, Connect, gRPC-Web and gRPC.
	req, _ := http.NewRequest(http.MethodGet, gw.URL+"/admin/v1/workers", nil)
	req.Header.Set("Authorization", "Bearer "+user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("admin REST with a user JWT: %d, want 403", resp.StatusCode)
	}
	for name, opt := range map[string]connect.ClientOption{"connect": connect.WithProtoJSON(), "grpc-web": connect.WithGRPCWeb()} {
		ac := adminv1connect.NewAdminServiceClient(http.DefaultClient, gw.URL, opt)
		cctx, info := connect.NewClientContext(ctx)
		info.RequestHeader().Set("Authorization", "Bearer "+user)
		if _, err := ac.ListWorkers(cctx, &adminv1.ListWorkersRequest{}); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("%s admin with a user JWT: %v, want permission_denied", name, err)
		}
	}
	gc := adminv1.NewAdminServiceClient(grpcConn(t, gw.Addr()))
	_, err = gc.ListWorkers(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+user), &adminv1.ListWorkersRequest{})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("gRPC admin with a user JWT: %v, want PermissionDenied", err)
	}
	_, err = gc.ListWorkers(ctx, &adminv1.ListWorkersRequest{}, grpc.WaitForReady(false))
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("gRPC admin without a credential: %v, want Unauthenticated", err)
	}
	if _, err := gc.ListWorkers(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+teamKey), &adminv1.ListWorkersRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("gRPC admin with an inference key: %v, want PermissionDenied", err)
	}
	refusals := logs.lines(t, "admin API refused: credential lacks the admin role")
	if len(refusals) < 4 || refusals[0]["principal"] != "jwt:alice" {
		t.Errorf("refusal log lines %v, want >= 4 naming jwt:alice", refusals)
	}

	// Admin with the admin JWT (gRPC) and the admin file key (REST): allowed and audited.
	actx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+admin)
	added, err := gc.AddWorker(actx, &adminv1.AddWorkerRequest{Worker: &adminv1.WorkerSpec{
		Url: "http://127.0.0.1:9", Role: "regular", Protocol: "sglang", Models: []string{"m"}, ApiKey: "worker-secret-key"}})
	if err != nil {
		t.Fatalf("AddWorker with the admin JWT: %v", err)
	}
	req, _ = http.NewRequest(http.MethodDelete, gw.URL+"/admin/v1/workers/"+added.GetWorker().GetId(), nil)
	req.Header.Set("Authorization", "Bearer "+opsKey)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("RemoveWorker with the admin file key: %d", resp.StatusCode)
	}
	audits := logs.lines(t, "admin audit")
	if len(audits) != 2 {
		t.Fatalf("%d audit lines, want 2: %v", len(audits), audits)
	}
	if a := audits[0]; a["who"] != "jwt:root" || a["action"] != "AddWorker" || a["result"] != "ok" ||
		!strings.Contains(a["after"].(string), "127.0.0.1:9") || a["target"] != added.GetWorker().GetId() {
		t.Errorf("AddWorker audit %v", a)
	}
	if a := audits[1]; a["who"] != "ops" || a["auth_method"] != "api_key" || a["action"] != "RemoveWorker" ||
		!strings.Contains(a["before"].(string), "127.0.0.1:9") || a["after"] != "" {
		t.Errorf("RemoveWorker audit %v", a)
	}

	// No credential, worker key included, appears in any log line.
	all := logs.String()
	for _, secret := range []string{user, admin, teamKey, opsKey, "worker-secret-key", strings.Split(user, ".")[2]} {
		if strings.Contains(all, secret) {
			t.Errorf("logs contain a credential (%.10s...)", secret)
		}
	}
}

// TestCallerOnSpans: the server span of a REST and of a typed RPC request names the caller by key id,
// and no span attribute carries the key.
func TestCallerOnSpans(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	keysPath := filepath.Join(t.TempDir(), "api-keys")
	const key = "sk-span-test-0123456789"
	if err := os.WriteFile(keysPath, []byte("team-span "+key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, sim.ClusterConfig{Regular: 1, Engine: instantEngine()})
	gw := startGateway(t, app.Options{TracerProvider: &telemetry.TracerProvider{TracerProvider: tp, Shutdown: tp.Shutdown}},
		"--worker-urls", c.Engines[0].URL(), "--api-keys-file", keysPath)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	cl := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	if _, err := cl.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: simModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(2)}); err != nil {
		t.Fatal(err)
	}
	rpc := openaiv1connect.NewOpenAIServiceClient(http.DefaultClient, gw.URL)
	cctx, info := connect.NewClientContext(context.Background())
	info.RequestHeader().Set("Authorization", "Bearer "+key)
	if _, err := rpc.ListModels(cctx, &openaiv1.ListModelsRequest{}); err != nil {
		t.Fatal(err)
	}
	const rpcSpan = "sluice.openai.v1.OpenAIService/ListModels"
	var spans tracetest.SpanStubs
	waitFor(t, "server spans", 5*time.Second, func() bool {
		spans = exp.GetSpans()
		named := byName(spans)
		return len(named["POST /v1/chat/completions"].Attributes) > 0 && len(named[rpcSpan].Attributes) > 0
	})
	found, foundRPC := false, false
	for _, s := range spans {
		for _, a := range s.Attributes {
			if strings.Contains(a.Value.String(), key) {
				t.Errorf("span %s attribute %s carries the key", s.Name, a.Key)
			}
			if a.Key == "sluice.auth.principal" && a.Value.AsString() == "team-span" {
				found = found || s.Name == "POST /v1/chat/completions"
				foundRPC = foundRPC || s.Name == rpcSpan
			}
		}
	}
	if !found || !foundRPC {
		t.Errorf("sluice.auth.principal=team-span on the REST span %v, on the RPC span %v; want both", found, foundRPC)
	}
}
