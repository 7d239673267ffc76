package discovery

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/kvevents/kvspec"
	"github.com/sluicegw/sluice/internal/worker"
)

// BootstrapPortAnnotation carries a prefill pod's KV bootstrap port (SGLang), as in smg.
const BootstrapPortAnnotation = "sglang.ai/bootstrap-port"

// Pod annotations for what an engine cannot be asked: its data-parallel size (SGLang reports dp_size in
// its server info; an annotation is for engines that do not) and a vLLM decode's KV connector (a
// prefill's Mooncake bootstrap server is detected; a decode has none), and a decode engine's running
// window per rank (vLLM's --max-num-seqs: vLLM does not report it; SGLang's max_running_requests is
// read from its server info and wins), the bound of decode seats with "auto".
const (
	DPSizeAnnotation       = "sluice.dev/dp-size"
	KVConnectorAnnotation  = "sluice.dev/kv-connector"
	DecodeWindowAnnotation = "sluice.dev/decode-window"
	// KVEventsAnnotation is the engine's KV-cache events endpoint (kv_aware routes by them), as
	// kvspec.Parse reads it; a host left out or given as "*" (the engine's own bind
	// address, as in its --kv-events-config) is the pod's IP: tcp://*:5557?replay=tcp://*:5558.
	KVEventsAnnotation = "sluice.dev/kv-events"
)

// KVRoleAnnotation declares a vLLM decode pod's KV connector role: kv_both lets local prefill send it
// requests alone (worker.KVRoleBoth; vLLM does not report the role). The registry refuses it on an
// SGLang engine, which cannot prefill on its own.
const KVRoleAnnotation = "sluice.dev/kv-role"

// defaultGrace bounds the drain of a pod whose termination grace period is unknown (the Kubernetes
// default grace period).
const defaultGrace = 30 * time.Second

// podState is what a pod should be for the gateway.
type podState int

const (
	// stateGone: no worker (absent, terminating, finished, unmatched or refused).
	stateGone podState = iota
	// stateUnready: keep a served worker registered but NotReady.
	stateUnready
	// stateServe: a worker at this pod's address.
	stateServe
)

// podView is what one pod means for the gateway, derived from the pod alone.
type podView struct {
	state podState
	// why says what made the pod gone or unready (for logs).
	why string
	// refusal is set when the pod matches but cannot be served as it is (ambiguous role, bad
	// annotation): it is logged as a warning.
	refusal error

	uid             types.UID
	namespace, name string
	role            worker.Role
	url             string
	bootstrapPort   int
	dpSize          int
	decodeWindow    int
	kvConnector     string
	kvEvents        string // the endpoint spec, its hosts resolved to the pod's IP
	kvRole          string
	// place holds the worker's topology and revision read from pod labels, as the reserved worker
	// labels (worker.LabelZone, ...); nil when none is configured or present.
	place map[string]string
	// model comes from the pod's metadata (--model-id-from); empty means ask the engine.
	model string
	grace time.Duration
}

// classifier turns pods into podViews under one configuration.
type classifier struct {
	pd                                        bool
	selector, prefillSelector, decodeSelector map[string]string
	port                                      int
	scheme                                    string // of the workers' URLs: http or grpc
	modelFrom                                 config.ModelIDSource
	// poolMode: the pods are an InferencePool's; pool is its current target, nil while it is absent
	// or unusable (then no pod is served). The pool's selector is ANDed with the selectors above and
	// its port replaces port.
	poolMode bool
	pool     *poolTarget
	// The pod labels of the topology levels and the revision; empty = not read.
	zoneLabel, rackLabel, nodeLabel, revisionLabel string
}

func matches(labels, selector map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// listSelector is the label selector sent to the API server: in PD mode the pairs the role selectors
// share (so one watch covers both roles); the exact selectors are applied in process.
func (c classifier) listSelector() map[string]string {
	sel := c.roleListSelector()
	if sel == nil {
		sel = map[string]string{}
	}
	if c.pool != nil {
		// Pairs that conflict with a role selector's make every pod unmatched, in process as here.
		maps.Copy(sel, c.pool.selector)
	}
	return sel
}

func (c classifier) roleListSelector() map[string]string {
	if !c.pd {
		return maps.Clone(c.selector)
	}
	var sels []map[string]string
	for _, s := range []map[string]string{c.prefillSelector, c.decodeSelector} {
		if len(s) > 0 {
			sels = append(sels, s)
		}
	}
	common := map[string]string{}
	if len(sels) == 0 {
		return common
	}
	for k, v := range sels[0] {
		shared := true
		for _, s := range sels[1:] {
			if s[k] != v {
				shared = false
			}
		}
		if shared {
			common[k] = v
		}
	}
	return common
}

// view classifies pod (nil when the pod is gone from the store).
func (c classifier) view(pod *corev1.Pod) podView {
	if c.poolMode && c.pool == nil {
		return podView{state: stateGone, why: "InferencePool absent or unusable"}
	}
	if pod == nil {
		return podView{state: stateGone, why: "pod deleted"}
	}
	v := podView{uid: pod.UID, namespace: pod.Namespace, name: pod.Name, grace: defaultGrace}
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil && *g >= 0 {
		v.grace = time.Duration(*g) * time.Second
	}
	if g := pod.DeletionGracePeriodSeconds; g != nil && *g >= 0 {
		v.grace = time.Duration(*g) * time.Second
	}

	if c.pool != nil && !matches(pod.Labels, c.pool.selector) {
		return v.gone("labels no longer match the InferencePool's selector")
	}
	switch {
	case !c.pd:
		// With a pool, --selector is optional: the pool's selector alone may pick the pods.
		poolAlone := c.pool != nil && len(c.selector) == 0
		if !poolAlone && !matches(pod.Labels, c.selector) {
			return v.gone("labels no longer match --selector")
		}
		v.role = worker.RoleRegular
	default:
		p, d := matches(pod.Labels, c.prefillSelector), matches(pod.Labels, c.decodeSelector)
		switch {
		case p && d:
			v.refusal = fmt.Errorf("%w: pod matches both --prefill-selector and --decode-selector", ErrAmbiguousRole)
			return v.gone("ambiguous role")
		case p:
			v.role = worker.RolePrefill
		case d:
			v.role = worker.RoleDecode
		default:
			return v.gone("labels no longer match a role selector")
		}
	}

	switch {
	case pod.DeletionTimestamp != nil:
		return v.gone("pod terminating")
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return v.gone("pod " + strings.ToLower(string(pod.Status.Phase)))
	}

	if v.role == worker.RolePrefill {
		if raw, ok := pod.Annotations[BootstrapPortAnnotation]; ok {
			n, err := strconv.Atoi(strings.TrimSpace(raw))
			if err != nil || n < 1 || n > 65535 {
				v.refusal = fmt.Errorf("%w: %s=%q is not a port number", ErrBadAnnotation, BootstrapPortAnnotation, raw)
				return v.gone("bad bootstrap port annotation")
			}
			v.bootstrapPort = n
		}
	}
	if raw, ok := pod.Annotations[DPSizeAnnotation]; ok {
		n, err := strconv.Atoi(strings.TrimSpace(raw))
		if err != nil || n < 1 || n > 1024 {
			v.refusal = fmt.Errorf("%w: %s=%q is not a dp size (1..1024)", ErrBadAnnotation, DPSizeAnnotation, raw)
			return v.gone("bad dp size annotation")
		}
		v.dpSize = n
	}
	if raw, ok := pod.Annotations[DecodeWindowAnnotation]; ok {
		n, err := strconv.Atoi(strings.TrimSpace(raw))
		if err != nil || n < 1 || n > 1<<20 {
			v.refusal = fmt.Errorf("%w: %s=%q is not a decode window (1..%d)", ErrBadAnnotation, DecodeWindowAnnotation, raw, 1<<20)
			return v.gone("bad decode window annotation")
		}
		v.decodeWindow = n
	}
	if raw, ok := pod.Annotations[KVConnectorAnnotation]; ok {
		switch kc := strings.TrimSpace(raw); kc {
		case worker.KVConnectorNIXL, worker.KVConnectorMooncake:
			v.kvConnector = kc
		default:
			v.refusal = fmt.Errorf("%w: %s=%q is not nixl or mooncake", ErrBadAnnotation, KVConnectorAnnotation, raw)
			return v.gone("bad kv connector annotation")
		}
	}
	if raw, ok := pod.Annotations[KVRoleAnnotation]; ok {
		if r := strings.TrimSpace(raw); r != worker.KVRoleBoth || v.role != worker.RoleDecode {
			v.refusal = fmt.Errorf("%w: %s=%q: want %s, on a decode pod", ErrBadAnnotation, KVRoleAnnotation, raw, worker.KVRoleBoth)
			return v.gone("bad kv role annotation")
		}
		v.kvRole = worker.KVRoleBoth
	}
	v.model = c.modelOf(pod)
	v.place = c.placeOf(pod)

	ready := false
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodReady {
			ready = cond.Status == corev1.ConditionTrue
		}
	}
	switch {
	case pod.Status.Phase != corev1.PodRunning:
		return v.unready("phase " + string(pod.Status.Phase))
	case !ready:
		return v.unready("not ready")
	case pod.Status.PodIP == "":
		return v.unready("no pod IP")
	}
	port := c.port
	if c.pool != nil {
		port = c.pool.port
	}
	scheme := c.scheme
	if scheme == "" {
		scheme = "http"
	}
	v.url = scheme + "://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port))
	if raw, ok := pod.Annotations[KVEventsAnnotation]; ok {
		spec, err := podKVEvents(strings.TrimSpace(raw), pod.Status.PodIP)
		if err == nil {
			_, err = kvspec.Parse(v.url, spec)
		}
		if err != nil {
			v.refusal = fmt.Errorf("%w: %s=%q: %w", ErrBadAnnotation, KVEventsAnnotation, raw, err)
			return v.gone("bad kv events annotation")
		}
		v.kvEvents = spec
	}
	v.state = stateServe
	return v
}

func (v podView) gone(why string) podView {
	v.state, v.why = stateGone, why
	return v
}

func (v podView) unready(why string) podView {
	v.state, v.why = stateUnready, why
	return v
}

// modelOf reads the model id from the pod's metadata; "" when not configured or absent.
func (c classifier) modelOf(pod *corev1.Pod) string {
	var m string
	switch c.modelFrom.Kind {
	case config.ModelFromNamespace:
		m = pod.Namespace
	case config.ModelFromLabel:
		m = pod.Labels[c.modelFrom.Key]
	case config.ModelFromAnnotation:
		m = pod.Annotations[c.modelFrom.Key]
	}
	return strings.TrimSpace(m)
}

// placeOf reads a pod's topology and revision into the reserved worker labels; nil when none is known.
func (c classifier) placeOf(pod *corev1.Pod) map[string]string {
	var out map[string]string
	set := func(label, v string) {
		if v = strings.TrimSpace(v); v != "" {
			if out == nil {
				out = map[string]string{}
			}
			out[label] = v
		}
	}
	read := func(key string) string {
		if key == "" {
			return ""
		}
		return pod.Labels[key]
	}
	set(worker.LabelZone, read(c.zoneLabel))
	set(worker.LabelRack, read(c.rackLabel))
	set(worker.LabelNode, read(c.nodeLabel))
	set(worker.LabelRevision, read(c.revisionLabel))
	return out
}

// spec is the worker spec discovery wants for a served pod; protocol and (without metadata) models are
// left for the Completer.
func (v podView) spec() worker.Spec {
	s := worker.Spec{
		URL: v.url, Role: v.role, BootstrapPort: v.bootstrapPort, DPSize: v.dpSize, KVConnector: v.kvConnector,
		DecodeWindow: v.decodeWindow, KVEvents: v.kvEvents,
		KVRole: v.kvRole,
		Source: worker.SourceKubernetes, Namespace: v.namespace, Pod: v.name,
		Labels: maps.Clone(v.place),
	}
	if v.model != "" {
		s.Models = []string{v.model}
	}
	return s
}

// podKVEvents resolves an events annotation's omitted or "*" hosts (its PUB endpoint's and its
// replay's) to the pod's IP.
func podKVEvents(raw, podIP string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	withIP := func(hp string) (string, error) {
		h, p, err := net.SplitHostPort(hp)
		if err != nil {
			return "", err
		}
		if h == "" || h == "*" {
			h = podIP
		}
		return net.JoinHostPort(h, p), nil
	}
	if u.Host, err = withIP(u.Host); err != nil {
		return "", err
	}
	q := u.Query()
	if r := q.Get("replay"); r != "" {
		ru, err := url.Parse(r)
		if err != nil {
			return "", err
		}
		if ru.Host, err = withIP(ru.Host); err != nil {
			return "", err
		}
		q.Del("replay")
		u.RawQuery = "replay=" + ru.String() // unescaped, as operators write it
		if rest := q.Encode(); rest != "" {
			u.RawQuery += "&" + rest
		}
	}
	return u.String(), nil
}
