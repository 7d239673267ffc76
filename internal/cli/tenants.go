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

	"connectrpc.com/connect"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
)

const tenantsUsage = `usage: sluice tenants budgets get
       sluice tenants budgets set [--default TOKENS:REQUESTS] [--tenant T=TOKENS:REQUESTS ...]
  set replaces every budget (per minute; 0 = no limit of that kind); tenants not named get the default.
  It applies at once on the --server gateway and, with cluster coordination on, on every replica within
  about two exchange periods.
common flags: --server URL, --admin-api-key KEY (or $SLUICE_ADMIN_API_KEY), -o table|json`

func tenantsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if (len(args) > 0 && isHelp(args[0])) || (len(args) > 1 && args[0] == "budgets" && isHelp(args[1])) {
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
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	c, err := af.client()
	if err != nil {
		return err
	}
	var out *adminv1.TenantBudgets
	var state *adminv1.TenantBudgetsState
	if sub == "get" {
		resp, err := c.GetTenantBudgets(ctx, &adminv1.GetTenantBudgetsRequest{})
		if budgetsOff(err) {
			// A question with an answer: the gateway has no tenants, so no budgets apply.
			if af.output == "json" {
				fmt.Fprintln(stderr, budgetsOffText)
				return printJSON(stdout, &adminv1.GetTenantBudgetsResponse{})
			}
			fmt.Fprintln(stdout, budgetsOffText)
			return nil
		}
		if err != nil {
			return err
		}
		out, state = resp.GetBudgets(), resp.GetState()
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
		out, state = resp.GetBudgets(), resp.GetState()
	}
	if af.output == "json" {
		return printJSON(stdout, &adminv1.GetTenantBudgetsResponse{Budgets: out, State: state})
	}
	// Where the budgets stand goes to stderr, so the table stays parseable.
	fmt.Fprintln(stderr, budgetsStateText(sub, state))
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tTOKENS/MIN\tREQUESTS/MIN\tSHARE HERE")
	row := func(name string, b *adminv1.TenantBudget, share float64) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, limitText(b.GetTokensPerMinute()), limitText(b.GetRequestsPerMinute()), shareText(share))
	}
	row("(default)", out.GetDefault(), state.GetDefaultShare())
	for _, name := range slices.Sorted(maps.Keys(out.GetTenants())) {
		share, ok := state.GetShares()[name]
		if !ok {
			share = state.GetDefaultShare()
		}
		row(name, out.GetTenants()[name], share)
	}
	return tw.Flush()
}

// budgetsOffText answers budgets get on a gateway without a tenant source.
const budgetsOffText = "tenant budgets are off on this gateway: no tenant source is set (sluice serve --tenant-api-key-ids, --tenant-jwt-claim or --tenant-header), so no budget applies"

// budgetsOff reports whether err is the gateway saying it has no tenant source (services/admin
// errNoTenants), which for a read means "budgets are off", not a failure.
func budgetsOff(err error) bool {
	return connect.CodeOf(err) == connect.CodeInvalidArgument && strings.Contains(err.Error(), "need a tenant source")
}

// budgetsStateText says which version of the budgets is in force and whether it is the fleet's.
func budgetsStateText(sub string, st *adminv1.TenantBudgetsState) string {
	v := "version 0 (the startup flags)"
	if st.GetVersion() > 0 {
		v = fmt.Sprintf("version %d", st.GetVersion())
		if st.GetVersionOrigin() != "" {
			v += " (set on " + st.GetVersionOrigin() + ")"
		}
	}
	where := "this gateway's alone (no cluster coordination)"
	if st.GetFleet() {
		where = "the fleet's: each replica enforces the share shown for it"
		if sub == "set" {
			where += "; applied here, on every other replica within about two exchange periods"
		}
	}
	return "budgets " + v + ", " + where
}

// shareText is a fraction of a budget as a percentage.
func shareText(f float64) string {
	return strconv.FormatFloat(100*f, 'f', 1, 64) + "%"
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
