// Command sluice-sim runs simulated inference engines (SGLang- and vLLM-style HTTP, sluice.worker.v1
// gRPC) for rehearsing, testing and benchmarking the sluice gateway. See internal/sim.
//
//	sluice-sim --role prefill --bootstrap-port 8998 --port 30001
//	sluice-sim cluster --prefill 2 --decode 2 --base-port 30000
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicegw/sluice/internal/sim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := sim.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
