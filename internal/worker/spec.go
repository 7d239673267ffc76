package worker

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicegw/sluice/internal/kvevents/kvspec"
)

// Role is the part a worker plays: a whole engine (regular) or one side of a
// prefill/decode disaggregated pair.
type Role string

// The worker roles.
const (
	RoleRegular Role = "regular"
	RolePrefill Role = "prefill"
	RoleDecode  Role = "decode"
)

// ParseRole parses a role name. The empty string is not a role.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleRegular, RolePrefill, RoleDecode:
		return r, nil
	}
	return "", fmt.Errorf("unknown worker role %q (want regular, prefill or decode)", s)
}

// index maps a role to a small array index; -1 for an unknown role.
func (r Role) index() int {
	switch r {
	case RoleRegular:
		return 0
	case RolePrefill:
		return 1
	case RoleDecode:
		return 2
	}
	return -1
}

const numRoles = 3

// Protocol is how the gateway talks to a worker.
type Protocol string

// The worker protocols.
const (
	ProtocolSGLang Protocol = "sglang"
	ProtocolVLLM   Protocol = "vllm"
	ProtocolGRPC   Protocol = "grpc"
	// ProtocolTRTLLM is TensorRT-LLM's own gRPC service (trtllm.TrtllmService) at a grpc:// URL. It
	// has no KV handoff: such a worker serves regular requests only (ErrTRTLLMRole).
	ProtocolTRTLLM Protocol = "trtllm"
)

// ErrTRTLLMRole refuses a TensorRT-LLM worker in a prefill or decode role. Its gRPC service returns
// none of the context phase's state a generation-only request needs, and the Rust gateway refuses PD
// for it too (smg model_gateway/src/routers/grpc/common/stages/request_execution.rs).
var ErrTRTLLMRole = errors.New("TensorRT-LLM workers serve regular requests only: its gRPC service returns no context-phase state for a decode worker, so prefill/decode is not supported")

// Handoff is how a prefill worker hands a request's KV cache to a decode worker. A PD pair is only
// formed from two workers with the same handoff: an SGLang prefill cannot feed a vLLM decode.
type Handoff uint8

// The handoffs. The zero Handoff is none (a regular worker needs none).
const (
	HandoffNone Handoff = iota
	// HandoffBootstrap is SGLang's: both legs at once, met at the prefill's bootstrap server by room.
	HandoffBootstrap
	// HandoffNIXL is vLLM's NIXL connector: prefill first, decode told where the KV is.
	HandoffNIXL
	// HandoffWorkerRPC is sluice.worker.v1's: bootstrap-style handshake fields over gRPC.
	HandoffWorkerRPC
	// HandoffMooncake is vLLM's Mooncake connector: both legs at once, the decode told the prefill's
	// bootstrap address, engine id and a transfer id.
	HandoffMooncake
	numHandoffs
)

// String returns a short label, usable as a low-cardinality metric label.
func (h Handoff) String() string {
	switch h {
	case HandoffBootstrap:
		return "sglang_bootstrap"
	case HandoffNIXL:
		return "vllm_nixl"
	case HandoffWorkerRPC:
		return "worker_rpc"
	case HandoffMooncake:
		return "vllm_mooncake"
	}
	return "none"
}

// Handoff returns the KV handoff a worker with this spec speaks.
func (s Spec) Handoff() Handoff {
	if s.Protocol == ProtocolVLLM && s.KVConnector == KVConnectorMooncake {
		return HandoffMooncake
	}
	return s.Protocol.Handoff()
}

// The KV connectors of vLLM workers (Spec.KVConnector).
const (
	KVConnectorNIXL     = "nixl"
	KVConnectorMooncake = "mooncake"
)

// KVRoleBoth is the vLLM KV connector role (kv_transfer_config's kv_role) of an engine that both
// produces and consumes KV (Spec.KVRole). Such a decode engine can serve a request alone: vLLM's NIXL
// connector (vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py,
// get_num_new_matched_tokens) loads remote KV only for a request whose kv_transfer_params say
// do_remote_prefill; a request without them is scheduled and prefilled locally like on any engine
// (kv_role semantics: vllm/config/kv_transfer.py, is_kv_producer / is_kv_consumer). vLLM exposes no
// endpoint that reports the role, so it is declared (--decode-kv-role, the admin API).
//
// SGLang has no such role: its decode server (python/sglang/srt/disaggregation/decode.py) admits a
// request only through the pre-allocation queue, which waits for the prefill server's KV over the
// bootstrap handshake, so an SGLang decode engine cannot prefill on its own; a KV role on a non-vLLM
// worker is refused.
const KVRoleBoth = "kv_both"

// SingleConsumer reports a handoff whose KV transfer serves one decode request: n > 1 samples or a
// prompt batch cannot share it (vLLM's connectors).
func (h Handoff) SingleConsumer() bool { return h == HandoffNIXL || h == HandoffMooncake }

// Handoff returns the KV handoff a worker of this protocol speaks.
func (p Protocol) Handoff() Handoff {
	switch p {
	case ProtocolSGLang:
		return HandoffBootstrap
	case ProtocolVLLM:
		return HandoffNIXL
	case ProtocolGRPC:
		return HandoffWorkerRPC
	}
	return HandoffNone
}

// HandoffSet is a set of handoffs; the zero set is empty.
type HandoffSet uint8

// Add returns s with h added.
func (s HandoffSet) Add(h Handoff) HandoffSet { return s | 1<<h }

// Has reports whether h is in s.
func (s HandoffSet) Has(h Handoff) bool { return s&(1<<h) != 0 }

// Single reports whether s holds exactly one handoff.
func (s HandoffSet) Single() bool { return s != 0 && s&(s-1) == 0 }

// ParseProtocol parses a protocol name. The empty string is not a protocol.
func ParseProtocol(s string) (Protocol, error) {
	switch p := Protocol(s); p {
	case ProtocolSGLang, ProtocolVLLM, ProtocolGRPC, ProtocolTRTLLM:
		return p, nil
	}
	return "", fmt.Errorf("unknown worker protocol %q (want sglang, vllm, trtllm or grpc)", s)
}

// Spec describes a worker as configured by flags or the admin API.
type Spec struct {
	// URL is the worker's base URL: http://, https:// or grpc://, with a host
	// and an optional port and path. Normalized removes a trailing slash.
	URL string
	// Role defaults to RoleRegular when empty (Normalized).
	Role Role
	// Protocol defaults to grpc for a grpc:// URL and to sglang otherwise.
	Protocol Protocol
	// Models lists the model ids the worker serves. Empty means any model.
	Models []string
	// BootstrapPort is the prefill worker's KV bootstrap port; 0 means none.
	BootstrapPort int
	// Labels are free-form metadata (admin, metrics); only the reserved labels of topology.go
	// (sluice.dev/zone, rack, node and revision) are read for routing: PD pairing.
	Labels map[string]string
	// APIKey is sent to the worker as a bearer token when set.
	APIKey string
	// DPSize is the engine's data-parallel size (SGLang dp_size); 0 means unknown (one rank).
	DPSize int
	// DecodeWindow is a decode engine's running window per data-parallel rank: how many requests each
	// rank runs at once (SGLang max_running_requests / dp_size, read from its server info; vLLM
	// --max-num-seqs, declared). 0 means unknown. Decode seats with "auto" use it as each rank's bound.
	DecodeWindow int
	// DecodeKVTokens is a decode engine's KV capacity in tokens per data-parallel rank (SGLang
	// max_total_tokens, read from its server info); 0 means unknown. Decode seats then also reserve
	// each request's prompt + max_tokens against it.
	DecodeKVTokens int64
	// ProtocolSource says how Protocol was decided (see the ProtocolFrom constants); informational.
	ProtocolSource string
	// KVConnector is a vLLM worker's KV connector: KVConnectorNIXL (the default) or
	// KVConnectorMooncake. Empty for other protocols.
	KVConnector string
	// KVRole is a vLLM decode worker's declared KV connector role: KVRoleBoth lets local prefill
	// (dispatch's LocalPrefillMaxTokens) send it short prompts alone. Empty means a consumer only.
	KVRole string
	// KVEvents is the engine's KV-cache events endpoint spec, as kvspec.Parse reads it
	// (tcp://HOST:PORT[?replay=...&topic=...&dp=N]); empty means none. kv_aware routes by them.
	KVEvents string
	// Source says who registered the worker: SourceFlag, SourceAdmin or
	// SourceKubernetes (empty is treated as unknown). A worker whose source
	// is SourceKubernetes belongs to discovery: see [Spec.Managed].
	Source Source
	// Namespace and Pod name the Kubernetes pod behind a discovered worker
	// (empty otherwise); shown in the admin API, never used for routing.
	Namespace string
	Pod       string
	// Given is what the operator gave for this worker before detection filled in the rest (nil when
	// no detection ran). Detection runs again from it when the engine first answers (DetectPending)
	// and when a worker that was not ready comes back, so an engine restarted as another kind is
	// noticed.
	Given *Spec
	// DetectPending is set while the engine has not answered detection: its protocol, models, PD role,
	// bootstrap port and ranks are unknown, so the health checker does not make it ready before it
	// has asked again (and the worker is not routed before).
	DetectPending bool
}

// How a worker's protocol was decided, as reported by the admin API.
const (
	ProtocolFromConfig     = "configured"      // given explicitly for this worker
	ProtocolFromURLScheme  = "url_scheme"      // grpc:// speaks the worker protocol
	ProtocolFromModelInfo  = "grpc_model_info" // grpc://: the engine's own GetModelInfo answered
	ProtocolFromOwnedBy    = "models_owned_by" // GET /v1/models named the engine
	ProtocolFromVersion    = "version"         // GET /version answered: vLLM
	ProtocolFromServerInfo = "server_info"     // GET /get_server_info or /server_info answered: SGLang
	ProtocolFromDefault    = "default"         // the engine answered none of them: the configured runtime
	ProtocolPending        = "pending"         // the engine has not answered yet: asked again when it does
)

// Source is where a worker's registration came from.
type Source string

// The worker sources.
const (
	SourceFlag       Source = "flag"
	SourceAdmin      Source = "admin"
	SourceKubernetes Source = "kubernetes"
)

// Managed reports whether the worker's lifecycle belongs to service
// discovery: the admin API must not remove or drain it, or discovery would
// bring it back (or keep a pod's traffic stopped that Kubernetes calls ready).
func (s Spec) Managed() bool { return s.Source == SourceKubernetes }

// Clone returns a deep copy of s.
func (s Spec) Clone() Spec {
	s.Models = slices.Clone(s.Models)
	s.Labels = maps.Clone(s.Labels)
	if s.Given != nil {
		g := s.Given.Clone()
		s.Given = &g
	}
	return s
}

// Validate reports whether s is a valid spec. It does not fill defaults: call
// Normalized for that.
func (s Spec) Validate() error {
	u, err := parseWorkerURL(s.URL)
	if err != nil {
		return err
	}
	if _, err := ParseRole(string(s.Role)); err != nil {
		return err
	}
	if _, err := ParseProtocol(string(s.Protocol)); err != nil {
		return err
	}
	// sglang and vllm at a grpc:// URL are those engines' own gRPC protocols (backend/enginerpc).
	if (s.Protocol == ProtocolGRPC || s.Protocol == ProtocolTRTLLM) && !isGRPCScheme(u.Scheme) {
		return fmt.Errorf("protocol %q does not match URL scheme %q", s.Protocol, u.Scheme)
	}
	if s.Protocol == ProtocolTRTLLM && s.Role != RoleRegular {
		return ErrTRTLLMRole
	}
	if s.KVEvents != "" {
		if _, err := kvspec.Parse(s.URL, s.KVEvents); err != nil {
			return err
		}
	}
	if s.BootstrapPort < 0 || s.BootstrapPort > 65535 {
		return fmt.Errorf("bootstrap port %d out of range 0..65535", s.BootstrapPort)
	}
	if s.BootstrapPort != 0 && s.Role != RolePrefill {
		return fmt.Errorf("bootstrap port set on a %s worker; only prefill workers have one", s.Role)
	}
	switch s.KVConnector {
	case "":
	case KVConnectorNIXL, KVConnectorMooncake:
		if s.Protocol != ProtocolVLLM {
			return fmt.Errorf("kv connector %q set on a %s worker; only vllm workers have one", s.KVConnector, s.Protocol)
		}
	default:
		return fmt.Errorf("unknown kv connector %q (want nixl or mooncake)", s.KVConnector)
	}
	switch {
	case s.KVRole == "":
	case s.KVRole != KVRoleBoth:
		return fmt.Errorf("unknown kv role %q (want %s)", s.KVRole, KVRoleBoth)
	case s.Protocol != ProtocolVLLM:
		return fmt.Errorf("kv role %s set on a %s worker; only vllm engines can prefill on their own (SGLang's decode waits for a prefill server's KV)", s.KVRole, s.Protocol)
	case s.Role != RoleDecode:
		return fmt.Errorf("kv role %s set on a %s worker; only decode workers have one", s.KVRole, s.Role)
	}
	if s.DPSize < 0 || s.DPSize > maxDPSize {
		return fmt.Errorf("dp size %d out of range 0..%d", s.DPSize, maxDPSize)
	}
	if s.DecodeWindow < 0 || s.DecodeWindow > maxDecodeWindow {
		return fmt.Errorf("decode window %d out of range 0..%d", s.DecodeWindow, maxDecodeWindow)
	}
	for _, m := range s.Models {
		if strings.TrimSpace(m) == "" {
			return errors.New("empty model id")
		}
	}
	return nil
}

// maxDPSize bounds data-parallel ranks per engine (far above any real deployment).
const maxDPSize = 1024

// maxDecodeWindow bounds a declared decode window (far above any engine's running batch).
const maxDecodeWindow = 1 << 20

// Normalized returns a validated deep copy of s with defaults filled in, the
// URL's scheme and host lower-cased, the trailing slash removed, and the
// model list sorted and de-duplicated.
func (s Spec) Normalized() (Spec, error) {
	s = s.Clone()
	u, err := parseWorkerURL(s.URL)
	if err != nil {
		return Spec{}, err
	}
	s.URL = u.String()
	if s.Role == "" {
		s.Role = RoleRegular
	}
	if s.Protocol == "" {
		s.Protocol = ProtocolSGLang
		if isGRPCScheme(u.Scheme) {
			s.Protocol = ProtocolGRPC
		}
	}
	if s.Protocol == ProtocolVLLM && s.KVConnector == "" {
		s.KVConnector = KVConnectorNIXL
	}
	if len(s.Models) > 0 {
		slices.Sort(s.Models)
		s.Models = slices.Compact(s.Models)
	} else {
		s.Models = nil
	}
	if err := s.Validate(); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// isGRPCScheme reports whether a (lower-case) scheme speaks the worker gRPC protocol: grpc:// in
// plaintext (h2c), grpcs:// over TLS.
func isGRPCScheme(scheme string) bool { return scheme == "grpc" || scheme == "grpcs" }

// parseWorkerURL parses and normalises a worker URL.
func parseWorkerURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("empty worker URL")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("bad worker URL %q: %w", raw, err)
	}
	u.Scheme = strings.ToLower(u.Scheme)
	switch u.Scheme {
	case "http", "https", "grpc", "grpcs":
	default:
		return nil, fmt.Errorf("worker URL %q: scheme must be http, https, grpc or grpcs", raw)
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, fmt.Errorf("worker URL %q has no host", raw)
	}
	if u.User != nil {
		// Credentials in a URL would end up in logs and metric labels.
		return nil, fmt.Errorf("worker URL %q must not carry user info; use the API key", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return nil, fmt.Errorf("worker URL %q must not have a query or fragment", raw)
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("worker URL %q: bad port %q", raw, p)
		}
	} else if strings.HasSuffix(u.Host, ":") {
		return nil, fmt.Errorf("worker URL %q: empty port", raw)
	}
	u.Host = strings.ToLower(u.Host)
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}
