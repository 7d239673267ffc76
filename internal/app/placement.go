package app

import (
	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/placement"
)

// newPlacement builds the KV-event index and the placement policies that read it.
func (a *App) newPlacement(cfg *config.Config) error {
	logger := a.logger
	var err error
	if a.kv, err = newKVEvents(a.Prom, a.Registry, cfg.KVEvents.RetryInterval, logger); err != nil {
		return err
	}
	a.Policies, err = placement.NewSet(placement.Config{
		Policy:              cfg.Placement.Policy,
		PrefillPolicy:       cfg.Placement.PrefillPolicy,
		DecodePolicy:        cfg.Placement.DecodePolicy,
		CacheThreshold:      cfg.Placement.CacheThreshold,
		BalanceAbsThreshold: int64(cfg.Placement.BalanceAbsThreshold),
		BalanceRelThreshold: cfg.Placement.BalanceRelThreshold,
		MaxTreeSize:         cfg.Placement.MaxTreeSize,
		EvictionInterval:    cfg.Placement.EvictionInterval,
		VirtualNodes:        cfg.Placement.VirtualNodes,
		StickyIdle:          cfg.Placement.StickyIdle,
		AssignmentMode:      cfg.Placement.AssignmentMode,
		KVIndex:             a.kv.index,
		SessionAffinity:     cfg.Tenants.SessionHeader != "",
	})
	return err
}
