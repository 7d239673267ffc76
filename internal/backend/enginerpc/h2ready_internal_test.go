package enginerpc

import (
	"bufio"
	"bytes"
	"testing"

	"golang.org/x/net/http2"
)

// A streamed body renders the messages that came with the last one in the same Read; ready must say
// yes only when the next message is whole without waiting for the engine, and never for a frame that
// is not this stream's data (a PING that rides along with DATA would hold the rendered chunks until
// the next token).
func TestH2StreamReady(t *testing.T) {
	msg := func(payload string) []byte { // a gRPC message: flag, length, payload
		return append([]byte{0, 0, 0, 0, byte(len(payload))}, payload...)
	}
	frames := func(write func(fr *http2.Framer) error) []byte {
		var b bytes.Buffer
		if err := write(http2.NewFramer(&b, nil)); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	data := func(id uint32, p []byte) []byte {
		return frames(func(fr *http2.Framer) error { return fr.WriteData(id, false, p) })
	}
	whole := msg("token")
	cases := []struct {
		name     string
		unread   []byte // the stream's data not yet taken as messages
		buffered []byte // in the connection's read buffer
		want     bool
	}{
		{"nothing", nil, nil, false},
		{"a message in the stream's data", whole, nil, true},
		{"a whole message in a buffered DATA frame", nil, data(1, whole), true},
		{"the rest of a message in a buffered DATA frame", whole[:3], data(1, whole[3:]), true},
		{"half a message in a buffered DATA frame", nil, data(1, whole[:6]), false},
		{"half a frame buffered", nil, data(1, whole)[:11], false},
		{"another stream's DATA", nil, data(3, whole), false},
		{"a PING", nil, frames(func(fr *http2.Framer) error { return fr.WritePing(false, [8]byte{1}) }), false},
		{"the trailers", nil, frames(func(fr *http2.Framer) error {
			return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x88}, EndHeaders: true, EndStream: true})
		}), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn := &h2Conn{br: bufio.NewReader(bytes.NewReader(c.buffered))}
			if len(c.buffered) > 0 {
				if _, err := conn.br.Peek(len(c.buffered)); err != nil {
					t.Fatal(err)
				}
			}
			s := &h2Stream{c: conn, id: 1, data: c.unread}
			if got := s.ready(); got != c.want {
				t.Errorf("ready = %v, want %v", got, c.want)
			}
		})
	}
}
