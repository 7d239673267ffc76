package config

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// KVEventsConfig names the engines whose KV-cache events the gateway subscribes to (internal/kvevents),
// which kv_aware routes by. Workers added through the admin API give theirs in the request, discovered
// pods in the sluice.dev/kv-events annotation.
type KVEventsConfig struct {
	// Endpoints maps a flag worker's URL to its events endpoint spec (--kv-events-endpoint URL=SPEC,
	// repeatable): tcp://HOST:PORT[?replay=tcp://HOST:PORT&topic=T&dp=N], as kvspec.Parse
	// reads it.
	Endpoints map[string]string
	// RetryInterval is the longest pause between a subscriber's redials of a publisher it lost
	// (--kv-events-retry-secs; 0: the kvevents default, 0.05 s). After an engine restart the index is
	// stale until the redial.
	RetryInterval time.Duration
}

func (s *flagSet) registerKVEvents() {
	s.section("KV-cache events")
	s.add(kvEventsValue{&s.cfg.KVEvents.Endpoints}, "kv-events-endpoint", "URL=SPEC",
		"KV-cache events of the flag worker at URL (kv_aware routes by them): SPEC is the engine's ZeroMQ PUB endpoint as "+
			"the gateway reaches it, tcp://HOST:PORT, with optional ?replay=tcp://HOST:PORT (its replay ROUTER), &topic=T "+
			"and &dp=N (rank r on the ports + r). Repeatable.")
	s.dur(&s.cfg.KVEvents.RetryInterval, time.Second, "kv-events-retry-secs", "SECS", 0,
		"The longest pause between redials of a lost events publisher (a restarted engine; the first is at once); its index is stale until then. 0 = 0.05 s.")
}

// kvEventsValue is a repeatable URL=SPEC flag. The URL is cut at the first "=": worker URLs carry
// none, the spec's query does.
type kvEventsValue struct{ p *map[string]string }

func (v kvEventsValue) String() string {
	if v.p == nil || len(*v.p) == 0 {
		return ""
	}
	parts := make([]string, 0, len(*v.p))
	for _, k := range slices.Sorted(maps.Keys(*v.p)) {
		parts = append(parts, k+"="+(*v.p)[k])
	}
	return strings.Join(parts, ",")
}

func (v kvEventsValue) Set(s string) error {
	url, spec, ok := strings.Cut(strings.TrimSpace(s), "=")
	url, spec = strings.TrimRight(strings.TrimSpace(url), "/"), strings.TrimSpace(spec)
	if !ok || url == "" || spec == "" {
		return fmt.Errorf("want WORKER_URL=tcp://HOST:PORT[?replay=...], got %q", s)
	}
	if !strings.HasPrefix(spec, "tcp://") {
		return fmt.Errorf("events endpoint %q of %s: want tcp://HOST:PORT", spec, redactURL(url))
	}
	if *v.p == nil {
		*v.p = map[string]string{}
	}
	if _, dup := (*v.p)[url]; dup {
		return fmt.Errorf("worker %s is given twice", redactURL(url))
	}
	(*v.p)[url] = spec
	return nil
}

// validateKVEvents checks that every endpoint names a flag worker (the spec itself is checked when
// the gateway starts, by the package that reads it).
func (c *Config) validateKVEvents(p *problems) {
	if c.KVEvents.RetryInterval < 0 {
		p.add("--kv-events-retry-secs must not be negative")
	}
	flagWorkers := map[string]bool{}
	for _, w := range c.Workers.Initial {
		flagWorkers[w.URL] = true
	}
	for _, url := range slices.Sorted(maps.Keys(c.KVEvents.Endpoints)) {
		if !flagWorkers[url] {
			p.add("--kv-events-endpoint %s: not a worker given by --worker-urls, --prefill or --decode", redactURL(url))
		}
	}
}
