package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// usage is the command line's help; the scenarios are named from Scenarios(), so that a new one
// cannot be missing from it.
func usage() string {
	return `sluice-bench: load generator and benchmark scenarios for OpenAI-compatible endpoints

  sluice-bench run --url URL [--rate R | --concurrency N] [--duration D | --requests N] [flags]
  sluice-bench compare a.json b.json ... [--out plot.svg]
  sluice-bench scenario ` + strings.Join(slices.Sorted(maps.Keys(Scenarios())), "|") + `|all [--out-dir DIR] [--short] [flags]

Run "sluice-bench <command> -h" for the flags of a command.
`
}

// Main runs the command line and returns the process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return 2
	}
	var err error
	switch args[0] {
	case "run":
		err = runCmd(ctx, args[1:], stdout, stderr)
	case "compare":
		err = compareCmd(args[1:], stdout, stderr)
	case "scenario":
		err = scenarioCmd(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage())
		return 0
	default:
		fmt.Fprintf(stderr, "sluice-bench: unknown command %q\n\n%s", args[0], usage())
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, ErrInvalidConfig), errors.Is(err, errUsage):
		fmt.Fprintln(stderr, "sluice-bench:", err)
		return 2
	default:
		fmt.Fprintln(stderr, "sluice-bench:", err)
		return 1
	}
}

var errUsage = errors.New("usage")

// ParseRunFlags parses the flags of `sluice-bench run` into a Config, the --out path and the quiet flag.
func ParseRunFlags(args []string, output io.Writer) (cfg Config, out string, quiet bool, err error) {
	fs := flag.NewFlagSet("sluice-bench run", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&cfg.URL, "url", "", "base URL of the OpenAI-compatible server, e.g. http://127.0.0.1:30000")
	fs.StringVar(&cfg.Endpoint, "endpoint", EndpointChat, "chat (/v1/chat/completions) or completions (/v1/completions)")
	fs.StringVar(&cfg.Model, "model", "", "model name sent in each request (empty: field omitted)")
	fs.StringVar(&cfg.APIKey, "api-key", os.Getenv("OPENAI_API_KEY"), "bearer token (default $OPENAI_API_KEY)")
	fs.StringVar(&cfg.Label, "label", "", "name of this run in result files and comparisons (default: the --out file name)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "open loop: Poisson arrivals per second")
	fs.IntVar(&cfg.Concurrency, "concurrency", 0, "closed loop: number of concurrent clients")
	fs.IntVar(&cfg.MaxInflight, "max-inflight", 10000, "open loop: bound on requests in flight; arrivals beyond it are dropped and counted")
	fs.DurationVar(&cfg.Duration, "duration", 0, "measured duration (after warmup), e.g. 30s")
	fs.Int64Var(&cfg.Requests, "requests", 0, "measured requests; the run stops at --duration or --requests, whichever first")
	fs.DurationVar(&cfg.Warmup, "warmup", 0, "load before the measured window, excluded from results")
	fs.BoolVar(&cfg.Stream, "stream", false, "stream responses (SSE) and measure TTFT and inter-token latency")
	fs.BoolVar(&cfg.IgnoreEOS, "ignore-eos", false, "send ignore_eos=true so engines generate max_tokens tokens")
	fs.StringVar(&cfg.ExtraBody, "extra-body", "", `JSON object whose members are added to every request body, e.g. '{"top_k":5}'`)
	fs.Int64Var(&cfg.Seed, "seed", 1, "seed of the arrival schedule and the prompt text")
	fs.DurationVar(&cfg.SLOTTFT, "slo-ttft", 0, "TTFT objective for goodput (0: every success counts)")
	fs.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "per-request timeout, end to end")
	w := &cfg.Workload
	fs.StringVar(&w.Kind, "workload", WorkloadFixed, "fixed, dist or prefix (see below)")
	fs.IntVar(&w.PromptTokens, "prompt-tokens", 128, "fixed/prefix: tokens of each user message")
	fs.IntVar(&w.MaxTokens, "max-tokens", 64, "fixed/prefix: max_tokens of each request")
	fs.StringVar(&w.Dist, "dist", DistLognormal, "dist: uniform, or lognormal with median at the geometric mean of the bounds and the bounds at ±2 sigma (clamped)")
	fs.IntVar(&w.PromptTokensMin, "prompt-tokens-min", 32, "dist: smallest prompt")
	fs.IntVar(&w.PromptTokensMax, "prompt-tokens-max", 2048, "dist: largest prompt")
	fs.IntVar(&w.MaxTokensMin, "max-tokens-min", 16, "dist: smallest max_tokens")
	fs.IntVar(&w.MaxTokensMax, "max-tokens-max", 512, "dist: largest max_tokens")
	fs.IntVar(&w.Prefixes, "prefixes", 8, "prefix: number of shared system prompts")
	fs.IntVar(&w.PrefixTokens, "prefix-tokens", 1024, "prefix: tokens of each system prompt")
	fs.IntVar(&w.Turns, "turns", 4, "prefix: turns per conversation (each turn carries the previous ones)")
	fs.IntVar(&w.Conversations, "conversations", 64, "prefix: conversations running side by side")
	fs.StringVar(&out, "out", "", "write the result (summary, parameters, per-request records) as JSON to this file")
	fs.BoolVar(&quiet, "quiet", false, "no progress lines on stderr")
	fs.Usage = func() {
		fmt.Fprintln(output, "usage: sluice-bench run --url URL [--rate R | --concurrency N] [--duration D | --requests N] [flags]")
		fs.PrintDefaults()
	}
	if err = fs.Parse(args); err != nil {
		return cfg, out, quiet, err
	}
	if fs.NArg() > 0 {
		return cfg, out, quiet, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if cfg.Label == "" && out != "" {
		cfg.Label = strings.TrimSuffix(filepath.Base(out), filepath.Ext(out))
	}
	if cfg.Label == "" {
		cfg.Label = "run"
	}
	return cfg, out, quiet, cfg.Validate()
}

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, out, quiet, err := ParseRunFlags(args, stderr)
	if err != nil {
		return err
	}
	o := Options{}
	if !quiet {
		o.Progress = stderr
	}
	res, runErr := Run(ctx, cfg, o)
	if res == nil {
		return runErr
	}
	if err := PrintSummary(stdout, res); err != nil {
		return err
	}
	if out != "" {
		if err := WriteResult(out, res); err != nil {
			return err
		}
	}
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return runErr
	}
	return nil
}

func compareCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sluice-bench compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "write an SVG plot of the TTFT and end-to-end latency CDFs to this file")
	// Flags may follow the file names: parse them out of any position.
	var files, flagArgs []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") {
			flagArgs = append(flagArgs, a)
			if !strings.Contains(a, "=") && i+1 < len(args) && a != "-h" && a != "--help" {
				flagArgs = append(flagArgs, args[i+1])
				i++
			}
			continue
		}
		files = append(files, a)
	}
	if err := fs.Parse(flagArgs); err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("%w: compare needs at least one result file", errUsage)
	}
	results := make([]*Result, 0, len(files))
	for _, f := range files {
		r, err := ReadResult(f)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	if err := PrintCompare(stdout, results); err != nil {
		return err
	}
	if *out == "" {
		return nil
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	if err := WriteCompareSVG(f, results); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
