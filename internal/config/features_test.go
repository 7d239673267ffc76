package config

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/admission"
)

func TestParseAdmissionFeatures(t *testing.T) {
	pd := []string{"--pd-disaggregation", "--prefill", "http://p:1", "--decode", "http://d:1"}
	c, err := parseNoEnv(append(pd,
		"--prefill-max-inflight-tokens-per-worker", "16384",
		"--prefill-token-estimate-chars-per-token", "3.5",
		"--prefill-priority-bands", "low:-10, default:0,high:10",
		"--prefill-priority-aging-secs", "2.5",
		"--prefill-early-rejection",
		"--prefill-adaptive-limit", "2:32",
		"--worker-overload-waiting-requests", "8",
		"--prefill-policy", "least_load")...)
	if err != nil {
		t.Fatal(err)
	}
	a := c.Admission
	if !a.Enabled() || a.MaxInflightPerWorker != 0 {
		t.Errorf("a token budget alone turns admission on: %+v", a)
	}
	want := AdmissionConfig{Settings: admission.Settings{MaxInflightPerWorker: 0, QueueSize: 100, QueueTimeout: time.Minute,
		MaxInflightTokensPerWorker: 16384, Aging: 2500 * time.Millisecond,
		Bands:          []admission.Band{{Name: "low", MinPriority: -10}, {Name: "default", MinPriority: 0}, {Name: "high", MinPriority: 10}},
		EarlyRejection: true, Adaptive: admission.AdaptiveLimit{Min: 2, Max: 32}}, CharsPerToken: 3.5}
	if diff := cmp.Diff(want, a); diff != "" {
		t.Errorf("admission (-want +got):\n%s", diff)
	}
	if c.Load.OverloadWaitingRequests != 8 || c.LoadMonitorInterval() != time.Second {
		t.Errorf("load: %+v, interval %v, want 8 and the 1 s default", c.Load, c.LoadMonitorInterval())
	}
	// The adaptive limit alone turns admission on too.
	c, err = parseNoEnv(append(pd, "--prefill-adaptive-limit", "1:8")...)
	if err != nil || !c.Admission.Enabled() {
		t.Fatalf("adaptive alone: %v, enabled %v", err, c != nil && c.Admission.Enabled())
	}
	// The monitor interval: explicit, needed, or off.
	for _, tt := range []struct {
		args []string
		want time.Duration
	}{
		{nil, 15 * time.Second},
		{[]string{"--engine-load-interval-secs", "0"}, 0},
		{[]string{"--engine-load-interval-secs", "0.5"}, 500 * time.Millisecond},
		{[]string{"--decode-policy", "least_load", "--load-monitor-interval-secs", "2"}, 2 * time.Second}, // the name
		{[]string{"--decode-policy", "least_load"}, time.Second},
		{[]string{"--policy", "least_load", "--engine-load-interval-secs", "3"}, 3 * time.Second},
	} {
		c, err := parseNoEnv(append(pd, tt.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.LoadMonitorInterval(); got != tt.want {
			t.Errorf("%v: interval %v, want %v", tt.args, got, tt.want)
		}
	}
}

func TestParseRejectsAdmissionFeatures(t *testing.T) {
	pd := []string{"--pd-disaggregation", "--prefill", "http://p:1", "--decode", "http://d:1"}
	on := slices.Concat(pd, []string{"--prefill-max-inflight-requests-per-worker", "4"})
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"token budget in regular mode", []string{"--prefill-max-inflight-tokens-per-worker", "100"}, "needs --pd-disaggregation"},
		{"bands without admission", slices.Concat(pd, []string{"--prefill-priority-bands", "low:0,high:1"}), "--prefill-priority-bands is set but admission is off"},
		{"aging without admission", slices.Concat(pd, []string{"--prefill-priority-aging-secs", "3"}), "--prefill-priority-aging-secs is set but admission is off"},
		{"early rejection without admission", slices.Concat(pd, []string{"--prefill-early-rejection"}), "--prefill-early-rejection is set but admission is off"},
		{"overload without admission", slices.Concat(pd, []string{"--worker-overload-waiting-requests", "2"}), "--worker-overload-waiting-requests is set but admission is off"},
		{"chars per token without budget", slices.Concat(on, []string{"--prefill-token-estimate-chars-per-token", "3"}), "needs --prefill-max-inflight-tokens-per-worker"},
		{"zero chars per token", slices.Concat(on, []string{"--prefill-max-inflight-tokens-per-worker", "9", "--prefill-token-estimate-chars-per-token", "0"}), "must be in (0, 64]"},
		{"band syntax", slices.Concat(on, []string{"--prefill-priority-bands", "low"}), "want NAME:MIN_PRIORITY"},
		{"band order", slices.Concat(on, []string{"--prefill-priority-bands", "high:10,low:0"}), `--prefill-priority-bands has band "low" starting at 0, which must be above the previous band's 10`},
		{"band name", slices.Concat(on, []string{"--prefill-priority-bands", "Low:0,high:1"}), `band name "Low"`},
		{"band twice", slices.Concat(on, []string{"--prefill-priority-bands", "a:0,a:1"}), `band "a" given twice`},
		{"zero aging", slices.Concat(on, []string{"--prefill-priority-bands", "a:0,b:1", "--prefill-priority-aging-secs", "0"}), "aging-secs must be positive"},
		{"negative aging", slices.Concat(on, []string{"--prefill-priority-aging-secs", "-1"}), "--prefill-priority-aging-secs must be >= 0"},
		{"too many bands", slices.Concat(on, []string{"--prefill-priority-bands", "a:0,b:1,c:2,d:3,e:4,f:5,g:6,h:7,i:8"}), "--prefill-priority-bands lists at most 8 bands, got 9"},
		{"adaptive syntax", slices.Concat(on, []string{"--prefill-adaptive-limit", "8"}), "want MIN:MAX"},
		{"adaptive inverted", slices.Concat(on, []string{"--prefill-adaptive-limit", "8:2"}), "--prefill-adaptive-limit 8:2 must have 1 <= min <= max"},
		{"adaptive zero", slices.Concat(on, []string{"--prefill-adaptive-limit", "0:2"}), "--prefill-adaptive-limit 0:2 must have 1 <= min <= max"},
		{"overload below -1", slices.Concat(on, []string{"--worker-overload-waiting-requests", "-2"}), "must be at least -1"},
		{"negative load interval", slices.Concat(pd, []string{"--engine-load-interval-secs", "-1"}), "--engine-load-interval-secs must be >= 0"},
		{"least_load without loads", slices.Concat(pd, []string{"--policy", "least_load", "--engine-load-interval-secs", "0"}), "reads the loads"},
		{"overload without loads", slices.Concat(on, []string{"--worker-overload-waiting-requests", "3", "--load-monitor-interval-secs", "0"}), "reads the loads"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseNoEnv(tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("parse(%q) = %v, want an error containing %q", tt.args, err, tt.want)
			}
		})
	}
}

func TestAdmissionFeaturesInFileAndSummary(t *testing.T) {
	path := writeFile(t, `
pd-disaggregation: true
prefill: ["http://p:1"]
decode: ["http://d:1"]
prefill-max-inflight-tokens-per-worker: 4096
prefill-priority-bands: "low:-1,high:1"
prefill-adaptive-limit: "2:16"
`)
	c, err := parseNoEnv("--config", path)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Admission.Bands) != 2 || c.Admission.Adaptive.Max != 16 || c.Admission.MaxInflightTokensPerWorker != 4096 {
		t.Fatalf("from file: %+v", c.Admission)
	}
	got := c.LogValue().String()
	for _, want := range []string{"priority_bands=low:-1,high:1", "adaptive_limit=2:16", "max_inflight_tokens_per_worker=4096"} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q: %s", want, got)
		}
	}
}

func TestParseDecodeSeats(t *testing.T) {
	base := []string{"--pd-disaggregation", "--prefill", "http://p:1", "--decode", "http://d:1"}
	c, err := parseNoEnv(append(base, "--decode-max-inflight-requests-per-worker", "8", "--decode-max-kv-usage", "0.9",
		"--decode-overload-waiting-requests", "4")...)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Admission.SeatsOn() || c.Admission.DecodeMaxInflightPerWorker != 8 || c.Admission.DecodeAuto ||
		c.Load.DecodeMaxKVUsage != 0.9 || c.Load.DecodeOverloadWaitingRequests != 4 || c.LoadMonitorInterval() != time.Second {
		t.Fatalf("parsed %+v / %+v", c.Admission, c.Load)
	}
	c, err = parseNoEnv(append(base, "--decode-max-inflight-requests-per-worker", "auto", "--decode-window", "64")...)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Admission.DecodeAuto || c.Admission.DecodeWindow != 64 || !c.Admission.Enabled() {
		t.Fatalf("auto: %+v", c.Admission)
	}
	for _, bad := range [][]string{
		{"--decode-max-inflight-requests-per-worker", "lots"},
		{"--decode-max-kv-usage", "0.9"},            // seats off
		{"--decode-overload-waiting-requests", "2"}, // seats off
		{"--decode-max-inflight-requests-per-worker", "4", "--decode-max-kv-usage", "1.5"},
		{"--decode-max-inflight-requests-per-worker", "4", "--decode-window", "8"}, // window without auto
	} {
		if _, err := parseNoEnv(append(append([]string{}, base...), bad...)...); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
	if _, err := Parse([]string{"--worker", "http://w:1", "--decode-max-inflight-requests-per-worker", "4"}, nil); err == nil {
		t.Error("decode seats accepted outside PD mode")
	}
}

func TestLocalPrefillFlags(t *testing.T) {
	base := []string{"--pd-disaggregation", "--prefill", "http://p:1", "--decode", "http://d:1"}
	c, err := parseNoEnv(append(base, "--pd-local-prefill-max-tokens", "256", "--decode-kv-role", "kv_both")...)
	if err != nil {
		t.Fatal(err)
	}
	if c.Admission.LocalPrefillMaxTokens != 256 || c.Workers.DecodeKVRole != "kv_both" || !strings.Contains(c.LogValue().String(), "local_prefill_max_tokens=256") {
		t.Fatalf("parsed %d %q", c.Admission.LocalPrefillMaxTokens, c.Workers.DecodeKVRole)
	}
	for _, bad := range [][]string{
		{"--pd-local-prefill-max-tokens", "-1"},
		{"--pd-local-prefill-max-tokens", "99999999"},
		{"--decode-kv-role", "kv_consumer"},
	} {
		if _, err := parseNoEnv(append(append([]string{}, base...), bad...)...); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
	// With decode seats a local request holds a seat (admission's seat-only grant).
	if _, err := parseNoEnv(append(base, "--pd-local-prefill-max-tokens", "64", "--decode-max-inflight-requests-per-worker", "4")...); err != nil {
		t.Errorf("local prefill with decode seats refused: %v", err)
	}
	if _, err := Parse([]string{"--worker", "http://w:1", "--pd-local-prefill-max-tokens", "64"}, nil); err == nil {
		t.Error("local prefill accepted outside PD mode")
	}
}
