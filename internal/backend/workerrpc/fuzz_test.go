// An external test package: the shared seeds (bodytest) import body, and workerrpc's own tests stay a
// floor lower without them (docs/architecture.md, the floors).
package workerrpc_test

import (
	"testing"

	"github.com/sluicegw/sluice/internal/backend/body/bodytest"
	"github.com/sluicegw/sluice/internal/backend/workerrpc"
)

// FuzzBuildCall: converting a client body to worker-protocol RPCs never panics.
func FuzzBuildCall(f *testing.F) {
	bodytest.AddRequestSeeds(f)
	f.Fuzz(func(t *testing.T, r uint8, body []byte) {
		_, _ = workerrpc.BuildCall(bodytest.FuzzRoute(r), body, "req-1")
	})
}
