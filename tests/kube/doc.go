// Package kube tests the gateway's Kubernetes side against a real control plane: kube-apiserver and etcd
// built from the Go module proxy (tools/kube), started on loopback with service-account signing, token
// authentication and RBAC. The Helm chart's objects are applied to it as a user would install them, and
// the gateway runs as a process holding the chart's ServiceAccount token, so it has the chart's
// permissions and no more.
//
// There is no kubelet and no controller manager: the tests write what those would (pods' status with
// phase, readiness and a 127.0.0.x pod IP where a simulated engine listens, deletion, the headless
// Service's EndpointSlices), through the API, with the admin token.
//
// The binaries are built once into a cache directory keyed by the tools module (about a build of
// kube-apiserver's size: see .ci/run) and reused. SLUICE_KUBE_SKIP=1 skips the suite, saying so; nothing
// else does.
package kube
