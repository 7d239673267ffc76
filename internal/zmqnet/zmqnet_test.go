package zmqnet

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEndpoint(t *testing.T) {
	for in, want := range map[string]string{
		"tcp://127.0.0.1:5557": Scheme + "://127.0.0.1:5557",
		"tcp://*:0":            Scheme + "://*:0",
		"ipc:///tmp/kv":        "ipc:///tmp/kv",
	} {
		got, err := Endpoint(in)
		if err != nil || got != want {
			t.Errorf("Endpoint(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	// A second call must not fail on the registration the first made.
	if _, err := Endpoint("tcp://127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
}

// The library's race in one step: a connection accepted after its socket's context ended (Close
// already ran) must be closed at once, not left for a reader to wait on.
func TestAcceptAfterCloseIsClosed(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	tr := tcp{inner: transportTCP()}
	l, err := tr.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	peer, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	cancel()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second)) // a failure, not a hang, if it stays open
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read on a connection accepted after close: %v, want net.ErrClosed", err)
	}
	// The peer sees the close too, as the library's reader on the other end would.
	_ = peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := peer.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("peer read: %v, want EOF", err)
	}
}

// A dialled connection closes when its socket's context ends, and one closed first unhooks.
func TestDialBoundToContext(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tr := tcp{inner: transportTCP()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := &net.Dialer{}

	early, err := tr.Dial(ctx, d, l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if err := early.Close(); err != nil {
		t.Fatal(err)
	}
	if early.(*boundConn).stop() {
		t.Fatal("closing the connection left its context hook armed")
	}

	c, err := tr.Dial(ctx, d, l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after the socket's context ended: %v, want net.ErrClosed", err)
	}
}
