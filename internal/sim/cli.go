package sim

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"
)

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// engineFlags binds the engine flags to fs; finish converts them into cfg after parsing.
func engineFlags(fs *flag.FlagSet, cfg *Config) (finish func() error) {
	d := DefaultConfig()
	role := fs.String("role", string(RoleRegular), "engine role: regular, prefill or decode")
	protocol := fs.String("protocol", string(ProtocolSGLang), "engine protocol: sglang, vllm, or trtllm (TensorRT-LLM's gRPC service only: with --grpc, regular role)")
	mode := fs.String("mode", string(ModeRealistic), "performance model: realistic or instant")
	fs.StringVar(&cfg.Host, "host", d.Host, "listen host")
	fs.IntVar(&cfg.Port, "port", 0, "listen port (0 picks a free port)")
	const bpHelp = "sglang --disaggregation-bootstrap-port, or a vllm mooncake prefill's VLLM_MOONCAKE_BOOTSTRAP_PORT: a prefill's " +
		"bootstrap server port (0 picks a free port); an sglang decode's port for requests whose bootstrap_port is null " +
		"(0 means 8998, SGLang's default)"
	fs.IntVar(&cfg.BootstrapPort, "bootstrap-port", 0, bpHelp)
	fs.IntVar(&cfg.BootstrapPort, "disaggregation-bootstrap-port", 0, "same as --bootstrap-port")
	grpcFlags(fs, cfg)
	var models stringList
	fs.Var(&models, "model", "served model id (repeatable; default sim-model)")
	fs.Int64Var(&cfg.Seed, "seed", 0, "output PRNG seed")
	fs.IntVar(&cfg.ContextLength, "context-length", d.ContextLength, "model context length: longer prompts (with max_tokens) get the engine's 400")
	const dpHelp = "data-parallel ranks (sglang --dp-size with DP attention, vllm --data-parallel-size): each rank has its own " +
		"scheduler, waiting queue, prefill executor, prefix cache and 1/N of the engine's capacities"
	fs.IntVar(&cfg.DPSize, "dp-size", d.DPSize, dpHelp)
	fs.IntVar(&cfg.DPSize, "data-parallel-size", d.DPSize, "same as --dp-size")
	kvConnector := fs.String("kv-connector", "", "vllm: the KV connector, nixl (default: prefill first, then decode) or mooncake "+
		"(legs in parallel, the decode pulls from the prefill's bootstrap server)")
	batchFlags(fs, cfg, d)
	itlBase := fs.Float64("itl-base-ms", float64(d.ITLBase)/float64(time.Millisecond), "inter-token latency, fixed part (ms)")
	itlPerSeq := fs.Float64("itl-per-seq-ms", float64(d.ITLPerSeq)/float64(time.Millisecond), "inter-token latency per sequence in the decode batch (ms)")
	bootTimeout := fs.Float64("bootstrap-timeout-secs", d.BootstrapTimeout.Seconds(),
		"sglang PD: how long a prefill waits for its decode to connect and a decode waits for the KV (SGLang's default is 300); "+
			"vllm mooncake: how long a decode's pull waits for the prefill's KV (VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT, 480 in vLLM)")
	roomTTL := fs.Float64("room-ttl-secs", 0, "unclaimed KV records expire after this (default 2 x bootstrap timeout)")
	fs.StringVar(&cfg.EngineID, "engine-id", "", "engine id in kv_transfer_params (default sim-<role>-<port>)")
	kvEventFlags(fs, &cfg.KVEvents)
	faultFlags(fs, &cfg.Faults)
	topology := topologyFlags(fs, cfg)
	return func() error {
		cfg.Role, cfg.Protocol, cfg.Mode = Role(*role), Protocol(*protocol), Mode(*mode)
		if err := topology(); err != nil {
			return err
		}
		cfg.KVConnector = KVConnector(*kvConnector)
		cfg.Models = models
		cfg.ITLBase = time.Duration(*itlBase * float64(time.Millisecond))
		cfg.ITLPerSeq = time.Duration(*itlPerSeq * float64(time.Millisecond))
		cfg.BootstrapTimeout = time.Duration(*bootTimeout * float64(time.Second))
		cfg.RoomTTL = time.Duration(*roomTTL * float64(time.Second))
		if *itlBase < 0 || *itlPerSeq < 0 || *bootTimeout <= 0 || *roomTTL < 0 {
			return fmt.Errorf("%w: durations must be positive", ErrInvalidConfig)
		}
		return cfg.Validate()
	}
}

// grpcFlags binds what the engine serves over gRPC.
func grpcFlags(fs *flag.FlagSet, cfg *Config) {
	fs.BoolVar(&cfg.GRPC, "grpc", false, "also serve gRPC on the same port (HTTP/2 with prior knowledge, on grpc-go's transport): the --protocol engine's own (SGLang's scheduler or vLLM's engine service) and sluice.worker.v1")
	fs.BoolVar(&cfg.EngineGRPCOnly, "grpc-engine-only", false, "with --grpc: serve only the engine's own gRPC service, not sluice.worker.v1, as a real engine does")
	fs.BoolVar(&cfg.ByteTokenIDs, "grpc-byte-token-ids", false, "the engine's token ids are UTF-8 bytes: gRPC Generate's output ids, and over HTTP text prompts' ids and output_ids/token_ids (a byte-level tokenizer whose ids 0-255 are the bytes decodes them)")
}

// batchFlags binds the batching, capacity and output-length model (the inter-token latencies are
// durations, converted when the flags are parsed, so engineFlags binds them).
func batchFlags(fs *flag.FlagSet, cfg *Config, d Config) {
	fs.IntVar(&cfg.MaxRunningRequests, "max-running-requests", d.MaxRunningRequests, "continuous batching: max running requests "+
		"(sglang --max-running-requests; an sglang decode also pre-allocates up to 2x more when it is at most 32)")
	fs.IntVar(&cfg.MaxRunningRequests, "max-num-seqs", d.MaxRunningRequests, "same as --max-running-requests (vllm's name)")
	fs.Float64Var(&cfg.PrefillTokensPerSec, "prefill-tokens-per-sec", d.PrefillTokensPerSec, "prefill speed on uncached prompt tokens")
	fs.Int64Var(&cfg.KVCapacityTokens, "kv-capacity-tokens", d.KVCapacityTokens, "KV budget: running requests hold prompt+max_tokens tokens")
	fs.IntVar(&cfg.BlockSize, "block-size", d.BlockSize, "prefix cache block size (tokens)")
	fs.Int64Var(&cfg.PrefixCacheTokens, "prefix-cache-tokens", 0, "prefix cache capacity in tokens (default: kv capacity)")
	fs.IntVar(&cfg.DefaultMaxTokens, "default-max-tokens", d.DefaultMaxTokens, "output length when max_tokens is absent")
	fs.IntVar(&cfg.InstantOutputTokens, "instant-output-tokens", d.InstantOutputTokens, "instant mode: output length cap")
}

// usageHeader introduces --help: what the engines are and where their limits are written down.
const usageHeader = `sluice-sim runs simulated SGLang (--protocol sglang) or vLLM (--protocol vllm) engines: their
routes, error shapes and PD handshakes as read from the engines' sources, with a queueing and timing
model. --dp-size N runs N data-parallel ranks per engine, each with its own queue, prefix cache and
share of the capacity, honouring SGLang's routed_dp_rank / disagg_prefill_dp_rank and vLLM's
X-data-parallel-rank (and falling back to bootstrap_room % N, round robin or least loaded as the
engines do). vLLM engines run the NIXL connector or, with --kv-connector mooncake, the Mooncake
connector. Not modelled: tensor/expert parallelism beyond the rank split, chat templates, vLLM
connectors other than NIXL and Mooncake, SGLang's other load-balance methods; the internal/sim package
documentation lists what is and is not modelled.

`

func setUsage(fs *flag.FlagSet, synopsis string) {
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageHeader+"Usage: "+synopsis+"\n")
		fs.PrintDefaults()
	}
}

// ParseFlags parses the flags of one engine (`sluice-sim [flags]`).
func ParseFlags(args []string, output io.Writer) (Config, error) {
	fs := flag.NewFlagSet("sluice-sim", flag.ContinueOnError)
	fs.SetOutput(output)
	setUsage(fs, "sluice-sim [flags]  |  sluice-sim cluster [flags]")
	var cfg Config
	finish := engineFlags(fs, &cfg)
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	return cfg, finish()
}

// ParseClusterFlags parses `sluice-sim cluster [flags]`: the engine flags plus the engine counts.
func ParseClusterFlags(args []string, output io.Writer) (ClusterConfig, error) {
	fs := flag.NewFlagSet("sluice-sim cluster", flag.ContinueOnError)
	fs.SetOutput(output)
	setUsage(fs, "sluice-sim cluster [flags]")
	var cc ClusterConfig
	finish := engineFlags(fs, &cc.Engine)
	fs.IntVar(&cc.Prefill, "prefill", 0, "number of prefill engines")
	fs.IntVar(&cc.Decode, "decode", 0, "number of decode engines")
	fs.IntVar(&cc.Regular, "regular", 0, "number of regular engines")
	fs.IntVar(&cc.BasePort, "base-port", 0, "first port; engines use consecutive ports (0 picks free ports)")
	if err := fs.Parse(args); err != nil {
		return cc, err
	}
	if fs.NArg() > 0 {
		return cc, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if err := finish(); err != nil {
		return cc, err
	}
	cc.Protocol, cc.Mode = cc.Engine.Protocol, cc.Engine.Mode
	return cc, nil
}

// Main runs the simulator command line until ctx ends (the caller cancels it on SIGINT/SIGTERM) and
// returns the process exit code. It prints one line per engine to stdout: `role url [bootstrap_port]`.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var engines []*Engine
	var stop func(context.Context) error
	if len(args) > 0 && args[0] == "cluster" {
		cc, err := ParseClusterFlags(args[1:], stderr)
		if err != nil {
			return usageError(err, stderr)
		}
		cc.Logger = logger
		c, err := StartCluster(ctx, cc)
		if err != nil {
			fmt.Fprintln(stderr, "sluice-sim:", err)
			return 1
		}
		engines, stop = c.Engines, c.Shutdown
	} else {
		cfg, err := ParseFlags(args, stderr)
		if err != nil {
			return usageError(err, stderr)
		}
		e, err := New(cfg, logger)
		if err != nil {
			fmt.Fprintln(stderr, "sluice-sim:", err)
			return 2
		}
		if err := e.Start(ctx); err != nil {
			fmt.Fprintln(stderr, "sluice-sim:", err)
			return 1
		}
		engines, stop = []*Engine{e}, e.Shutdown
	}
	for _, e := range engines {
		if bp := e.BootstrapPort(); bp != 0 {
			fmt.Fprintf(stdout, "%s %s %d\n", e.Role(), e.URL(), bp)
		} else {
			fmt.Fprintf(stdout, "%s %s\n", e.Role(), e.URL())
		}
	}
	<-ctx.Done()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := stop(shutdownCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintln(stderr, "sluice-sim: shutdown:", err)
		return 1
	}
	return 0
}

func usageError(err error, stderr io.Writer) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintln(stderr, "sluice-sim:", err)
	return 2
}

// kvEventFlags binds the KV-cache event flags (vLLM's and SGLang's --kv-events-config).
func kvEventFlags(fs *flag.FlagSet, ev *KVEventsConfig) {
	fs.BoolVar(&ev.Enabled, "kv-events", false, "publish KV-cache events as --kv-events-config does: ZeroMQ PUB and ROUTER replay per DP rank")
	fs.IntVar(&ev.Port, "kv-events-port", 0, "KV events PUB port of rank 0, rank r on +r (0 picks free ports; vLLM's default is 5557)")
	fs.IntVar(&ev.ReplayPort, "kv-events-replay-port", 0, "KV events ROUTER replay port of rank 0, rank r on +r (0 picks free ports, -1 none)")
	fs.StringVar(&ev.Topic, "kv-events-topic", "", "KV events topic frame")
	fs.IntVar(&ev.BufferSteps, "kv-events-buffer-steps", 0, "batches kept for replay (default 10000, vLLM's buffer_steps)")
	fs.IntVar(&ev.DropEvery, "kv-events-drop-every", 0, "fault: every Nth KV event batch is not sent on PUB (still replayable)")
}

// faultFlags binds the fault injection flags.
func faultFlags(fs *flag.FlagSet, f *Faults) {
	fs.Float64Var(&f.ErrorRate, "error-rate", 0, "fault: fraction of generation requests failing with --error-status")
	fs.IntVar(&f.ErrorStatus, "error-status", 503, "fault: HTTP status of injected errors")
	fs.BoolVar(&f.Hang, "hang", false, "fault: accept generation requests and never answer")
	fs.Float64Var(&f.LatencyMS, "latency-ms", 0, "fault: latency added to each generation request (ms)")
	fs.Float64Var(&f.SlownessFactor, "slowness-factor", 1, "fault: multiplies every modelled duration")
	fs.IntVar(&f.DieAfterTokens, "die-after-tokens", 0, "fault: abort the connection after K output tokens")
	fs.BoolVar(&f.FailHealth, "fail-health", false, "fault: /health answers 503")
	fs.BoolVar(&f.RefuseConnections, "refuse-connections", false, "fault: do not accept connections")
	fs.BoolVar(&f.OmitKVTransferParams, "omit-kv-transfer-params", false,
		"fault, vllm prefill: never return kv_transfer_params (nixl) or keep no KV for the decode (mooncake)")
}

// topologyFlags binds the engine's place in the cluster and the KV-transfer delays it pays; finish
// sets the delays after parsing.
func topologyFlags(fs *flag.FlagSet, cfg *Config) (finish func() error) {
	fs.StringVar(&cfg.Topology.Zone, "zone", "", "topology: the engine's zone (a decode engine pays --kv-transfer-*-ms for a prefill elsewhere)")
	fs.StringVar(&cfg.Topology.Rack, "rack", "", "topology: the engine's rack")
	fs.StringVar(&cfg.Topology.Node, "node", "", "topology: the engine's node")
	xferRack := fs.Float64("kv-transfer-rack-ms", 0, "decode: extra KV-transfer time from a prefill on another node of the rack (ms)")
	xferZone := fs.Float64("kv-transfer-zone-ms", 0, "decode: extra KV-transfer time from a prefill in another rack of the zone (ms)")
	xferCross := fs.Float64("kv-transfer-cross-zone-ms", 0, "decode: extra KV-transfer time from a prefill in another zone (ms)")
	return func() error {
		if *xferRack < 0 || *xferZone < 0 || *xferCross < 0 {
			return fmt.Errorf("%w: KV transfer delays must not be negative", ErrInvalidConfig)
		}
		ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
		cfg.TransferDelays = TransferDelays{Rack: ms(*xferRack), Zone: ms(*xferZone), CrossZone: ms(*xferCross)}
		return nil
	}
}
