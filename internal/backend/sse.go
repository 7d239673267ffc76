package backend

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// SSE framing as engines emit it (text/event-stream): events separated by a blank line, the payload
// in "data:" lines. Reading is on the per-token hot path of every streamed response, so the reader
// reuses one buffer and returns slices of it.

// MaxSSEFrame bounds one event's payload (a runaway upstream must not exhaust memory).
const MaxSSEFrame = 16 << 20

// ErrSSEFrameTooLarge is returned for an event larger than MaxSSEFrame.
var ErrSSEFrameTooLarge = errors.New("sse: event too large")

var (
	doneData = []byte("[DONE]")
	dataPfx  = []byte("data:")
)

// SSEReader reads the data payloads of server-sent events.
type SSEReader struct {
	r    *bufio.Reader
	data []byte // payload of the event being assembled (reused)
	line []byte // spill buffer for lines longer than the bufio buffer (reused)
	rest []byte // what follows a bare CR in the last physical line, still to be read as lines
	more bool   // rest holds pending lines (rest may be empty: "a\r" ends with an empty line)
	seen bool   // a data field was seen in the current event
	err  error
}

// NewSSEReader returns a reader of the events in r.
func NewSSEReader(r io.Reader) *SSEReader {
	return &SSEReader{r: bufio.NewReaderSize(r, 16<<10), data: make([]byte, 0, 1024)}
}

// Next returns the data payload of the next event that has one: its data lines joined with "\n",
// the optional space after "data:" removed. Comments (lines starting with ':') and the event, id and
// retry fields are skipped; lines end with "\n", "\r\n" or a bare "\r", as the SSE standard says (a
// bare CR inside a data line would otherwise reach clients, whose decoders split there, as a different
// payload than the one the gateway inspected). The payload is valid until the next call.
// At the end of the stream Next returns io.EOF, or io.ErrUnexpectedEOF when the stream ended inside an
// event (that partial event is dropped, as the SSE spec says). "[DONE]" is returned like any other
// payload; see IsDone.
func (s *SSEReader) Next() ([]byte, error) {
	if s.err != nil {
		return nil, s.err
	}
	s.data = s.data[:0]
	s.seen = false
	for {
		line, err := s.readLine()
		if err != nil {
			if errors.Is(err, io.EOF) && (s.seen || (len(line) > 0 && line[0] != ':')) {
				err = io.ErrUnexpectedEOF
			}
			s.err = err
			return nil, err
		}
		if len(line) == 0 {
			if s.seen {
				return s.data, nil
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		if !bytes.HasPrefix(line, dataPfx) {
			// event:, id:, retry: or a field name without a colon: nothing the gateway relays.
			if bytes.Equal(line, dataPfx[:4]) { // "data" alone: an empty data line
				s.appendData(nil)
			}
			continue
		}
		v := line[len(dataPfx):]
		if len(v) > 0 && v[0] == ' ' {
			v = v[1:]
		}
		if len(s.data)+len(v)+1 > MaxSSEFrame {
			s.err = ErrSSEFrameTooLarge
			return nil, s.err
		}
		s.appendData(v)
	}
}

func (s *SSEReader) appendData(v []byte) {
	if s.seen {
		s.data = append(s.data, '\n')
	}
	s.data = append(s.data, v...)
	s.seen = true
}

// readLine returns the next line without its terminator. The slice is valid until the next read.
func (s *SSEReader) readLine() ([]byte, error) {
	if s.more {
		line, rest, found := bytes.Cut(s.rest, []byte{'\r'})
		s.rest, s.more = rest, found
		return line, nil
	}
	line, err := s.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		s.line = append(s.line[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			if len(s.line) > MaxSSEFrame {
				return nil, ErrSSEFrameTooLarge
			}
			line, err = s.r.ReadSlice('\n')
			s.line = append(s.line, line...)
		}
		line = s.line
	}
	if err != nil {
		// io.EOF with a partial last line: report it so the caller can tell a truncated stream.
		return line, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	if i := bytes.IndexByte(line, '\r'); i >= 0 {
		s.rest, s.more = line[i+1:], true
		line = line[:i]
	}
	return line, nil
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
	it := newObjIter(payload, 0)
	for {
		m, ok := it.next()
		if !ok {
			return false
		}
		v := m.value(payload)
		if m.keyIs(payload, "error") && !isNull(v) {
			return true
		}
		if m.keyIs(payload, "object") && string(v) == `"error"` {
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
