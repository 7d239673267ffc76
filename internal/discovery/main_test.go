package discovery

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine (informers, reconcilers, drains) outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
