package config

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
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
	// Fairness is "on" (default) or "off" (--tenant-fairness): fair queueing across tenants within a
	// band, whenever a source is set.
	Fairness string
	// Weights are tenants' shares in fair queueing, 1 for a tenant not named (--tenant-weights T=W,...).
	Weights map[string]int
	// MaxQueued bounds one tenant's waiting requests (--tenant-max-queued; 0 = none).
	MaxQueued int
	// MetricsMaxTenants bounds the tenants named in metric labels, the rest being "other"
	// (--tenant-metrics-max-tenants, default 20; the weighted tenants are always named).
	MetricsMaxTenants int
}

// On reports whether some tenant source is configured.
func (t TenantsConfig) On() bool { return t.APIKeyIDs || t.JWTClaim != "" || t.Header != "" }

// Fair reports whether fair queueing across tenants is on.
func (t TenantsConfig) Fair() bool { return t.On() && t.Fairness != "off" }

func (s *flagSet) registerTenants() {
	c := s.cfg
	s.section("Tenants (fair shares inside admission)")
	s.bool(&c.Tenants.APIKeyIDs, "tenant-api-key-ids", "The id of the API key a caller authenticated with (--api-keys-file's ID column) names its tenant; the most trusted source.")
	s.str(&c.Tenants.JWTClaim, "tenant-jwt-claim", "NAME", "", "JWT claim (dots descend into objects) naming the caller's tenant; needs --jwt-issuer. Trusted after API key ids.")
	s.str(&c.Tenants.Header, "tenant-header", "HEADER", "", "Request header naming the tenant of callers no credential names; the least trusted source. Callers named by no source share the tenant \"default\".")
	s.str(&c.Tenants.Fairness, "tenant-fairness", "on|off", "on", "With a tenant source: within a priority band, admission serves tenants by weighted deficit round robin, FIFO within a tenant; off = one FIFO.")
	s.add(tenantWeightsValue{&c.Tenants.Weights}, "tenant-weights", "T=W,...", "Tenants' weights in fair queueing (grants per round, 1-1000); tenants not named weigh 1.")
	s.int(&c.Tenants.MaxQueued, "tenant-max-queued", "N", 0, "Requests one tenant may have waiting for admission; beyond it 429 tenant_queue_full while other tenants still queue; 0 = no bound.")
	s.int(&c.Tenants.MetricsMaxTenants, "tenant-metrics-max-tenants", "N", 20, "Tenants named in metric labels (the weighted ones, then the first seen); the rest are reported as \"other\".")
}

func (c *Config) validateTenants() []error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, a...)...))
	}
	t := c.Tenants
	if t.Fairness != "on" && t.Fairness != "off" {
		bad("--tenant-fairness must be on or off, got %q", t.Fairness)
	}
	if t.JWTClaim != "" && !c.Auth.JWTEnabled() {
		bad("--tenant-jwt-claim needs --jwt-issuer")
	}
	if t.APIKeyIDs && c.Auth.APIKeysFile == "" && c.Server.APIKey == "" {
		bad("--tenant-api-key-ids needs --api-keys-file (or --api-key)")
	}
	if t.Header != "" && !validHeaderName(t.Header) {
		bad("--tenant-header %q is not a header name", t.Header)
	}
	if t.MaxQueued < 0 {
		bad("--tenant-max-queued must be at least 0, got %d", t.MaxQueued)
	}
	if t.MetricsMaxTenants < 0 {
		bad("--tenant-metrics-max-tenants must be at least 0, got %d", t.MetricsMaxTenants)
	}
	if !t.On() && (len(t.Weights) > 0 || t.MaxQueued > 0) {
		bad("--tenant-weights and --tenant-max-queued need a tenant source (--tenant-api-key-ids, --tenant-jwt-claim or --tenant-header)")
	}
	if t.On() && (t.Fair() || t.MaxQueued > 0) && !c.Admission.Enabled() {
		bad("tenant fairness and --tenant-max-queued act inside prefill admission, which is off; set --prefill-max-inflight-requests-per-worker (or --tenant-fairness off)")
	}
	return errs
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
		case err != nil || n < 1 || n > 1000:
			return fmt.Errorf("tenant %q: weight must be an integer 1-1000, got %q", name, w)
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
