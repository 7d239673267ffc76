package config

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicegw/sluice/internal/admission"
)

// TenantsConfig names the tenant sources and admission's tenancy (internal/tenant,
// internal/admission Settings.Tenants). With no source set, nothing about tenants is on.
type TenantsConfig struct {
	// APIKeyIDs makes the id of the caller's API key its tenant (--tenant-api-key-ids).
	APIKeyIDs bool
	// JWTClaim is the JWT claim (dotted path) naming the tenant (--tenant-jwt-claim; needs --jwt-issuer).
	JWTClaim string
	// Header is the request header naming the tenant of callers no credential names (--tenant-header).
	Header string
	// Fairness is "share" (default), "round-robin" or "off" (--tenant-fairness): fair queueing
	// across tenants within a band, whenever a source is set. round-robin is weighted deficit round
	// robin; share also serves first the tenants below their share of recent grants (admission
	// TenantSettings.UnderShareFirst). "on", the round robin's name when it was the default, is
	// taken as the default, so command lines that turned fairness on keep the fairest mode.
	Fairness string
	// Weights are tenants' shares in fair queueing, 1 for a tenant not named (--tenant-weights T=W,...).
	Weights map[string]int
	// MaxQueued bounds one tenant's waiting requests (--tenant-max-queued; 0 or "off" = none). Not
	// given, it is half of --prefill-queue-size (at least 1) whenever a tenant source is set and
	// admission is on (MaxQueuedDefaulted reports it): without a bound a single tenant's flood fills
	// the shared queue and every other tenant, fair queueing or not, gets 429 pd_prefill_queue_full.
	MaxQueued int
	// MaxQueuedDefaulted reports that MaxQueued was derived from the queue size, not given.
	MaxQueuedDefaulted bool
	// Burst is the grants a tenant back from idle may take in its first turn, repaid in its later
	// turns (--tenant-burst, default 1 = its weight). Opt-in: a flood that starts from idle also
	// gets its burst ahead of the tenants that arrive just after it, and in the tenants scenario a
	// burst of 4 did not shorten the quiet tenants' tail (docs/benchmarks.md).
	Burst int
	// MetricsMaxTenants bounds the tenants named in metric labels, the rest being "other"
	// (--tenant-metrics-max-tenants, default 20; the weighted and budgeted tenants are always named).
	MetricsMaxTenants int
	// TokensPerMinute and RequestsPerMinute are every tenant's budget unless Budgets names it
	// (--tenant-tokens-per-minute, --tenant-requests-per-minute; 0 = none).
	TokensPerMinute, RequestsPerMinute int64
	// Budgets are per-tenant budgets (--tenant-budgets T=TOKENS:REQUESTS,...; 0 = none of that kind).
	Budgets map[string]TenantBudget
	// SessionHeader names a conversation's session (--session-header, e.g. x-session-id; "" = off):
	// it is read as a routing key after --routing-key-headers, and cache_aware and kv_aware keep a
	// request with a routing key on the worker its key used last (internal/placement session.go).
	SessionHeader string
}

// TenantBudget is one tenant's tokens and requests per minute (0 = no limit of that kind).
type TenantBudget struct {
	TokensPerMinute, RequestsPerMinute int64
}

// BudgetsOn reports whether any tenant has a budget.
func (t TenantsConfig) BudgetsOn() bool {
	return t.TokensPerMinute > 0 || t.RequestsPerMinute > 0 || len(t.Budgets) > 0
}

// On reports whether some tenant source is configured.
func (t TenantsConfig) On() bool { return t.APIKeyIDs || t.JWTClaim != "" || t.Header != "" }

// Fair reports whether fair queueing across tenants is on.
func (t TenantsConfig) Fair() bool { return t.On() && t.Fairness != FairnessOff }

// UnderShareFirst reports whether fair queueing also serves the tenants under their share first.
func (t TenantsConfig) UnderShareFirst() bool { return t.Fair() && t.Fairness != FairnessRoundRobin }

// The values of --tenant-fairness.
const (
	FairnessShare      = "share"
	FairnessRoundRobin = "round-robin"
	FairnessOff        = "off"
	fairnessOn         = "on" // FairnessShare's alias
)

func (s *flagSet) registerTenants() {
	c := s.cfg
	s.section("Tenants (fair shares inside admission)")
	s.bool(&c.Tenants.APIKeyIDs, "tenant-api-key-ids", "The id of the API key a caller authenticated with (--api-keys-file's ID column) names its tenant; the most trusted source.")
	s.str(&c.Tenants.JWTClaim, "tenant-jwt-claim", "NAME", "", "JWT claim (dots descend into objects) naming the caller's tenant; needs --jwt-issuer. Trusted after API key ids.")
	s.str(&c.Tenants.Header, "tenant-header", "HEADER", "", "Request header naming the tenant of callers no credential names; the least trusted source. Callers named by no source share the tenant \"default\".")
	s.str(&c.Tenants.Fairness, "tenant-fairness", "share|round-robin|off", FairnessShare, "With a tenant source and prefill admission on, how admission orders tenants within a priority band, FIFO within a tenant: share (default; on is the same) = first the tenants whose grants over the last ~2 s are below their weighted share, most under-served first (max-min fairness: a tenant under its share never waits behind one over it), else weighted deficit round robin; round-robin = the round robin alone (a quiet tenant's requests go one a turn between a flood's); off = one FIFO.")
	s.add(tenantWeightsValue{&c.Tenants.Weights}, "tenant-weights", "T=W,...", "Tenants' weights in fair queueing (grants per round, 1-1000); tenants not named weigh 1.")
	s.int(&c.Tenants.Burst, "tenant-burst", "N", 1, "In fair queueing, the requests a tenant back from idle is granted back to back in its first turn (at least its weight), repaid from its later turns: over any interval a tenant gets at most its share plus N; 1 (default) = one turn of its weight, 0-1000 (0 is 1).")
	s.add(tenantMaxQueuedValue{&c.Tenants.MaxQueued}, "tenant-max-queued", "N|off", "Requests one tenant may have waiting for admission; beyond it 429 tenant_queue_full while other tenants still queue; 0 or off = no bound. Default with a tenant source and admission on: half of --prefill-queue-size (at least 1), so that one tenant's flood leaves the other half of the shared queue to the other tenants instead of filling it (then they would get 429 pd_prefill_queue_full however fair the order); without a tenant source, no bound.")
	s.int64(&c.Tenants.TokensPerMinute, "tenant-tokens-per-minute", "N", 0, "Every tenant's token budget per minute (prompt tokens reserved on arrival, settled on the reported usage); beyond it 429 rate_limit_exceeded with Retry-After and x-ratelimit-* headers; 0 = none.")
	s.int64(&c.Tenants.RequestsPerMinute, "tenant-requests-per-minute", "N", 0, "Every tenant's request budget per minute; 0 = none.")
	s.add(tenantBudgetsValue{&c.Tenants.Budgets}, "tenant-budgets", "T=TOKENS:REQUESTS,...", "Per-tenant budgets per minute, overriding the two above for the tenants named (0 = no limit of that kind).")
	s.int(&c.Tenants.MetricsMaxTenants, "tenant-metrics-max-tenants", "N", 20, "Tenants named in metric labels besides those --tenant-weights and --tenant-budgets name (first seen first); the rest are reported as \"other\".")

	s.section("Session affinity (agents)")
	s.str(&c.Tenants.SessionHeader, "session-header", "HEADER", "", "Request header naming a conversation's session, read as a routing key after --routing-key-headers; cache_aware and kv_aware then keep a request with a routing key on the worker its key used last while that worker is healthy, below its limits and not overloaded by the balance thresholds (keys idle --max-idle-secs are forgotten); empty = off.")
}

// Admission is the tenancy admission orders waiters by (its rules and their validation are
// admission's); app uses it only when a tenant source is on.
func (t TenantsConfig) Admission() admission.TenantSettings {
	return admission.TenantSettings{Fair: t.Fair(), Weights: maps.Clone(t.Weights), MaxQueued: t.MaxQueued, Burst: t.Burst,
		UnderShareFirst: t.UnderShareFirst()}
}

// tenantFlags name admission.TenantSettings' fields as the flags that set them.
var tenantFlags = map[string]string{
	"Tenants.MaxQueued": "tenant-max-queued", "Tenants.Burst": "tenant-burst", "Tenants.Weights": "tenant-weights",
}

func (c *Config) validateTenants(p *problems) {
	t := c.Tenants
	switch t.Fairness {
	case FairnessShare, FairnessRoundRobin, FairnessOff, fairnessOn:
	default:
		p.add("--tenant-fairness must be share, round-robin or off, got %q", t.Fairness)
	}
	if t.JWTClaim != "" && !c.Auth.JWTEnabled() {
		p.add("--tenant-jwt-claim needs --jwt-issuer")
	}
	if t.APIKeyIDs && c.Auth.APIKeysFile == "" && c.Server.APIKey == "" {
		p.add("--tenant-api-key-ids needs --api-keys-file (or --api-key)")
	}
	if t.Header != "" && !validHeaderName(t.Header) {
		p.add("--tenant-header %q is not a header name", t.Header)
	}
	p.settings(admission.Settings{Tenants: t.Admission()}.Validate(), tenantFlags)
	if t.MetricsMaxTenants < 0 {
		p.add("--tenant-metrics-max-tenants must be at least 0, got %d", t.MetricsMaxTenants)
	}
	if !t.On() && (len(t.Weights) > 0 || (t.MaxQueued > 0 && !t.MaxQueuedDefaulted) || t.BudgetsOn()) {
		p.add("--tenant-weights, --tenant-max-queued and tenant budgets need a tenant source (--tenant-api-key-ids, --tenant-jwt-claim or --tenant-header)")
	}
	if t.SessionHeader != "" && !validHeaderName(t.SessionHeader) {
		p.add("--session-header %q is not a header name", t.SessionHeader)
	}
	if t.SessionHeader != "" && !c.usesPolicy(PolicyCacheAware) && !c.usesPolicy(PolicyKVAware) &&
		!c.usesPolicy(PolicyConsistentHashing) && !c.usesPolicy(PolicyManual) {
		p.add("--session-header needs a policy that reads routing keys (cache_aware, kv_aware, consistent_hashing or manual)")
	}
	if t.TokensPerMinute < 0 || t.RequestsPerMinute < 0 {
		p.add("--tenant-tokens-per-minute and --tenant-requests-per-minute must be at least 0")
	}
	if t.On() && (len(t.Weights) > 0 || t.MaxQueued > 0) && !c.Admission.Enabled() {
		p.add("--tenant-weights and --tenant-max-queued act inside prefill admission, which is off; set --prefill-max-inflight-requests-per-worker")
	}
}

// defaultTenantMaxQueued derives --tenant-max-queued when it was not given: half of
// --prefill-queue-size (at least 1) with a tenant source and admission on. Half, not less, so a
// tenant's burst still queues; not more, so a flood leaves room for everyone else (two floods
// together can still fill the queue, but each of them alone cannot).
func (c *Config) defaultTenantMaxQueued() {
	if c.explicit["tenant-max-queued"] || !c.Tenants.On() || !c.Admission.Enabled() || c.Admission.QueueSize <= 0 {
		return
	}
	c.Tenants.MaxQueued = max(1, c.Admission.QueueSize/2)
	c.Tenants.MaxQueuedDefaulted = true
}

// tenantMaxQueuedValue is --tenant-max-queued: a number of requests, or "off" (= 0, no bound).
type tenantMaxQueuedValue struct{ p *int }

func (v tenantMaxQueuedValue) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.Itoa(*v.p)
}

func (v tenantMaxQueuedValue) Get() any { return *v.p }

func (v tenantMaxQueuedValue) Set(s string) error {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "off") || strings.EqualFold(s, "none") {
		*v.p = 0
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New(`want a number of requests or "off"`)
	}
	*v.p = n
	return nil
}

// tenantWeightsValue is a T=W,... flag; values accumulate over repeats.
type tenantWeightsValue struct{ p *map[string]int }

func (v tenantWeightsValue) String() string {
	if v.p == nil || len(*v.p) == 0 {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(*v.p)) {
		parts = append(parts, k+"="+strconv.Itoa((*v.p)[k]))
	}
	return strings.Join(parts, ",")
}

func (v tenantWeightsValue) Set(s string) error {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	for _, part := range strings.Split(s, ",") {
		name, w, ok := strings.Cut(strings.TrimSpace(part), "=")
		name = strings.TrimSpace(name)
		n, err := strconv.Atoi(strings.TrimSpace(w))
		switch {
		case !ok || name == "":
			return fmt.Errorf("want TENANT=WEIGHT, got %q", part)
		case err != nil: // the range is admission's rule (TenantSettings.Weights), checked with the rest
			return fmt.Errorf("tenant %q: weight must be an integer, got %q", name, w)
		}
		if *v.p == nil {
			*v.p = map[string]int{}
		}
		if _, dup := (*v.p)[name]; dup {
			return fmt.Errorf("tenant %q is given twice", name)
		}
		(*v.p)[name] = n
	}
	return nil
}

// tenantBudgetsValue is a T=TOKENS:REQUESTS,... flag; values accumulate over repeats.
type tenantBudgetsValue struct{ p *map[string]TenantBudget }

func (v tenantBudgetsValue) String() string {
	if v.p == nil || len(*v.p) == 0 {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(*v.p)) {
		b := (*v.p)[k]
		parts = append(parts, fmt.Sprintf("%s=%d:%d", k, b.TokensPerMinute, b.RequestsPerMinute))
	}
	return strings.Join(parts, ",")
}

func (v tenantBudgetsValue) Set(s string) error {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	for _, part := range strings.Split(s, ",") {
		name, spec, ok := strings.Cut(strings.TrimSpace(part), "=")
		name = strings.TrimSpace(name)
		tok, req, ok2 := strings.Cut(strings.TrimSpace(spec), ":")
		t, err1 := strconv.ParseInt(strings.TrimSpace(tok), 10, 64)
		r, err2 := strconv.ParseInt(strings.TrimSpace(req), 10, 64)
		switch {
		case !ok || !ok2 || name == "":
			return fmt.Errorf("want TENANT=TOKENS:REQUESTS, got %q", part)
		case err1 != nil || err2 != nil || t < 0 || r < 0:
			return fmt.Errorf("tenant %q: want non-negative integers TOKENS:REQUESTS per minute, got %q", name, spec)
		}
		if *v.p == nil {
			*v.p = map[string]TenantBudget{}
		}
		if _, dup := (*v.p)[name]; dup {
			return fmt.Errorf("tenant %q is given twice", name)
		}
		(*v.p)[name] = TenantBudget{TokensPerMinute: t, RequestsPerMinute: r}
	}
	return nil
}
