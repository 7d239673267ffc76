package kvevents_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Subscribers and the ZeroMQ library's goroutines must all end with Run.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
