package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
)

// ClusterConfig describes several engines started in one process.
type ClusterConfig struct {
	Prefill, Decode, Regular int
	// BasePort: engines listen on consecutive ports from BasePort (prefill first, then decode, then
	// regular) and the prefill engines' bootstrap servers on the ports after those. 0 picks free ports.
	// SGLang decode engines use the first prefill engine's bootstrap port for a null bootstrap_port:
	// real deployments run every prefill on the same port (8998) on its own host, one host cannot.
	BasePort int
	Protocol Protocol
	Mode     Mode
	// Engine is the template of every engine's Config (model parameters, seed, faults, GRPC, Host...);
	// its Role, Port and BootstrapPort are set per engine, and Protocol and Mode when the fields above
	// are set (else the template's apply).
	Engine Config
	// Topologies, when given, places the engines, in engine order (prefill, decode, regular): engine i
	// gets Topologies[i] (the template's TransferDelays apply to every decode engine).
	Topologies []Topology
	// Logger receives the engines' logs; nil discards them.
	Logger *slog.Logger
}

// Cluster is a set of running engines.
type Cluster struct {
	Engines []*Engine // prefill engines first, then decode, then regular
}

// StartCluster starts the engines; on error the ones already started are closed.
func StartCluster(ctx context.Context, cc ClusterConfig) (*Cluster, error) {
	logger := cc.Logger
	if cc.Prefill < 0 || cc.Decode < 0 || cc.Regular < 0 || cc.Prefill+cc.Decode+cc.Regular == 0 {
		return nil, fmt.Errorf("%w: a cluster needs a non-negative number of engines, at least one", ErrInvalidConfig)
	}
	if cc.BasePort < 0 || cc.BasePort > 65535 {
		return nil, fmt.Errorf("%w: base port %d out of range", ErrInvalidConfig, cc.BasePort)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	total := cc.Prefill + cc.Decode + cc.Regular
	c := &Cluster{}
	idx := 0
	add := func(role Role, count int) error {
		for i := 0; i < count; i++ {
			cfg := cc.Engine
			cfg.Models = append([]string(nil), cc.Engine.Models...)
			cfg.Role = role
			if cc.Protocol != "" {
				cfg.Protocol = cc.Protocol
			}
			if cc.Mode != "" {
				cfg.Mode = cc.Mode
			}
			cfg.Port, cfg.BootstrapPort = 0, 0
			cfg.EngineID = ""
			if cc.BasePort != 0 {
				cfg.Port = cc.BasePort + idx
				if role == RolePrefill {
					cfg.BootstrapPort = cc.BasePort + total + i
				}
			}
			if role == RoleDecode && len(c.Engines) > 0 && c.Engines[0].Role() == RolePrefill {
				cfg.BootstrapPort = c.Engines[0].BootstrapPort()
			}
			if idx < len(cc.Topologies) {
				cfg.Topology = cc.Topologies[idx]
			}
			idx++
			e, err := New(cfg, logger.With("engine", fmt.Sprintf("%s-%d", role, i)))
			if err != nil {
				return err
			}
			if err := e.Start(ctx); err != nil {
				return err
			}
			c.Engines = append(c.Engines, e)
		}
		return nil
	}
	err := errors.Join(add(RolePrefill, cc.Prefill))
	if err == nil {
		err = add(RoleDecode, cc.Decode)
	}
	if err == nil {
		err = add(RoleRegular, cc.Regular)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Endpoint is how a gateway reaches one engine.
type Endpoint struct {
	Role          Role
	URL           string // http://host:port; the same port serves gRPC when Config.GRPC is set
	BootstrapPort int    // prefill engines with a bootstrap server (SGLang, vLLM Mooncake), else 0
}

// Endpoints lists the engines' addresses in start order.
func (c *Cluster) Endpoints() []Endpoint {
	out := make([]Endpoint, len(c.Engines))
	for i, e := range c.Engines {
		out[i] = Endpoint{Role: e.Role(), URL: e.URL(), BootstrapPort: e.BootstrapPort()}
	}
	return out
}

// ByRole returns the cluster's engines of a role, in start order.
func (c *Cluster) ByRole(r Role) []*Engine {
	var out []*Engine
	for _, e := range c.Engines {
		if e.cfg.Role == r {
			out = append(out, e)
		}
	}
	return out
}

// SetFaults sets the faults of every engine (use Faults.Roles to target some).
func (c *Cluster) SetFaults(f Faults) error {
	var errs []error
	for _, e := range c.Engines {
		errs = append(errs, e.SetFaults(f))
	}
	return errors.Join(errs...)
}

// Shutdown shuts every engine down gracefully (see Engine.Shutdown).
func (c *Cluster) Shutdown(ctx context.Context) error {
	var errs []error
	for _, e := range c.Engines {
		errs = append(errs, e.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

// Close closes every engine.
func (c *Cluster) Close() error {
	for _, e := range c.Engines {
		_ = e.Close()
	}
	return nil
}
