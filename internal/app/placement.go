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
		Settings:        cfg.Placement.Settings,
		KVIndex:         a.kv.index,
		SessionAffinity: cfg.Tenants.SessionHeader != "",
	})
	return err
}
