package kube

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// nodeName is the node every pod is bound to. A bound pod is deleted gracefully (deletionTimestamp first,
// then the kubelet's final delete), as on a real node; an unbound one would vanish at once.
const nodeName = "sim-node"

// kubelet writes, with the admin token, what a kubelet and the controllers would: pods bound to the node,
// their status (phase, readiness, pod IP), their final deletion, and the EndpointSlices of a Service.
type kubelet struct {
	t  *testing.T
	c  kubernetes.Interface
	ns string
}

// run creates the pod on the node and reports it Running with the given IP and readiness.
func (k *kubelet) run(pod *corev1.Pod, ip string, ready bool) {
	k.t.Helper()
	pod = pod.DeepCopy()
	pod.Namespace = k.ns
	pod.Spec.NodeName = nodeName
	if len(pod.Spec.Containers) == 0 {
		pod.Spec.Containers = []corev1.Container{{Name: "engine", Image: "sluice-sim"}}
	}
	if _, err := k.c.CoreV1().Pods(k.ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		k.t.Fatalf("create pod %s: %v", pod.Name, err)
	}
	k.setStatus(pod.Name, ip, ready)
}

func (k *kubelet) setStatus(name, ip string, ready bool) {
	k.t.Helper()
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := k.c.CoreV1().Pods(k.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		p.Status.HostIP, p.Status.HostIPs = "127.0.0.1", []corev1.HostIP{{IP: "127.0.0.1"}}
		if p.Status.StartTime == nil {
			p.Status.StartTime = &now
		}
		p.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: cond, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: cond, LastTransitionTime: now},
		}
		_, err = k.c.CoreV1().Pods(k.ns).UpdateStatus(context.Background(), p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		k.t.Fatalf("pod %s status: %v", name, err)
	}
}

// setReady flips the pod's readiness as the kubelet's readiness probe would.
func (k *kubelet) setReady(name string, ready bool) {
	k.t.Helper()
	p, err := k.c.CoreV1().Pods(k.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		k.t.Fatal(err)
	}
	k.setStatus(name, p.Status.PodIP, ready)
}

// terminate deletes the pod as a user would: a bound pod gets its deletionTimestamp and stays until
// finish removes it (the kubelet's confirmation once the containers stopped).
func (k *kubelet) terminate(name string) {
	k.t.Helper()
	if err := k.c.CoreV1().Pods(k.ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		k.t.Fatalf("delete pod %s: %v", name, err)
	}
}

func (k *kubelet) finish(name string) {
	k.t.Helper()
	zero := int64(0)
	err := k.c.CoreV1().Pods(k.ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if err != nil && !apierrors.IsNotFound(err) {
		k.t.Fatalf("final delete of pod %s: %v", name, err)
	}
}

// endpoint is one pod behind a Service, as the EndpointSlice controller lists it.
type endpoint struct {
	pod, ip string
	ready   bool
}

// syncEndpointSlice writes the Service's one EndpointSlice, as the EndpointSlice controller would (but
// for the address type: see below).
func (k *kubelet) syncEndpointSlice(service string, ports []discoveryv1.EndpointPort, eps []endpoint) {
	k.t.Helper()
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: service + "-sim", Namespace: k.ns,
			Labels: map[string]string{discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"},
		},
		// The API server refuses loopback addresses in IPv4 and IPv6 slices (ValidateEndpointIP in
		// k8s.io/kubernetes pkg/apis/core/validation), and only loopback is ours here; the gateway reads an
		// endpoint's address whatever the slice's type, so an FQDN slice carries the dotted address.
		AddressType: discoveryv1.AddressTypeFQDN,
		Ports:       ports,
	}
	for _, e := range eps {
		ready := e.ready
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{e.ip},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: k.ns, Name: e.pod},
			NodeName:   ptr(nodeName),
		})
	}
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := k.c.DiscoveryV1().EndpointSlices(k.ns).Get(ctx, es.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = k.c.DiscoveryV1().EndpointSlices(k.ns).Create(ctx, es, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		es.ResourceVersion = cur.ResourceVersion
		_, err = k.c.DiscoveryV1().EndpointSlices(k.ns).Update(ctx, es, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		k.t.Fatalf("endpointslice of %s: %v", service, err)
	}
}

func ptr[T any](v T) *T { return &v }
