package body

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/benchcpu"
)

// chunkReader returns its input in pieces of the given sizes (cycling), to split frames across reads.
type chunkReader struct {
	data  []byte
	sizes []int
	i     int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := min(r.sizes[r.i%len(r.sizes)], len(p), len(r.data))
	r.i++
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

func readAll(t *testing.T, r io.Reader) ([]string, error) {
	t.Helper()
	sr := NewSSEReader(r)
	var got []string
	for {
		p, err := sr.Next()
		if err != nil {
			if _, again := sr.Next(); !errors.Is(again, err) {
				t.Errorf("error not sticky: %v then %v", err, again)
			}
			return got, err
		}
		got = append(got, string(p))
	}
}

func TestSSEReader(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 40<<10) // longer than the bufio buffer
	tests := []struct {
		name    string
		in      string
		want    []string
		wantErr error
	}{
		{name: "lf", in: "data: {\"a\":1}\n\ndata: [DONE]\n\n", want: []string{`{"a":1}`, "[DONE]"}, wantErr: io.EOF},
		{name: "crlf", in: "data: a\r\n\r\ndata: b\r\n\r\n", want: []string{"a", "b"}, wantErr: io.EOF},
		{name: "no space after colon", in: "data:a\n\n", want: []string{"a"}, wantErr: io.EOF},
		{name: "only first space stripped", in: "data:  a\n\n", want: []string{" a"}, wantErr: io.EOF},
		{name: "multi-line data", in: "data: line1\ndata: line2\ndata\n\n", want: []string{"line1\nline2\n"}, wantErr: io.EOF},
		{name: "comments and fields skipped", in: ": ping\n\nevent: message\nid: 7\nretry: 10\n: c\ndata: x\n\n", want: []string{"x"}, wantErr: io.EOF},
		{name: "blank lines without data dispatch nothing", in: "\n\n\n\ndata: x\n\n\n", want: []string{"x"}, wantErr: io.EOF},
		{name: "empty data is an event", in: "data:\n\n", want: []string{""}, wantErr: io.EOF},
		{name: "truncated event dropped", in: "data: a\n\ndata: b\n", want: []string{"a"}, wantErr: io.ErrUnexpectedEOF},
		{name: "truncated line", in: "data: a\n\ndata: b", want: []string{"a"}, wantErr: io.ErrUnexpectedEOF},
		{name: "trailing comment without newline is clean", in: "data: a\n\n: bye", want: []string{"a"}, wantErr: io.EOF},
		{name: "long line", in: "data: " + long + "\n\ndata: y\n\n", want: []string{long, "y"}, wantErr: io.EOF},
		{name: "empty stream", in: "", want: nil, wantErr: io.EOF},
	}
	for _, tt := range tests {
		for _, split := range [][]int{{1 << 20}, {1}, {3, 7, 1}} {
			t.Run(tt.name, func(t *testing.T) {
				got, err := readAll(t, &chunkReader{data: []byte(tt.in), sizes: split})
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("error = %v, want %v", err, tt.wantErr)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("frames (-want +got):\n%s", diff)
				}
			})
		}
	}
}

func TestSSEReaderErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	got, err := readAll(t, io.MultiReader(strings.NewReader("data: a\n\n"), iotest.ErrReader(boom)))
	if !errors.Is(err, boom) || len(got) != 1 {
		t.Errorf("got %q, %v; want [a], boom", got, err)
	}
	huge := "data: " + strings.Repeat("x", MaxSSEFrame) + "\n\n"
	if _, err := readAll(t, strings.NewReader(huge)); !errors.Is(err, ErrSSEFrameTooLarge) {
		t.Errorf("huge frame error = %v", err)
	}
}

func TestWriteSSERoundTrip(t *testing.T) {
	t.Parallel()
	payloads := []string{`{"a":1}`, "multi\nline", "", "[DONE]"}
	var buf bytes.Buffer
	for _, p := range payloads[:3] {
		if err := WriteSSE(&buf, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteDone(&buf); err != nil {
		t.Fatal(err)
	}
	want := "data: {\"a\":1}\n\ndata: multi\ndata: line\n\ndata: \n\ndata: [DONE]\n\n"
	if buf.String() != want {
		t.Errorf("written %q, want %q", buf.String(), want)
	}
	got, err := readAll(t, &buf)
	if !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if diff := cmp.Diff(payloads, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if !IsDone([]byte(got[3])) || IsDone([]byte(got[0])) {
		t.Error("IsDone")
	}
}

func TestIsErrorFrame(t *testing.T) {
	t.Parallel()
	tests := []struct {
		payload string
		want    bool
	}{
		{`{"error":{"message":"boom","type":"server_error"}}`, true},
		{`{"id":"x","error":"overloaded"}`, true},
		{`{"object":"error","message":"bad","code":400}`, true},
		{`{"error":null,"choices":[]}`, false},
		{`{"choices":[{"delta":{"content":"an \"error\" occurred"}}]}`, false},
		{`{"choices":[{"delta":{"content":"error"}}]}`, false},
		{`[DONE]`, false},
		{`not json "error"`, false},
	}
	for _, tt := range tests {
		if got := IsErrorFrame([]byte(tt.payload)); got != tt.want {
			t.Errorf("IsErrorFrame(%s) = %v, want %v", tt.payload, got, tt.want)
		}
	}
}

// A typical ~200-byte chat chunk, as SGLang and vLLM stream them.
const benchChunk = `{"id":"chatcmpl-8a1f0c2e9b7d4e6f","object":"chat.completion.chunk","created":1735689600,` +
	`"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":" the"},` +
	`"logprobs":null,"finish_reason":null}]}`

// loopReader replays a stream forever without allocating.
type loopReader struct {
	data []byte
	off  int
}

func (r *loopReader) Read(p []byte) (int, error) {
	n := copy(p, r.data[r.off:])
	r.off = (r.off + n) % len(r.data)
	return n, nil
}

// BenchmarkSSEReader measures reading one frame (ns/op = ns per frame), plus the error check and
// re-framing a relay does per frame.
func BenchmarkSSEReader(b *testing.B) {
	frame := "data: " + benchChunk + "\n\n"
	stream := []byte(strings.Repeat(frame, 64))
	sr := NewSSEReader(&loopReader{data: stream})
	var out []byte
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	defer benchcpu.Start(b)()
	for b.Loop() {
		p, err := sr.Next()
		if err != nil {
			b.Fatal(err)
		}
		if IsErrorFrame(p) || IsDone(p) {
			b.Fatal("unexpected frame")
		}
		out = AppendSSE(out[:0], p)
	}
}
