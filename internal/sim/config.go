package sim

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"time"
)

// Role is the part an engine plays in disaggregated serving.
type Role string

// Roles.
const (
	RoleRegular Role = "regular"
	RolePrefill Role = "prefill"
	RoleDecode  Role = "decode"
)

// Protocol is the disaggregation handshake an engine speaks.
type Protocol string

// Protocols.
const (
	ProtocolSGLang Protocol = "sglang"
	ProtocolVLLM   Protocol = "vllm"
	// ProtocolTRTLLM is TensorRT-LLM's trtllm.TrtllmService, served over gRPC only and by a regular
	// engine only (grpc_trtllm.go says why).
	ProtocolTRTLLM Protocol = "trtllm"
)

// Mode selects the performance model.
type Mode string

// Modes.
const (
	// ModeRealistic models queueing, prefill and decode time (see the package doc).
	ModeRealistic Mode = "realistic"
	// ModeInstant answers at once with a small fixed output, to measure the gateway's overhead.
	ModeInstant Mode = "instant"
)

// KVConnector is the vLLM KV connector a vLLM-protocol engine runs (--kv-transfer-config kv_connector).
type KVConnector string

// KV connectors.
const (
	// ConnectorNIXL is vLLM's NixlConnector: the prefill runs first and returns kv_transfer_params that
	// the decode is given (nixl_connector.py).
	ConnectorNIXL KVConnector = "nixl"
	// ConnectorMooncake is vLLM's MooncakeConnector: prefill and decode legs run in parallel, sharing a
	// transfer_id, and the decode pulls the KV from the prefill's bootstrap server (mooncake_connector.py).
	ConnectorMooncake KVConnector = "mooncake"
)

// Defaults shared with the real engines.
const (
	// DefaultContextLength is a common served context length (Qwen2.5 models ship with 32768).
	DefaultContextLength = 32768
	// DefaultBootstrapPort is SGLang's --disaggregation-bootstrap-port default (server_args.py), and
	// vLLM's VLLM_MOONCAKE_BOOTSTRAP_PORT default (vllm/envs.py) too.
	DefaultBootstrapPort = 8998
	// MaxDPSize bounds Config.DPSize (a simulator limit: real deployments run up to a few dozen ranks).
	MaxDPSize = 256
)

// Config configures one simulated engine. The zero value of a field means its default (see DefaultConfig);
// Validate reports the fields that are out of range.
type Config struct {
	Role     Role     // regular (default), prefill or decode
	Protocol Protocol // sglang (default), vllm or trtllm (gRPC only)
	Mode     Mode     // realistic (default) or instant

	Host string // listen host, default 127.0.0.1
	Port int    // listen port; 0 picks a free port
	// BootstrapPort is SGLang's --disaggregation-bootstrap-port, or a vLLM Mooncake prefill's
	// VLLM_MOONCAKE_BOOTSTRAP_PORT. A prefill engine runs its bootstrap server there (0 picks a free
	// port). An SGLang decode engine uses it for a request whose bootstrap_port is null or absent, as
	// SGLang's scheduler does (scheduler.py handle_generate_request falls back to
	// server_args.disaggregation_bootstrap_port); 0 means SGLang's default 8998.
	BootstrapPort int
	// GRPC also serves gRPC on Port (HTTP/2 with prior knowledge, on grpc-go's transport): the
	// Protocol engine's own service (sglang.grpc.scheduler.SglangScheduler or
	// vllm.grpc.engine.VllmEngine) and sluice.worker.v1.
	GRPC bool
	// EngineGRPCOnly leaves sluice.worker.v1 out of the gRPC services (with GRPC), as a real engine
	// serves only its own: a gateway then has to speak the engine's protocol.
	EngineGRPCOnly bool
	// ByteTokenIDs makes the engines' gRPC Generate answer the generated text's UTF-8 bytes as its
	// token ids (a byte-level vocabulary whose ids 0-255 are the bytes), which a gateway can decode
	// with such a tokenizer; otherwise the ids are the simulator's own word chunks (tokenizer.go). Over
	// HTTP a text prompt (completions, /generate) is tokenized into its bytes and the generated ids
	// shown (output_ids, token_ids) are bytes too; a chat's rendered prompt keeps word tokens.
	ByteTokenIDs bool
	// TokenizerDir is the model directory whose tokenizer files the engines' gRPC GetTokenizer
	// streams as a zip bundle; empty serves the built-in byte-level tokenizer (bytetokenizer/:
	// ids 0-255 the bytes, ChatML's template), the one whose ids ByteTokenIDs answers.
	TokenizerDir string

	Models []string // served model ids, default ["sim-model"]; the first is the default model
	Seed   int64    // output PRNG seed

	// ContextLength is the model's context length (SGLang --context-length, vLLM --max-model-len),
	// default 32768. Prompts (with max_tokens) beyond it are refused with 400 as each engine does.
	ContextLength int
	// DPSize is the number of data-parallel ranks (SGLang --dp-size with --enable-dp-attention, vLLM
	// --data-parallel-size), default 1. Each rank has its own scheduler, waiting queue, prefill
	// executor, prefix cache and KV pool; the engine's capacities below are split evenly over them (see
	// the package doc).
	DPSize int
	// KVConnector is a vLLM engine's KV connector: nixl (default) or mooncake. SGLang engines have none.
	KVConnector KVConnector

	MaxRunningRequests  int           // default 256
	PrefillTokensPerSec float64       // default 8000
	ITLBase             time.Duration // default 6ms
	ITLPerSeq           time.Duration // default 350µs, times the decode batch size
	KVCapacityTokens    int64         // default 524288
	BlockSize           int           // prefix cache block, default 16 tokens
	PrefixCacheTokens   int64         // prefix cache capacity, default KVCapacityTokens
	DefaultMaxTokens    int           // output length when max_tokens is absent, default 16
	InstantOutputTokens int           // instant mode output length cap, default 8

	// BootstrapTimeout bounds both bootstrap waits: a prefill's wait for its decode to connect
	// (SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT) and a decode's wait for its room's KV
	// (SGLANG_DISAGGREGATION_WAITING_TIMEOUT); for a vLLM Mooncake prefill, how long a decode's pull
	// waits for the KV (VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT). Default 30s; SGLang's own default is
	// 300s, vLLM's 480s.
	BootstrapTimeout time.Duration
	RoomTTL          time.Duration // unclaimed published rooms/KV records expire, default 2 x BootstrapTimeout
	MaxRooms         int           // bound on unclaimed rooms/KV records kept, default 65536

	EngineID string // engine id in kv_transfer_params; default derived from host:port

	KVEvents KVEventsConfig // KV-cache event publisher, off by default (kvevents.go)

	// Topology is where the engine runs; TransferDelays the extra KV-transfer time a decode engine
	// waits when its prefill engine runs elsewhere (topology.go). Zero: no extra time.
	Topology       Topology
	TransferDelays TransferDelays

	Faults Faults // faults active from the start
}

// DefaultConfig returns a Config with every default filled in.
func DefaultConfig() Config {
	var c Config
	c.applyDefaults()
	return c
}

func (c *Config) applyDefaults() {
	c.Role = cmp.Or(c.Role, RoleRegular)
	c.Protocol = cmp.Or(c.Protocol, ProtocolSGLang)
	c.Mode = cmp.Or(c.Mode, ModeRealistic)
	c.Host = cmp.Or(c.Host, "127.0.0.1")
	if len(c.Models) == 0 {
		c.Models = []string{"sim-model"}
	}
	c.ContextLength = cmp.Or(c.ContextLength, DefaultContextLength)
	c.DPSize = cmp.Or(c.DPSize, 1)
	if c.Protocol == ProtocolVLLM {
		c.KVConnector = cmp.Or(c.KVConnector, ConnectorNIXL)
	}
	if c.Role == RoleDecode && c.Protocol == ProtocolSGLang {
		c.BootstrapPort = cmp.Or(c.BootstrapPort, DefaultBootstrapPort)
	}
	c.MaxRunningRequests = cmp.Or(c.MaxRunningRequests, 256)
	c.PrefillTokensPerSec = cmp.Or(c.PrefillTokensPerSec, 8000)
	c.ITLBase = cmp.Or(c.ITLBase, 6*time.Millisecond)
	c.ITLPerSeq = cmp.Or(c.ITLPerSeq, 350*time.Microsecond)
	c.KVCapacityTokens = cmp.Or(c.KVCapacityTokens, 524288)
	c.BlockSize = cmp.Or(c.BlockSize, 16)
	c.KVEvents.applyDefaults()
	c.PrefixCacheTokens = cmp.Or(c.PrefixCacheTokens, c.KVCapacityTokens)
	c.DefaultMaxTokens = cmp.Or(c.DefaultMaxTokens, 16)
	c.InstantOutputTokens = cmp.Or(c.InstantOutputTokens, 8)
	c.BootstrapTimeout = cmp.Or(c.BootstrapTimeout, 30*time.Second)
	c.RoomTTL = cmp.Or(c.RoomTTL, 2*c.BootstrapTimeout)
	c.MaxRooms = cmp.Or(c.MaxRooms, 65536)
	c.Faults.SlownessFactor = cmp.Or(c.Faults.SlownessFactor, 1)
	c.Faults.ErrorStatus = cmp.Or(c.Faults.ErrorStatus, 503)
}

// ErrInvalidConfig is wrapped by every configuration error.
var ErrInvalidConfig = errors.New("sim: invalid config")

// Validate applies defaults and checks ranges.
func (c *Config) Validate() error {
	c.applyDefaults()
	errs := append(c.engineErrors(), c.rangeErrors()...)
	if err := c.Faults.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.KVEvents.validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	return nil
}

// engineErrors checks which engine is simulated: its role, protocol, mode and KV connector.
func (c *Config) engineErrors() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch c.Role {
	case RoleRegular, RolePrefill, RoleDecode:
	default:
		bad("role %q: want regular, prefill or decode", c.Role)
	}
	switch c.Protocol {
	case ProtocolSGLang, ProtocolVLLM:
	case ProtocolTRTLLM:
		if !c.GRPC {
			bad("protocol trtllm is TensorRT-LLM's gRPC service: it needs GRPC (its HTTP API is not simulated)")
		}
		if c.Role != RoleRegular {
			bad("protocol trtllm serves the regular role only: TensorRT-LLM's gRPC service returns no context-phase state for a generation-only leg")
		}
	default:
		bad("protocol %q: want sglang, vllm or trtllm", c.Protocol)
	}
	switch c.Mode {
	case ModeRealistic, ModeInstant:
	default:
		bad("mode %q: want realistic or instant", c.Mode)
	}
	switch {
	case c.Protocol == ProtocolVLLM && c.KVConnector != ConnectorNIXL && c.KVConnector != ConnectorMooncake:
		bad("kv connector %q: want nixl or mooncake", c.KVConnector)
	case c.Protocol != ProtocolVLLM && c.KVConnector != "":
		bad("kv connector %q: only vLLM engines have a KV connector (SGLang's transfer backend is not simulated)", c.KVConnector)
	}
	return errs
}

// rangeErrors checks the addresses, models and the numbers of the performance model.
func (c *Config) rangeErrors() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if net.ParseIP(c.Host) == nil && c.Host != "localhost" {
		bad("host %q: want an IP address", c.Host)
	}
	if c.Port < 0 || c.Port > 65535 {
		bad("port %d out of range", c.Port)
	}
	if c.BootstrapPort < 0 || c.BootstrapPort > 65535 {
		bad("bootstrap port %d out of range", c.BootstrapPort)
	}
	for _, m := range c.Models {
		if m == "" {
			bad("empty model id")
		}
	}
	if c.ContextLength < 0 {
		bad("context length %d < 1", c.ContextLength)
	}
	if c.DPSize < 0 || c.DPSize > MaxDPSize {
		bad("dp size %d not in [1, %d]", c.DPSize, MaxDPSize)
	}
	if c.MaxRunningRequests < 0 {
		bad("max running requests %d < 1", c.MaxRunningRequests)
	}
	if c.PrefillTokensPerSec < 0 {
		bad("prefill tokens/s %g <= 0", c.PrefillTokensPerSec)
	}
	if c.ITLBase < 0 || c.ITLPerSeq < 0 {
		bad("inter-token latency must not be negative")
	}
	if c.KVCapacityTokens < 0 {
		bad("kv capacity %d < 1", c.KVCapacityTokens)
	}
	if c.BlockSize < 0 {
		bad("block size %d < 1", c.BlockSize)
	}
	if c.PrefixCacheTokens < 0 {
		bad("prefix cache tokens %d < 0", c.PrefixCacheTokens)
	}
	if c.DefaultMaxTokens < 0 || c.InstantOutputTokens < 0 {
		bad("output lengths must be positive")
	}
	if c.BootstrapTimeout < 0 || c.RoomTTL < 0 || c.MaxRooms < 0 {
		bad("bootstrap timeout, room TTL and max rooms must be positive")
	}
	return errs
}

// hasBootstrapServer reports whether the engine runs a bootstrap server: an SGLang prefill's
// (disaggregation/common/conn.py CommonKVBootstrapServer) or a vLLM Mooncake prefill's
// (mooncake_utils.py MooncakeBootstrapServer).
func (c *Config) hasBootstrapServer() bool {
	return c.Role == RolePrefill && (c.Protocol == ProtocolSGLang || c.mooncake())
}

// mooncake reports whether the engine is a vLLM engine with the Mooncake connector.
func (c *Config) mooncake() bool {
	return c.Protocol == ProtocolVLLM && c.KVConnector == ConnectorMooncake
}
