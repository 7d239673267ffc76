package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
)

const tenantsUsage = `usage: sluice tenants budgets get
       sluice tenants budgets set [--default TOKENS:REQUESTS] [--tenant T=TOKENS:REQUESTS ...]
  set replaces every budget (per minute; 0 = no limit of that kind); tenants not named get the default.
  It applies at once on the --server gateway and, with cluster coordination on, on every replica within
  about two exchange periods.
common flags: --server URL, --admin-api-key KEY (or $SLUICE_ADMIN_API_KEY), -o table|json`

func tenantsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprintln(stdout, tenantsUsage)
		return nil
	}
	if len(args) < 2 || args[0] != "budgets" || (args[1] != "get" && args[1] != "set") {
		fmt.Fprintln(stderr, tenantsUsage)
		return errors.New("tenants needs budgets get or budgets set")
	}
	sub, args := args[1], args[2:]
	fs := flag.NewFlagSet("tenants budgets "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var af adminFlags
	af.register(fs)
	var def string
	var per listFlag
	if sub == "set" {
		fs.StringVar(&def, "default", "0:0", "every other tenant's TOKENS:REQUESTS per minute")
		fs.Var(&per, "tenant", "one tenant's T=TOKENS:REQUESTS per minute; repeatable")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := af.client()
	if err != nil {
		return err
	}
	var out *adminv1.TenantBudgets
	if sub == "get" {
		resp, err := c.GetTenantBudgets(ctx, &adminv1.GetTenantBudgetsRequest{})
		if err != nil {
			return err
		}
		out = resp.GetBudgets()
		// The answer is this replica's; the note goes to stderr, so the table and JSON stay parseable.
		fmt.Fprintln(stderr, "applied on this gateway; with cluster coordination on, every replica enforces it within about two exchange periods")
	} else {
		in := &adminv1.TenantBudgets{Tenants: map[string]*adminv1.TenantBudget{}}
		if in.Default, err = parseBudget(def); err != nil {
			return fmt.Errorf("--default: %w", err)
		}
		for _, p := range per {
			name, spec, ok := strings.Cut(p, "=")
			if !ok || name == "" {
				return fmt.Errorf("--tenant %q: want T=TOKENS:REQUESTS", p)
			}
			if _, dup := in.Tenants[name]; dup {
				return fmt.Errorf("--tenant: %q is given twice", name)
			}
			if in.Tenants[name], err = parseBudget(spec); err != nil {
				return fmt.Errorf("--tenant %s: %w", name, err)
			}
		}
		resp, err := c.SetTenantBudgets(ctx, &adminv1.SetTenantBudgetsRequest{Budgets: in})
		if err != nil {
			return err
		}
		out = resp.GetBudgets()
		// The answer is this replica's; the note goes to stderr, so the table and JSON stay parseable.
		fmt.Fprintln(stderr, "applied on this gateway; with cluster coordination on, every replica enforces it within about two exchange periods")
	}
	if af.output == "json" {
		return printJSON(stdout, out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tTOKENS/MIN\tREQUESTS/MIN")
	row := func(name string, b *adminv1.TenantBudget) {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", name, limitText(b.GetTokensPerMinute()), limitText(b.GetRequestsPerMinute()))
	}
	row("(default)", out.GetDefault())
	for _, name := range slices.Sorted(maps.Keys(out.GetTenants())) {
		row(name, out.GetTenants()[name])
	}
	return tw.Flush()
}

func limitText(n int32) string {
	if n <= 0 {
		return "-"
	}
	return strconv.Itoa(int(n))
}

// parseBudget reads TOKENS:REQUESTS per minute.
func parseBudget(s string) (*adminv1.TenantBudget, error) {
	tok, req, ok := strings.Cut(s, ":")
	t, err1 := strconv.ParseInt(strings.TrimSpace(tok), 10, 32)
	r, err2 := strconv.ParseInt(strings.TrimSpace(req), 10, 32)
	if !ok || err1 != nil || err2 != nil || t < 0 || r < 0 || t > math.MaxInt32 || r > math.MaxInt32 {
		return nil, fmt.Errorf("want TOKENS:REQUESTS, non-negative integers, got %q", s)
	}
	return &adminv1.TenantBudget{TokensPerMinute: int32(t), RequestsPerMinute: int32(r)}, nil
}
