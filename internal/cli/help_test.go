package cli_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/cli"
)

// Asking a command group for help prints its usage on stdout and exits 0; a missing subcommand is
// still an error.
func TestSubcommandHelp(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		code int
		out  string // in stdout when code is 0, in stderr otherwise
	}{
		{[]string{"workers", "--help"}, 0, "usage: sluice workers list"},
		{[]string{"workers", "-h"}, 0, "usage: sluice workers list"},
		{[]string{"workers", "help"}, 0, "usage: sluice workers list"},
		{[]string{"admission", "--help"}, 0, "sluice admission"},
		{[]string{"workers", "list", "--help"}, 0, ""},
		{[]string{"tenants", "--help"}, 0, "usage: sluice tenants budgets get"},
		{[]string{"tenants", "budgets", "--help"}, 0, "usage: sluice tenants budgets get"},
		{[]string{"tenants", "budgets", "-h"}, 0, "usage: sluice tenants budgets get"},
		{[]string{"tenants", "budgets", "help"}, 0, "usage: sluice tenants budgets get"},
		{[]string{"workers"}, 1, "usage: sluice workers list"},
		{[]string{"admission"}, 1, "sluice admission"},
		{[]string{"tenants", "budgets"}, 1, "usage: sluice tenants budgets get"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := cli.Main(t.Context(), tc.args, &stdout, &stderr)
			if code != tc.code {
				t.Fatalf("exit %d, want %d (stdout %q, stderr %q)", code, tc.code, stdout.String(), stderr.String())
			}
			where := stdout.String()
			if tc.code != 0 {
				where = stderr.String()
			}
			if !strings.Contains(where, tc.out) {
				t.Errorf("output %q does not contain %q", where, tc.out)
			}
		})
	}
}

// Every subcommand's --help (and -h) exits 0 and prints its flags or usage, without contacting a
// gateway and without an error line.
func TestEveryHelpExitsZero(t *testing.T) {
	t.Parallel()
	for _, cmd := range [][]string{
		{"serve"}, {"launch"}, {"demo"}, {"top"}, {"capacity"},
		{"workers"}, {"workers", "list"}, {"workers", "get"}, {"workers", "add"}, {"workers", "drain"}, {"workers", "rm"},
		{"admission"}, {"admission", "get"}, {"admission", "set"},
		{"tenants"}, {"tenants", "budgets"}, {"tenants", "budgets", "get"}, {"tenants", "budgets", "set"},
	} {
		for _, h := range []string{"--help", "-h"} {
			args := append(append([]string{}, cmd...), h)
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				var stdout, stderr bytes.Buffer
				if code := cli.Main(t.Context(), args, &stdout, &stderr); code != 0 {
					t.Fatalf("exit %d, want 0 (stdout %q, stderr %q)", code, stdout.String(), stderr.String())
				}
				all := stdout.String() + stderr.String()
				if strings.TrimSpace(all) == "" || strings.Contains(all, "sluice:") {
					t.Fatalf("want usage and no error line, got stdout %q stderr %q", stdout.String(), stderr.String())
				}
			})
		}
	}
}

// A flag error is printed once: the usage, then the error (from Main) a single time; a mistyped flag
// names the closest one.
func TestFlagErrorsOnceWithSuggestion(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"admission", "set", "--queue-timeout", "5"}, `invalid value "5" for flag -queue-timeout: parse error (a duration takes a unit: 5s, 500ms, 2m)`},
		{[]string{"admission", "set", "--queue-timout", "5s"}, "did you mean --queue-timeout?"},
		{[]string{"admission", "set", "--limt", "3"}, "did you mean --limit?"},
		{[]string{"workers", "list", "--rol", "prefill"}, "did you mean --role?"},
		{[]string{"tenants", "budgets", "set", "--defalt", "1:1"}, "did you mean --default?"},
		{[]string{"capacity", "--servr", "http://x"}, "did you mean --server?"},
		{[]string{"top", "--servr", "http://x"}, "did you mean --server?"},
		{[]string{"serve", "--prefil", "http://p:1"}, "did you mean --prefill?"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := cli.Main(t.Context(), tc.args, &stdout, &stderr); code != 1 {
				t.Fatalf("exit %d, want 1 (stderr %q)", code, stderr.String())
			}
			errs := stderr.String()
			if n := strings.Count(errs, tc.want); n != 1 {
				t.Fatalf("stderr has %q %d times, want once:\n%s", tc.want, n, errs)
			}
			if !strings.HasSuffix(strings.TrimSpace(errs), tc.want) && !strings.Contains(lastLine(errs), tc.want) {
				t.Fatalf("the error is not the last line:\n%s", errs)
			}
		})
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}
