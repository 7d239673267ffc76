package cluster

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// ParsePeers checks --admission-peers: base URLs (http://host:port, no path) of every replica's admin
// listener, each once. They are returned normalized (lower-case scheme and host, no trailing slash), as
// replica ids.
func ParsePeers(list []string) ([]string, error) {
	var out []string
	for _, raw := range list {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		u, err := url.Parse(strings.TrimRight(raw, "/"))
		if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Hostname() == "" {
			return nil, fmt.Errorf("%w: peer %q: want a base URL like http://10.0.0.1:30000", ErrInvalidConfig, raw)
		}
		if u.Port() == "" || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return nil, fmt.Errorf("%w: peer %q: want scheme://host:port only (the admin listener of the replica)", ErrInvalidConfig, raw)
		}
		p, err := strconv.Atoi(u.Port())
		if err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("%w: peer %q: port out of range", ErrInvalidConfig, raw)
		}
		id := (&url.URL{Scheme: strings.ToLower(u.Scheme), Host: net.JoinHostPort(strings.ToLower(u.Hostname()), u.Port())}).String()
		if slices.Contains(out, id) {
			return nil, fmt.Errorf("%w: peer %q given twice", ErrInvalidConfig, raw)
		}
		out = append(out, id)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: --admission-peers is empty", ErrInvalidConfig)
	}
	return out, nil
}

// Resolver looks host names up (net.DefaultResolver in production).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// FindSelf picks this replica out of the peers by its own admin listener: the peer whose port is port and
// whose host is listenHost (when it is a specific address) or one of this machine's addresses (localAddrs;
// host names are resolved). Exactly one peer must match.
func FindSelf(ctx context.Context, peers []string, listenHost string, port int, localAddrs []netip.Addr, res Resolver) (string, error) {
	mine := func(a netip.Addr) bool {
		a = a.Unmap()
		if h, err := netip.ParseAddr(listenHost); err == nil && !h.IsUnspecified() {
			return a == h.Unmap()
		}
		return a.IsLoopback() || slices.ContainsFunc(localAddrs, func(l netip.Addr) bool { return l.Unmap() == a })
	}
	var found []string
	for _, p := range peers {
		u, err := url.Parse(p)
		if err != nil || u.Port() != strconv.Itoa(port) {
			continue
		}
		host := u.Hostname()
		var addrs []netip.Addr
		if a, err := netip.ParseAddr(host); err == nil {
			addrs = []netip.Addr{a}
		} else if res != nil {
			addrs, _ = res.LookupNetIP(ctx, "ip", host) // an unresolvable name is simply not this replica
		}
		if slices.ContainsFunc(addrs, mine) {
			found = append(found, p)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return "", fmt.Errorf("%w: no peer names this replica's admin listener (port %d on this machine's addresses); list this replica in --admission-peers by an address it listens on", ErrSelfNotFound, port)
	default:
		return "", fmt.Errorf("%w: several peers name this replica's admin listener (%s); give each replica once", ErrSelfNotFound, strings.Join(found, ", "))
	}
}

// LocalAddrs returns the addresses of this machine's interfaces.
func LocalAddrs() []netip.Addr {
	ifs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range ifs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out
}
