// Package poll waits in tests for a condition that another process or socket makes true and that sends
// no notification the test could wait on (a scraped metric, a file descriptor count, a peer's close, a
// child process's output). It is the one place in the tree's real-time tests that sleeps: between
// re-checks of the condition, never in place of one. State a test can observe through a channel or run
// under testing/synctest should be waited on that way instead.
package poll

import (
	"testing"
	"time"
)

// Interval is the pause between two checks: short against the timeouts tests use (seconds), long
// enough not to busy-spin on the two shared cores of CI.
const Interval = 5 * time.Millisecond

// Until calls cond until it returns true and fails the test (Fatalf, naming what) when timeout passes
// first. It returns as soon as cond holds.
func Until(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	if !Wait(timeout, cond) {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// Wait calls cond until it returns true or timeout passes, and reports whether it held. For callers that
// report the failure themselves, with the state they saw.
func Wait(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return cond()
		}
		time.Sleep(Interval) // between checks of cond, which is re-checked: not synchronisation
	}
	return true
}
