package cluster

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine (exchange and ping loops, informers, leader election)
// outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
