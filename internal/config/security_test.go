package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestSecurityFlags(t *testing.T) {
	c, err := parseNoEnv(
		"--tls-cert-path", "/etc/tls/tls.crt", "--tls-key-path", "/etc/tls/tls.key",
		"--ca-cert-paths", "/ca/a.pem,/ca/b.pem", "--ca-cert-paths", "/ca/c.pem",
		"--client-cert-path", "/c/client.crt", "--client-key-path", "/c/client.key",
		"--api-keys-file", "/keys/api-keys",
		"--jwt-issuer", "https://idp.example.com/realms/x", "--jwt-audience", "sluice",
		"--jwt-jwks-uri", "https://idp.example.com/certs", "--jwt-role-claim", "realm_access.roles",
		"--jwt-admin-role", "sluice-admin",
		"--cors-allowed-origins", "https://app.example.com, http://localhost:5173",
		"--read-header-timeout-secs", "2.5", "--body-read-timeout-secs", "30", "--client-write-timeout-secs", "15",
		"--idle-timeout-secs", "45", "--max-header-bytes", "16KiB", "--max-connections", "0",
		"--disable-cb-health-recovery",
	)
	if err != nil {
		t.Fatal(err)
	}
	want := TLSConfig{
		CertPath: "/etc/tls/tls.crt", KeyPath: "/etc/tls/tls.key",
		CACertPaths:    []string{"/ca/a.pem", "/ca/b.pem", "/ca/c.pem"},
		ClientCertPath: "/c/client.crt", ClientKeyPath: "/c/client.key",
	}
	if diff := cmp.Diff(want, c.TLS); diff != "" {
		t.Errorf("TLS (-want +got):\n%s", diff)
	}
	wantAuth := AuthConfig{
		APIKeysFile: "/keys/api-keys", JWTIssuer: "https://idp.example.com/realms/x", JWTAudience: "sluice",
		JWTJWKSURI: "https://idp.example.com/certs", JWTRoleClaim: "realm_access.roles", JWTAdminRole: "sluice-admin",
		CORSAllowedOrigins: []string{"https://app.example.com", "http://localhost:5173"},
	}
	if diff := cmp.Diff(wantAuth, c.Auth); diff != "" {
		t.Errorf("Auth (-want +got):\n%s", diff)
	}
	wantLimits := LimitsConfig{
		ReadHeaderTimeout: 2500 * time.Millisecond, BodyReadTimeout: 30 * time.Second, WriteTimeout: 15 * time.Second,
		IdleTimeout: 45 * time.Second, MaxHeaderBytes: 16 << 10, MaxConnections: 0,
	}
	if diff := cmp.Diff(wantLimits, c.Limits); diff != "" {
		t.Errorf("Limits (-want +got):\n%s", diff)
	}
	if !c.Breaker.HealthRecoveryDisabled {
		t.Error("--disable-cb-health-recovery not applied")
	}
	if !c.TLS.Enabled() || !c.Auth.JWTEnabled() {
		t.Error("TLS and JWT should be enabled")
	}
}

func TestSecurityFileLists(t *testing.T) {
	path := writeFile(t, "ca-cert-paths:\n  - /ca/a.pem\n  - /ca/b.pem\ncors-allowed-origins: ['*']\n")
	c, err := parseNoEnv("--config", path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"/ca/a.pem", "/ca/b.pem"}, c.TLS.CACertPaths); diff != "" {
		t.Errorf("ca-cert-paths from file (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"*"}, c.Auth.CORSAllowedOrigins); diff != "" {
		t.Errorf("cors-allowed-origins from file (-want +got):\n%s", diff)
	}
}

func TestSecurityValidation(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"cert without key", []string{"--tls-cert-path", "c.pem"}, "--tls-cert-path and --tls-key-path go together"},
		{"key without cert", []string{"--tls-key-path", "k.pem"}, "--tls-cert-path and --tls-key-path go together"},
		{"client cert without key", []string{"--client-cert-path", "c.pem"}, "--client-cert-path and --client-key-path go together"},
		{"issuer without audience", []string{"--jwt-issuer", "https://idp"}, "--jwt-issuer and --jwt-audience go together"},
		{"jwks without issuer", []string{"--jwt-jwks-uri", "https://idp/keys"}, "--jwt-jwks-uri needs --jwt-issuer"},
		{"issuer not a URL", []string{"--jwt-issuer", "idp", "--jwt-audience", "a"}, `--jwt-issuer "idp"`},
		{"jwks bad scheme", []string{"--jwt-issuer", "https://idp", "--jwt-audience", "a", "--jwt-jwks-uri", "file:///keys"}, `scheme "file" not supported`},
		{"empty role claim", []string{"--jwt-issuer", "https://idp", "--jwt-audience", "a", "--jwt-role-claim", ""}, "--jwt-role-claim must not be empty"},
		{"origin with path", []string{"--cors-allowed-origins", "https://a.example/app"}, "an origin has no path"},
		{"origin without scheme", []string{"--cors-allowed-origins", "a.example"}, "want scheme://host"},
		{"empty origin item", []string{"--cors-allowed-origins", "https://a,"}, "empty item"},
		{"zero header timeout", []string{"--read-header-timeout-secs", "0"}, "--read-header-timeout-secs must be positive"},
		{"negative write timeout", []string{"--client-write-timeout-secs", "-1"}, "--client-write-timeout-secs must be positive"},
		{"tiny header limit", []string{"--max-header-bytes", "100"}, "--max-header-bytes must be between"},
		{"negative connections", []string{"--max-connections", "-5"}, "--max-connections must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseNoEnv(tt.args...)
			if err == nil {
				t.Fatalf("parse(%q) succeeded, want error containing %q", tt.args, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parse(%q) = %v, want it to contain %q", tt.args, err, tt.wantErr)
			}
			var flagErr bool
			if errors.Is(err, ErrInvalid) || strings.Contains(err.Error(), "invalid value") {
				flagErr = true
			}
			if !flagErr {
				t.Errorf("error %v is neither a validation nor a flag error", err)
			}
		})
	}
}

func TestSummaryHasNoKeyMaterial(t *testing.T) {
	c, err := parseNoEnv("--api-key", "sk-very-secret", "--api-keys-file", "/keys", "--jwt-issuer", "https://idp",
		"--jwt-audience", "aud", "--tls-cert-path", "/c", "--tls-key-path", "/k")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, a := range c.LogValue().Group() {
		b.WriteString(a.String())
	}
	out := b.String()
	if strings.Contains(out, "sk-very-secret") {
		t.Errorf("summary leaks the API key: %s", out)
	}
	for _, want := range []string{"api_keys_file=/keys", "jwt_issuer=https://idp", "tls=true"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary %s lacks %q", out, want)
		}
	}
}
