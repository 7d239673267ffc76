package sim

import (
	"context"
	"time"
)

// Topology is where a simulated engine runs (zone, rack, node), so that a KV transfer between engines
// far apart costs what it does on real fabrics: a decode engine waits TransferDelay's time for the
// level the two engines differ at, after the KV has arrived and before its first token.
type Topology struct {
	Zone, Rack, Node string
}

// TransferDelays is the extra KV-transfer time per topology level a decode engine adds when its
// prefill engine is on another node in its rack (Rack), another rack in its zone (Zone), or in another
// zone (CrossZone). A transfer where either engine has no topology, or within one node, adds nothing.
type TransferDelays struct {
	Rack, Zone, CrossZone time.Duration
}

// transferDelay is the extra time of a KV transfer from a prefill engine at from.
func (c *Config) transferDelay(from Topology) time.Duration {
	to := c.Topology
	if from == (Topology{}) || to == (Topology{}) {
		return 0
	}
	differ := func(a, b string) bool { return a != "" && b != "" && a != b }
	switch {
	case differ(from.Zone, to.Zone):
		return c.TransferDelays.CrossZone
	case differ(from.Rack, to.Rack):
		return c.TransferDelays.Zone
	case differ(from.Node, to.Node):
		return c.TransferDelays.Rack
	}
	return 0
}

// awaitTransfer waits out the transfer's extra time for a record from prefill topology rec's,
// counting the transfers that paid one.
func (e *Engine) awaitTransfer(ctx context.Context, rec kvRecord) error {
	d := e.cfg.transferDelay(Topology{Zone: rec.Zone, Rack: rec.Rack, Node: rec.Node})
	if d <= 0 {
		return nil
	}
	e.stats.remoteTransfers.Add(1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
