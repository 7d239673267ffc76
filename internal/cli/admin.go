package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
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
       sluice workers add --url URL --role prefill|decode|regular [--protocol P] [--model M]... [--bootstrap-port N] [--label k=v]...
       sluice workers drain ID [--remove]
       sluice workers rm ID
common flags: --server URL, --admin-api-key KEY (or $SLUICE_ADMIN_API_KEY), -o table|json`

func workersCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, workersUsage)
		return errors.New("missing workers subcommand")
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
	case "drain":
		fs.BoolVar(&remove, "remove", false, "remove the worker once idle")
	case "get", "rm":
	default:
		fmt.Fprintln(stderr, workersUsage)
		return fmt.Errorf("unknown workers subcommand %q", sub)
	}
	if err := fs.Parse(reorder(args)); err != nil {
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
		resp, err := c.AddWorker(ctx, &adminv1.AddWorkerRequest{Worker: &adminv1.WorkerSpec{
			Url: url, Role: role, Protocol: protocol, Models: models, BootstrapPort: uint32(bootstrap), Labels: labels,
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
common flags: --server URL, --admin-api-key KEY (or $SLUICE_ADMIN_API_KEY), -o table|json`

func admissionCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
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
	var timeout time.Duration
	if sub == "set" {
		fs.IntVar(&limit, "limit", 0, "max in-flight prefill requests per worker (<= 0 turns admission off)")
		fs.IntVar(&queue, "queue-size", 0, "max waiting requests")
		fs.DurationVar(&timeout, "queue-timeout", 0, "max wait for a slot, e.g. 30s")
	}
	if err := fs.Parse(args); err != nil {
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
		if len(set) == 0 || (!set["limit"] && !set["queue-size"] && !set["queue-timeout"]) {
			return errors.New("admission set needs at least one of --limit, --queue-size, --queue-timeout")
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

func printAdmission(w io.Writer, st *adminv1.AdmissionStatus) error {
	s := st.GetSettings()
	fmt.Fprintf(w, "enabled:        %t\nlimit/worker:   %d\nqueue size:     %d\nqueue timeout:  %s\nqueued:         %d\nwait p50/p90/p99: %.3fs / %.3fs / %.3fs\n",
		st.GetEnabled(), s.GetMaxInflightPerWorker(), s.GetQueueSize(), s.GetQueueTimeout().AsDuration(), st.GetQueued(),
		st.GetWaitP50Seconds(), st.GetWaitP90Seconds(), st.GetWaitP99Seconds())
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
	if len(st.GetWorkers()) > 0 {
		if cl != nil {
			fmt.Fprintln(tw, "WORKER\tSLOTS\tSHARE\tDEMAND")
			for _, x := range st.GetWorkers() {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", x.GetUrl(), x.GetInflight(), x.GetClusterShare(), x.GetClusterDemand())
			}
		} else {
			fmt.Fprintln(tw, "WORKER\tSLOTS")
			for _, x := range st.GetWorkers() {
				fmt.Fprintf(tw, "%s\t%d\n", x.GetUrl(), x.GetInflight())
			}
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
			fmt.Fprintf(tw, "%s\t%s\n", k, strconv.FormatInt(st.GetRejections()[k], 10))
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
	return name == "remove"
}
