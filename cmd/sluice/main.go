// Command sluice is the sluice gateway: `sluice serve` runs it, `sluice demo` runs it with simulated
// engines, and `sluice workers|admission` manage a running gateway. Everything lives in internal/cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicegw/sluice/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
