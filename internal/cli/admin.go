package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/gen/sluice/admin/v1/adminv1connect"
	"github.com/sluicegw/sluice/internal/config"
)

// EnvAdminAPIKey is read when --admin-api-key is not given.
const EnvAdminAPIKey = "SLUICE_ADMIN_API_KEY"

// adminFlags are the flags every admin client command shares.
type adminFlags struct {
	server string
	key    string
	output string
}

func (a *adminFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.server, "server", "http://127.0.0.1:30000", "gateway (or admin port) base URL")
	fs.StringVar(&a.key, "admin-api-key", "", "admin API key (default $"+EnvAdminAPIKey+")")
	fs.StringVar(&a.output, "o", "table", "output: table or json")
}

func (a *adminFlags) client() (adminv1connect.AdminServiceClient, error) {
	if a.output != "table" && a.output != "json" {
		return nil, fmt.Errorf("-o must be table or json, got %q", a.output)
	}
	key := a.key
	if key == "" {
		key = os.Getenv(EnvAdminAPIKey)
	}
	var opts []connect.ClientOption
	if key != "" {
		opts = append(opts, connect.WithInterceptors(bearerInterceptor(key)))
	}
	return adminv1connect.NewAdminServiceClient(&http.Client{Timeout: 60 * time.Second}, strings.TrimRight(a.server, "/"), opts...), nil
}

func bearerInterceptor(key string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+key)
			return next(ctx, req)
		}
	}
}

func printJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true, Multiline: true}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

func printWorkers(w io.Writer, ws []*adminv1.Worker) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tURL\tROLE\tPROTOCOL\tMODELS\tHEALTH\tBREAKER\tLOAD\tSLOTS\tSOURCE")
	for _, x := range ws {
		source := x.GetSource()
		if x.GetPod() != "" {
			source += ":" + x.GetNamespace() + "/" + x.GetPod()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", x.GetId(), x.GetUrl(), x.GetRole(), x.GetProtocol(),
			strings.Join(x.GetModels(), ","), x.GetHealth(), x.GetCircuitBreaker(), x.GetLoad(), x.GetAdmissionInflight(), source)
	}
	return tw.Flush()
}

// isHelp reports whether arg asks for usage ("sluice workers --help", "sluice workers help").
func isHelp(arg string) bool {
	switch arg {
	case "help", "-h", "-help", "--help":
		return true
	}
	return false
}

// labelsFlag collects repeatable key=value flags.
type labelsFlag map[string]string

func (l labelsFlag) String() string { return "" }
func (l labelsFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("label must be key=value, got %q", s)
	}
	l[k] = v
	return nil
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

const workersUsage = `usage: sluice workers list [--role R] [--model M] [--health H]
       sluice workers get ID
       sluice workers add --url URL --role prefill|decode|regular [--protocol P] [--model M]... [--bootstrap-port N] [--label k=v]... [--kv-events SPEC] [--decode-window N] [--kv-role kv_both]
       sluice workers drain ID [--remove]
       sluice workers rm ID
common flags: --server URL, --admin-api-key KEY (or $SLUICE_ADMIN_API_KEY), -o table|json`

func workersCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, workersUsage)
		return errors.New("missing workers subcommand")
	}
	if isHelp(args[0]) {
		fmt.Fprintln(stdout, workersUsage)
		return nil
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("workers "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var af adminFlags
	af.register(fs)
	var role, model, health, url, protocol string
	var bootstrap int
	var models listFlag
	labels := labelsFlag{}
	var remove bool
	var kvEvents, kvRole string
	var decodeWindow int
	switch sub {
	case "list":
		fs.StringVar(&role, "role", "", "only this role")
		fs.StringVar(&model, "model", "", "only workers serving this model")
		fs.StringVar(&health, "health", "", "only this health state")
	case "add":
		fs.StringVar(&url, "url", "", "worker base URL (required)")
		fs.StringVar(&role, "role", "", "prefill, decode or regular (required)")
		fs.StringVar(&protocol, "protocol", "", "sglang, vllm or grpc (default: detected)")
		fs.Var(&models, "model", "model served (repeatable; default: detected)")
		fs.IntVar(&bootstrap, "bootstrap-port", 0, "bootstrap port of a prefill worker")
		fs.Var(labels, "label", "label key=value (repeatable)")
		fs.StringVar(&kvEvents, "kv-events", "", "the engine's KV-cache events endpoint, tcp://HOST:PORT[?replay=tcp://HOST:PORT&dp=N] (kv_aware)")
		fs.IntVar(&decodeWindow, "decode-window", 0, "running window per data-parallel rank of a decode worker whose engine reports none (vLLM: its --max-num-seqs); the decode seat bound under --decode-max-inflight-requests-per-worker auto; 0 = unknown (unbounded)")
		fs.StringVar(&kvRole, "kv-role", "", "KV connector role of a vLLM decode worker: kv_both (it also prefills alone, for --pd-local-prefill-max-tokens); empty = none")
	case "drain":
		fs.BoolVar(&remove, "remove", false, "remove the worker once idle")
	case "get", "rm":
	default:
		fmt.Fprintln(stderr, workersUsage)
		return fmt.Errorf("unknown workers subcommand %q", sub)
	}
	if err := parseFlags(fs, reorder(args), stderr); err != nil {
		return err
	}
	c, err := af.client()
	if err != nil {
		return err
	}
	id := fs.Arg(0)
	needID := func() error {
		if id == "" {
			return fmt.Errorf("workers %s needs a worker id", sub)
		}
		return nil
	}
	switch sub {
	case "list":
		resp, err := c.ListWorkers(ctx, &adminv1.ListWorkersRequest{Role: role, Model: model, Health: health})
		if err != nil {
			return err
		}
		if af.output == "json" {
			return printJSON(stdout, resp)
		}
		return printWorkers(stdout, resp.GetWorkers())
	case "get":
		if err := needID(); err != nil {
			return err
		}
		resp, err := c.GetWorker(ctx, &adminv1.GetWorkerRequest{Id: id})
		if err != nil {
			return err
		}
		if af.output == "json" {
			return printJSON(stdout, resp.GetWorker())
		}
		return printWorkers(stdout, []*adminv1.Worker{resp.GetWorker()})
	case "add":
		if bootstrap < 0 || bootstrap > 65535 {
			return fmt.Errorf("--bootstrap-port %d out of range", bootstrap)
		}
		if decodeWindow < 0 || decodeWindow > 1<<20 {
			return fmt.Errorf("--decode-window %d out of range 0..%d", decodeWindow, 1<<20)
		}
		resp, err := c.AddWorker(ctx, &adminv1.AddWorkerRequest{Worker: &adminv1.WorkerSpec{
			Url: url, Role: role, Protocol: protocol, Models: models, BootstrapPort: uint32(bootstrap), Labels: labels,
			KvEvents: kvEvents, DecodeWindow: uint32(decodeWindow), KvRole: kvRole,
		}})
		if err != nil {
			return err
		}
		if af.output == "json" {
			return printJSON(stdout, resp.GetWorker())
		}
		return printWorkers(stdout, []*adminv1.Worker{resp.GetWorker()})
	case "drain":
		if err := needID(); err != nil {
			return err
		}
		resp, err := c.DrainWorker(ctx, &adminv1.DrainWorkerRequest{Id: id, RemoveWhenIdle: remove})
		if err != nil {
			return err
		}
		if af.output == "json" {
			return printJSON(stdout, resp.GetWorker())
		}
		return printWorkers(stdout, []*adminv1.Worker{resp.GetWorker()})
	default: // rm
		if err := needID(); err != nil {
			return err
		}
		resp, err := c.RemoveWorker(ctx, &adminv1.RemoveWorkerRequest{Id: id})
		if err != nil {
			return err
		}
		if af.output == "json" {
			return printJSON(stdout, resp)
		}
		fmt.Fprintf(stdout, "removed %s (%s)\n", resp.GetWorker().GetId(), resp.GetWorker().GetUrl())
		return nil
	}
}

const admissionUsage = `usage: sluice admission get
       sluice admission set [--limit N] [--queue-size N] [--queue-timeout DURATION]
                            [--token-limit N] [--bands NAME:MIN,...] [--aging DURATION]
                            [--early-rejection=true|false] [--adaptive MIN:MAX|off]
                            [--decode-limit N|auto|off]
common flags: --server URL, --admin-api-key KEY (or $SLUICE_ADMIN_API_KEY), -o table|json`

func admissionCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprintln(stdout, admissionUsage)
		return nil
	}
	if len(args) == 0 || (args[0] != "get" && args[0] != "set") {
		fmt.Fprintln(stderr, admissionUsage)
		return errors.New("admission needs get or set")
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("admission "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var af adminFlags
	af.register(fs)
	var limit, queue int
	var timeout, aging time.Duration
	var tokenLimit int64
	var bands, adaptive, decodeLimit string
	var early bool
	if sub == "set" {
		fs.IntVar(&limit, "limit", 0, "max in-flight prefill requests per worker; 0 turns admission off (a negative N counts as 0), as admission get shows it; a fixed limit turns adaptation off")
		fs.IntVar(&queue, "queue-size", 0, "max waiting requests")
		fs.DurationVar(&timeout, "queue-timeout", 0, "max wait for a slot, e.g. 30s")
		fs.Int64Var(&tokenLimit, "token-limit", 0, "max estimated prompt tokens in prefill per worker; 0 removes the bound (a negative N counts as 0)")
		fs.StringVar(&bands, "bands", "", "priority bands NAME:MIN,... lowest first (\"\" turns priorities off)")
		fs.DurationVar(&aging, "aging", 0, "a waiting request rises one band per this much wait, e.g. 10s")
		fs.BoolVar(&early, "early-rejection", false, "reject at once requests whose predicted wait exceeds their timeout")
		fs.StringVar(&adaptive, "adaptive", "", "adaptive per-worker limit range MIN:MAX, or off")
		fs.StringVar(&decodeLimit, "decode-limit", "", "decode seats per decode worker (per rank): N, auto (each engine's own window), or off (= 0)")
	}
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	c, err := af.client()
	if err != nil {
		return err
	}
	var st *adminv1.AdmissionStatus
	if sub == "get" {
		resp, err := c.GetAdmission(ctx, &adminv1.GetAdmissionRequest{})
		if err != nil {
			return err
		}
		st = resp.GetStatus()
	} else {
		req := &adminv1.UpdateAdmissionRequest{}
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if set["limit"] {
			l := int32(limit)
			req.MaxInflightPerWorker = &l
		}
		if set["queue-size"] {
			q := int32(queue)
			req.QueueSize = &q
		}
		if set["queue-timeout"] {
			req.QueueTimeout = durationpb.New(timeout)
		}
		if set["token-limit"] {
			if tokenLimit > math.MaxInt32 {
				return fmt.Errorf("--token-limit must be at most %d, got %d", math.MaxInt32, tokenLimit)
			}
			t := int32(tokenLimit)
			req.MaxInflightTokensPerWorker = &t
		}
		if set["bands"] {
			parsed, err := config.ParsePriorityBands(bands)
			if err != nil {
				return fmt.Errorf("--bands: %w", err)
			}
			req.PriorityBands = &adminv1.PriorityBandList{}
			for _, b := range parsed {
				req.PriorityBands.Bands = append(req.PriorityBands.Bands, &adminv1.PriorityBand{Name: b.Name, MinPriority: int32(b.MinPriority)})
			}
		}
		if set["aging"] {
			req.PriorityAging = durationpb.New(aging)
		}
		if set["early-rejection"] {
			req.EarlyRejection = &early
		}
		if set["adaptive"] {
			req.AdaptiveLimit = &adminv1.AdaptiveLimit{}
			if adaptive != "off" && adaptive != "" {
				lo, hi, ok := strings.Cut(adaptive, ":")
				mn, err1 := strconv.Atoi(lo)
				mx, err2 := strconv.Atoi(hi)
				if !ok || err1 != nil || err2 != nil {
					return fmt.Errorf("--adaptive %q: want MIN:MAX or off", adaptive)
				}
				req.AdaptiveLimit.Min, req.AdaptiveLimit.Max = int32(mn), int32(mx)
			}
		}
		if set["decode-limit"] {
			if err := setDecodeLimit(req, decodeLimit); err != nil {
				return err
			}
		}
		changes := 0
		for _, f := range []string{"limit", "queue-size", "queue-timeout", "token-limit", "bands", "aging", "early-rejection", "adaptive", "decode-limit"} {
			if set[f] {
				changes++
			}
		}
		if changes == 0 {
			return errors.New("admission set needs at least one of --limit, --queue-size, --queue-timeout, --token-limit, --bands, --aging, --early-rejection, --adaptive, --decode-limit")
		}
		resp, err := c.UpdateAdmission(ctx, req)
		if err != nil {
			return err
		}
		st = resp.GetStatus()
	}
	if af.output == "json" {
		return printJSON(stdout, st)
	}
	return printAdmission(stdout, st)
}

// setDecodeLimit turns --decode-limit into the request: N is a fixed bound (auto off), auto takes each
// engine's window (a fixed bound, if any, stays for workers whose window is unknown), off removes both.
func setDecodeLimit(req *adminv1.UpdateAdmissionRequest, v string) error {
	switch v = strings.TrimSpace(v); v {
	case "auto":
		on := true
		req.DecodeAuto = &on
	case "off":
		var zero int32
		off := false
		req.DecodeMaxInflightPerWorker, req.DecodeAuto = &zero, &off
	default:
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("--decode-limit %q: want N, auto or off", v)
		}
		l, off := int32(n), false
		req.DecodeMaxInflightPerWorker, req.DecodeAuto = &l, &off
	}
	return nil
}

// decodeLimitText describes the decode seat bound of s.
func decodeLimitText(s *adminv1.AdmissionSettings) string {
	n := s.GetDecodeMaxInflightPerWorker()
	switch {
	case s.GetDecodeAuto() && n > 0:
		return fmt.Sprintf("auto (else %d)", n)
	case s.GetDecodeAuto():
		return "auto"
	case n > 0:
		return strconv.Itoa(int(n))
	}
	return "off"
}

func printAdmission(w io.Writer, st *adminv1.AdmissionStatus) error {
	s := st.GetSettings()
	fmt.Fprintf(w, "enabled:        %t\nlimit/worker:   %d\nqueue size:     %d\nqueue timeout:  %s\nqueued:         %d\nwait p50/p90/p99: %.3fs / %.3fs / %.3fs\n",
		st.GetEnabled(), s.GetMaxInflightPerWorker(), s.GetQueueSize(), s.GetQueueTimeout().AsDuration(), st.GetQueued(),
		st.GetWaitP50Seconds(), st.GetWaitP90Seconds(), st.GetWaitP99Seconds())
	if t := s.GetMaxInflightTokensPerWorker(); t > 0 {
		fmt.Fprintf(w, "tokens/worker:  %d\n", t)
	}
	if a := s.GetAdaptiveLimit(); a != nil {
		fmt.Fprintf(w, "adaptive limit: %d:%d\n", a.GetMin(), a.GetMax())
	}
	if s.GetEarlyRejection() {
		fmt.Fprintf(w, "early rejection: on (release rate %.2f/s)\n", st.GetReleaseRate())
	}
	if d := decodeLimitText(s); d != "off" {
		fmt.Fprintf(w, "decode seats/worker: %s (release rate %.2f/s)\n", d, st.GetSeatReleaseRate())
	}
	cl := st.GetCluster()
	if cl != nil {
		role := "follows " + cl.GetCoordinator()
		if cl.GetIsCoordinator() {
			role = "coordinates"
		}
		lease := "never granted"
		if cl.GetLeaseAge() != nil {
			lease = fmt.Sprintf("last grant %.2fs ago", cl.GetLeaseAge().AsDuration().Seconds())
		}
		if cl.GetFallback() {
			lease += ", lease ended: FALLBACK (even split)"
		}
		fmt.Fprintf(w, "cluster:        %s, replica %s %s, fleet limit %d over %d members, %s\n",
			cl.GetMode(), cl.GetReplica(), role, cl.GetFleetLimit(), len(cl.GetMembers()), lease)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(st.GetBands()) > 0 {
		fmt.Fprintf(tw, "BAND\tMIN PRIORITY\tQUEUED\t(aging %s)\n", s.GetPriorityAging().AsDuration())
		for _, b := range st.GetBands() {
			fmt.Fprintf(tw, "%s\t%d\t%d\t\n", b.GetName(), b.GetMinPriority(), b.GetQueued())
		}
	}
	if len(st.GetWorkers()) > 0 {
		switch {
		case cl != nil:
			fmt.Fprintln(tw, "WORKER\tSLOTS\tTOKENS\tLIMIT\tSHARE\tDEMAND")
			for _, x := range st.GetWorkers() {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\n", x.GetUrl(), x.GetInflight(), x.GetInflightTokens(), x.GetLimit(),
					x.GetClusterShare(), x.GetClusterDemand())
			}
		default:
			fmt.Fprintln(tw, "WORKER\tSLOTS\tTOKENS\tLIMIT")
			for _, x := range st.GetWorkers() {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", x.GetUrl(), x.GetInflight(), x.GetInflightTokens(), x.GetLimit())
			}
		}
	}
	if len(st.GetDecodeWorkers()) > 0 {
		fmt.Fprintln(tw, "DECODE WORKER\tSEATS\tLIMIT\tWINDOW")
		for _, x := range st.GetDecodeWorkers() {
			limit, window := strconv.Itoa(int(x.GetLimit())), strconv.Itoa(int(x.GetWindow()))
			if x.GetLimit() <= 0 {
				limit = "none"
			}
			if x.GetWindow() <= 0 {
				window = "unknown"
				if st.GetSettings().GetDecodeAuto() && x.GetLimit() <= 0 {
					window = "unknown (unbounded: declare --decode-window)"
				}
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", x.GetWorker(), x.GetInflight(), limit, window)
		}
	}
	for _, m := range cl.GetReplicas() {
		for _, x := range m.GetWorkers() {
			fmt.Fprintf(tw, "REPLICA %s (%s)\t%s\tgranted %d\treserved %d\tdemand %d\n", m.GetReplica(), m.GetState(), x.GetWorker(), x.GetGranted(), x.GetReserved(), x.GetDemand())
		}
	}
	if len(st.GetRejections()) > 0 {
		keys := make([]string, 0, len(st.GetRejections()))
		for k := range st.GetRejections() {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintln(tw, "REJECTED\tCOUNT")
		for _, k := range keys {
			fmt.Fprintf(tw, "%s\t%s\n", k, strconv.Itoa(int(st.GetRejections()[k])))
		}
	}
	return tw.Flush()
}

// reorder moves positional arguments after the flags so "get ID -o json" parses like "-o json get ID".
func reorder(args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") {
			flags = append(flags, a)
			if !strings.Contains(a, "=") && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") && !isBoolFlag(a) {
				flags = append(flags, args[i+1])
				i++
			}
			continue
		}
		pos = append(pos, a)
	}
	return append(flags, pos...)
}

func isBoolFlag(a string) bool {
	name := strings.TrimLeft(a, "-")
	return name == "remove" || name == "early-rejection"
}
