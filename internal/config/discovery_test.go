package config

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseDiscovery(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want DiscoveryConfig
	}{
		{"off by default", nil, DiscoveryConfig{Port: 80, Protocol: "http"}},
		{
			"regular mode, repeated and comma-joined pairs",
			[]string{"--service-discovery", "--selector", "app=sglang", "--selector", "tier=gpu,zone==a", "--service-discovery-port", "30000", "--service-discovery-protocol", "grpc"},
			DiscoveryConfig{Enabled: true, Selector: map[string]string{"app": "sglang", "tier": "gpu", "zone": "a"}, Port: 30000, Protocol: "grpc"},
		},
		{
			"pd mode with namespace and model label",
			[]string{
				"--pd-disaggregation", "--service-discovery", "--prefill-selector", "app=sglang,role=prefill",
				"--decode-selector", "app=sglang", "--decode-selector", "role=decode",
				"--service-discovery-namespace", "inference", "--model-id-from", "label:app.kubernetes.io/model",
			},
			DiscoveryConfig{
				Enabled:         true,
				PrefillSelector: map[string]string{"app": "sglang", "role": "prefill"},
				DecodeSelector:  map[string]string{"app": "sglang", "role": "decode"},
				Namespace:       "inference", Port: 80, Protocol: "http",
				ModelIDFrom: ModelIDSource{Kind: ModelFromLabel, Key: "app.kubernetes.io/model"},
			},
		},
		{
			"pd mode, decode pods only, model from namespace",
			[]string{"--pd-disaggregation", "--prefill", "http://10.0.0.1:1", "--service-discovery", "--decode-selector", "role=decode", "--model-id-from", "Namespace"},
			DiscoveryConfig{Enabled: true, DecodeSelector: map[string]string{"role": "decode"}, Port: 80, Protocol: "http", ModelIDFrom: ModelIDSource{Kind: ModelFromNamespace}},
		},
		{
			"regular mode from an inference pool, no selector needed",
			[]string{"--service-discovery", "--inference-pool", "llama", "--service-discovery-namespace", "inference"},
			DiscoveryConfig{Enabled: true, InferencePool: "llama", Namespace: "inference", Port: 80, Protocol: "http"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseNoEnv(tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, c.Discovery); diff != "" {
				t.Errorf("discovery config (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseDiscoveryRejects(t *testing.T) {
	sd := []string{"--service-discovery"}
	pd := []string{"--pd-disaggregation", "--service-discovery"}
	with := func(base []string, extra ...string) []string { return append(append([]string{}, base...), extra...) }
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"selector without discovery", []string{"--selector", "app=x"}, "--selector needs --service-discovery"},
		{"namespace without discovery", []string{"--service-discovery-namespace", "ns"}, "--service-discovery-namespace needs --service-discovery"},
		{"port without discovery", []string{"--service-discovery-port", "80"}, "--service-discovery-port needs --service-discovery"},
		{"protocol without discovery", []string{"--service-discovery-protocol", "grpc"}, "--service-discovery-protocol needs --service-discovery"},
		{"unknown protocol", with(sd, "--selector", "a=b", "--service-discovery-protocol", "https"), `--service-discovery-protocol must be http or grpc, got "https"`},
		{"model source without discovery", []string{"--model-id-from", "namespace"}, "--model-id-from needs --service-discovery"},
		{"regular mode without selector", sd, "--service-discovery needs --selector"},
		{"pool without discovery", []string{"--inference-pool", "p"}, "--inference-pool needs --service-discovery"},
		{"pool without namespace", with(sd, "--inference-pool", "p"), "--inference-pool needs --service-discovery-namespace"},
		{"pool with a port", with(sd, "--inference-pool", "p", "--service-discovery-namespace", "n", "--service-discovery-port", "8000"), "--service-discovery-port and --inference-pool conflict"},
		{"bad pool name", with(sd, "--inference-pool", "Bad_Name", "--service-discovery-namespace", "n"), `--inference-pool "Bad_Name"`},
		{"pd pool still needs role selectors", with(pd, "--inference-pool", "p", "--service-discovery-namespace", "n"), "needs --prefill-selector and/or --decode-selector"},
		{"pd selector in regular mode", with(sd, "--selector", "a=b", "--prefill-selector", "r=p"), "--prefill-selector/--decode-selector need --pd-disaggregation"},
		{"pd mode without selectors", pd, "needs --prefill-selector and/or --decode-selector"},
		{"regular selector in pd mode", with(pd, "--selector", "a=b", "--prefill-selector", "r=p"), "--selector picks regular workers"},
		{"equal pd selectors", with(pd, "--prefill-selector", "a=b", "--decode-selector", "a=b"), "are equal (a=b)"},
		{"set-based selector", with(sd, "--selector", "app in (a,b)"), "only key=value pairs"},
		{"negated selector", with(sd, "--selector", "app!=a"), "only key=value pairs"},
		{"pair without value sign", with(sd, "--selector", "app"), `"app": want key=value`},
		{"bad label key", with(sd, "--selector", "-app=x"), `label key "-app"`},
		{"bad label value", with(sd, "--selector", "app=a b"), `label value "a b"`},
		{"conflicting values", with(sd, "--selector", "app=a", "--selector", "app=b"), `label "app" given twice`},
		{"port zero", with(sd, "--selector", "a=b", "--service-discovery-port", "0"), "--service-discovery-port must be between 1 and 65535"},
		{"bad namespace", with(sd, "--selector", "a=b", "--service-discovery-namespace", "Not_A_Namespace"), `--service-discovery-namespace "Not_A_Namespace"`},
		{"bad model source", with(sd, "--selector", "a=b", "--model-id-from", "env:MODEL"), "want namespace, label:KEY or annotation:KEY"},
		{"model label without key", with(sd, "--selector", "a=b", "--model-id-from", "label:"), "label: needs a key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseNoEnv(tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestFileDiscovery(t *testing.T) {
	path := writeFile(t, `
pd-disaggregation: true
service-discovery: true
prefill-selector: {app: sglang, role: prefill}
decode-selector: ["app=sglang", "role=decode"]
service-discovery-port: 30000
model-id-from: annotation:sluice.ai/model
`)
	c, err := parseNoEnv("--config", path)
	if err != nil {
		t.Fatal(err)
	}
	want := DiscoveryConfig{
		Enabled:         true,
		PrefillSelector: map[string]string{"app": "sglang", "role": "prefill"},
		DecodeSelector:  map[string]string{"app": "sglang", "role": "decode"},
		Port:            30000,
		Protocol:        "http",
		ModelIDFrom:     ModelIDSource{Kind: ModelFromAnnotation, Key: "sluice.ai/model"},
	}
	if diff := cmp.Diff(want, c.Discovery); diff != "" {
		t.Errorf("discovery config (-want +got):\n%s", diff)
	}
	// The command line replaces the file's selector instead of merging into it.
	c, err = parseNoEnv("--config", path, "--decode-selector", "tier=decode")
	if err != nil {
		t.Fatal(err)
	}
	if got := FormatSelector(c.Discovery.DecodeSelector); got != "tier=decode" {
		t.Errorf("decode selector = %q, want the command line's tier=decode", got)
	}
	bad := writeFile(t, "service-discovery: true\nselector: {app: [a, b]}\n")
	if _, err := parseNoEnv("--config", bad); err == nil || !strings.Contains(err.Error(), `label "app" needs a single value`) {
		t.Fatalf("err = %v, want a single-value error", err)
	}
}

func TestFlagNames(t *testing.T) {
	names := FlagNames()
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			t.Errorf("flag %q listed twice", n)
		}
		seen[n] = true
	}
	for _, want := range []string{"port", "service-discovery", "prefill-selector", "model-id-from", "disable-retries"} {
		if !seen[want] {
			t.Errorf("FlagNames lacks %q", want)
		}
	}
}
