package config

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Cluster admission modes (--admission-coordination).
const (
	CoordinationOff        = "off"
	CoordinationStatic     = "static"
	CoordinationKubernetes = "kubernetes"
)

// ClusterConfig makes the prefill admission limit the fleet's: gateway replicas share it through leased,
// demand-weighted shares (internal/cluster).
type ClusterConfig struct {
	// Mode is CoordinationOff, CoordinationStatic or CoordinationKubernetes (--admission-coordination,
	// default: static when --admission-peers is given, else off).
	Mode string
	// Peers are the base URLs of every replica's admin listener, this one included (--admission-peers,
	// repeatable or comma-separated; static mode).
	Peers []string
	// ExchangePeriod is how often a replica reports to the coordinator and pings its peers
	// (--admission-exchange-period-secs, default 0.25).
	ExchangePeriod time.Duration
	// Lease is how long a granted share holds without a new exchange (--admission-lease-secs, default 2;
	// at least twice the exchange period). In Kubernetes mode it is also the Lease's duration, rounded up
	// to whole seconds.
	Lease time.Duration
	// Service is the headless Service whose endpoints are the replicas (--admission-service; Kubernetes
	// mode).
	Service string
	// Namespace of the Service and the Lease (--admission-namespace, default "" = the pod's own, from
	// $POD_NAMESPACE or the service account).
	Namespace string
	// LeaseName is the coordination.k8s.io Lease the coordinator holds (--admission-lease-name, default
	// "sluice-admission").
	LeaseName string
}

// Enabled reports whether cluster admission is on.
func (c ClusterConfig) Enabled() bool { return c.Mode != CoordinationOff && c.Mode != "" }

// mode is the mode in force: the one given, else static when peers are given, else off. finish
// stores it; Validate reads it too, for configurations built by hand.
func (c ClusterConfig) mode() string {
	switch {
	case c.Mode != "":
		return c.Mode
	case len(c.Peers) > 0:
		return CoordinationStatic
	}
	return CoordinationOff
}

// validateCluster checks the cluster admission settings against each other, admission and the mode.
func (c *Config) validateCluster(p *problems) {
	cc := c.Cluster
	mode := cc.mode()
	switch mode {
	case CoordinationOff, CoordinationStatic, CoordinationKubernetes:
	default:
		p.add("--admission-coordination must be off, static or kubernetes, got %q", cc.Mode)
		return
	}
	if mode == CoordinationOff {
		for _, name := range []string{"admission-peers", "admission-exchange-period-secs", "admission-lease-secs", "admission-service", "admission-namespace", "admission-lease-name"} {
			if c.explicit[name] {
				p.add("--%s needs cluster admission (--admission-coordination static or kubernetes)", name)
			}
		}
		return
	}
	if !c.Admission.PrefillBounded() {
		p.add("--admission-coordination %s needs prefill admission: a positive --prefill-max-inflight-requests-per-worker (the fleet's limit per worker)", mode)
	}
	if cc.ExchangePeriod <= 0 {
		p.add("--admission-exchange-period-secs must be positive, got %v", cc.ExchangePeriod)
	} else if cc.Lease < 2*cc.ExchangePeriod {
		p.add("--admission-lease-secs (%v) must be at least twice --admission-exchange-period-secs (%v): a share must survive a lost exchange", cc.Lease, cc.ExchangePeriod)
	}
	switch mode {
	case CoordinationStatic:
		if len(cc.Peers) == 0 {
			p.add("--admission-coordination static needs --admission-peers: the base URL of every replica's admin listener, this one included")
		}
		seen := map[string]bool{}
		for _, peer := range cc.Peers {
			if err := checkPeerURL(peer); err != nil {
				p.add("--admission-peers %q: %v", peer, err)
				continue
			}
			key := strings.ToLower(strings.TrimRight(peer, "/"))
			if seen[key] {
				p.add("--admission-peers %q: given twice", peer)
			}
			seen[key] = true
		}
		for _, name := range []string{"admission-service", "admission-namespace", "admission-lease-name"} {
			if c.explicit[name] {
				p.add("--%s is for --admission-coordination kubernetes", name)
			}
		}
	case CoordinationKubernetes:
		if len(cc.Peers) > 0 {
			p.add("--admission-peers is for static mode; in kubernetes mode the members are the endpoints of --admission-service")
		}
		if cc.Service == "" {
			p.add("--admission-coordination kubernetes needs --admission-service: the gateway's headless Service")
		} else if msgs := validation.IsDNS1035Label(cc.Service); len(msgs) > 0 {
			p.add("--admission-service %q: %s", cc.Service, strings.Join(msgs, "; "))
		}
		if ns := cc.Namespace; ns != "" {
			if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
				p.add("--admission-namespace %q: %s", ns, strings.Join(msgs, "; "))
			}
		}
		if msgs := validation.IsDNS1123Subdomain(cc.LeaseName); len(msgs) > 0 {
			p.add("--admission-lease-name %q: %s", cc.LeaseName, strings.Join(msgs, "; "))
		}
	}
}

// checkPeerURL accepts http(s)://host:port, nothing more.
func checkPeerURL(s string) error {
	u, err := url.Parse(strings.TrimRight(s, "/"))
	if err != nil || !slices.Contains([]string{"http", "https"}, strings.ToLower(u.Scheme)) || u.Hostname() == "" {
		return fmt.Errorf("want a base URL like http://10.0.0.1:30000")
	}
	if u.Port() == "" {
		return fmt.Errorf("needs the port of the replica's admin listener")
	}
	if n, err := strconv.Atoi(u.Port()); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q out of range", u.Port())
	}
	if u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("want scheme://host:port only")
	}
	return nil
}
