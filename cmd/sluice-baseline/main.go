// Command sluice-baseline runs the reference servers sluice-bench's overhead scenario measures the
// gateway against (see internal/bench/baseline): the standard library's reverse proxy, a bare
// two-leg PD proxy, and an instant upstream that streams frames spaced like tokens.
//
//	sluice-baseline frames --listen 127.0.0.1:30100
//	sluice-baseline reverseproxy --upstream http://127.0.0.1:30100
//	sluice-baseline pd --prefill http://127.0.0.1:30001 --bootstrap-port 8998 --decode http://127.0.0.1:30002
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicegw/sluice/internal/bench/baseline"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := baseline.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
