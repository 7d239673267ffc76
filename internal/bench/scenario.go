package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// ScenarioOptions configure a scenario run.
type ScenarioOptions struct {
	OutDir string // result files and the markdown summary go here
	Short  bool   // a few-second smoke version
	// InProcess runs the gateway and the simulators inside this process even where the scenario would
	// use separate processes (overhead); CPU per request is then not measured.
	InProcess    bool
	NoNginx      bool   // overhead: skip the nginx baseline
	InstallNginx bool   // overhead: apt-get install nginx when missing (root only)
	SluiceBin    string // overhead: the gateway binary (default: built from the module)
	SimBin       string // overhead: the simulator binary (default: built from the module)
	BaselineBin  string // overhead: the baseline servers' binary (default: built from the module)
	Rounds       int    // overhead: interleaved rounds (default 3; 1 when short)
	PDOnly       bool   // overhead: only the PD targets (bare-pd, sluice-pd, sluice-pd-seats, sluice-pd-grpc)
	// PairedOnly is overhead's issue #33 figures alone: only the paired loads, each on a gateway and its
	// baseline at once (sluice-pd and bare-pd, sluice and reverseproxy), about 30 s a round where the
	// whole scenario takes minutes.
	PairedOnly bool
	// PDRate is overhead's PD JSON open-loop rate (default 1000 req/s; 200 when short).
	PDRate float64
	// StreamRate is overhead's streamed loads' arrival rate, spaced and back to back (default 200 and
	// 1,000 req/s; 50 and 200 when short).
	StreamRate float64
	// Engines is tenants' prefill engines and decode engines each (default 4).
	Engines int
	// Duration is tenants' measured time per variant (default 60 s).
	Duration time.Duration
	// Prompts is tenants' prompt lengths in tokens: "N" (every prompt N) or "LO-HI" (lognormal between
	// them, the median at their geometric mean); "" is 256-4096.
	Prompts string
	// Variants restricts tenants to these variants (noisy-absent, fairness-off, fairness-round-robin,
	// fairness-share); nil runs them all.
	Variants []string
	// DecodeGateFlags are the gateway flags of decode-bound's "on" runs (nil: DefaultDecodeGateFlags).
	DecodeGateFlags []string
	// Progress receives the load generator's per-second lines; nil prints none.
	Progress io.Writer
	// Log receives scenario notes as they happen (and child process stderr); nil discards.
	Log    io.Writer
	Logger *slog.Logger // components' logger; nil discards
}

// RunRef is one load run of a scenario.
type RunRef struct {
	Label   string         `json:"label"`
	File    string         `json:"file"`
	Summary Summary        `json:"summary"`
	Extra   map[string]any `json:"extra,omitempty"`
}

// ScenarioResult is what a scenario measured: its runs, a table of the headline figures, notes, and
// scenario-specific measurements.
type ScenarioResult struct {
	Name         string         `json:"name"`
	Short        bool           `json:"short"`
	StartedAt    time.Time      `json:"started_at"`
	Runs         []RunRef       `json:"runs"`
	Table        [][]string     `json:"table"`
	Sections     []Section      `json:"sections,omitempty"`
	Notes        []string       `json:"notes,omitempty"`
	Measurements map[string]any `json:"measurements,omitempty"`
}

// Section is a further table of a scenario's result, with its title.
type Section struct {
	Title string     `json:"title"`
	Table [][]string `json:"table"`
}

// Scenario is one benchmark scenario.
type Scenario func(ctx context.Context, o ScenarioOptions) (*ScenarioResult, error)

// Scenarios returns the scenarios by name.
func Scenarios() map[string]Scenario {
	return map[string]Scenario{
		"adaptive":          ScenarioAdaptive,
		"capacity":          ScenarioCapacity,
		"decode-bound":      ScenarioDecodeBound,
		"dp":                ScenarioDP,
		"early-rejection":   ScenarioEarlyRejection,
		"kv-events":         ScenarioKVEvents,
		"overhead":          ScenarioOverhead,
		"overload":          ScenarioOverload,
		"predicted-latency": ScenarioPredictedLatency,
		"prefix":            ScenarioPrefix,
		"priority":          ScenarioPriority,
		"replicas":          ScenarioReplicas,
		"scale":             ScenarioScale,
		"tenants":           ScenarioTenants,
		"tokens":            ScenarioTokens,
		"topology":          ScenarioTopology,
	}
}

// RunScenario runs one scenario and writes <name>.json and <name>.md (plus each run's result file) to
// o.OutDir.
func RunScenario(ctx context.Context, name string, o ScenarioOptions) (*ScenarioResult, error) {
	sc, ok := Scenarios()[name]
	if !ok {
		return nil, fmt.Errorf("%w: unknown scenario %q (want one of %s)", errUsage, name, strings.Join(slices.Sorted(maps.Keys(Scenarios())), ", "))
	}
	if o.OutDir == "" {
		o.OutDir = "bench-results"
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, err
	}
	res, err := sc(ctx, o)
	if res == nil {
		return nil, err
	}
	res.Name, res.Short = name, o.Short
	b, jerr := json.MarshalIndent(res, "", "  ")
	if jerr != nil {
		return res, errors.Join(err, jerr)
	}
	werr := os.WriteFile(filepath.Join(o.OutDir, name+".json"), b, 0o644)
	werr = errors.Join(werr, os.WriteFile(filepath.Join(o.OutDir, name+".md"), []byte(res.Markdown()), 0o644))
	return res, errors.Join(err, werr)
}

// Markdown renders the scenario's table and notes.
func (r *ScenarioResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Scenario %s", r.Name)
	if r.Short {
		b.WriteString(" (short)")
	}
	fmt.Fprintf(&b, "\n\n%s\n\n", r.StartedAt.UTC().Format(time.RFC3339))
	if len(r.Table) > 0 {
		b.WriteString(MarkdownTable(r.Table))
	}
	for _, sec := range r.Sections {
		fmt.Fprintf(&b, "\n%s\n\n", sec.Title)
		b.WriteString(MarkdownTable(sec.Table))
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range r.Notes {
			b.WriteString("- " + n + "\n")
		}
	}
	if len(r.Runs) > 0 {
		b.WriteString("\nRuns (per-request records in the JSON files):\n\n")
		for _, run := range r.Runs {
			fmt.Fprintf(&b, "- %s: `%s`\n", run.Label, run.File)
		}
	}
	return b.String()
}

// scenarioRun is the shared state of one scenario function.
type scenarioRun struct {
	o   ScenarioOptions
	res *ScenarioResult
}

func newScenarioRun(name string, o ScenarioOptions) *scenarioRun {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &scenarioRun{o: o, res: &ScenarioResult{Name: name, Short: o.Short, StartedAt: time.Now(), Measurements: map[string]any{}}}
}

func (s *scenarioRun) section(title string, table [][]string) {
	s.res.Sections = append(s.res.Sections, Section{Title: title, Table: table})
}

func (s *scenarioRun) note(format string, args ...any) {
	n := fmt.Sprintf(format, args...)
	s.res.Notes = append(s.res.Notes, n)
	fmt.Fprintln(s.o.Log, s.res.Name+": "+n)
}

// load runs one load, writes its result file and records it.
func (s *scenarioRun) load(ctx context.Context, label string, cfg Config, observe func(time.Duration), extra map[string]any) (*Result, error) {
	cfg.Label = label
	fmt.Fprintf(s.o.Log, "%s: run %s\n", s.res.Name, label)
	res, err := Run(ctx, cfg, Options{Progress: s.o.Progress, Observe: observe})
	if err != nil {
		return res, fmt.Errorf("%s: %w", label, err)
	}
	return res, s.record(label, res, extra)
}

// record writes a load's result file and adds it to the scenario's runs; not safe for concurrent use.
func (s *scenarioRun) record(label string, res *Result, extra map[string]any) error {
	res.Extra = extra
	file := filepath.Join(s.o.OutDir, s.res.Name+"-"+label+".json")
	if err := WriteResult(file, res); err != nil {
		return err
	}
	s.res.Runs = append(s.res.Runs, RunRef{Label: label, File: file, Summary: res.Summary, Extra: extra})
	return nil
}

func scenarioCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return fmt.Errorf("%w: scenario needs a name: %s or all", errUsage, strings.Join(slices.Sorted(maps.Keys(Scenarios())), ", "))
	}
	name := args[0]
	fs := flag.NewFlagSet("sluice-bench scenario", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o ScenarioOptions
	fs.StringVar(&o.OutDir, "out-dir", "bench-results", "directory for result JSON files and the markdown summary")
	fs.BoolVar(&o.Short, "short", false, "a few-second smoke version")
	fs.BoolVar(&o.InProcess, "in-process", false, "overhead: run gateway and simulators in this process (no CPU figures)")
	fs.BoolVar(&o.NoNginx, "no-nginx", false, "overhead: skip the nginx baseline")
	fs.BoolVar(&o.InstallNginx, "install-nginx", false, "overhead: apt-get install nginx if missing (root only)")
	fs.StringVar(&o.SluiceBin, "sluice-bin", "", "overhead: sluice gateway binary (default: go build ./cmd/sluice)")
	fs.StringVar(&o.SimBin, "sim-bin", "", "overhead: sluice-sim binary (default: go build ./cmd/sluice-sim)")
	fs.StringVar(&o.BaselineBin, "baseline-bin", "", "overhead: sluice-baseline binary (default: go build ./cmd/sluice-baseline)")
	fs.IntVar(&o.Rounds, "rounds", 0, "overhead: interleaved rounds (default 3, 1 with --short)")
	fs.Float64Var(&o.StreamRate, "stream-rate", 0, "overhead: arrival rate of the streamed loads, spaced and back to back (default 200 and 1000 req/s, 50 and 200 with --short); lower it on a loaded machine")
	fs.Float64Var(&o.PDRate, "pd-rate", 0, "overhead: arrival rate of the PD JSON open loop (default 1000 req/s, 200 with --short); lower it on a loaded machine, where the engines cannot keep up")
	fs.BoolVar(&o.PDOnly, "pd-only", false, "overhead: run only the PD targets (bare-pd, sluice-pd, sluice-pd-seats, sluice-pd-grpc) on their JSON and streamed loads (CPU per request and per frame, e.g. the decode seats' and gRPC mode's ratios; no memory)")
	fs.BoolVar(&o.PairedOnly, "paired-only", false, "overhead: run only the paired loads, each on a gateway and its baseline at once (issue #33's figures): sluice-pd and bare-pd on the PD JSON closed loop (pd-json-paired), sluice and reverseproxy on streams of frames spaced like tokens (spaced-paired); about 30 s a round")
	fs.IntVar(&o.Engines, "engines", 0, "tenants: prefill engines and decode engines each (default 4); the non-preemptive floor of a quiet request's wait falls with the number of prefill slots")
	fs.DurationVar(&o.Duration, "duration", 0, "tenants: measured time per variant (default 60s); a tenant's p99 over a minute rests on its two slowest of ~200 requests")
	fs.StringVar(&o.Prompts, "prompts", "", "tenants: prompt lengths in tokens, N (every prompt N) or LO-HI (lognormal between them, the median at their geometric mean, the bounds at ±2 sigma); default 256-4096. Equal prompts are the worst case for the quiet tenants' p99 ratio: its baseline is the bare prefill, and the flood's prefills, started together, end together")
	variants := fs.String("variants", "", "tenants: comma-separated variants to run (noisy-absent, fairness-off, fairness-round-robin, fairness-share; default all; a ratio needs noisy-absent)")
	gate := fs.String("decode-gate-flags", dbGateFlagsDef, "decode-bound: gateway flags of the runs with the decode gate on (space separated)")
	progress := fs.Bool("progress", false, "print the load generator's per-second progress lines")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	o.DecodeGateFlags = strings.Fields(*gate)
	if *variants != "" {
		o.Variants = strings.Split(*variants, ",")
	}
	o.Log = stderr
	if *progress {
		o.Progress = stderr
	}
	names := []string{name}
	if name == "all" {
		names = slices.Sorted(maps.Keys(Scenarios()))
	}
	var errs []error
	for _, n := range names {
		res, err := RunScenario(ctx, n, o)
		if res != nil {
			fmt.Fprintln(stdout, res.Markdown())
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("scenario %s: %w", n, err))
			if ctx.Err() != nil {
				break
			}
		}
	}
	return errors.Join(errs...)
}

// Table helpers.

func fms(v float64) string { return fmt.Sprintf("%.2f", v) }

func fpct(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }
