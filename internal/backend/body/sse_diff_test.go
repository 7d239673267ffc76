package body

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// readEvents reads every payload with next (Next or the NextBuffered-then-Next loop of a relay) and
// returns them with the final error.
func readEvents(next func() ([]byte, error)) ([]string, error) {
	var got []string
	for {
		p, err := next()
		if err != nil {
			return got, err
		}
		got = append(got, string(p))
	}
}

// relayNext reads r the way the relay does: NextBuffered while it has events, Next when not.
func relayNext(r *SSEReader) func() ([]byte, error) {
	return func() ([]byte, error) {
		if p, ok := r.NextBuffered(); ok {
			return bytes.Clone(p), nil
		}
		return r.Next()
	}
}

// FuzzSSEReaderMatchesReference: on any byte stream, split into reads of any sizes, SSEReader
// returns the same payloads and the same final error as the line-by-line reader it replaced, whether
// it is read with Next alone or the way the relay reads it (NextBuffered first).
func FuzzSSEReaderMatchesReference(f *testing.F) {
	f.Add([]byte("data: {\"a\":1}\n\ndata: [DONE]\n\n"), []byte{1})
	f.Add([]byte("data: a\r\n\r\ndata: b\r\n\r\n"), []byte{1, 2, 3})
	f.Add([]byte("data: a\rdata: b\r\rdata:c\n\r\n"), []byte{7})
	f.Add([]byte("event: ping\r\ndata: a\r\ndata: b\r\n\r\n: comment\n\nid: 7\nretry: 10\ndata:x\n\n"), []byte{5, 1})
	f.Add([]byte("data: line1\ndata: line2\ndata\n\n\n\ndata: x\n\n\n"), []byte{2})
	f.Add([]byte("data: a\n\ndata: b"), []byte{3})
	f.Add([]byte("data: a\n\n: bye"), []byte{4})
	f.Add([]byte("id: 5"), []byte{1})
	f.Add([]byte("data: a\r"), []byte{1})
	f.Add(bytes.Repeat([]byte("data: 0123456789abcdef\n\n"), 400), []byte{200, 13})
	f.Add(append(append([]byte("data: "), bytes.Repeat([]byte("y"), 9000)...), "\n\n"...), []byte{255})
	f.Fuzz(func(t *testing.T, in, sizes []byte) {
		split := make([]int, 0, len(sizes))
		for _, s := range sizes {
			split = append(split, int(s)+1)
		}
		if len(split) == 0 {
			split = []int{1 << 20}
		}
		ref := newLineSSEReader(&chunkReader{data: in, sizes: split})
		want, wantErr := readEvents(ref.Next)
		got, err := readEvents(NewSSEReader(&chunkReader{data: in, sizes: split}).Next)
		check := func(how string, got []string, err error) {
			t.Helper()
			if !errors.Is(err, wantErr) && err.Error() != wantErr.Error() {
				t.Fatalf("%s: error %v, reference %v (input %q)", how, err, wantErr, in)
			}
			if len(got) != len(want) {
				t.Fatalf("%s: %d events %q, reference %d %q (input %q)", how, len(got), got, len(want), want, in)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%s: event %d = %q, reference %q (input %q)", how, i, got[i], want[i], in)
				}
			}
		}
		check("Next", got, err)
		got, err = readEvents(relayNext(NewSSEReader(&chunkReader{data: in, sizes: split})))
		check("NextBuffered", got, err)
	})
}

// TestSSEReaderNextBuffered: NextBuffered returns exactly the events complete in what was read,
// never reads, and leaves a partial event for Next.
func TestSSEReaderNextBuffered(t *testing.T) {
	t.Parallel()
	pr, pw := io.Pipe()
	r := NewSSEReader(pr)
	if _, ok := r.NextBuffered(); ok {
		t.Fatal("NextBuffered before anything was read")
	}
	go func() {
		_, _ = pw.Write([]byte("data: a\n\ndata: b\r\n\r\n: ping\n\ndata: c\r")) // c is incomplete
		_, _ = pw.Write([]byte("\n\r\n"))
		_ = pw.Close()
	}()
	p, err := r.Next()
	if err != nil || string(p) != "a" {
		t.Fatalf("Next = %q, %v", p, err)
	}
	if p, ok := r.NextBuffered(); !ok || string(p) != "b" {
		t.Fatalf("NextBuffered = %q, %v; want b", p, ok)
	}
	if p, ok := r.NextBuffered(); ok {
		t.Fatalf("NextBuffered = %q before c was complete", p)
	}
	if p, err := r.Next(); err != nil || string(p) != "c" {
		t.Fatalf("Next = %q, %v; want c", p, err)
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("end: %v", err)
	}
	if _, ok := r.NextBuffered(); ok {
		t.Fatal("NextBuffered after the end")
	}
}
