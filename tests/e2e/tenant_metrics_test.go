package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// TestTenantMetrics: per-tenant admitted, rejected (by reason) and token counts on /metrics, with the
// tenant label bounded: the budgeted tenant and the first other one seen keep their names
// (--tenant-metrics-max-tenants 1), every later tenant is "other".
func TestTenantMetrics(t *testing.T) {
	c := startCluster(t, sim.ClusterConfig{Regular: 1, Protocol: sim.ProtocolSGLang})
	gw := startGateway(t, app.Options{}, "--worker-urls", c.Engines[0].URL(), "--disable-retries",
		"--tenant-header", "X-Tenant", "--tenant-budgets", "capped=0:1", "--tenant-metrics-max-tenants", "1")
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	call := func(tenant string) error {
		cl := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0),
			option.WithHeader("X-Tenant", tenant))
		_, err := cl.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: simModel, MaxTokens: openai.Int(3),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("count my tokens")}})
		return err
	}
	for i, tc := range []struct {
		tenant  string
		refused bool
	}{{"capped", false}, {"capped", true}, {"first", false}, {"second", false}, {"third", false}, {"third", false}} {
		if err := call(tc.tenant); (err != nil) != tc.refused {
			t.Fatalf("call %d of %s: %v, want refused %v", i, tc.tenant, err, tc.refused)
		}
	}
	admitted := scrape(t, gw.URL, "sluice_tenant_admitted_total")
	for label, want := range map[string]float64{"tenant=capped": 1, "tenant=first": 1, "tenant=other": 3} {
		if admitted[label] != want {
			t.Errorf("admitted %s = %v, want %v (all: %v)", label, admitted[label], want, admitted)
		}
	}
	if len(admitted) != 3 {
		t.Errorf("admitted series %v, want capped, first and other only", admitted)
	}
	if rej := scrape(t, gw.URL, "sluice_tenant_rejections_total"); len(rej) != 1 || rej["reason=rate_limit_exceeded,tenant=capped"] != 1 {
		t.Errorf("rejections %v, want one rate_limit_exceeded of capped", rej)
	}
	tokens := scrape(t, gw.URL, "sluice_tenant_tokens_total")
	if tokens["tenant=capped,type=input"] <= 0 || tokens["tenant=other,type=output"] != 3*3 {
		t.Errorf("tokens %v, want capped's input counted and other's 3 x 3 output tokens", tokens)
	}
}
