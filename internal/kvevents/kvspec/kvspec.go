// Package kvspec reads and checks the endpoints of an engine's KV-cache events: the spec a flag, the
// admin API or a discovery annotation carries, and the per-rank [Endpoint] the subscriber
// (internal/kvevents) dials. It is a leaf so that the worker registry can validate a spec without
// linking the subscriber and its ZeroMQ and msgpack libraries.
package kvspec

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// ErrConfig classifies every invalid endpoint or spec. internal/kvevents reports its own
// configuration errors with the same sentinel (kvevents.ErrConfig).
var ErrConfig = errors.New("kvevents: invalid configuration")

// Endpoint is one engine rank's event stream, as its `--kv-events-config` names it: `endpoint` and
// `replay_endpoint` with the host the gateway reaches (the engine binds `tcp://*:port`), and `topic`.
type Endpoint struct {
	Worker string // worker key (URL)
	Rank   int    // data-parallel rank
	// Publisher is the PUB endpoint, tcp://host:port (rank r of a DP engine publishes on port + r:
	// give each rank's port).
	Publisher string
	Replay    string // the ROUTER replay endpoint; "" when the engine has none (gaps then clear)
	Topic     string // subscription prefix; "" (vLLM's default) receives every topic
	// Engine, when set ("sglang" or "vllm"), makes Publisher the worker's grpc:// (or grpcs://) URL,
	// whose engine gRPC streams every rank's events on SubscribeKvEvents; Rank is then 0 and the
	// batches carry theirs, and Replay and Topic are unused.
	Engine string
}

// Validate checks that e names a worker, a rank and endpoints the gateway can dial.
func (e Endpoint) Validate() error {
	if e.Worker == "" {
		return fmt.Errorf("%w: endpoint without a worker", ErrConfig)
	}
	if e.Rank < 0 {
		return fmt.Errorf("%w: rank %d < 0", ErrConfig, e.Rank)
	}
	if e.Publisher == "" {
		return fmt.Errorf("%w: worker %s: no publisher endpoint", ErrConfig, e.Worker)
	}
	if e.Engine != "" {
		if e.Engine != "sglang" && e.Engine != "vllm" {
			return fmt.Errorf("%w: worker %s: engine %q has no KV event stream (want sglang or vllm)", ErrConfig, e.Worker, e.Engine)
		}
		if !strings.HasPrefix(e.Publisher, "grpc://") && !strings.HasPrefix(e.Publisher, "grpcs://") {
			return fmt.Errorf("%w: worker %s: engine gRPC endpoint %q is not grpc:// or grpcs://", ErrConfig, e.Worker, e.Publisher)
		}
		return nil
	}
	for _, ep := range []string{e.Publisher, e.Replay} {
		if ep == "" {
			continue
		}
		if !strings.HasPrefix(ep, "tcp://") && !strings.HasPrefix(ep, "ipc://") {
			return fmt.Errorf("%w: endpoint %q is not tcp:// or ipc://", ErrConfig, ep)
		}
		if strings.Contains(ep, "*") {
			return fmt.Errorf("%w: endpoint %q is a bind address; give the host the engine is reached at", ErrConfig, ep)
		}
	}
	return nil
}

// Parse reads one engine's event endpoints from the form a flag, the admin API or a
// discovery annotation carries: the PUB endpoint as the gateway reaches it, with optional query
// parameters replay (the ROUTER endpoint), topic and dp (the engine's data-parallel size, default 1):
//
//	tcp://10.0.0.5:5557?replay=tcp://10.0.0.5:5558&dp=2
//
// Rank r's ports are the given ports + r, as vLLM's and SGLang's offset_endpoint_port place them.
func Parse(worker, spec string) ([]Endpoint, error) {
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
		if err := ep.Validate(); err != nil {
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
