package config

import (
	"flag"
	"log/slog"
	"strconv"
	"strings"
)

// LogValue implements [slog.LogValuer] for the startup log line. It is read off the flag table,
// not written out a second time: one group per help section, one attribute per setting, keyed by
// its flag name with underscores, holding the value the setting has now (so a new flag shows up
// here by being declared). Aliases, SMG compatibility flags and the raw worker flags are left out;
// the group "effective" says what the settings amount to: the mode, the flag workers, whether
// admission, decode seats, TLS and cluster admission are on, and the engine-load interval in force.
// API keys appear only as "[redacted]" (or "" when unset) and passwords in URLs are masked.
func (c *Config) LogValue() slog.Value {
	s := newFlagSet()
	*s.cfg = *c // the flag values point into s.cfg: now they read c's settings
	attrs := []slog.Attr{c.effectiveLogValue()}
	for _, sec := range s.sections {
		if sec.title == compatSection || sec.title == refusedSection {
			continue
		}
		group := make([]slog.Attr, 0, len(sec.names))
		for _, name := range sec.names {
			if s.aliases[name] || s.unbound[name] {
				continue
			}
			group = append(group, slog.Attr{Key: summaryKey(name), Value: summaryValue(s.fs.Lookup(name).Value)})
		}
		if len(group) > 0 {
			attrs = append(attrs, slog.Attr{Key: sectionKey(sec.title), Value: slog.GroupValue(group...)})
		}
	}
	return slog.GroupValue(attrs...)
}

// effectiveLogValue is what the settings imply, beyond the flags' own values.
func (c *Config) effectiveLogValue() slog.Attr {
	workers := make([]slog.Attr, 0, len(c.Workers.Initial))
	for i, w := range c.Workers.Initial {
		v := w.Role + " " + w.Protocol + " " + redactURL(w.URL)
		if w.BootstrapPort != 0 {
			v += " bootstrap=" + strconv.Itoa(w.BootstrapPort)
		}
		workers = append(workers, slog.String(strconv.Itoa(i), v))
	}
	attrs := []any{
		slog.String("mode", string(c.Mode())),
		slog.Attr{Key: "workers", Value: slog.GroupValue(workers...)},
		slog.Bool("admission", c.Admission.Enabled()),
		slog.Bool("decode_seats", c.Admission.SeatsOn()),
		slog.Bool("tls", c.TLS.Enabled()),
		slog.Bool("cluster_admission", c.Cluster.Enabled()),
		slog.Duration("engine_load_interval", c.LoadMonitorInterval()),
	}
	if c.Tenants.MaxQueuedDefaulted {
		attrs = append(attrs, slog.String("tenant_max_queued",
			strconv.Itoa(c.Tenants.MaxQueued)+" (default with a tenant source: half of --prefill-queue-size; --tenant-max-queued off for none)"))
	}
	if ws := c.ExposureWarnings(); len(ws) > 0 {
		attrs = append(attrs, slog.Any("warnings", ws))
	}
	return slog.Group("effective", attrs...)
}

// summaryValue is a flag's value for the log: typed where the flag.Value says its type (numbers,
// booleans, durations stay numbers in JSON), a string otherwise, with URL passwords masked.
func summaryValue(v flag.Value) slog.Value {
	if g, ok := v.(flag.Getter); ok {
		switch x := g.Get().(type) {
		case Secret:
			return slog.StringValue(x.String())
		case string:
			return slog.StringValue(redactList(x))
		default:
			return slog.AnyValue(x)
		}
	}
	return slog.StringValue(redactList(v.String()))
}

// redactList masks URL passwords in a value that may list several items separated by commas.
func redactList(s string) string {
	if s == "" {
		return s
	}
	items := strings.Split(s, ",")
	for i, item := range items {
		items[i] = redactURL(item)
	}
	return strings.Join(items, ",")
}

// summaryKey is a flag's attribute key: its name with underscores, as log keys are.
func summaryKey(flagName string) string { return strings.ReplaceAll(flagName, "-", "_") }

// sectionKey is a help section's group key: its title up to any parenthesis or colon, lower case,
// words joined by underscores ("Prefill admission (PD mode)" is prefill_admission).
func sectionKey(title string) string {
	if i := strings.IndexAny(title, "(:"); i >= 0 {
		title = title[:i]
	}
	return strings.Join(strings.FieldsFunc(strings.ToLower(title), func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9')
	}), "_")
}
