package config

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseTenants(t *testing.T) {
	pd := []string{"--pd-disaggregation", "--prefill", "http://p:1", "--decode", "http://d:1",
		"--prefill-max-inflight-requests-per-worker", "2"}
	c, err := parseNoEnv(append(pd, "--tenant-header", "X-Tenant", "--tenant-weights", "a=3, b=2",
		"--tenant-weights", "c=1", "--tenant-max-queued", "10")...)
	if err != nil {
		t.Fatal(err)
	}
	want := TenantsConfig{Header: "X-Tenant", Fairness: "share", Weights: map[string]int{"a": 3, "b": 2, "c": 1},
		MaxQueued: 10, Burst: 1, MetricsMaxTenants: 20}
	if diff := cmp.Diff(want, c.Tenants); diff != "" {
		t.Errorf("tenants (-want +got):\n%s", diff)
	}
	if !c.Tenants.Fair() || !c.Tenants.UnderShareFirst() {
		t.Error("a tenant source turns fairness on, in share mode")
	}
	for _, tt := range []struct {
		value       string
		fair, share bool
	}{
		{"share", true, true},
		{"on", true, true}, // the round robin's name when it was the default: now the default
		{"round-robin", true, false},
		{"off", false, false},
	} {
		c, err := parseNoEnv(append(pd, "--tenant-header", "X-Tenant", "--tenant-fairness", tt.value)...)
		if err != nil || c.Tenants.Fair() != tt.fair || c.Tenants.UnderShareFirst() != tt.share {
			t.Errorf("--tenant-fairness %s: %v, fair %v, under share first %v; want %v, %v", tt.value, err,
				c != nil && c.Tenants.Fair(), c != nil && c.Tenants.UnderShareFirst(), tt.fair, tt.share)
		}
	}
	if c, err = parseNoEnv(append(pd, "--tenant-fairness", "share")...); err != nil || c.Tenants.UnderShareFirst() {
		t.Errorf("--tenant-fairness share without a tenant source: %v, under share first %v", err, c != nil && c.Tenants.UnderShareFirst())
	}
	c, err = parseNoEnv(append(pd, "--tenant-header", "X-T", "--tenant-tokens-per-minute", "1000", "--tenant-budgets", "a=0:10,b=500:0")...)
	if err != nil || !c.Tenants.BudgetsOn() || c.Tenants.TokensPerMinute != 1000 ||
		!cmp.Equal(c.Tenants.Budgets, map[string]TenantBudget{"a": {0, 10}, "b": {500, 0}}) {
		t.Errorf("budgets: %v, %+v", err, c.Tenants)
	}
	if c, err = parseNoEnv(append(pd, "--session-header", "x-session-id")...); err != nil || c.Tenants.SessionHeader != "x-session-id" || c.Tenants.On() {
		t.Errorf("--session-header: %v, %+v (it needs no tenant source)", err, c.Tenants)
	}
	if c, err = parseNoEnv(pd...); err != nil || c.Tenants.On() || c.Tenants.Fair() || c.Tenants.BudgetsOn() {
		t.Errorf("no source: %v, tenants %+v, want off", err, c.Tenants)
	}
}

func TestParseTenantsRejects(t *testing.T) {
	pd := []string{"--pd-disaggregation", "--prefill", "http://p:1", "--decode", "http://d:1"}
	on := append(slices.Clone(pd), "--prefill-max-inflight-requests-per-worker", "2")
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"bad fairness", append(slices.Clone(on), "--tenant-header", "X-T", "--tenant-fairness", "yes"), "--tenant-fairness must be share, round-robin or off"},
		{"claim without jwt", append(slices.Clone(on), "--tenant-jwt-claim", "org"), "--tenant-jwt-claim needs --jwt-issuer"},
		{"key ids without keys", append(slices.Clone(on), "--tenant-api-key-ids"), "--tenant-api-key-ids needs --api-keys-file"},
		{"bad header", append(slices.Clone(on), "--tenant-header", "X T"), "is not a header name"},
		{"weights without source", append(slices.Clone(on), "--tenant-weights", "a=2"), "need a tenant source"},
		{"bad weight", append(slices.Clone(on), "--tenant-header", "X-T", "--tenant-weights", "a=0"), `--tenant-weights of tenant "a" must be 1-1000, got 0`},
		{"weight not a number", append(slices.Clone(on), "--tenant-header", "X-T", "--tenant-weights", "a=x"), "weight must be an integer"},
		{"weight twice", append(slices.Clone(on), "--tenant-header", "X-T", "--tenant-weights", "a=2,a=3"), "given twice"},
		{"burst over", append(slices.Clone(on), "--tenant-header", "X-T", "--tenant-burst", "1001"), "--tenant-burst must be 0-1000"},
		{"burst negative", append(slices.Clone(on), "--tenant-header", "X-T", "--tenant-burst", "-1"), "--tenant-burst must be 0-1000"},
		{"negative bound", append(slices.Clone(on), "--tenant-header", "X-T", "--tenant-max-queued", "-1"), "--tenant-max-queued must be at least 0"},
		{"tenant bound without admission", append(slices.Clone(pd), "--tenant-header", "X-T", "--tenant-max-queued", "3"), "act inside prefill admission, which is off"},
		{"budgets without source", append(slices.Clone(on), "--tenant-requests-per-minute", "5"), "need a tenant source"},
		{"bad budget", append(slices.Clone(on), "--tenant-header", "X-T", "--tenant-budgets", "a=5"), "want TENANT=TOKENS:REQUESTS"},
		{"bad session header", append(slices.Clone(pd), "--session-header", "x session"), "--session-header \"x session\" is not a header name"},
		{"session header unread", append(slices.Clone(pd), "--policy", "round_robin", "--session-header", "x-session-id"), "--session-header needs a policy that reads routing keys"},
		{"negative budget", append(slices.Clone(on), "--tenant-header", "X-T", "--tenant-budgets", "a=-1:2"), "non-negative"},
	} {
		_, err := parseNoEnv(tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want one containing %q", tt.name, err, tt.want)
		}
	}
}

// TestTenantMaxQueuedDefault: with a tenant source and admission on, --tenant-max-queued not given is
// half of --prefill-queue-size, so one tenant's flood cannot fill the shared queue; given (a number,
// 0 or off) it wins; with no tenant source there is no bound.
func TestTenantMaxQueuedDefault(t *testing.T) {
	pd := []string{"--pd-disaggregation", "--prefill", "http://p:1", "--decode", "http://d:1",
		"--prefill-max-inflight-requests-per-worker", "1", "--prefill-queue-size", "20"}
	for _, tt := range []struct {
		name      string
		args      []string
		want      int
		defaulted bool
	}{
		{"tenant source", []string{"--tenant-header", "x-tenant"}, 10, true},
		{"explicit", []string{"--tenant-header", "x-tenant", "--tenant-max-queued", "3"}, 3, false},
		{"explicit off", []string{"--tenant-header", "x-tenant", "--tenant-max-queued", "off"}, 0, false},
		{"explicit 0", []string{"--tenant-header", "x-tenant", "--tenant-max-queued", "0"}, 0, false},
		{"no tenant source", nil, 0, false},
		{"queue of one", []string{"--tenant-header", "x-tenant", "--prefill-queue-size", "1"}, 1, true},
	} {
		c, err := parseNoEnv(append(slices.Clone(pd), tt.args...)...)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if c.Tenants.MaxQueued != tt.want || c.Tenants.MaxQueuedDefaulted != tt.defaulted {
			t.Errorf("%s: max queued %d (defaulted %v), want %d (%v)", tt.name, c.Tenants.MaxQueued,
				c.Tenants.MaxQueuedDefaulted, tt.want, tt.defaulted)
		}
	}
	// A tenant source without admission stays valid: there is no queue to share.
	if _, err := parseNoEnv("--pd-disaggregation", "--prefill", "http://p:1", "--decode", "http://d:1", "--tenant-header", "x-tenant"); err != nil {
		t.Errorf("tenant source without admission: %v", err)
	}
}
