// Command sluice-bench is sluice's load generator and scenario runner (see internal/bench):
//
//	sluice-bench run --url http://127.0.0.1:30000 --rate 100 --duration 30s --stream --out a.json
//	sluice-bench compare a.json b.json --out plot.svg
//	sluice-bench scenario overhead --out-dir results/
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicegw/sluice/internal/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := bench.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
