package workerrpc

import (
	"testing"

	"github.com/sluicegw/sluice/internal/backend/body/bodytest"
)

// FuzzBuildCall: converting a client body to worker-protocol RPCs never panics.
func FuzzBuildCall(f *testing.F) {
	bodytest.AddRequestSeeds(f)
	f.Fuzz(func(t *testing.T, r uint8, body []byte) {
		_, _ = buildCall(bodytest.FuzzRoute(r), body, "req-1")
	})
}
