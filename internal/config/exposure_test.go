package config

import (
	"strings"
	"testing"
)

// TestExposureWarnings: listening beyond loopback with no credential warns about the inference and the
// admin API; a credential or a loopback host silences the matching warning, and it is in the startup
// summary's effective group.
func TestExposureWarnings(t *testing.T) {
	for _, tt := range []struct {
		name             string
		args             []string
		inference, admin bool
	}{
		{"default host, no keys", nil, true, true},
		{"explicit 0.0.0.0", []string{"--host", "0.0.0.0"}, true, true},
		{"ipv6 any", []string{"--host", "::"}, true, true},
		{"loopback", []string{"--host", "127.0.0.1"}, false, false},
		{"localhost", []string{"--host", "localhost"}, false, false},
		{"ipv6 loopback", []string{"--host", "::1"}, false, false},
		{"api key guards both", []string{"--api-key", "sk-0123456789abcdef"}, false, false},
		{"admin key only", []string{"--admin-api-key", "sk-0123456789abcdef"}, true, false},
	} {
		c, err := parseNoEnv(append([]string{"--worker-urls", "http://w:1"}, tt.args...)...)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		ws := c.ExposureWarnings()
		joined := strings.Join(ws, "\n")
		if got := strings.Contains(joined, "inference API"); got != tt.inference {
			t.Errorf("%s: inference warning %v, want %v: %q", tt.name, got, tt.inference, ws)
		}
		if got := strings.Contains(joined, "admin API"); got != tt.admin {
			t.Errorf("%s: admin warning %v, want %v: %q", tt.name, got, tt.admin, ws)
		}
		summary := c.LogValue().String()
		if got := strings.Contains(summary, "is open to anyone"); got != (tt.inference || tt.admin) {
			t.Errorf("%s: startup summary has the warning %v, want %v", tt.name, got, tt.inference || tt.admin)
		}
	}
}
