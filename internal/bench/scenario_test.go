package bench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestScenarioSmoke runs the short in-process version of every scenario and checks
// only that they produce well-formed results.
func TestScenarioSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts simulators and gateways")
	}
	// overhead's short form runs in tests/overhead (TestOverheadScenarioShort).
	for _, name := range []string{"dp", "overload", "prefix", "replicas", "scale"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			res, err := RunScenario(context.Background(), name, ScenarioOptions{OutDir: dir, Short: true, InProcess: true, NoNginx: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Runs) == 0 || len(res.Table) < 2 {
				t.Fatalf("%d runs, %d table rows", len(res.Runs), len(res.Table))
			}
			for _, run := range res.Runs {
				if run.Summary.Requests == 0 || run.Summary.Succeeded == 0 {
					t.Fatalf("run %s: summary %+v", run.Label, run.Summary)
				}
				b, err := os.ReadFile(run.File)
				if err != nil {
					t.Fatal(err)
				}
				var r Result
				if err := json.Unmarshal(b, &r); err != nil || len(r.Records) != r.Summary.Sent {
					t.Fatalf("run file %s: %v, %d records for %d sent", run.File, err, len(r.Records), r.Summary.Sent)
				}
			}
			for _, f := range []string{name + ".json", name + ".md"} {
				if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
					t.Fatalf("%s: %v", f, err)
				}
			}
			var back ScenarioResult
			b, _ := os.ReadFile(filepath.Join(dir, name+".json"))
			if err := json.Unmarshal(b, &back); err != nil || back.Name != name || len(back.Runs) != len(res.Runs) {
				t.Fatalf("%s.json: %v, %+v", name, err, back)
			}
		})
	}
}
