package server

import (
	"net"
	"testing"
)

// discardConn is a connection that accepts every write and reads a fixed request.
type discardConn struct {
	net.Conn
	req []byte
}

func (discardConn) Write(p []byte) (int, error)  { return len(p), nil }
func (c discardConn) Read(p []byte) (int, error) { return copy(p, c.req), nil }

// BenchmarkWireErrConn measures what the wrapper adds to a normal response's write and a request's
// read, against the bare connection (go test -bench WireErrConn ./internal/server).
func BenchmarkWireErrConn(b *testing.B) {
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Length: 120\r\nContent-Type: application/json\r\nDate: Tue, 01 Dec 2026 13:00:00 GMT\r\n\r\n" +
		`{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}]}`)
	req := []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
	raw := discardConn{req: req}
	buf := make([]byte, 4096)
	for _, bc := range []struct {
		name string
		conn net.Conn
	}{{"bare", raw}, {"wrapped", newWireErrConn(raw, 64<<10)}} {
		b.Run("write/"+bc.name, func(b *testing.B) {
			for b.Loop() {
				_, _ = bc.conn.Write(resp)
			}
		})
		b.Run("read/"+bc.name, func(b *testing.B) {
			for b.Loop() {
				_, _ = bc.conn.Read(buf)
			}
		})
	}
}
