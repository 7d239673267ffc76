package kvevents

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
)

// ParseEndpointSpec reads one engine's event endpoints from the form a flag, the admin API or a
// discovery annotation carries: the PUB endpoint as the gateway reaches it, with optional query
// parameters replay (the ROUTER endpoint), topic and dp (the engine's data-parallel size, default 1):
//
//	tcp://10.0.0.5:5557?replay=tcp://10.0.0.5:5558&dp=2
//
// Rank r's ports are the given ports + r, as vLLM's and SGLang's offset_endpoint_port place them.
func ParseEndpointSpec(worker, spec string) ([]Endpoint, error) {
	u, err := url.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("%w: kv events endpoint %q: %w", ErrConfig, spec, err)
	}
	if u.Scheme != "tcp" || u.Path != "" || u.User != nil || u.Fragment != "" {
		return nil, fmt.Errorf("%w: kv events endpoint %q: want tcp://host:port[?replay=tcp://host:port&topic=T&dp=N]", ErrConfig, spec)
	}
	q := u.Query()
	for k := range q {
		if k != "replay" && k != "topic" && k != "dp" {
			return nil, fmt.Errorf("%w: kv events endpoint %q: unknown parameter %q", ErrConfig, spec, k)
		}
	}
	dp := 1
	if s := q.Get("dp"); s != "" {
		if dp, err = strconv.Atoi(s); err != nil || dp < 1 || dp > 1024 {
			return nil, fmt.Errorf("%w: kv events endpoint %q: dp %q is not in [1, 1024]", ErrConfig, spec, s)
		}
	}
	pubHost, pubPort, err := hostPort(u.Host)
	if err != nil {
		return nil, fmt.Errorf("%w: kv events endpoint %q: %w", ErrConfig, spec, err)
	}
	var repHost string
	repPort := -1
	if r := q.Get("replay"); r != "" {
		ru, err := url.Parse(r)
		if err != nil || ru.Scheme != "tcp" || ru.Path != "" {
			return nil, fmt.Errorf("%w: kv events replay endpoint %q: want tcp://host:port", ErrConfig, r)
		}
		if repHost, repPort, err = hostPort(ru.Host); err != nil {
			return nil, fmt.Errorf("%w: kv events replay endpoint %q: %w", ErrConfig, r, err)
		}
	}
	eps := make([]Endpoint, dp)
	for r := range eps {
		ep := Endpoint{Worker: worker, Rank: r, Topic: q.Get("topic"),
			Publisher: "tcp://" + net.JoinHostPort(pubHost, strconv.Itoa(pubPort+r))}
		if repPort >= 0 {
			ep.Replay = "tcp://" + net.JoinHostPort(repHost, strconv.Itoa(repPort+r))
		}
		if pubPort+r > 65535 || repPort+r > 65535 {
			return nil, fmt.Errorf("%w: kv events endpoint %q: rank %d's port is beyond 65535", ErrConfig, spec, r)
		}
		if err := ep.validate(); err != nil {
			return nil, err
		}
		eps[r] = ep
	}
	return eps, nil
}

func hostPort(hp string) (string, int, error) {
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, err
	}
	if h == "" || h == "*" {
		return "", 0, fmt.Errorf("host %q: give the address the engine is reached at, not a bind address", h)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return "", 0, fmt.Errorf("port %q out of range", p)
	}
	return h, n, nil
}
