package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/cluster"
	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/kubeaccess"
	"github.com/sluicegw/sluice/internal/server"
	"github.com/sluicegw/sluice/internal/worker"
)

// newCluster builds cluster admission when --admission-coordination is on: this replica's share of the
// fleet's limit becomes a cap on its admission controller.
func (a *App) newCluster(cfg *config.Config, kube kubernetes.Interface, hc *http.Client, clientTLS *tls.Config) error {
	cc := cfg.Cluster
	if !cc.Enabled() {
		return nil
	}
	ccfg := cluster.Config{Period: cc.ExchangePeriod, Lease: cc.Lease, Service: cc.Service, LeaseName: cc.LeaseName}
	switch cc.Mode {
	case config.CoordinationStatic:
		peers, err := cluster.ParsePeers(cc.Peers)
		if err != nil {
			return err
		}
		ccfg.Mode, ccfg.Peers = cluster.ModeStatic, peers
	case config.CoordinationKubernetes:
		ccfg.Mode = cluster.ModeKubernetes
		ccfg.Port = cfg.Server.AdminPort
		if ccfg.Port == 0 {
			ccfg.Port = cfg.Server.Port
		}
		if ccfg.Port == 0 {
			return fmt.Errorf("%w: kubernetes mode needs a fixed admin port (--admin-port or --port), not 0", cluster.ErrInvalidConfig)
		}
		ccfg.Namespace = cc.Namespace
		if ccfg.Namespace == "" {
			ccfg.Namespace = podNamespace()
		}
		if ccfg.Namespace == "" {
			return fmt.Errorf("%w: --admission-namespace not set and the pod's namespace is unknown ($POD_NAMESPACE, service account)", cluster.ErrInvalidConfig)
		}
		if kube == nil {
			var err error
			if kube, err = kubeClient(); err != nil {
				return fmt.Errorf("cluster admission: %w", err)
			}
			perms := append(kubeaccess.Verbs("coordination.k8s.io", "leases", ccfg.Namespace, "get", "create", "update"),
				kubeaccess.Verbs("discovery.k8s.io", "endpointslices", ccfg.Namespace, "list", "watch")...)
			if err := a.checkKubeAccess(kube, "cluster admission", perms); err != nil {
				return err
			}
		}
	}
	// Peers authenticate with the static admin credential, the same on every replica: --admin-api-key, or
	// --api-key when it is the only credential (then it guards the admin API). An admin API guarded only
	// by API-key files or JWTs would refuse them.
	token := cfg.Server.AdminAPIKey.Value()
	if token == "" && cfg.Auth.APIKeysFile == "" && cfg.Auth.JWTIssuer == "" {
		token = cfg.Server.APIKey.Value()
	}
	switch {
	case token == "" && a.auth.AdminProtected():
		return fmt.Errorf("%w: cluster admission needs --admin-api-key (the same on every replica): the replicas authenticate to each other's admin listener with it", cluster.ErrInvalidConfig)
	case token == "":
		a.logger.Warn("cluster admission: the coordination service on the admin listener is unauthenticated; set --admin-api-key (the same on every replica)")
	}
	if hc == nil {
		// Peers behind TLS are verified like the workers (--ca-cert-paths), with the same client certificate.
		// The config is cloned: a transport enabling HTTP/2 writes to its own.
		var tc *tls.Config
		if clientTLS != nil {
			tc = clientTLS.Clone()
		}
		hc = &http.Client{Transport: &http.Transport{TLSClientConfig: tc, MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second}}
	}
	if a.serverTLS != nil {
		ccfg.Scheme = "https"
	}
	deps := cluster.Deps{
		Local: clusterLocal{adm: a.Admission, reg: a.Registry}, Token: token, HTTP: hc,
		Kube: kube, Registerer: a.Prom, Logger: a.logger,
	}
	if a.budgets != nil {
		deps.Budgets = a.budgets
	}
	r, err := cluster.New(ccfg, deps)
	if err != nil {
		return err
	}
	a.cluster = r
	return nil
}

// clusterSelf is this replica's id: in static mode the peer that names its admin listener, in Kubernetes
// mode its pod address ($POD_IP, else --host when it is a specific address, else the hostname's) with the
// admin port.
func (a *App) clusterSelf(ctx context.Context) (string, error) {
	_, portStr, err := net.SplitHostPort(a.AdminAddr())
	if err != nil {
		return "", err
	}
	port, _ := strconv.Atoi(portStr)
	if a.cfg.Cluster.Mode == config.CoordinationStatic {
		peers, err := cluster.ParsePeers(a.cfg.Cluster.Peers)
		if err != nil {
			return "", err
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return cluster.FindSelf(rctx, peers, a.cfg.Server.Host, port, cluster.LocalAddrs(), net.DefaultResolver)
	}
	ip := os.Getenv("POD_IP")
	if h, err := netip.ParseAddr(a.cfg.Server.Host); ip == "" && err == nil && !h.IsUnspecified() {
		ip = h.String()
	}
	if ip == "" {
		host, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("cluster admission: $POD_IP not set and no hostname: %w", err)
		}
		addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil || len(addrs) == 0 {
			return "", fmt.Errorf("cluster admission: $POD_IP not set and hostname %q does not resolve (set POD_IP from status.podIP)", host)
		}
		ip = addrs[0].Unmap().String()
	}
	if _, err := netip.ParseAddr(ip); err != nil {
		return "", fmt.Errorf("cluster admission: $POD_IP %q is not an IP address", ip)
	}
	scheme := "http"
	if a.serverTLS != nil {
		scheme = "https"
	}
	return cluster.ReplicaURL(scheme, ip, port), nil
}

// startCluster finds this replica's id and runs cluster admission until the background context ends.
func (a *App) startCluster(ctx, bg context.Context) error {
	if a.cluster == nil {
		return nil
	}
	self, err := a.clusterSelf(ctx)
	if err != nil {
		return err
	}
	a.wg.Go(func() {
		if err := a.cluster.Run(bg, self); err != nil && !errors.Is(err, context.Canceled) {
			a.logger.Error("cluster admission stopped", "err", err)
		}
	})
	return nil
}

// podNamespace is the pod's namespace: $POD_NAMESPACE, else the service account's.
func podNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// clusterLocal is this replica's admission as cluster admission sees it. A waiting request is not tied to
// a worker: the requests waiting for a model count as demand spread evenly over the prefill workers that
// serve it (rounded up, so a worker that could take one sees it). With decode seats on, the decode seats
// are one more set of keys (cluster.DecodeKey), under the decode seat limit, with their demand spread the
// same way over the decode seat keys that serve the model.
type clusterLocal struct {
	adm *admission.Controller
	reg *worker.Registry
}

func (l clusterLocal) Usage() (cluster.Limits, map[string]cluster.Use) {
	u := l.adm.Usage()
	limits := cluster.Limits{Prefill: u.Limit, Decode: u.SeatLimit}
	prefill := l.reg.Snapshot().ByRole(worker.RolePrefill)
	out := make(map[string]cluster.Use, len(prefill))
	for _, w := range prefill {
		out[w.URL()] = cluster.Use{Inflight: u.Inflight[w.URL()], Demand: u.Inflight[w.URL()]}
	}
	for model, n := range u.Queued {
		var serving []string
		for _, w := range prefill {
			if model == "" || w.ServesModel(model) {
				serving = append(serving, w.URL())
			}
		}
		for _, url := range serving {
			use := out[url]
			use.Demand += (n + len(serving) - 1) / len(serving)
			out[url] = use
		}
	}
	for url, n := range u.Inflight { // slots on a worker removed meanwhile
		if _, ok := out[url]; !ok {
			out[url] = cluster.Use{Inflight: n, Demand: n}
		}
	}
	if limits.Decode > 0 {
		l.decodeUsage(u, out)
	}
	return limits, out
}

// decodeUsage adds the decode seat keys to out. A decode engine's seats are keyed by the engine (ranks
// not placed) or by each rank view (URL@rank), so every one of its keys is reported: a key not reported
// would be capped at the default share, 0. Demand spread over all of them over-counts an engine's demand,
// which only weights the shares, never the bound.
func (l clusterLocal) decodeUsage(u admission.Usage, out map[string]cluster.Use) {
	decode := l.reg.Snapshot().ByRole(worker.RoleDecode)
	for _, w := range decode {
		for _, k := range seatKeys(w) {
			out[cluster.DecodeKey(k)] = cluster.Use{Inflight: u.Seats[k], Demand: u.Seats[k]}
		}
	}
	for model, n := range u.Queued {
		var serving []string
		for _, w := range decode {
			if model == "" || w.ServesModel(model) {
				serving = append(serving, seatKeys(w)...)
			}
		}
		for _, k := range serving {
			use := out[cluster.DecodeKey(k)]
			use.Demand += (n + len(serving) - 1) / len(serving)
			out[cluster.DecodeKey(k)] = use
		}
	}
	for k, n := range u.Seats { // seats on a worker removed meanwhile
		if _, ok := out[cluster.DecodeKey(k)]; !ok {
			out[cluster.DecodeKey(k)] = cluster.Use{Inflight: n, Demand: n}
		}
	}
}

// seatKeys are the keys a decode worker's seats may be held under: the engine's and its rank views'.
func seatKeys(w *worker.Worker) []string {
	keys := []string{w.Key()}
	for _, r := range w.Ranks() {
		keys = append(keys, r.Key())
	}
	return keys
}

// SetCaps splits the shares into prefill slot caps and decode seat caps; other bounds both.
func (l clusterLocal) SetCaps(caps map[string]int, other int) {
	slots := make(map[string]int, len(caps))
	var seats map[string]int
	for k, n := range caps {
		if d, ok := cluster.SplitDecodeKey(k); ok {
			if seats == nil {
				seats = map[string]int{}
			}
			seats[d] = n
		} else {
			slots[k] = n
		}
	}
	l.adm.SetWorkerCaps(slots, other)
	l.adm.SetSeatCaps(seats, other)
}

// clusterService is the coordination service for the admin listener (none when coordination is off). It
// gets no RPC tracing: exchanges run every period and would drown the traces.
func (a *App) clusterService() []server.InternalService {
	if a.cluster == nil {
		return nil
	}
	path, h := a.cluster.Handler()
	return []server.InternalService{{Name: cluster.ServiceName, Path: path, Handler: h}}
}

// clusterStatus feeds GET /admin/v1/admission (nil when coordination is off).
func (a *App) clusterStatus() func() *cluster.Status {
	if a.cluster == nil {
		return nil
	}
	return func() *cluster.Status {
		st := a.cluster.Status()
		return &st
	}
}

// ClusterStatus is cluster admission's state on this replica (an empty Status when coordination is off).
func (a *App) ClusterStatus() cluster.Status {
	if a.cluster == nil {
		return cluster.Status{LeaseAge: -1}
	}
	return a.cluster.Status()
}
