package poll_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/testkit/poll"
)

func TestWaitReturnsWhenTheConditionHolds(t *testing.T) {
	var calls atomic.Int32
	ok := poll.Wait(time.Minute, func() bool { return calls.Add(1) == 3 })
	if !ok || calls.Load() != 3 {
		t.Fatalf("Wait = %v after %d calls, want true after 3", ok, calls.Load())
	}
}

func TestWaitGivesUpAtTheTimeout(t *testing.T) {
	var calls atomic.Int32
	if poll.Wait(20*time.Millisecond, func() bool { calls.Add(1); return false }) {
		t.Fatal("Wait reported a condition that never held")
	}
	if calls.Load() < 2 {
		t.Fatalf("cond checked %d times, want re-checks until the timeout", calls.Load())
	}
}

type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = format
	panic(r) // Fatalf must not return
}

func TestUntilFailsNamingWhat(t *testing.T) {
	r := &recorder{TB: t}
	func() {
		defer func() {
			if p := recover(); p != r {
				t.Fatalf("recovered %v, want the recorder's Fatalf", p)
			}
		}()
		poll.Until(r, "the thing", time.Millisecond, func() bool { return false })
	}()
	if r.failed == "" {
		t.Fatal("Until did not fail the test")
	}
}
