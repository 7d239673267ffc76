package body

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// The line-by-line SSE reader the gateway used before SSEReader read events straight from its own
// buffer: kept as the reference the new reader is checked against (FuzzSSEReaderMatchesReference).

// lineSSEReader reads the data payloads of server-sent events.
type lineSSEReader struct {
	r    *bufio.Reader
	data []byte // payload of the event being assembled (reused)
	line []byte // spill buffer for lines longer than the bufio buffer (reused)
	rest []byte // what follows a bare CR in the last physical line, still to be read as lines
	more bool   // rest holds pending lines (rest may be empty: "a\r" ends with an empty line)
	seen bool   // a data field was seen in the current event
	err  error
}

// newLineSSEReader returns a reader of the events in r.
func newLineSSEReader(r io.Reader) *lineSSEReader {
	return &lineSSEReader{r: bufio.NewReaderSize(r, 16<<10), data: make([]byte, 0, 1024)}
}

// Next returns the data payload of the next event that has one: its data lines joined with "\n",
// the optional space after "data:" removed. Comments (lines starting with ':') and the event, id and
// retry fields are skipped; lines end with "\n", "\r\n" or a bare "\r", as the SSE standard says (a
// bare CR inside a data line would otherwise reach clients, whose decoders split there, as a different
// payload than the one the gateway inspected). The payload is valid until the next call.
// At the end of the stream Next returns io.EOF, or io.ErrUnexpectedEOF when the stream ended inside an
// event (that partial event is dropped, as the SSE spec says). "[DONE]" is returned like any other
// payload; see IsDone.
func (s *lineSSEReader) Next() ([]byte, error) {
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

func (s *lineSSEReader) appendData(v []byte) {
	if s.seen {
		s.data = append(s.data, '\n')
	}
	s.data = append(s.data, v...)
	s.seen = true
}

// readLine returns the next line without its terminator. The slice is valid until the next read.
func (s *lineSSEReader) readLine() ([]byte, error) {
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
