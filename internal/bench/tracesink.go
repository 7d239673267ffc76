package bench

import (
	"context"
	"net"
	"sync/atomic"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// traceSink is an OTLP/gRPC trace collector that counts the spans it receives and keeps nothing: the
// overhead scenario runs the gateway with tracing on, and its exporter needs somewhere to send to.
type traceSink struct {
	coltracepb.UnimplementedTraceServiceServer
	spans atomic.Int64
	srv   *grpc.Server
	done  chan struct{}
	addr  string
}

func (s *traceSink) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	var n int64
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			n += int64(len(ss.GetSpans()))
		}
	}
	s.spans.Add(n)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// startTraceSink serves a sink on a free loopback port; stop ends it and waits for its server.
func startTraceSink() (*traceSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &traceSink{srv: grpc.NewServer(), done: make(chan struct{}), addr: ln.Addr().String()}
	coltracepb.RegisterTraceServiceServer(s.srv, s)
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

func (s *traceSink) stop() {
	s.srv.Stop()
	<-s.done
}
