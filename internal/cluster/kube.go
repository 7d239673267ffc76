package cluster

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// kubeElection finds the members in the EndpointSlices of the gateway's headless Service and the
// coordinator through a coordination.k8s.io Lease (client-go leader election, identity = replica id).
type kubeElection struct {
	r *Replica

	mu      sync.Mutex
	leading bool   // between OnStartedLeading and OnStoppedLeading of this replica's elector
	leader  string // the holder last observed
}

func (k *kubeElection) coordinator() (string, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.leading {
		return k.r.self, true
	}
	if k.leader == k.r.self { // observed ourselves, but no longer leading
		return "", false
	}
	return k.leader, false
}

// start runs the EndpointSlice informer and the elector until ctx ends; the goroutines join wg.
func (k *kubeElection) start(ctx context.Context, wg *sync.WaitGroup) error {
	r := k.r
	// client-go logs through the context's logger: send it to ours, not to klog's global stderr.
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(r.log.Handler()))
	factory := informers.NewSharedInformerFactoryWithOptions(r.d.Kube, 0,
		informers.WithNamespace(r.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = discoveryv1.LabelServiceName + "=" + r.cfg.Service
		}))
	inf := factory.Discovery().V1().EndpointSlices().Informer()
	resync := func() { k.syncMembers(inf.GetStore()) }
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { resync() },
		UpdateFunc: func(any, any) { resync() },
		DeleteFunc: func(any) { resync() },
	}); err != nil {
		return fmt.Errorf("endpointslice informer: %w", err)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: r.cfg.LeaseName, Namespace: r.cfg.Namespace},
		Client:     r.d.Kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: r.self},
	}
	// A Lease records its duration in whole seconds.
	lease := r.cfg.Lease.Round(time.Second)
	if lease < r.cfg.Lease {
		lease += time.Second
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   lease,
		RenewDeadline:   lease * 2 / 3,
		RetryPeriod:     lease / 4,
		ReleaseOnCancel: true,
		Name:            "sluice-admission",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				// Run cancels lctx before it calls OnStoppedLeading; checking it under the lock keeps a
				// late start from following a stop.
				k.mu.Lock()
				if lctx.Err() == nil {
					k.leading = true
				}
				k.mu.Unlock()
			},
			OnStoppedLeading: func() {
				k.mu.Lock()
				k.leading = false
				k.mu.Unlock()
			},
			OnNewLeader: func(id string) {
				k.mu.Lock()
				k.leader = id
				k.mu.Unlock()
				r.log.Info("admission coordinator elected", "coordinator", id)
			},
		},
	})
	if err != nil {
		return fmt.Errorf("%w: leader election: %w", ErrInvalidConfig, err)
	}
	factory.Start(ctx.Done())
	wg.Go(func() {
		<-ctx.Done()
		factory.Shutdown() // waits for the informer's goroutines
	})
	// Leaving (or stopping) cancels the election, which releases the Lease so another replica takes over
	// at once.
	ectx, cancel := context.WithCancel(ctx)
	wg.Go(func() {
		defer cancel()
		select {
		case <-ctx.Done():
		case <-r.leave:
		}
	})
	wg.Go(func() {
		for ectx.Err() == nil {
			le.Run(ectx) // returns when the lease is lost; stand again
		}
	})
	return nil
}

// syncMembers makes the endpoints of every slice of the Service the members (ready or not: a replica that
// is not ready still holds slots). Each is addressed at the admin port every replica listens on.
func (k *kubeElection) syncMembers(store cache.Store) {
	var ids []string
	for _, obj := range store.List() {
		es, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			continue
		}
		for _, ep := range es.Endpoints {
			if len(ep.Addresses) == 0 {
				continue
			}
			ids = append(ids, ReplicaURL(k.r.cfg.Scheme, ep.Addresses[0], k.r.cfg.Port))
		}
	}
	k.r.peers.setMembers(ids)
}

// ReplicaURL is the replica id of the admin listener at host:port (scheme http or https).
func ReplicaURL(scheme, host string, port int) string {
	return (&url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(port))}).String()
}
