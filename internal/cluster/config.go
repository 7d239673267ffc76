package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
)

// Modes of finding the members and the coordinator.
const (
	// ModeStatic: members are the --admission-peers list; the lowest live one coordinates.
	ModeStatic = "static"
	// ModeKubernetes: members are the endpoints of the gateway's headless Service; the coordinator holds a
	// coordination.k8s.io Lease (client-go leader election).
	ModeKubernetes = "kubernetes"
)

// ProtocolVersion is the version of the coordination protocol this build speaks.
const ProtocolVersion = 1

// Defaults.
const (
	DefaultPeriod    = 250 * time.Millisecond
	DefaultLease     = 2 * time.Second
	DefaultLeaseName = "sluice-admission"
)

// Config says how this replica finds its fleet. Zero durations take the defaults.
type Config struct {
	// Mode is ModeStatic or ModeKubernetes.
	Mode string
	// Peers are the base URLs of every replica's admin listener, this one included (static mode).
	Peers []string
	// Period is how often a replica reports and pings (DefaultPeriod).
	Period time.Duration
	// Lease is how long a grant holds without a new exchange; also how long a member may stay silent
	// before it can be declared dead, and the Kubernetes leader lease (DefaultLease). At least 2 x Period.
	Lease time.Duration
	// Timeout bounds one exchange or ping (default: the smaller of Lease/4 and 2 x Period).
	Timeout time.Duration
	// Namespace, Service and LeaseName locate the headless Service whose endpoints are the members and the
	// Lease whose holder coordinates (Kubernetes mode).
	Namespace, Service, LeaseName string
	// Port is the admin listener's port of every replica, and Scheme its scheme (http, or https when the
	// listeners serve TLS): in Kubernetes mode the members are the endpoint addresses with these.
	Port   int
	Scheme string
}

func (c Config) normalized() (Config, error) {
	if c.Period <= 0 {
		c.Period = DefaultPeriod
	}
	if c.Lease <= 0 {
		c.Lease = DefaultLease
	}
	if c.Timeout <= 0 {
		c.Timeout = min(c.Lease/4, 2*c.Period)
	}
	if c.LeaseName == "" {
		c.LeaseName = DefaultLeaseName
	}
	if c.Scheme == "" {
		c.Scheme = "http"
	}
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, a...)...))
	}
	if c.Lease < 2*c.Period {
		bad("lease %v must be at least twice the exchange period %v", c.Lease, c.Period)
	}
	switch c.Mode {
	case ModeStatic:
		if len(c.Peers) == 0 {
			bad("static mode needs peers")
		}
	case ModeKubernetes:
		if c.Service == "" || c.Namespace == "" {
			bad("kubernetes mode needs the headless service and its namespace")
		}
		if c.Port < 1 || c.Port > 65535 {
			bad("kubernetes mode needs the admin port, got %d", c.Port)
		}
	default:
		bad("mode must be %s or %s, got %q", ModeStatic, ModeKubernetes, c.Mode)
	}
	return c, errors.Join(errs...)
}

// Local is this replica's admission, as coordination sees it.
type Local interface {
	// Usage returns the configured limits per worker and, per prefill worker, the slots held and the demand
	// (slots held plus the waiting requests the worker could serve); with decode seats on, also per decode
	// worker, keyed DecodeKey(its key), the seats held and their demand.
	Usage() (Limits, map[string]Use)
	// SetCaps bounds new grants per worker (other: workers not listed); it must not block.
	SetCaps(caps map[string]int, other int)
}

// Use is one worker's usage on this replica.
type Use struct{ Inflight, Demand int }

// Limits are a replica's configured bounds per worker: Prefill slots per prefill worker
// (--prefill-max-inflight-requests-per-worker) and Decode seats per decode worker
// (--decode-max-inflight-requests-per-worker; 0 when seats are off). Each is the fleet's: the fleet uses
// the smallest positive one of each.
type Limits struct{ Prefill, Decode int }

// decodePrefix marks a worker key as a decode worker's seats (no worker URL starts with it): one
// allocation mechanism serves both sides, each key under its side's limit.
const decodePrefix = "decode:"

// DecodeKey is the key under which a decode worker's seats (its key: URL, or URL@rank) are reported and
// capped.
func DecodeKey(worker string) string { return decodePrefix + worker }

// SplitDecodeKey reports whether key names a decode worker's seats, and which decode worker.
func SplitDecodeKey(key string) (worker string, ok bool) { return strings.CutPrefix(key, decodePrefix) }

// limitOf is the limit of key: decode for a decode worker's seats, else prefill.
func limitOf(key string, prefill, decode int) int {
	if _, ok := SplitDecodeKey(key); ok {
		return decode
	}
	return prefill
}

// Deps are the replica's collaborators. Local is required; Kube is required in Kubernetes mode.
type Deps struct {
	Local Local
	// HTTP carries exchanges and pings to peers (default: a client with keep-alive); tests inject
	// transports that partition replicas.
	HTTP *http.Client
	// Token is sent as a bearer token to peers (the admin API key); empty sends none.
	Token string
	// Kube is the Kubernetes client (EndpointSlices and the Lease).
	Kube kubernetes.Interface
	// Registerer receives the cluster metrics; nil registers none.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// Now is the clock (default time.Now). Timers use package time, which testing/synctest controls.
	Now func() time.Time
	// Budgets, when set, are the tenants' budgets: coordination spreads their live changes over the
	// fleet and sets the fraction of each budget this replica enforces (budgets.go).
	Budgets TenantBudgets
}
