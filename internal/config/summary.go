package config

import (
	"log/slog"
	"strconv"
)

// LogValue implements [slog.LogValuer] for the startup log line. API keys
// appear only as "[redacted]" (or "" when unset) and passwords in URLs are
// masked.
func (c *Config) LogValue() slog.Value {
	workers := make([]slog.Attr, 0, len(c.Workers.Initial)+4)
	workers = append(workers,
		slog.String("mode", string(c.Mode())),
		slog.String("runtime", c.Workers.Runtime),
		slog.String("model_id", c.Workers.ModelID),
	)
	for i, w := range c.Workers.Initial {
		v := w.Role + " " + w.Protocol + " " + redactURL(w.URL)
		if w.BootstrapPort != 0 {
			v += " bootstrap=" + strconv.Itoa(w.BootstrapPort)
		}
		workers = append(workers, slog.String(strconv.Itoa(i), v))
	}
	level, ok := logLevelName(c.Telemetry.LogLevel)
	if !ok {
		level = c.Telemetry.LogLevel.String()
	}
	return slog.GroupValue(
		slog.Group("server",
			slog.String("host", c.Server.Host),
			slog.Int("port", c.Server.Port),
			slog.Int("admin_port", c.Server.AdminPort),
			slog.String("config_file", c.Server.ConfigFile),
			slog.Duration("shutdown_grace_period", c.Server.ShutdownGracePeriod),
			slog.Duration("request_timeout", c.Server.RequestTimeout),
			slog.Int64("max_payload_size", c.Server.MaxPayloadSize),
			slog.String("api_key", c.Server.APIKey.String()),
			slog.String("admin_api_key", c.Server.AdminAPIKey.String()),
		),
		slog.Attr{Key: "workers", Value: slog.GroupValue(workers...)},
		slog.Group("discovery",
			slog.Bool("enabled", c.Discovery.Enabled),
			slog.String("selector", FormatSelector(c.Discovery.Selector)),
			slog.String("prefill_selector", FormatSelector(c.Discovery.PrefillSelector)),
			slog.String("decode_selector", FormatSelector(c.Discovery.DecodeSelector)),
			slog.String("namespace", c.Discovery.Namespace),
			slog.Int("port", c.Discovery.Port),
			slog.String("model_id_from", c.Discovery.ModelIDFrom.String()),
		),
		slog.Group("placement",
			slog.String("policy", c.Placement.Policy),
			slog.String("prefill_policy", c.Placement.PrefillPolicy),
			slog.String("decode_policy", c.Placement.DecodePolicy),
			slog.Float64("cache_threshold", c.Placement.CacheThreshold),
			slog.Int("balance_abs_threshold", c.Placement.BalanceAbsThreshold),
			slog.Float64("balance_rel_threshold", c.Placement.BalanceRelThreshold),
			slog.Int("max_tree_size", c.Placement.MaxTreeSize),
			slog.Duration("eviction_interval", c.Placement.EvictionInterval),
			slog.Int("virtual_nodes", c.Placement.VirtualNodes),
		),
		slog.Group("admission",
			slog.Bool("enabled", c.Admission.Enabled()),
			slog.Int("max_inflight_per_worker", c.Admission.MaxInflightPerWorker),
			slog.Int("queue_size", c.Admission.QueueSize),
			slog.Duration("queue_timeout", c.Admission.QueueTimeout),
			slog.Int64("max_inflight_tokens_per_worker", c.Admission.MaxInflightTokensPerWorker),
			slog.Float64("chars_per_token", c.Admission.CharsPerToken),
			slog.Any("priority_bands", bandsValue{&c.Admission.PriorityBands}.String()),
			slog.Duration("priority_aging", c.Admission.PriorityAging),
			slog.Bool("early_rejection", c.Admission.EarlyRejection),
			slog.String("adaptive_limit", rangeValue{&c.Admission.AdaptiveMin, &c.Admission.AdaptiveMax}.String()),
			slog.String("decode_max_inflight_per_worker", decodeLimitValue{&c.Admission.DecodeMaxInflightPerWorker, &c.Admission.DecodeAuto}.String()),
			slog.Int("decode_window", c.Admission.DecodeWindow),
			slog.Int64("local_prefill_max_tokens", c.Admission.LocalPrefillMaxTokens),
		),
		slog.Group("load",
			slog.Duration("interval", c.LoadMonitorInterval()),
			slog.Int("overload_waiting_requests", c.Load.OverloadWaitingRequests),
			slog.Int("decode_overload_waiting_requests", c.Load.DecodeOverloadWaitingRequests),
			slog.Float64("decode_max_kv_usage", c.Load.DecodeMaxKVUsage),
		),
		slog.Group("cluster_admission",
			slog.String("mode", c.Cluster.Mode),
			slog.Any("peers", c.Cluster.Peers),
			slog.Duration("exchange_period", c.Cluster.ExchangePeriod),
			slog.Duration("lease", c.Cluster.Lease),
			slog.String("service", c.Cluster.Service),
			slog.String("namespace", c.Cluster.Namespace),
			slog.String("lease_name", c.Cluster.LeaseName),
		),
		slog.Group("health",
			slog.Bool("disabled", c.Health.Disabled),
			slog.Duration("interval", c.Health.Interval),
			slog.Duration("timeout", c.Health.Timeout),
			slog.Int("success_threshold", c.Health.SuccessThreshold),
			slog.Int("failure_threshold", c.Health.FailureThreshold),
			slog.String("endpoint", c.Health.Endpoint),
		),
		slog.Group("breaker",
			slog.Bool("disabled", c.Breaker.Disabled),
			slog.Int("failure_threshold", c.Breaker.FailureThreshold),
			slog.Int("success_threshold", c.Breaker.SuccessThreshold),
			slog.Duration("timeout", c.Breaker.Timeout),
			slog.Bool("health_recovery_disabled", c.Breaker.HealthRecoveryDisabled),
		),
		c.securityLogValue(),
		c.smgLogValue(),
		slog.Group("retry",
			slog.Bool("disabled", c.Retry.Disabled),
			slog.Int("max_retries", c.Retry.MaxRetries),
			slog.Duration("initial_backoff", c.Retry.InitialBackoff),
			slog.Duration("max_backoff", c.Retry.MaxBackoff),
			slog.Float64("backoff_multiplier", c.Retry.BackoffMultiplier),
			slog.Float64("jitter_factor", c.Retry.JitterFactor),
		),
		slog.Group("telemetry",
			slog.String("log_level", level),
			slog.Bool("log_json", c.Telemetry.LogJSON),
			slog.String("otlp_traces_endpoint", redactURL(c.Telemetry.OTLPTracesEndpoint)),
			slog.Float64("trace_sample_ratio", c.Telemetry.TraceSampleRatio),
		),
	)
}
