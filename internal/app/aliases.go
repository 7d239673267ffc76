package app

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicegw/sluice/internal/alias"
	"github.com/sluicegw/sluice/internal/config"
)

// newAliases builds the live table of model aliases (--model-alias; the admin API changes it) and
// counts each resolution by alias and target, so a canary's share is visible as it is served.
func (a *App) newAliases(cfg *config.Config) error {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_model_alias_requests_total",
		Help: "Requests for a model alias, by the served model (target) they went to.",
	}, []string{"alias", "target"})
	a.Prom.MustRegister(requests)
	t, err := alias.New(cfg.Aliases.Rules, alias.Options{OnResolve: func(al, target string) {
		requests.WithLabelValues(al, target).Inc()
	}})
	if err != nil {
		return err
	}
	a.Aliases = t
	return nil
}
