package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
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
	// Four counts per role, each with its own meaning: they differ after a burst (the recommendation
	// holds the peak while the load now needs fewer), so each is named and the legend says how the
	// recommendation follows from the others.
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tROLE\tRECOMMENDED\tREGISTERED\tNEEDED-NOW\tBUSY-NOW\tCHANGE")
	for _, x := range recs {
		need := "-" // not sized: the recommendation stays at REGISTERED
		if x.GetSized() {
			need = strconv.Itoa(int(x.GetTargetWorkers()))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%s\n", x.GetModel(), x.GetRole(), x.GetRecommendedWorkers(),
			x.GetCurrentWorkers(), need, x.GetBusyWorkers(), capacityChange(x))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nRECOMMENDED: workers to scale to (sluice_capacity_recommended_workers): NEEDED-NOW, raised at once,\n"+
		"lowered only once a lower need has held for %s, never below BUSY-NOW (nor 1 while the model has\n"+
		"workers); REGISTERED when the load cannot size the role (NEEDED-NOW -). REGISTERED: workers the\n"+
		"gateway has. NEEDED-NOW: what the measured load asks for at this instant. BUSY-NOW: workers the\n"+
		"requests in flight occupy. CHANGE: RECOMMENDED minus REGISTERED.\n", r.GetScaleDownHold().AsDuration())
	for _, x := range recs {
		fmt.Fprintf(w, "\n%s %s: recommended %s (%d registered).", x.GetModel(), x.GetRole(), workerCount(x.GetRecommendedWorkers()), x.GetCurrentWorkers())
		switch rec, need := x.GetRecommendedWorkers(), x.GetTargetWorkers(); {
		case !x.GetSized():
		case rec > need && x.GetScaleDownAt() != "":
			fmt.Fprintf(w, " The load now needs %s; the recommendation keeps the recent peak until %s, then falls if the need stays lower.", workerCount(need), x.GetScaleDownAt())
		case rec > need:
			fmt.Fprintf(w, " The load now needs %s; the recommendation is not below what is busy (at least 1 while the model has workers).", workerCount(need))
		}
		fmt.Fprintf(w, " Why: %s.\n", x.GetReason())
	}
	return nil
}

// capacityChange is what an autoscaler following the recommendation does now.
func capacityChange(x *adminv1.CapacityRecommendation) string {
	switch d := x.GetRecommendedWorkers() - x.GetCurrentWorkers(); {
	case d > 0:
		return fmt.Sprintf("add %d", d)
	case d < 0:
		return fmt.Sprintf("remove %d", -d)
	}
	return "keep"
}

// workerCount is "1 worker" or "n workers".
func workerCount(n int32) string {
	if n == 1 {
		return "1 worker"
	}
	return fmt.Sprintf("%d workers", n)
}
