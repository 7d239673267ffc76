package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// pdMode is one way the gateway reaches PD engines: the admission contract must hold in each, so its
// tests run one set of cases over every mode rather than a copy per transport.
type pdMode struct {
	name     string
	protocol sim.Protocol
	// engineGRPC: the engines speak only their own gRPC (grpc:// workers, token ids, a tokenizer in
	// the gateway); otherwise they speak HTTP.
	engineGRPC bool
}

// pdModes are SGLang over HTTP (the seed's mode) and SGLang and vLLM over their engines' gRPC (#35).
func pdModes() []pdMode {
	return []pdMode{
		{name: "http-sglang", protocol: sim.ProtocolSGLang},
		{name: "grpc-sglang", protocol: sim.ProtocolSGLang, engineGRPC: true},
		{name: "grpc-vllm", protocol: sim.ProtocolVLLM, engineGRPC: true},
	}
}

// splitModes are the modes where n > 1 is split into single-sample PD requests (SGLang's).
func splitModes() []pdMode {
	var out []pdMode
	for _, m := range pdModes() {
		if m.protocol == sim.ProtocolSGLang {
			out = append(out, m)
		}
	}
	return out
}

// startCluster starts a PD cluster of the mode's protocol and transport with cc's engine settings.
func (m pdMode) startCluster(t *testing.T, cc sim.ClusterConfig) *sim.Cluster {
	t.Helper()
	cc.Protocol = m.protocol
	if m.engineGRPC {
		cc.Engine.GRPC, cc.Engine.EngineGRPCOnly, cc.Engine.ByteTokenIDs = true, true, true
	}
	return startCluster(t, cc)
}

// startGateway starts a PD gateway in front of c with the test's flags and waits until it is ready.
func (m pdMode) startGateway(t *testing.T, c *sim.Cluster, flags ...string) *gateway {
	t.Helper()
	args := append([]string{"--pd-disaggregation"}, flags...)
	if m.engineGRPC {
		args = append(args, engineGRPCArgs(c, byteTokenizerDir(t))...)
	} else {
		args = append(args, pdArgs(c)...)
	}
	gw := startGateway(t, app.Options{}, args...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	return gw
}

// url is the engine's worker URL in the gateway: what admission's gauges and the worker headers name.
func (m pdMode) url(e *sim.Engine) string {
	if m.engineGRPC {
		return strings.Replace(e.URL(), "http://", "grpc://", 1)
	}
	return e.URL()
}
