package e2e

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// TestTenantBudgetEndToEnd: tenants named by a header, with request budgets, through the real
// gateway and the official Go SDK. A tenant past its budget gets 429 rate_limit_exceeded with
// Retry-After, Retry-After-Ms and the x-ratelimit-* headers, while another tenant is still served;
// and the SDK's own retry, following Retry-After-Ms, gets a request through once the bucket refills.
func TestTenantBudgetEndToEnd(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.ClusterConfig{Regular: 1, Protocol: sim.ProtocolSGLang})
	gw := startGateway(t, app.Options{}, "--worker-urls", c.Engines[0].URL(), "--disable-retries",
		"--tenant-header", "X-Tenant", "--tenant-budgets", "slow=0:2,fast=0:60")
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	ctx := context.Background()
	client := func(tenant string, retries int, mw ...option.Middleware) openai.Client {
		opts := []option.RequestOption{option.WithBaseURL(gw.URL + "/v1/"), option.WithAPIKey("unused"),
			option.WithMaxRetries(retries), option.WithHeader("X-Tenant", tenant)}
		for _, m := range mw {
			opts = append(opts, option.WithMiddleware(m))
		}
		return openai.NewClient(opts...)
	}
	params := openai.ChatCompletionNewParams{Model: simModel, MaxTokens: openai.Int(1),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}

	slow := client("slow", 0)
	for i := range 2 {
		if _, err := slow.Chat.Completions.New(ctx, params); err != nil {
			t.Fatalf("slow #%d within its budget: %v", i, err)
		}
	}
	_, err := slow.Chat.Completions.New(ctx, params)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "rate_limit_exceeded" {
		t.Fatalf("slow past its budget: %v, want 429 rate_limit_exceeded", err)
	}
	h := apiErr.Response.Header
	ra, _ := strconv.Atoi(h.Get("Retry-After"))
	ms, _ := strconv.Atoi(h.Get("Retry-After-Ms"))
	// 2 requests per minute refill one every 30 s.
	if ra < 1 || ra > 30 || ms < 1 || ms > 30000 || h.Get("X-Ratelimit-Limit-Requests") != "2" ||
		h.Get("X-Ratelimit-Remaining-Requests") != "0" || h.Get("X-Ratelimit-Reset-Requests") == "" {
		t.Fatalf("429 headers %v, want Retry-After(-Ms) within 30 s and the x-ratelimit-*-requests set", h)
	}
	if h.Get("X-Ratelimit-Limit-Tokens") != "" {
		t.Errorf("a tenant without a token budget got token headers: %v", h)
	}
	// Another tenant is not affected; a tenant without a budget gets no rate-limit headers.
	var resp *http.Response
	other := client("other", 0)
	if _, err := other.Chat.Completions.New(ctx, params, option.WithResponseInto(&resp)); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
	if resp.Header.Get("X-Ratelimit-Limit-Requests") != "" {
		t.Errorf("a tenant without a budget got rate-limit headers: %v", resp.Header)
	}

	// The budgets are set live: through the CLI, then read back over REST.
	out := runCLI(t, 0, "tenants", "budgets", "set", "--server", gw.URL, "--tenant", "slow=0:1000", "--tenant", "fast=0:60")
	if !strings.Contains(out, "slow") || !strings.Contains(out, "1000") {
		t.Fatalf("budgets set printed %q", out)
	}
	if _, err := slow.Chat.Completions.New(ctx, params); err != nil {
		t.Fatalf("slow after its budget was raised live: %v", err)
	}
	if _, body := get(t, gw.URL+"/admin/v1/tenants/budgets"); !strings.Contains(string(body), `"slow"`) || !strings.Contains(string(body), "1000") {
		t.Fatalf("GET /admin/v1/tenants/budgets = %s", body)
	}
	put, _ := http.NewRequest(http.MethodPut, gw.URL+"/admin/v1/tenants/budgets",
		strings.NewReader(`{"default":{"tokens_per_minute":100000},"tenants":{"slow":{"requests_per_minute":1000},"fast":{"requests_per_minute":60}}}`))
	put.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(put); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /admin/v1/tenants/budgets: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}
	if _, body := get(t, gw.URL+"/admin/v1/tenants/budgets"); !strings.Contains(string(body), "100000") {
		t.Fatalf("the REST PUT did not take: %s", body)
	}
	runCLI(t, 1, "tenants", "budgets", "set", "--server", gw.URL, "--tenant", "slow=-1:2") // a bad budget is refused
	runCLI(t, 1, "tenants", "budgets")

	// fast refills one request per second: drain it, then let the SDK retry through a 429.
	var mu sync.Mutex
	var statuses []int
	record := func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		r, err := next(req)
		if err == nil {
			mu.Lock()
			statuses = append(statuses, r.StatusCode)
			mu.Unlock()
		}
		return r, err
	}
	fast := client("fast", 0)
	if _, err := fast.Chat.Completions.New(ctx, params, option.WithResponseInto(&resp)); err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("X-Ratelimit-Limit-Requests") != "60" || resp.Header.Get("X-Ratelimit-Remaining-Requests") != "59" {
		t.Errorf("answer headers %v, want limit 60, remaining 59", resp.Header)
	}
	for range 200 {
		if _, err := fast.Chat.Completions.New(ctx, params); err != nil {
			break
		}
	}
	retrying := client("fast", 3, record)
	for range 50 { // until one call starts on a spent bucket (a refill may land in between)
		mu.Lock()
		statuses = statuses[:0]
		mu.Unlock()
		if _, err := retrying.Chat.Completions.New(ctx, params); err != nil {
			t.Fatalf("the SDK's retries did not get through: %v (statuses %v)", err, statuses)
		}
		mu.Lock()
		saw429 := len(statuses) >= 2 && statuses[0] == http.StatusTooManyRequests && statuses[len(statuses)-1] == http.StatusOK
		mu.Unlock()
		if saw429 {
			return
		}
	}
	t.Fatalf("no call met a spent bucket: statuses of the last %v", statuses)
}
