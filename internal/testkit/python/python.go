// Package python finds the Python 3 that tests run as an independent peer of the gateway's code (an
// engine's grpcio server, vLLM's KV-event publisher), with the Debian packages .ci/run installs.
package python

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Find returns a python3 that imports every one of modules. Without one it skips the test, or fails it
// when CI is set, naming the Debian packages (debs) that provide them.
func Find(t testing.TB, debs []string, modules ...string) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if err := exec.Command(p, "-c", "import "+strings.Join(modules, ", ")).Run(); err == nil {
			return p
		}
	}
	msg := "python3 with " + strings.Join(modules, " and ") + " not found (apt-get install " + strings.Join(debs, " ") + ")"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}
