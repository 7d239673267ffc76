package config

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseCluster(t *testing.T) {
	pd := []string{"--pd-disaggregation", "--prefill-max-inflight-requests-per-worker", "4"}
	with := func(extra ...string) []string { return append(append([]string{}, pd...), extra...) }
	def := func(c ClusterConfig) ClusterConfig {
		if c.ExchangePeriod == 0 {
			c.ExchangePeriod = 250 * time.Millisecond
		}
		if c.Lease == 0 {
			c.Lease = 2 * time.Second
		}
		if c.LeaseName == "" {
			c.LeaseName = "sluice-admission"
		}
		return c
	}
	tests := []struct {
		name string
		args []string
		want ClusterConfig
	}{
		{"off by default", pd, def(ClusterConfig{Mode: CoordinationOff})},
		{
			"peers alone mean static mode; repeated and comma-separated",
			with("--admission-peers", "http://10.0.0.1:30000,http://10.0.0.2:30000", "--admission-peers", "http://10.0.0.3:30000"),
			def(ClusterConfig{Mode: CoordinationStatic, Peers: []string{"http://10.0.0.1:30000", "http://10.0.0.2:30000", "http://10.0.0.3:30000"}}),
		},
		{
			"kubernetes with timings",
			with("--admission-coordination", "kubernetes", "--admission-service", "sluice-headless", "--admission-namespace", "inference",
				"--admission-exchange-period-secs", "0.1", "--admission-lease-secs", "3"),
			def(ClusterConfig{Mode: CoordinationKubernetes, Service: "sluice-headless", Namespace: "inference", ExchangePeriod: 100 * time.Millisecond, Lease: 3 * time.Second}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseNoEnv(tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, c.Cluster); diff != "" {
				t.Errorf("cluster config (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseClusterRejects(t *testing.T) {
	pd := []string{"--pd-disaggregation", "--prefill-max-inflight-requests-per-worker", "4"}
	with := func(extra ...string) []string { return append(append([]string{}, pd...), extra...) }
	peers := []string{"--admission-peers", "http://10.0.0.1:30000,http://10.0.0.2:30000"}
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"bad mode", with("--admission-coordination", "gossip"), `--admission-coordination must be off, static or kubernetes, got "gossip"`},
		{"static without peers", with("--admission-coordination", "static"), "needs --admission-peers"},
		{"without admission", append([]string{"--pd-disaggregation"}, peers...), "needs prefill admission"},
		{"timing without coordination", with("--admission-lease-secs", "3"), "--admission-lease-secs needs cluster admission"},
		{"peers with coordination off", with("--admission-coordination", "off", "--admission-peers", "http://a:1"), "--admission-peers needs cluster admission"},
		{"peer without port", with("--admission-peers", "http://10.0.0.1"), "needs the port of the replica's admin listener"},
		{"peer with path", with("--admission-peers", "http://10.0.0.1:1/admin"), "want scheme://host:port only"},
		{"peer not a URL", with("--admission-peers", "10.0.0.1:30000"), "want a base URL"},
		{"peer twice", with("--admission-peers", "http://a:1,http://A:1/"), "given twice"},
		{"lease below two periods", with(append(peers, "--admission-exchange-period-secs", "1", "--admission-lease-secs", "1.5")...), "must be at least twice"},
		{"kubernetes flag in static mode", with(append(peers, "--admission-service", "x")...), "--admission-service is for --admission-coordination kubernetes"},
		{"kubernetes without service", with("--admission-coordination", "kubernetes"), "needs --admission-service"},
		{"kubernetes with peers", with("--admission-coordination", "kubernetes", "--admission-service", "s", "--admission-peers", "http://a:1"), "--admission-peers is for static mode"},
		{"bad service name", with("--admission-coordination", "kubernetes", "--admission-service", "Sluice_Headless"), `--admission-service "Sluice_Headless"`},
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

func TestFileCluster(t *testing.T) {
	path := writeFile(t, `
pd-disaggregation: true
prefill-max-inflight-requests-per-worker: 8
admission-peers: ["http://10.0.0.1:9090", "http://10.0.0.2:9090"]
admission-lease-secs: 1
`)
	c, err := parseNoEnv("--config", path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Cluster.Mode != CoordinationStatic || len(c.Cluster.Peers) != 2 || c.Cluster.Lease != time.Second {
		t.Errorf("cluster config from file: %+v", c.Cluster)
	}
}
