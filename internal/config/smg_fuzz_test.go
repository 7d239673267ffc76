package config

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzCommandLine fuzzes command lines (SMG's forms included: several values after one flag, URL
// [PORT], refused flags with or without values): parsing never panics, and a configuration it accepts
// validates.
func FuzzCommandLine(f *testing.F) {
	for _, l := range smgLines {
		f.Add(l.line)
	}
	f.Add("--prefill-selector app=sglang role=prefill --decode-selector --service-discovery")
	f.Add("--encode http://e:1 none --worker-urls")
	f.Add("--storage-context-headers -x=1 --prometheus-duration-buckets -1 0.5 --")
	f.Fuzz(func(t *testing.T, line string) {
		args := splitLine(strings.ReplaceAll(line, "\x00", " "))
		if len(args) > 64 {
			return
		}
		cfg, err := parse(args, &bytes.Buffer{}, noEnv)
		if err != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("parse(%q) accepted a config that does not validate: %v", args, err)
		}
	})
}
