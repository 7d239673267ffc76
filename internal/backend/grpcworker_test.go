package backend

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"

	workerv1 "github.com/sluicegw/sluice/gen/sluice/worker/v1"
	"github.com/sluicegw/sluice/gen/sluice/worker/v1/workerv1connect"
)

// A worker-protocol server for the metadata calls (loads, probes) made through NewHTTPClient's
// grpc:// transport; workerrpc's own tests have the full one.

// fakeWorker answers GetLoad as load says (unimplemented when nil).
type fakeWorker struct {
	load func(ctx context.Context) (*workerv1.GetLoadResponse, error)
}

func (f *fakeWorker) GetLoad(ctx context.Context, _ *workerv1.GetLoadRequest) (*workerv1.GetLoadResponse, error) {
	if f.load == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, nil)
	}
	return f.load(ctx)
}

// startWorker serves f's LoadService (and whatever extra mounts) over h2c on loopback; it returns
// "host:port".
func startWorker(t *testing.T, f *fakeWorker, extra ...func(*http.ServeMux)) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(workerv1connect.NewLoadServiceHandler(f))
	for _, e := range extra {
		e(mux)
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
