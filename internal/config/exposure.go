package config

import (
	"net"
	"strconv"
	"strings"
)

// ExposureWarnings says what the settings leave open to the network: the inference API without any
// credential (--api-key, --api-keys-file, --jwt-issuer) and the admin API (which adds and removes
// workers and changes admission) without one either, when the gateway listens beyond loopback. The
// default --host is 0.0.0.0, so a first `sluice serve` is open to every address; these lines are
// logged at startup, in the startup summary and in /health's warnings. The rule matches internal/auth:
// any inference credential also guards the admin API.
func (c *Config) ExposureWarnings() []string {
	if isLoopbackHost(c.Server.Host) {
		return nil
	}
	inference := c.Server.APIKey != "" || c.Auth.APIKeysFile != "" || c.Auth.JWTEnabled()
	admin := inference || c.Server.AdminAPIKey != ""
	where := net.JoinHostPort(c.Server.Host, strconv.Itoa(c.Server.Port))
	var out []string
	if !inference {
		out = append(out, "the inference API on "+where+" is open to anyone who can reach it: no --api-key, --api-keys-file or --jwt-issuer (or listen on --host 127.0.0.1)")
	}
	if !admin {
		adminWhere := where
		if c.Server.AdminPort != 0 {
			adminWhere = net.JoinHostPort(c.Server.Host, strconv.Itoa(c.Server.AdminPort))
		}
		out = append(out, "the admin API on "+adminWhere+" (add and remove workers, change admission) is open to anyone who can reach it: set --admin-api-key (or listen on --host 127.0.0.1)")
	}
	return out
}

// isLoopbackHost reports whether a listen host reaches only this machine ("" and 0.0.0.0 are every
// interface).
func isLoopbackHost(host string) bool {
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
