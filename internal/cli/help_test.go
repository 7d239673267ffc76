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
		{[]string{"workers"}, 1, "usage: sluice workers list"},
		{[]string{"admission"}, 1, "sluice admission"},
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
