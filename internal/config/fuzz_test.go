package config

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzConfigFile fuzzes the YAML config file: any content is either rejected with an error or yields a
// configuration that validates; it never panics.
func FuzzConfigFile(f *testing.F) {
	f.Add([]byte("pd-disaggregation: true\nprefill:\n  - url: http://10.0.0.1:30000\n    bootstrap-port: 8998\n  - http://10.0.0.2:30000 none\ndecode: [http://10.0.0.3:30000]\nprefill-max-inflight-requests-per-worker: 4\n"))
	f.Add([]byte("worker-urls: http://a:1,http://b:2\npolicy: round_robin\nmax-payload-size: 16MiB\nlog-level: debug\n"))
	f.Add([]byte("tls-cert-path: /c\ntls-key-path: /k\nca-cert-paths: [/ca1, /ca2]\njwt-issuer: https://idp\njwt-audience: a\ncors-allowed-origins: ['*']\n"))
	f.Add([]byte("a: &x [1, *x]\n"))
	f.Add([]byte("port: 1e99\n"))
	f.Add([]byte("---\n---\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if bytes.Count(data, []byte("*")) > 16 {
			return // YAML alias bombs are yaml.v3's to bound; keep each run short
		}
		path := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := parse([]string{"--config", path}, &bytes.Buffer{}, noEnv)
		if err != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("parse accepted a config that does not validate: %v", err)
		}
	})
}
