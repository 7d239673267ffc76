package config

import (
	"strings"
	"testing"
)

// The error about admission outside PD mode names the flag that turned admission on.
func TestAdmissionWithoutPDNamesTheFlagGiven(t *testing.T) {
	for _, flag := range []string{"--prefill-max-inflight-requests-per-worker", "--prefill-max-inflight-tokens-per-worker"} {
		t.Run(flag, func(t *testing.T) {
			c, err := parseNoEnv("--worker-urls", "http://a:1", flag, "4")
			if err == nil {
				err = c.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), flag+" needs --pd-disaggregation") {
				t.Errorf("error %v, want one naming %s", err, flag)
			}
		})
	}
}

// The metrics listener binds --host unless --prometheus-host says otherwise.
func TestPrometheusHostFollowsHost(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--host", "127.0.0.1", "--prometheus-port", "29000"}, "127.0.0.1"},
		{[]string{"--prometheus-port", "29000"}, "0.0.0.0"},
		{[]string{"--host", "127.0.0.1", "--prometheus-host", "0.0.0.0", "--prometheus-port", "29000"}, "0.0.0.0"},
	}
	for _, tc := range cases {
		c, err := parseNoEnv(tc.args...)
		if err != nil {
			t.Fatal(err)
		}
		if c.Telemetry.MetricsHost != tc.want {
			t.Errorf("%v: metrics host %q, want %q", tc.args, c.Telemetry.MetricsHost, tc.want)
		}
	}
}

// A mistyped config file key gets the flag it most likely meant.
func TestConfigFileTypoSuggestsFlag(t *testing.T) {
	cases := []struct{ yaml, hint string }{
		{"prefil-max-inflight-requests-per-worker: 4\n", `did you mean "prefill-max-inflight-requests-per-worker"`},
		{"prefill_queue_size: 4\n", `did you mean "prefill-queue-size"`},
		{"polcy: random\n", `did you mean "policy"`},
		{"completely-unrelated-thing: 1\n", "unknown key"},
	}
	for _, tc := range cases {
		_, err := parseNoEnv("--config", writeFile(t, tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.hint) {
			t.Errorf("%q: error %v, want %q", tc.yaml, err, tc.hint)
		}
	}
	if _, err := parseNoEnv("--config", writeFile(t, "completely-unrelated-thing: 1\n")); err != nil && strings.Contains(err.Error(), "did you mean") {
		t.Errorf("far-off key got a suggestion: %v", err)
	}
}
