package kvevents

import (
	"context"
	"crypto/tls"
	"net/url"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// engineRunner is a GRPCSubscriber with the client connection it owns: closed when Run returns.
type engineRunner struct {
	conn *grpc.ClientConn
	sub  *GRPCSubscriber
}

// newEngineRunner dials (lazily) the engine of an Endpoint with Engine set and makes its subscriber.
func newEngineRunner(ep Endpoint, cfg ManagerConfig) (*engineRunner, error) {
	if err := ep.Validate(); err != nil {
		return nil, err
	}
	u, err := url.Parse(ep.Publisher)
	if err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if u.Scheme == "grpcs" {
		creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	}
	conn, err := grpc.NewClient("passthrough:///"+u.Host, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}
	subscribe, err := EngineSubscribe(conn, ep.Engine)
	if err == nil {
		var sub *GRPCSubscriber
		sub, err = NewGRPCSubscriber(GRPCSubscriberConfig{Worker: ep.Worker, Index: cfg.Index, Subscribe: subscribe,
			RetryInterval: cfg.RetryInterval, Logger: cfg.Logger, Metrics: cfg.Metrics, Now: cfg.Now})
		if err == nil {
			return &engineRunner{conn: conn, sub: sub}, nil
		}
	}
	_ = conn.Close()
	return nil, err
}

func (r *engineRunner) Run(ctx context.Context) error {
	defer r.conn.Close()
	return r.sub.Run(ctx)
}
