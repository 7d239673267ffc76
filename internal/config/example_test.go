package config_test

import (
	"fmt"
	"os"

	"github.com/sluicegw/sluice/internal/config"
)

func ExampleParse() {
	cfg, err := config.Parse([]string{
		"--pd-disaggregation",
		"--prefill", "http://10.0.0.1:30001", "8998",
		"--prefill", "http://10.0.0.2:30001",
		"--decode", "grpc://10.0.0.3:30002",
		"--prefill-max-inflight-requests-per-worker", "4",
		"--prefill-queue-timeout-secs", "2.5",
		"--decode-policy", "power_of_two",
	}, os.Stderr)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("mode:", cfg.Mode())
	for _, w := range cfg.Workers.Initial {
		proto := w.Protocol
		if proto == "" {
			proto = "detected, else " + cfg.Workers.Runtime
		}
		fmt.Println(w.Role, w.URL, w.BootstrapPort, proto)
	}
	fmt.Println("admission:", cfg.Admission.MaxInflightPerWorker, cfg.Admission.QueueSize, cfg.Admission.QueueTimeout)
	fmt.Println("policies:", cfg.Placement.PrefillPolicy, cfg.Placement.DecodePolicy)
	// Output:
	// mode: pd
	// prefill http://10.0.0.1:30001 8998 detected, else sglang
	// prefill http://10.0.0.2:30001 0 detected, else sglang
	// decode grpc://10.0.0.3:30002 0 grpc
	// admission: 4 100 2.5s
	// policies: cache_aware power_of_two
}
