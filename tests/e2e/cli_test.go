package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/cli"
)

// runCLI runs the sluice command in-process and returns its stdout; a non-zero exit fails the test
// unless wantCode says otherwise.
func runCLI(t *testing.T, wantCode int, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := cli.Main(context.Background(), args, &out, &errOut); code != wantCode {
		t.Fatalf("sluice %s: exit %d (want %d)\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, wantCode, out.String(), errOut.String())
	}
	return out.String()
}

// TestCLIAgainstRunningGateway drives `sluice workers` and `sluice admission` against a gateway and
// parses their table and JSON output.
func TestCLIAgainstRunningGateway(t *testing.T) {
	t.Parallel()
	gw := startGateway(t, app.Options{}, "--pd-disaggregation", "--admin-api-key", "adm", "--prefill-max-inflight-requests-per-worker", "3")
	common := []string{"--server", gw.URL, "--admin-api-key", "adm"}
	with := func(args ...string) []string { return append(args, common...) }

	var added struct {
		ID, URL, Role, Health string
		Models                []string
		BootstrapPort         int `json:"bootstrap_port"`
	}
	out := runCLI(t, 0, with("workers", "add", "--url", "http://127.0.0.1:9", "--role", "prefill", "--protocol", "sglang",
		"--model", "m1", "--bootstrap-port", "8998", "--label", "zone=a", "-o", "json")...)
	if err := json.Unmarshal([]byte(out), &added); err != nil {
		t.Fatalf("add -o json: %v\n%s", err, out)
	}
	if added.ID == "" || added.URL != "http://127.0.0.1:9" || added.Role != "prefill" || added.BootstrapPort != 8998 || len(added.Models) != 1 {
		t.Fatalf("added %+v", added)
	}

	table := runCLI(t, 0, with("workers", "list")...)
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[1], added.ID) || !strings.Contains(lines[1], "pending") {
		t.Fatalf("workers list table:\n%s", table)
	}
	var listed struct {
		Workers []struct{ ID string } `json:"workers"`
	}
	if err := json.Unmarshal([]byte(runCLI(t, 0, with("workers", "list", "--role", "prefill", "-o", "json")...)), &listed); err != nil || len(listed.Workers) != 1 {
		t.Fatalf("list -o json: %v %+v", err, listed)
	}
	if got := runCLI(t, 0, with("workers", "get", added.ID)...); !strings.Contains(got, "http://127.0.0.1:9") {
		t.Fatalf("get:\n%s", got)
	}

	var st struct {
		Settings struct {
			Limit int    `json:"max_inflight_per_worker"`
			Queue int    `json:"queue_size"`
			TO    string `json:"queue_timeout"`
		} `json:"settings"`
	}
	if err := json.Unmarshal([]byte(runCLI(t, 0, with("admission", "set", "--limit", "5", "--queue-size", "7", "--queue-timeout", "2s", "-o", "json")...)), &st); err != nil {
		t.Fatal(err)
	}
	if st.Settings.Limit != 5 || st.Settings.Queue != 7 || st.Settings.TO != "2s" {
		t.Fatalf("admission set -o json: %+v", st)
	}
	if got := gw.Admission.Settings(); got.MaxInflightPerWorker != 5 || got.QueueSize != 7 {
		t.Fatalf("gateway settings after the CLI set them: %+v", got)
	}
	if got := runCLI(t, 0, with("admission", "get")...); !strings.Contains(got, "limit/worker:   5") {
		t.Fatalf("admission get:\n%s", got)
	}

	runCLI(t, 0, with("workers", "drain", added.ID, "--remove")...)
	waitFor(t, "drained idle worker gone", 5e9, func() bool { return gw.Registry.Snapshot().Len() == 0 })

	// Errors exit non-zero: a wrong key, an unknown id, a bad flag value.
	runCLI(t, 1, "workers", "list", "--server", gw.URL, "--admin-api-key", "wrong")
	runCLI(t, 1, with("workers", "rm", "no-such-id")...)
	runCLI(t, 1, with("admission", "set", "--queue-size", "-1")...)
}

// TestCLIBudgetsGetWithoutTenants: on a gateway without a tenant source, `sluice tenants budgets get`
// answers (exit 0) that budgets are off, in both output forms; set is still refused.
func TestCLIBudgetsGetWithoutTenants(t *testing.T) {
	t.Parallel()
	gw := startGateway(t, app.Options{})
	out := runCLI(t, 0, "tenants", "budgets", "get", "--server", gw.URL)
	if !strings.Contains(out, "tenant budgets are off") || !strings.Contains(out, "--tenant-header") {
		t.Fatalf("budgets get without tenants:\n%s", out)
	}
	var resp map[string]any
	if err := json.Unmarshal([]byte(runCLI(t, 0, "tenants", "budgets", "get", "--server", gw.URL, "-o", "json")), &resp); err != nil {
		t.Fatalf("budgets get -o json: %v", err)
	}
	runCLI(t, 1, "tenants", "budgets", "set", "--server", gw.URL, "--default", "10:1")
}
