package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/gen/sluice/admin/v1/adminv1connect"
)

// `sluice top`: a live view of prefill admission from the admin API, like `kubectl top`. On a terminal
// it redraws in place every interval until interrupted; otherwise it prints plain snapshots (one by
// default), so `sluice top | grep` and scripts work.

const topUsage = `usage: sluice top [--interval 2s] [-n N] [--loads] [--server URL] [--admin-api-key KEY]
  -n N        refreshes before exiting (default: until interrupted on a terminal, 1 otherwise)
  --loads     also ask every engine for its own load at each refresh`

// topSnapshot is one refresh.
type topSnapshot struct {
	at        time.Time
	admission *adminv1.AdmissionStatus
	workers   []*adminv1.Worker
	loads     map[string]*adminv1.WorkerLoad // by worker id; nil without --loads
}

func topCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("top", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, topUsage) }
	var af adminFlags
	af.register(fs)
	interval := fs.Duration("interval", 2*time.Second, "time between refreshes")
	n := fs.Int("n", 0, "refreshes before exiting; 0 = until interrupted on a terminal, 1 otherwise")
	loads := fs.Bool("loads", false, "also ask every engine for its own load at each refresh")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if *interval <= 0 {
		return fmt.Errorf("--interval must be positive, got %v", *interval)
	}
	if *n < 0 {
		return fmt.Errorf("-n must be >= 0, got %d", *n)
	}
	c, err := af.client()
	if err != nil {
		return err
	}
	term := isTerminal(stdout)
	if *n == 0 && !term {
		*n = 1
	}
	return runTop(ctx, c, stdout, topOptions{server: af.server, interval: *interval, count: *n, loads: *loads, term: term})
}

type topOptions struct {
	server   string
	interval time.Duration
	count    int  // 0 = until ctx ends
	loads    bool // fetch engine loads
	term     bool // redraw in place
}

// runTop refreshes until count snapshots were shown or ctx ends (an interrupt is a normal end). A
// failed refresh ends it with the error on the first one (nothing to show), and is shown in place of
// the view afterwards, so a restarting gateway does not end a watch.
func runTop(ctx context.Context, c adminv1connect.AdminServiceClient, w io.Writer, o topOptions) error {
	if o.term {
		fmt.Fprint(w, "\x1b[?25l")       // hide the cursor while redrawing
		defer fmt.Fprint(w, "\x1b[?25h") // and give it back
	}
	var prev *topSnapshot
	t := time.NewTicker(o.interval)
	defer t.Stop()
	for i := 0; o.count == 0 || i < o.count; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
		snap, err := fetchTop(ctx, c, o.loads)
		var frame string
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil && prev == nil:
			return err
		case err != nil:
			frame = fmt.Sprintf("sluice top  %s  %s\n\nrefresh failed: %v\n", o.server, time.Now().Format("15:04:05"), err)
		default:
			frame = renderTop(o.server, snap, prev)
			prev = snap
		}
		if o.term {
			frame = "\x1b[H\x1b[2J" + frame // home and clear: redraw in place
		} else if i > 0 {
			frame = "\n" + frame
		}
		if _, err := io.WriteString(w, frame); err != nil {
			return err
		}
	}
	return nil
}

func fetchTop(ctx context.Context, c adminv1connect.AdminServiceClient, withLoads bool) (*topSnapshot, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	adm, err := c.GetAdmission(rctx, &adminv1.GetAdmissionRequest{})
	if err != nil {
		return nil, err
	}
	ws, err := c.ListWorkers(rctx, &adminv1.ListWorkersRequest{})
	if err != nil {
		return nil, err
	}
	s := &topSnapshot{at: time.Now(), admission: adm.GetStatus(), workers: ws.GetWorkers()}
	if withLoads {
		l, err := c.GetLoads(rctx, &adminv1.GetLoadsRequest{})
		if err != nil {
			return nil, err
		}
		s.loads = map[string]*adminv1.WorkerLoad{}
		for _, x := range l.GetLoads() {
			s.loads[x.GetId()] = x
		}
	}
	return s, nil
}

// barWidth is the width of a slot bar.
const barWidth = 10

// bar draws used of limit as a bar of barWidth cells.
func bar(used, limit int32) string {
	if limit <= 0 {
		return ""
	}
	full := int(min(used, limit)) * barWidth / int(limit)
	return "[" + strings.Repeat("#", full) + strings.Repeat(".", barWidth-full) + "]"
}

// renderTop draws one snapshot; prev (may be nil) gives the rejection rates.
func renderTop(server string, s, prev *topSnapshot) string {
	var b strings.Builder
	st := s.admission
	set := st.GetSettings()
	fmt.Fprintf(&b, "sluice top  %s  %s\n", server, s.at.Format("15:04:05"))
	if st.GetEnabled() {
		fmt.Fprintf(&b, "admission on: limit %d per prefill worker, queue %d/%d, timeout %s", set.GetMaxInflightPerWorker(),
			st.GetQueued(), set.GetQueueSize(), set.GetQueueTimeout().AsDuration())
		if d := decodeLimitText(set); d != "off" {
			fmt.Fprintf(&b, ", decode seats %s per decode worker", d)
		}
		b.WriteString("\n\n")
	} else {
		b.WriteString("admission off\n\n")
	}
	inflight := map[string]int32{}
	for _, x := range st.GetWorkers() {
		inflight[x.GetUrl()] = x.GetInflight()
	}
	// Seats are per rank (URL@rank) where ranks are placed: an engine's row sums its ranks.
	seats, seatLimits := map[string]int32{}, map[string]int32{}
	for _, x := range st.GetDecodeWorkers() {
		url, _, _ := strings.Cut(x.GetWorker(), "@")
		seats[url] += x.GetInflight()
		seatLimits[url] += max(x.GetLimit(), 0)
	}
	showSeats := len(st.GetDecodeWorkers()) > 0
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, role := range []string{"prefill", "decode", "regular"} {
		var ws []*adminv1.Worker
		for _, w := range s.workers {
			if w.GetRole() == role {
				ws = append(ws, w)
			}
		}
		if len(ws) == 0 {
			continue
		}
		head := strings.ToUpper(role) + " WORKER\tHEALTH\tBREAKER\tLEGS"
		if role == "prefill" && st.GetEnabled() {
			head += "\tSLOTS"
		}
		if role == "decode" && showSeats {
			head += "\tSEATS"
		}
		if s.loads != nil {
			head += "\tENGINE RUN/WAIT/KV"
		}
		fmt.Fprintln(tw, head)
		for _, w := range ws {
			line := fmt.Sprintf("%s\t%s\t%s\t%d", w.GetUrl(), w.GetHealth(), w.GetCircuitBreaker(), w.GetLoad())
			if role == "prefill" && st.GetEnabled() {
				used, limit := inflight[w.GetUrl()], set.GetMaxInflightPerWorker()
				line += fmt.Sprintf("\t%d/%d %s", used, limit, bar(used, limit))
			}
			if role == "decode" && showSeats {
				used, limit := seats[w.GetUrl()], seatLimits[w.GetUrl()]
				line += fmt.Sprintf("\t%d/%d %s", used, limit, bar(used, limit))
			}
			if s.loads != nil {
				if l := s.loads[w.GetId()]; l == nil || l.GetError() != "" {
					line += "\t-"
				} else {
					line += fmt.Sprintf("\t%d/%d/%.0f%%", l.GetRunningRequests(), l.GetWaitingRequests(), 100*l.GetKvUsage())
				}
			}
			fmt.Fprintln(tw, line)
		}
		fmt.Fprintln(tw)
	}
	if st.GetEnabled() {
		fmt.Fprintln(tw, "QUEUE (MODEL)\tWAITING")
		queues := st.GetQueues()
		if len(queues) == 0 {
			fmt.Fprintln(tw, "(none waiting)\t0")
		}
		for _, q := range queues {
			fmt.Fprintf(tw, "%s\t%d\n", q.GetModel(), q.GetQueued())
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
	fmt.Fprintf(&b, "waits (recent)  p50 %s  p90 %s  p99 %s\n", secs(st.GetWaitP50Seconds()), secs(st.GetWaitP90Seconds()), secs(st.GetWaitP99Seconds()))
	reasons := make([]string, 0, len(st.GetRejections()))
	for k := range st.GetRejections() {
		reasons = append(reasons, k)
	}
	sort.Strings(reasons)
	b.WriteString("rejected")
	if len(reasons) == 0 {
		b.WriteString("  none")
	}
	for _, k := range reasons {
		n := st.GetRejections()[k]
		fmt.Fprintf(&b, "  %s %d", k, n)
		if prev != nil {
			if dt := s.at.Sub(prev.at).Seconds(); dt > 0 {
				fmt.Fprintf(&b, " (%+.1f/s)", float64(n-prev.admission.GetRejections()[k])/dt)
			}
		}
	}
	b.WriteString("\n")
	return b.String()
}

func secs(v float64) string { return fmt.Sprintf("%.3fs", v) }

// isTerminal reports whether w is a terminal (a character device), where top redraws in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
