package config

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// summaryJSON logs c as the gateway does at startup and returns the "config" object.
func summaryJSON(t *testing.T, c *Config) (map[string]map[string]any, string) {
	t.Helper()
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("starting", "config", c)
	var line struct {
		Config map[string]map[string]any `json:"config"`
	}
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("log line %s: %v", buf.String(), err)
	}
	return line.Config, buf.String()
}

// TestSummaryListsEverySetting: the summary is the flag table, so every setting is in it, under its
// section's group and its flag name, and a value given on the command line is what it shows.
func TestSummaryListsEverySetting(t *testing.T) {
	c, err := parseNoEnv("--queue-size", "7", "--max-idle-secs", "30", "--log-dir", "/var/log/x")
	if err != nil {
		t.Fatal(err)
	}
	groups, raw := summaryJSON(t, c)
	s := newFlagSet()
	seen := 0
	for _, sec := range s.sections {
		if sec.title == compatSection || sec.title == refusedSection {
			if _, ok := groups[sectionKey(sec.title)]; ok {
				t.Errorf("summary has the SMG section %q", sec.title)
			}
			continue
		}
		for _, name := range sec.names {
			_, ok := groups[sectionKey(sec.title)][summaryKey(name)]
			if skip := s.aliases[name] || s.unbound[name]; ok == skip {
				t.Errorf("--%s in section %q: in summary %v, want %v", name, sec.title, ok, !skip)
			}
			if ok {
				seen++
			}
		}
	}
	if seen < 120 {
		t.Errorf("summary lists %d settings, want every one (more than 120)", seen)
	}
	for _, want := range []struct {
		group, key string
		value      any
	}{
		{"gateway_concurrency_limit", "queue_size", 7.0},
		{"placement", "max_idle_secs", 30e9}, // durations are nanoseconds in JSON, as slog writes them
		{"telemetry", "log_dir", "/var/log/x"},
		{"server", "request_id_headers", "x-request-id,x-correlation-id,x-trace-id,request-id"},
		{"effective", "mode", "regular"},
	} {
		if got := groups[want.group][want.key]; got != want.value {
			t.Errorf("%s.%s = %v (%T), want %v in %s", want.group, want.key, got, got, want.value, raw)
		}
	}
}

// TestSummaryRedactsEverySecret: every flag holding a Secret, and every URL password, stays out of
// the summary in both handlers' output.
func TestSummaryRedactsEverySecret(t *testing.T) {
	var args []string
	var secrets []string
	s := newFlagSet()
	for _, sec := range s.sections {
		for _, name := range sec.names {
			if _, ok := s.fs.Lookup(name).Value.(secretValue); ok {
				secret := "s3cr3t-" + name
				args = append(args, "--"+name, secret)
				secrets = append(secrets, secret)
			}
		}
	}
	if len(secrets) < 2 {
		t.Fatalf("found %d secret flags, want at least --api-key and --admin-api-key", len(secrets))
	}
	args = append(args,
		"--pd-disaggregation", "--prefill", "http://u:pw-prefill@p:1", "--decode", "http://d:1",
		"--otlp-traces-endpoint", "https://u:pw-otlp@collector:4318",
		"--kv-events-endpoint", "http://u:pw-prefill@p:1=tcp://127.0.0.1:5557",
	)
	secrets = append(secrets, "pw-prefill", "pw-otlp")
	c, err := parseNoEnv(args...)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("starting", "config", c)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("starting", "config", c)
	out := logs.String() + c.LogValue().String()
	for _, secret := range secrets {
		if strings.Contains(out, secret) {
			t.Errorf("summary leaks %q:\n%s", secret, out)
		}
	}
	groups, _ := summaryJSON(t, c)
	if got := groups["server"]["api_key"]; got != redacted {
		t.Errorf("server.api_key = %v, want %q", got, redacted)
	}
}
