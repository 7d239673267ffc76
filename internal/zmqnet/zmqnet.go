// Package zmqnet gives go-zeromq sockets a TCP transport whose connections all close when their
// socket closes, which the library itself does not guarantee.
//
// go-zeromq/zmq4 v0.17.0 closes only the connections it has registered when Close runs. A
// connection that a listener accepted, or that an automatic reconnect dialled, while Close was
// running is registered afterwards and never closed: its reader goroutine then waits on the peer
// forever (seen as a goroutine leak in CI, a PUB socket's pubQReader.listen). Every connection this
// transport opens is tied to the socket's context, which Close cancels first, so such a
// connection is closed too and its goroutine ends.
//
// # Concurrency Model
//
// The transport is registered once in the library's process-wide registry (the library keeps
// transports by name there; it cannot be injected per socket) and is stateless: each connection
// carries its own stop function, so it is safe from any goroutine.
package zmqnet

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// Scheme is the endpoint scheme of the transport: "tcp" endpoints are rewritten to it.
const Scheme = "sluice-tcp"

var register = sync.OnceValue(func() error {
	return zmq4.RegisterTransport(Scheme, tcp{inner: transportTCP()})
})

// Endpoint returns ep ("tcp://host:port") for the socket's Dial or Listen, served by this
// transport. Other schemes (ipc, inproc) are returned unchanged.
func Endpoint(ep string) (string, error) {
	if err := register(); err != nil {
		return "", fmt.Errorf("zmqnet: register transport: %w", err)
	}
	if rest, ok := strings.CutPrefix(ep, "tcp://"); ok {
		return Scheme + "://" + rest, nil
	}
	return ep, nil
}

type tcp struct{ inner transport.Transport }

func (t tcp) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	c, err := t.inner.Dial(ctx, d, addr)
	if err != nil {
		return nil, err
	}
	return bind(ctx, c), nil
}

func (t tcp) Listen(ctx context.Context, addr string) (net.Listener, error) {
	l, err := t.inner.Listen(ctx, addr)
	if err != nil {
		return nil, err
	}
	return listener{Listener: l, ctx: ctx}, nil
}

func (t tcp) Addr(ep string) (string, error) { return t.inner.Addr(ep) }

type listener struct {
	net.Listener
	ctx context.Context
}

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return bind(l.ctx, c), nil
}

// bind closes c when ctx ends; closing c first unhooks it, so a socket that reconnects for days
// holds no hook per dead connection.
func bind(ctx context.Context, c net.Conn) net.Conn {
	b := &boundConn{Conn: c}
	b.stop = context.AfterFunc(ctx, func() { _ = c.Close() })
	return b
}

type boundConn struct {
	net.Conn
	stop func() bool
}

func (b *boundConn) Close() error {
	b.stop()
	return b.Conn.Close()
}

func transportTCP() transport.Transport { return transport.New("tcp") }
