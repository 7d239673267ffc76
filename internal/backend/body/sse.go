package body

import (
	"bytes"
	"errors"
	"io"

	"github.com/sluicegw/sluice/internal/jsonscan"
)

// SSE framing as engines emit it (text/event-stream): events separated by a blank line, the payload
// in "data:" lines. Reading is on the per-token hot path of every streamed response: the reader keeps
// one buffer, finds each event in it without copying (an event with one data line, the usual case,
// is returned as a slice of that buffer), and can tell without reading whether a complete event is
// already buffered (NextBuffered), so a relay writes every frame that arrived together at once.

// MaxSSEFrame bounds one event's payload (a runaway upstream must not exhaust memory).
const MaxSSEFrame = 16 << 20

// ErrSSEFrameTooLarge is returned for an event larger than MaxSSEFrame.
var ErrSSEFrameTooLarge = errors.New("sse: event too large")

var (
	doneData = []byte("[DONE]")
	dataPfx  = []byte("data:")
)

const (
	// sseBufSize is the reader's first buffer: a few typical chunks. It grows (doubling) for larger
	// events, up to what MaxSSEFrame needs.
	sseBufSize = 4 << 10
	// maxSSEEvent bounds an event's raw bytes (its payload plus field names, comments and line ends).
	maxSSEEvent = MaxSSEFrame + 64<<10
	// maxEmptyReads is how many reads in a row may return nothing before the reader gives up.
	maxEmptyReads = 100
)

// SSEReader reads the data payloads of server-sent events.
type SSEReader struct {
	r   io.Reader
	buf []byte
	// buf[off:end] is unread. The event being scanned starts at off; pos is the start of its next
	// line not yet parsed, and scan how far that line was searched for its end without finding it.
	off, end, pos, scan int
	// The current event's data: seen is set once it has a data field; its first value is
	// buf[first0:first1]; a second data line moves the payload to data (reused).
	seen, multi    bool
	first0, first1 int
	data           []byte
	rerr           error // what the underlying reader returned last: no more reads after it
	err            error // sticky: what Next returns from now on
}

// NewSSEReader returns a reader of the events in r.
func NewSSEReader(r io.Reader) *SSEReader {
	return &SSEReader{r: r}
}

// Next returns the data payload of the next event that has one: its data lines joined with "\n",
// the optional space after "data:" removed. Comments (lines starting with ':') and the event, id and
// retry fields are skipped; lines end with "\n", "\r\n" or a bare "\r", as the SSE standard says (a
// bare CR inside a data line would otherwise reach clients, whose decoders split there, as a different
// payload than the one the gateway inspected). The payload is valid until the next call of Next or
// NextBuffered. At the end of the stream Next returns io.EOF, or io.ErrUnexpectedEOF when the stream
// ended inside an event (that partial event is dropped, as the SSE spec says). "[DONE]" is returned
// like any other payload; see IsDone.
func (s *SSEReader) Next() ([]byte, error) {
	if s.err != nil {
		return nil, s.err
	}
	empty := 0
	for {
		payload, ok, err := s.event()
		switch {
		case err != nil:
			s.err = err
			return nil, err
		case ok:
			return payload, nil
		case s.rerr != nil:
			s.err = s.endError()
			return nil, s.err
		}
		n, err := s.fill()
		if n == 0 && err == nil {
			if empty++; empty >= maxEmptyReads {
				s.rerr = io.ErrNoProgress
			}
		} else {
			empty = 0
		}
	}
}

// NextBuffered returns the next event's payload, as Next would, when that event is complete in what
// was already read; otherwise ok is false and nothing was read (the next Next reads). It never
// blocks: a relay calls it after each frame and flushes what it has written once it says no.
func (s *SSEReader) NextBuffered() (payload []byte, ok bool) {
	if s.err != nil {
		return nil, false
	}
	payload, ok, err := s.event()
	if err != nil {
		s.err = err
		return nil, false
	}
	return payload, ok
}

// event parses the buffered bytes for the next event with data. ok is false when none is complete
// yet; the parse state is kept, so the next call goes on where this one stopped.
//
// A line ends at a LF, a CRLF or a bare CR, but bytes are parsed only up to the last LF read: a bare
// CR is taken as a line end once a LF has followed it (so a CR at the end of a read is never taken for
// a line end that turns out to be half a CRLF), and what follows the last LF at the end of the stream
// is a partial line. This is how the line-by-line reader before this one behaved.
func (s *SSEReader) event() ([]byte, bool, error) {
	for {
		rest := s.buf[s.pos:s.end]
		from := s.scan - s.pos // what an earlier call searched for a LF already
		nl := bytes.IndexByte(rest[from:], '\n')
		if nl < 0 {
			s.scan = s.end
			return nil, false, s.checkSize()
		}
		nl += from
		n, term := nl, 1
		if cr := bytes.IndexByte(rest[:nl], '\r'); cr >= 0 {
			n = cr
			if cr+1 == nl {
				term = 2
			}
		}
		line := rest[:n]
		start := s.pos
		s.pos += n + term
		s.scan = s.pos // after a bare CR the LF found is still ahead: it is searched for again
		if n == 0 {    // a blank line ends the event
			if !s.seen {
				s.off = s.pos // nothing to dispatch: an event without data
				continue
			}
			payload := s.buf[s.first0:s.first1]
			if s.multi {
				payload = s.data
			}
			s.off, s.seen, s.multi = s.pos, false, false
			return payload, true, nil
		}
		if line[0] == ':' {
			continue // a comment
		}
		var v0, v1 int
		switch {
		case bytes.HasPrefix(line, dataPfx):
			v0, v1 = start+len(dataPfx), start+n
			if v0 < v1 && s.buf[v0] == ' ' {
				v0++
			}
		case n == len(dataPfx)-1 && bytes.Equal(line, dataPfx[:4]): // "data" alone: an empty data line
			v0, v1 = start+n, start+n
		default:
			continue // event:, id:, retry: or another field: nothing the gateway relays
		}
		switch {
		case !s.seen:
			s.seen, s.first0, s.first1 = true, v0, v1
		case !s.multi:
			s.multi = true
			s.data = append(s.data[:0], s.buf[s.first0:s.first1]...)
			fallthrough
		default:
			if len(s.data)+v1-v0+1 > MaxSSEFrame {
				return nil, false, ErrSSEFrameTooLarge
			}
			s.data = append(s.data, '\n')
			s.data = append(s.data, s.buf[v0:v1]...)
		}
		if s.first1-s.first0+1 > MaxSSEFrame {
			return nil, false, ErrSSEFrameTooLarge
		}
	}
}

// checkSize fails an incomplete event that has grown past every bound.
func (s *SSEReader) checkSize() error {
	if s.end-s.off > maxSSEEvent || (s.seen && !s.multi && s.first1-s.first0+1 > MaxSSEFrame) {
		return ErrSSEFrameTooLarge
	}
	return nil
}

// endError is the error at the end of the input: io.EOF becomes io.ErrUnexpectedEOF when the stream
// ended inside an event (a data field seen, or a partial last line that is not a comment).
func (s *SSEReader) endError() error {
	if !errors.Is(s.rerr, io.EOF) {
		return s.rerr
	}
	if s.seen || (s.pos < s.end && s.buf[s.pos] != ':') {
		return io.ErrUnexpectedEOF
	}
	return io.EOF
}

// fill reads once more, first making room: the unread bytes move to the front, and the buffer
// doubles when they fill it.
func (s *SSEReader) fill() (int, error) {
	if s.buf == nil {
		s.buf = make([]byte, sseBufSize)
	}
	if s.off == s.end { // everything read was used: start over at the front
		s.off, s.end, s.pos, s.scan = 0, 0, 0, 0
	}
	if s.end == len(s.buf) {
		if s.off > 0 {
			k := s.off
			copy(s.buf, s.buf[k:s.end])
			s.end -= k
			s.pos -= k
			s.scan -= k
			s.first0 -= k
			s.first1 -= k
			s.off = 0
		}
		if s.end == len(s.buf) {
			nb := make([]byte, 2*len(s.buf))
			copy(nb, s.buf[:s.end])
			s.buf = nb
		}
	}
	n, err := s.r.Read(s.buf[s.end:])
	s.end += n
	if err != nil {
		s.rerr = err
	}
	return n, err
}

// IsDone reports whether a payload is the OpenAI end-of-stream marker "[DONE]".
func IsDone(payload []byte) bool { return bytes.Equal(payload, doneData) }

// IsErrorFrame reports whether a payload is an error event: an object with a non-null "error" member
// (OpenAI, SGLang, newer vLLM), or with "object":"error" (older vLLM).
func IsErrorFrame(payload []byte) bool {
	// Cheap reject first: this runs for every relayed frame.
	if !bytes.Contains(payload, []byte(`"error"`)) {
		return false
	}
	it := jsonscan.NewObjIter(payload, 0)
	for {
		m, ok := it.Next()
		if !ok {
			return false
		}
		v := m.Value(payload)
		if m.KeyIs(payload, "error") && !jsonscan.IsNull(v) {
			return true
		}
		if m.KeyIs(payload, "object") && string(v) == `"error"` {
			return true
		}
	}
}

var (
	sseData = []byte("data: ")
	sseEnd  = []byte("\n\n")
	sseDone = []byte("data: [DONE]\n\n")
)

// AppendSSE appends one event carrying payload to dst ("data: payload\n\n"; a payload with newlines
// becomes several data lines).
func AppendSSE(dst, payload []byte) []byte {
	for {
		i := bytes.IndexByte(payload, '\n')
		if i < 0 {
			break
		}
		dst = append(dst, sseData...)
		dst = append(dst, payload[:i]...)
		dst = append(dst, '\n')
		payload = payload[i+1:]
	}
	dst = append(dst, sseData...)
	dst = append(dst, payload...)
	return append(dst, sseEnd...)
}

// WriteSSE writes one event carrying payload to w. w should be buffered (an http.ResponseWriter is);
// the caller flushes.
func WriteSSE(w io.Writer, payload []byte) error {
	if bytes.IndexByte(payload, '\n') >= 0 {
		_, err := w.Write(AppendSSE(nil, payload))
		return err
	}
	if _, err := w.Write(sseData); err != nil {
		return err
	}
	if _, err := w.Write(payload); err != nil {
		return err
	}
	_, err := w.Write(sseEnd)
	return err
}

// WriteDone writes the end-of-stream event "data: [DONE]".
func WriteDone(w io.Writer) error {
	_, err := w.Write(sseDone)
	return err
}
