package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/discovery"
	"github.com/sluicegw/sluice/internal/kubeaccess"
	"github.com/sluicegw/sluice/internal/worker"
)

// newPodDiscovery builds Kubernetes service discovery. New workers go through the same detection as
// flag and admin workers (dispatch.Detector, which may refuse one) and are probed by the same health
// checker.
func (a *App) newPodDiscovery(cfg *config.Config, client kubernetes.Interface, dyn dynamic.Interface) error {
	if client == nil {
		rc, err := kubeRESTConfig()
		if err != nil {
			return fmt.Errorf("service discovery: %w", err)
		}
		if client, err = kubernetes.NewForConfig(rc); err != nil {
			return fmt.Errorf("service discovery: %w", err)
		}
		perms := kubeaccess.Verbs("", "pods", cfg.Discovery.Namespace, "list", "watch")
		if cfg.Discovery.InferencePool != "" {
			if dyn, err = dynamic.NewForConfig(rc); err != nil {
				return fmt.Errorf("service discovery: %w", err)
			}
			perms = append(perms, kubeaccess.Verbs(discovery.PoolGroup, discovery.PoolResource, cfg.Discovery.Namespace, "list", "watch")...)
		}
		// Only real credentials are checked: a test's fake clientset answers no access reviews.
		if err := a.checkKubeAccess(client, "service discovery", perms); err != nil {
			return err
		}
	}
	// a.detector (engine detection) and a.checker are built later in New; both are read only when a
	// pod is reconciled, after Start. A refusal (a pod whose engine runs another PD role) is logged and
	// retried by discovery.
	complete := discovery.CompleterFunc(func(ctx context.Context, s worker.Spec) (worker.Spec, error) {
		return a.detector.Complete(ctx, s)
	})
	check := checkerFunc(func(ctx context.Context, id string) (worker.Health, error) { return a.checker.CheckNow(ctx, id) })
	d, err := discovery.New(discovery.FromConfig(cfg.Discovery, cfg.Mode() == config.ModePD).WithPlacement(cfg.Pairing), discovery.Deps{
		Client: client, Dynamic: dyn, Registry: a.Registry, Completer: complete, Checker: check, Logger: a.logger,
	})
	if err != nil {
		return err
	}
	a.pods = d
	a.Prom.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_discovery_workers", Help: "Workers registered from Kubernetes pods.",
		}, func() float64 { return float64(len(d.Served())) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_discovery_pods_refused", Help: "Pods matching a selector that are not served (unknown model, detection refused, ambiguous role, bad annotation, address taken); the reason is logged.",
		}, func() float64 { return float64(d.Refused()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_discovery_synced", Help: "1 once the first list of pods has completed.",
		}, func() float64 {
			if d.Synced() {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_discovery_watch_failures_total", Help: "Pod list/watch errors; each was retried with backoff.",
		}, func() float64 { return float64(d.WatchFailures()) }),
	)
	return nil
}

type checkerFunc func(ctx context.Context, id string) (worker.Health, error)

func (f checkerFunc) CheckNow(ctx context.Context, id string) (worker.Health, error) {
	return f(ctx, id)
}

// kubeClient uses the pod's service account in a cluster, else $KUBECONFIG (for running the gateway
// outside the cluster it discovers).
func kubeClient() (kubernetes.Interface, error) {
	rc, err := kubeRESTConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(rc)
}

// kubeRESTConfig is the connection kubeClient uses, for clients of other kinds (InferencePools are read
// with the dynamic client).
func kubeRESTConfig() (*rest.Config, error) {
	rc, err := rest.InClusterConfig()
	if err != nil {
		path := os.Getenv("KUBECONFIG")
		if path == "" {
			return nil, fmt.Errorf("not in a cluster (%w) and $KUBECONFIG is not set", err)
		}
		if rc, err = clientcmd.BuildConfigFromFlags("", path); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
		}
	}
	rc.UserAgent = "sluice/" + Version
	return rc, nil
}

// checkKubeAccess fails startup when RBAC denies a permission the feature needs, naming it; when the API
// server cannot be asked it only warns, since the informers retry and an unreachable API server is not a
// reason to refuse to serve.
func (a *App) checkKubeAccess(client kubernetes.Interface, usedFor string, perms []kubeaccess.Permission) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	err := kubeaccess.Check(ctx, client, usedFor, perms)
	if errors.Is(err, kubeaccess.ErrUnchecked) {
		a.logger.Warn("kubernetes permissions not checked", "error", err)
		return nil
	}
	return err
}

// newDiscovery builds Kubernetes service discovery when --service-discovery is on.
func (a *App) newDiscovery(cfg *config.Config, client kubernetes.Interface, dyn dynamic.Interface) error {
	if !cfg.Discovery.Enabled {
		return nil
	}
	return a.newPodDiscovery(cfg, client, dyn)
}
