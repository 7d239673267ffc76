package sim

import (
	"testing"
	"time"
)

func TestTransferDelay(t *testing.T) {
	t.Parallel()
	c := Config{Topology: Topology{Zone: "a", Rack: "r1", Node: "n1"},
		TransferDelays: TransferDelays{Rack: time.Millisecond, Zone: 2 * time.Millisecond, CrossZone: 3 * time.Millisecond}}
	for _, tc := range []struct {
		from Topology
		want time.Duration
	}{
		{Topology{Zone: "a", Rack: "r1", Node: "n1"}, 0},
		{Topology{Zone: "a", Rack: "r1", Node: "n2"}, time.Millisecond},
		{Topology{Zone: "a", Rack: "r2", Node: "n2"}, 2 * time.Millisecond},
		{Topology{Zone: "b", Rack: "r1", Node: "n1"}, 3 * time.Millisecond},
		{Topology{Zone: "b"}, 3 * time.Millisecond},
		{Topology{}, 0}, // a prefill without topology: nothing known, nothing added
	} {
		if got := c.transferDelay(tc.from); got != tc.want {
			t.Errorf("from %+v: %v, want %v", tc.from, got, tc.want)
		}
	}
	if got := (&Config{TransferDelays: c.TransferDelays}).transferDelay(Topology{Zone: "b"}); got != 0 {
		t.Errorf("a decode without topology added %v", got)
	}
}
