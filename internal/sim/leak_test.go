package sim

import (
	"testing"

	"go.uber.org/goleak"
)

func verifyNoLeaks(m *testing.M) { goleak.VerifyTestMain(m) }
