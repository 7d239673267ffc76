package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
)

const capacityUsage = `usage: sluice capacity [--server URL] [--admin-api-key KEY] [-o table|json]

Prints how many prefill and decode workers each model needs now (what
sluice_capacity_recommended_workers exports for autoscalers), and why, in words.`

// capacityCmd is `sluice capacity`.
func capacityCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprintln(stdout, capacityUsage)
		return nil
	}
	fs := flag.NewFlagSet("capacity", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var af adminFlags
	af.register(fs)
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(stderr, capacityUsage)
		return fmt.Errorf("capacity takes no arguments, got %q", fs.Args())
	}
	c, err := af.client()
	if err != nil {
		return err
	}
	resp, err := c.GetCapacity(ctx, &adminv1.GetCapacityRequest{})
	if err != nil {
		return err
	}
	if af.output == "json" {
		return printJSON(stdout, resp)
	}
	return printCapacity(stdout, resp)
}

func printCapacity(w io.Writer, r *adminv1.GetCapacityResponse) error {
	if !r.GetEnabled() {
		_, err := fmt.Fprintln(w, "no capacity recommendation: the gateway is not in PD mode (nothing to size by role)")
		return err
	}
	ttft, itl := "none", "none"
	if d := r.GetSloTtft().AsDuration(); d > 0 {
		ttft = d.String()
	}
	if d := r.GetSloItl().AsDuration(); d > 0 {
		itl = d.String()
	}
	fmt.Fprintf(w, "SLOs: TTFT %s, ITL %s; scale-down after %s of a lower target\n\n", ttft, itl, r.GetScaleDownHold().AsDuration())
	recs := r.GetRecommendations()
	if len(recs) == 0 {
		_, err := fmt.Fprintln(w, "no model measured yet")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tROLE\tRECOMMENDED\tCURRENT\tTARGET\tBUSY\tCHANGE")
	for _, x := range recs {
		change := "keep"
		switch d := x.GetRecommendedWorkers() - x.GetCurrentWorkers(); {
		case d > 0:
			change = fmt.Sprintf("add %d", d)
		case d < 0:
			change = fmt.Sprintf("remove %d", -d)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", x.GetModel(), x.GetRole(), x.GetRecommendedWorkers(),
			x.GetCurrentWorkers(), x.GetTargetWorkers(), x.GetBusyWorkers(), change)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, x := range recs {
		unit := "workers"
		if x.GetRecommendedWorkers() == 1 {
			unit = "worker"
		}
		fmt.Fprintf(w, "\n%s %s: %d %s. %s.\n", x.GetModel(), x.GetRole(), x.GetRecommendedWorkers(), unit, x.GetReason())
	}
	return nil
}
