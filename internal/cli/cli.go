// Package cli implements the sluice command's subcommands; cmd/sluice only hands it the arguments and
// a context that ends on SIGINT/SIGTERM.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"time"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/logfile"
)

const usage = `sluice — LLM inference gateway for prefill/decode disaggregated serving

Usage:
  sluice serve [flags]        run the gateway (sluice serve --help lists every flag and default);
                              also as "sluice launch [flags]" or "sluice [flags]", like the Rust gateway
  sluice demo [flags]         run the gateway with 2 prefill + 2 decode simulated engines
  sluice workers <cmd>        manage workers of a running gateway (list|get|add|drain|rm)
  sluice admission <cmd>      show or tune prefill admission of a running gateway (get|set)
  sluice tenants budgets <cmd> show or set the tenants' token and request budgets (get|set)
  sluice top [flags]          live view of a running gateway: slots per prefill worker, queues, waits, rejections
  sluice capacity [flags]     prefill and decode workers each model needs now, and why (for autoscalers)
  sluice version              print the version
`

// Main runs one subcommand and returns the process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve", "launch", "start": // launch and start as the Rust gateway (smg launch) names it
		err = serve(ctx, args[1:], stderr)
	case "demo":
		err = demo(ctx, args[1:], stdout, stderr)
	case "workers":
		err = workersCmd(ctx, args[1:], stdout, stderr)
	case "admission":
		err = admissionCmd(ctx, args[1:], stdout, stderr)
	case "tenants":
		err = tenantsCmd(ctx, args[1:], stdout, stderr)
	case "top":
		err = topCmd(ctx, args[1:], stdout, stderr)
	case "capacity":
		err = capacityCmd(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-version", "-V", "--version-verbose":
		fmt.Fprintln(stdout, "sluice", app.Version)
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
	default:
		if strings.HasPrefix(args[0], "-") {
			// `smg --worker-urls ...` runs the gateway without a subcommand; so does sluice.
			err = serve(ctx, args, stderr)
			break
		}
		fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "sluice:", err)
		return 1
	}
	return 0
}

// NewLogger builds the process logger from the telemetry config.
func NewLogger(w io.Writer, t config.TelemetryConfig) *slog.Logger {
	opts := &slog.HandlerOptions{Level: t.LogLevel}
	if t.LogJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	cfg, err := config.Parse(args, stderr)
	if err != nil {
		return err
	}
	out := stderr
	if dir := cfg.Telemetry.LogDir; dir != "" {
		lf, err := logfile.Open(dir, "sluice", nil)
		if err != nil {
			return err
		}
		defer lf.Close()
		out = io.MultiWriter(stderr, lf)
	}
	logger := NewLogger(out, cfg.Telemetry)
	app.TuneGC()
	if n := cfg.Server.RuntimeWorkerThreads; n > 0 {
		runtime.GOMAXPROCS(n)
	}
	logger.Info("starting sluice", "version", app.Version, "config", cfg)
	if len(cfg.InertSMGFlags) > 0 {
		logger.Info("Rust gateway (SMG) flags accepted; sluice already behaves as they ask (sluice serve --help says why)", "flags", cfg.InertSMGFlags)
	}
	return app.Run(ctx, cfg, app.Options{Logger: logger})
}

// parseFlags parses a subcommand's flags. The flag package's own output is silenced while it parses,
// because it prints the error and the usage and Main prints the error again: here the usage is printed
// once, to stderr, and the error (with the closest flag for a mistyped one) is returned for Main to
// print, once.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return err
	}
	fs.Usage()
	if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
		if near := config.SuggestFlag(fs, name); near != "" {
			return fmt.Errorf("unknown flag --%s of %s: did you mean --%s?", name, fs.Name(), near)
		}
		return fmt.Errorf("unknown flag --%s of %s (sluice %s --help lists them)", name, fs.Name(), fs.Name())
	}
	if _, rest, ok := strings.Cut(err.Error(), " for flag -"); ok {
		name, _, _ := strings.Cut(rest, ":")
		if f := fs.Lookup(name); f != nil {
			if g, ok := f.Value.(flag.Getter); ok {
				if _, isDur := g.Get().(time.Duration); isDur {
					return fmt.Errorf("%w (a duration takes a unit: 5s, 500ms, 2m)", err)
				}
			}
		}
	}
	return err
}
