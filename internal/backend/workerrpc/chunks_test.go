package workerrpc

import (
	"errors"
	"io"
	"testing"

	"github.com/sluicegw/sluice/internal/backend/body"
)

// TestTypedStream: a typed stream gives each choice's chunks in order and the usage chunk last, and
// closing it part way ends every goroutine of the call (goleak in TestMain) and the chunks.
func TestTypedStream(t *testing.T) {
	addr := startWorker(t, &fakeWorker{decode: tokens("a", "b", "c")})
	rt := newTestTransport(t, RoleRegular)
	c, err := BuildCall(body.RouteChat, []byte(`{"model":"m","messages":[{"role":"user","content":"q"}],"stream":true,`+
		`"stream_options":{"include_usage":true},"n":2}`), "r")
	if err != nil {
		t.Fatal(err)
	}
	send := func() *Stream {
		resp, err := rt.Send(t.Context(), "grpc://"+addr, RoleRegular, c.WithTypedAnswer())
		if err != nil {
			t.Fatal(err)
		}
		st := StreamOf(resp.Body)
		if st == nil {
			t.Fatal("no typed stream")
		}
		return st
	}

	st := send()
	text := map[int]string{}
	var last *Chunk
	for {
		ch, err := st.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if last != nil && last.Usage {
			t.Fatal("a chunk after the usage chunk")
		}
		text[ch.Index] += ch.Text
		last = ch
	}
	st.Close()
	if text[0] != "abc" || text[1] != "abc" || last == nil || !last.Usage || last.CompletionTokens != 6 || last.PromptTokens != 7 {
		t.Fatalf("text %v, last chunk %+v", text, last)
	}

	st = send()
	if _, err := st.Next(); err != nil {
		t.Fatal(err)
	}
	st.Close()
	for i := 0; ; i++ {
		if _, err := st.Next(); err != nil {
			break // the pending chunks, then the end of the closed call
		}
		if i > 10 {
			t.Fatal("a closed stream keeps giving chunks")
		}
	}
}
