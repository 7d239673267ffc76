// Command sluice-sim runs simulated inference engines that speak SGLang's or vLLM's HTTP API (routes,
// error shapes, PD handshakes, as read from the engines' sources) and sluice.worker.v1 gRPC, for
// rehearsing, testing and benchmarking the sluice gateway. What it models, and what it does not, is
// in the internal/sim package documentation.
//
//	sluice-sim --role prefill --bootstrap-port 8998 --port 30001
//	sluice-sim --role decode --port 30002   # a null bootstrap_port means 8998, as in SGLang
//	sluice-sim --protocol vllm --role prefill --port 8100
//	sluice-sim --role prefill --dp-size 4 --port 30001          # 4 DP-attention ranks
//	sluice-sim --protocol vllm --kv-connector mooncake --role prefill --bootstrap-port 8998
//	sluice-sim cluster --prefill 2 --decode 2 --base-port 30000
//	sluice-sim cluster --prefill 2 --decode 1 --dp-size 4
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
