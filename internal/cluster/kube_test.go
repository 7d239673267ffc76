package cluster

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const (
	kubeNS  = "inference"
	kubeSvc = "sluice-headless"
)

func endpointSlice(ips ...string) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: kubeSvc + "-abc", Namespace: kubeNS,
			Labels: map[string]string{discoveryv1.LabelServiceName: kubeSvc}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for _, ip := range ips {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}})
	}
	return es
}

// A Lease counts whole seconds.
const kubeLease, kubePeriod = time.Second, 100 * time.Millisecond

func kubeFleet(t *testing.T, client *fake.Clientset) *fleet {
	f := newFleet(t, 3, Config{Mode: ModeKubernetes, Period: kubePeriod, Lease: kubeLease, Namespace: kubeNS, Service: kubeSvc, Port: 9000})
	f.kube = client
	return f
}

func leaseHolder(t *testing.T, client *fake.Clientset) string {
	l, err := client.CoordinationV1().Leases(kubeNS).Get(context.Background(), DefaultLeaseName, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// TestKubernetesFleet: members come from the headless Service's EndpointSlice, the coordinator is the
// Lease holder (client-go leader election against the fake clientset), shares follow demand within the
// limit; a crashed coordinator (its Lease left to expire) is replaced within two leases with the bound
// intact, and a replica whose endpoint goes away returns its share within a lease.
func TestKubernetesFleet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := fake.NewClientset(endpointSlice("10.0.0.1", "10.0.0.2", "10.0.0.3"))
		// crashing makes Lease writes fail, so a stopped replica cannot release its Lease: a crash.
		var crashing atomic.Bool
		client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
			if crashing.Load() {
				return true, nil, errors.New("connection reset")
			}
			return false, nil, nil
		})
		f := kubeFleet(t, client)
		defer f.stopAll()
		for i := range 3 {
			f.start(i, 9, w1).local.setWaiting(w1, 30)
		}
		f.node(0).local.setWaiting(w1, 100)
		for range 40 {
			step(kubePeriod)
			f.fill(w1)
			checkBound(t, f, w1, 9, "converging")
		}
		coords := f.coordinators()
		if len(coords) != 1 || leaseHolder(t, client) != coords[0] {
			t.Fatalf("coordinators %v, lease holder %q: want one, holding the Lease", coords, leaseHolder(t, client))
		}
		if got := f.held(w1); got != 9 {
			t.Fatalf("fleet holds %d, want the whole limit 9", got)
		}
		st := f.nodes[coords[0]].r.Status()
		if len(st.Members) != 3 || st.RaisesBlocked {
			t.Fatalf("coordinator: members %v, raises blocked %v", st.Members, st.RaisesBlocked)
		}

		// The coordinator crashes: its pod's endpoint stays (not ready) until Kubernetes deletes the pod.
		old := coords[0]
		crashing.Store(true)
		f.kill(slices.Index(f.ids, old))
		crashing.Store(false)
		killed := time.Now()
		var elected time.Duration
		for time.Since(killed) < 4*kubeLease {
			step(kubePeriod)
			f.fill(w1)
			checkBound(t, f, w1, 9, "after the crash")
			if c := f.coordinators(); elected == 0 && len(c) == 1 && leaseHolder(t, client) == c[0] {
				elected = time.Since(killed)
			}
		}
		if elected == 0 || elected > 2*kubeLease {
			t.Fatalf("new coordinator after %v, want within two leases (%v)", elected, 2*kubeLease)
		}
		if got := f.held(w1); got != 9 {
			t.Fatalf("survivors hold %d, want 9 (the crashed one refuses connections: dead)", got)
		}

		// A follower's pod is deleted: its endpoint goes; its share returns.
		var follower int
		for i, id := range f.ids {
			if id != old && !slices.Contains(f.coordinators(), id) {
				follower = i
			}
		}
		var keep []string
		for i, id := range f.ids {
			if i != follower && id != old {
				keep = append(keep, strings.TrimSuffix(strings.TrimPrefix(id, "http://"), ":9000"))
			}
		}
		if _, err := client.DiscoveryV1().EndpointSlices(kubeNS).Update(context.Background(), endpointSlice(keep...), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		f.kill(follower)
		gone := time.Now()
		returned := time.Duration(0)
		for time.Since(gone) < 2*kubeLease {
			step(kubePeriod / 5)
			f.fill(w1)
			checkBound(t, f, w1, 9, "after the deletion")
			if returned == 0 && f.held(w1) == 9 {
				returned = time.Since(gone)
			}
		}
		if returned == 0 || returned > kubeLease+2*kubePeriod {
			t.Fatalf("share returned after %v, want within a lease plus two periods", returned)
		}
	})
}
