package dispatch

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// The first stream's completions chunks are scanned in place: their ids taken, the id members cut
// out where the client did not ask for them, wherever they sit in the choice.
func TestScanIDChunk(t *testing.T) {
	cases := []struct {
		name, in, want string
		ids            []uint32
		ended, ok      bool
	}{
		{"vllm's order", `{"id":"c","choices":[{"index":0,"text":" a","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":[1,2],"token_ids":[7]}]}`,
			`{"id":"c","choices":[{"index":0,"text":" a","logprobs":null,"finish_reason":null,"stop_reason":null}]}`, []uint32{7}, false, true},
		{"first members", `{"choices":[ {"token_ids": [7, 8] , "prompt_token_ids":[1],"text":"x","finish_reason":"length"}]}`,
			`{"choices":[{"text":"x","finish_reason":"length"}]}`, []uint32{7, 8}, true, true},
		{"only member", `{"choices":[{"token_ids":[]}]}`, `{"choices":[{}]}`, nil, false, true},
		{"usage chunk", `{"id":"c","choices":[],"usage":{"prompt_tokens":2}}`, `{"id":"c","choices":[],"usage":{"prompt_tokens":2}}`, nil, false, true},
		{"error chunk", `{"error":{"message":"boom"}}`, "", nil, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sc, ok := scanIDChunk([]byte(c.in), []uint32{3}, nil, nil, nil)
			if ok != c.ok {
				t.Fatalf("ok = %v, want %v", ok, c.ok)
			}
			if !ok {
				return
			}
			if want := append([]uint32{3}, c.ids...); !slices.Equal(sc.ids, want) || sc.ended != c.ended {
				t.Errorf("ids %v ended %v, want %v %v", sc.ids, sc.ended, want, c.ended)
			}
			var got, want any
			if err := json.Unmarshal(appendCut(nil, []byte(c.in), sc.cut), &got); err != nil {
				t.Fatalf("cut %q is not JSON: %v", appendCut(nil, []byte(c.in), sc.cut), err)
			}
			_ = json.Unmarshal([]byte(c.want), &want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("cut %s, want %s", appendCut(nil, []byte(c.in), sc.cut), c.want)
			}
		})
	}
}

// A continuation's chunk goes on as the request's: the first stream's id and created, usage counting
// the request's prompt once and every token the client got, no continuation prompt ids.
func TestCompletionContinuedChunk(t *testing.T) {
	cm, ok := checkCompletionMigration([]byte(`{"model":"m","prompt":[1,2,3],"max_tokens":10,"stream":true}`))
	if !ok {
		t.Fatal("not migratable")
	}
	if out, _ := cm.frame(nil, []byte(`{"id":"first","created":5,"choices":[{"text":" a","finish_reason":null,"prompt_token_ids":[1,2,3],"token_ids":[40,41]}]}`)); strings.Contains(string(out), "token_ids") {
		t.Fatalf("ids the client did not ask for were passed on: %s", out)
	}
	ids, body, ok := cm.continuation()
	if !ok || !slices.Equal(ids, []uint32{1, 2, 3, 40, 41}) {
		t.Fatalf("continuation ids %v ok %v", ids, ok)
	}
	var cb struct {
		Prompt    []uint32 `json:"prompt"`
		MaxTokens int      `json:"max_tokens"`
		Return    bool     `json:"return_token_ids"`
	}
	if err := json.Unmarshal(body, &cb); err != nil || cb.MaxTokens != 8 || !cb.Return || !slices.Equal(cb.Prompt, ids) {
		t.Fatalf("continuation body %s", body)
	}
	out, ended := cm.frame(nil, []byte(`{"id":"second","created":9,"choices":[{"text":" b","finish_reason":"length","prompt_token_ids":[1,2,3,40,41],"token_ids":[42]}],`+
		`"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6,"prompt_tokens_details":{"cached_tokens":5}}}`))
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil || !ended {
		t.Fatalf("continued chunk %s (ended %v): %v", out, ended, err)
	}
	want := map[string]any{"id": "first", "created": 5.0, "choices": []any{map[string]any{"text": " b", "finish_reason": "length"}},
		"usage": map[string]any{"prompt_tokens": 3.0, "completion_tokens": 3.0, "total_tokens": 6.0}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("continued chunk %s\nwant %v", out, want)
	}
}

// brokenBody is an engine's stream that breaks off after its frames.
type brokenBody struct{ r io.Reader }

func (b brokenBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (brokenBody) Close() error { return nil }

// A stream that broke off after its last token and before the chunk that finishes it ends as the
// engine would have ended it (a length finish, the usage asked for, [DONE]) with no continuation to
// ask a pair for; one with tokens left does not.
func TestStreamSpentAtABreakEndsWithALengthFinish(t *testing.T) {
	gen := func(text string, ids string, n int) string {
		return fmt.Sprintf(`data: {"text":%q,"output_ids":[%s],"meta_info":{"id":"r","finish_reason":null,"prompt_tokens":3,"completion_tokens":%d}}`+"\n\n", text, ids, n)
	}
	cmpl := func(text string, id int, first bool) string {
		p := ""
		if first {
			p = `,"prompt_token_ids":[1,2,3]`
		}
		return fmt.Sprintf(`data: {"id":"c","object":"text_completion","created":5,"model":"m","choices":[{"index":0,"text":%q,"logprobs":null,"finish_reason":null%s,"token_ids":[%d]}],"usage":null}`+"\n\n", text, p, id)
	}
	chat := func(text string, id int, first bool) string {
		p := ""
		if first {
			p = `,"prompt_token_ids":[1,2,3]`
		}
		return fmt.Sprintf(`data: {"id":"x","object":"chat.completion.chunk","created":5,"model":"m"%s,"choices":[{"index":0,"delta":{"content":%q},"logprobs":null,"finish_reason":null,"token_ids":[%d]}]}`+"\n\n", p, text, id)
	}
	cases := []struct {
		name   string
		api    func(t *testing.T, budget int) httpStreamAPI
		frames string
		want   []string // the payloads after the frames, [DONE] last
	}{
		{"generate", func(t *testing.T, budget int) httpStreamAPI {
			return &generateMigration{raw: fmt.Appendf(nil, `{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":%d},"stream":true}`, budget)}
		}, gen("a", "5", 1) + gen("ab", "5,6", 2),
			[]string{`{"text":"ab","output_ids":[5,6],"meta_info":{"id":"r","finish_reason":{"type":"length","length":2},"prompt_tokens":3,"completion_tokens":2}}`, "[DONE]"}},
		{"completion", func(t *testing.T, budget int) httpStreamAPI {
			cm, ok := checkCompletionMigration(fmt.Appendf(nil, `{"model":"m","prompt":[1,2,3],"max_tokens":%d,"stream":true,"stream_options":{"include_usage":true},"return_token_ids":true}`, budget))
			if !ok {
				t.Fatal("not migratable")
			}
			return cm
		}, cmpl("a", 5, true) + cmpl("b", 6, false),
			[]string{`{"id":"c","object":"text_completion","created":5,"model":"m","choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":null}`,
				`{"id":"c","object":"text_completion","created":5,"model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`, "[DONE]"}},
		{"chat", func(t *testing.T, budget int) httpStreamAPI {
			cm, ok := checkChatMigration(fmt.Appendf(nil, `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":%d,"stream":true}`, budget))
			if !ok {
				t.Fatal("not migratable")
			}
			return cm
		}, chat("a", 5, true) + chat("b", 6, false),
			[]string{`{"id":"x","object":"chat.completion.chunk","created":5,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length","stop_reason":null}]}`, "[DONE]"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			api := c.api(t, 2)
			s := &migratingStream{ctx: t.Context(), api: api, first: brokenBody{strings.NewReader(c.frames)}}
			s.cur = s.first
			got, err := io.ReadAll(s)
			if err != nil {
				t.Fatalf("read: %v (got %q)", err, got)
			}
			var payloads []string
			for f := range strings.SplitSeq(strings.TrimSuffix(string(got), "\n\n"), "\n\n") {
				payloads = append(payloads, strings.TrimPrefix(f, "data: "))
			}
			if len(payloads) != 2+len(c.want) {
				t.Fatalf("frames %q, want the 2 passed on and %d more", payloads, len(c.want))
			}
			for i, w := range c.want {
				if g := payloads[2+i]; g != w && !jsonEqual(g, w) {
					t.Errorf("frame %d: %s\nwant %s", 2+i, g, w)
				}
			}
			// With a token left, the stream must go on elsewhere: no finish of its own.
			more := c.api(t, 3)
			for f := range strings.SplitSeq(strings.TrimSuffix(c.frames, "\n\n"), "\n\n") {
				more.frame(nil, []byte(strings.TrimPrefix(f, "data: ")))
			}
			if out, ok := more.lengthFinish(nil); ok {
				t.Errorf("a stream with a token left finished: %s", out)
			}
		})
	}
}

// jsonEqual says whether two JSON texts hold the same value.
func jsonEqual(a, b string) bool {
	var x, y any
	return json.Unmarshal([]byte(a), &x) == nil && json.Unmarshal([]byte(b), &y) == nil && reflect.DeepEqual(x, y)
}

// A stream that broke off after its generation ended (a finish or an error chunk went out) and
// before [DONE] ends as the engine would have ended it: the usage chunk the client asked for when it
// had not come, and [DONE]; no error after a whole answer, and no continuation.
func TestStreamBrokenAfterItsFinishEndsWhole(t *testing.T) {
	const cmplBody = `{"model":"m","prompt":[1,2,3],"max_tokens":8,"stream":true,"stream_options":{"include_usage":true},"return_token_ids":true}`
	cmpl := func(text string, id int, finish string) string {
		return fmt.Sprintf(`data: {"id":"c","object":"text_completion","created":5,"model":"m","choices":[{"index":0,"text":%q,"logprobs":null,"finish_reason":%s,"prompt_token_ids":[1,2,3],"token_ids":[%d]}],"usage":null}`+"\n\n", text, finish, id)
	}
	completion := func(t *testing.T) httpStreamAPI {
		cm, ok := checkCompletionMigration([]byte(cmplBody))
		if !ok {
			t.Fatal("not migratable")
		}
		return cm
	}
	usage := `{"id":"c","object":"text_completion","created":5,"model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`
	cases := []struct {
		name   string
		api    func(t *testing.T) httpStreamAPI
		frames string
		want   []string // the payloads after the frames, [DONE] last
	}{
		{"generate", func(t *testing.T) httpStreamAPI {
			return &generateMigration{raw: []byte(`{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":8},"stream":true}`)}
		}, `data: {"text":"ab","output_ids":[5,6],"meta_info":{"id":"r","finish_reason":{"type":"stop"},"prompt_tokens":3,"completion_tokens":2}}` + "\n\n" +
			`data: {"text":"ab","outp`, // a partial frame after it is dropped
			[]string{"[DONE]"}},
		{"completion, usage lost", completion, cmpl("a", 5, "null") + cmpl("b", 6, `"stop"`), []string{usage, "[DONE]"}},
		{"completion, usage came", completion, cmpl("a", 5, "null") + cmpl("b", 6, `"stop"`) + "data: " + usage + "\n\n", []string{"[DONE]"}},
		{"completion, error chunk", completion, cmpl("a", 5, "null") + `data: {"error":{"message":"boom","code":500}}` + "\n\n", []string{"[DONE]"}},
		{"chat", func(t *testing.T) httpStreamAPI {
			cm, ok := checkChatMigration([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`))
			if !ok {
				t.Fatal("not migratable")
			}
			return cm
		}, `data: {"id":"x","object":"chat.completion.chunk","created":5,"model":"m","prompt_token_ids":[1,2,3],"choices":[{"index":0,"delta":{"content":"a"},"logprobs":null,"finish_reason":"stop","token_ids":[5]}]}` + "\n\n",
			[]string{"[DONE]"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &migratingStream{ctx: t.Context(), api: c.api(t), first: brokenBody{strings.NewReader(c.frames)}}
			s.cur = s.first
			got, err := io.ReadAll(s)
			if err != nil {
				t.Fatalf("read: %v (got %q)", err, got)
			}
			whole := strings.Count(c.frames, "\n\n")
			var payloads []string
			for f := range strings.SplitSeq(strings.TrimSuffix(string(got), "\n\n"), "\n\n") {
				payloads = append(payloads, strings.TrimPrefix(f, "data: "))
			}
			if len(payloads) != whole+len(c.want) {
				t.Fatalf("frames %q, want the %d passed on and %d more", payloads, whole, len(c.want))
			}
			for i, w := range c.want {
				if g := payloads[whole+i]; g != w && !jsonEqual(g, w) {
					t.Errorf("frame %d: %s\nwant %s", whole+i, g, w)
				}
			}
		})
	}
}

// A stream's chunks read from their choices on, after a first chunk with the same start, give what
// they give read whole: the same ids, prompt ids, finish, cuts and deltas, and the same verdict, in
// any order of starts that match, differ, carry id members or a second choices, and of truncated or
// malformed chunks.
func TestScanIDChunkHeadProperty(t *testing.T) {
	starts := []string{
		`{"id":"a","object":"chat.completion.chunk","created":1,"model":"m",`,
		`{"id":"b","object":"chat.completion.chunk","created":1,"model":"m",`,
		`{ "id":"a" , "object":"chat.completion.chunk",`,
		`{"prompt_token_ids":[1,2],"id":"a",`,
		`{"choices":[{"token_ids":[4]}],"id":"a",`,
		`{`,
		`{"id":"a","object":"chat.completion.chunk","created":1,"model":"m","error":{"message":"x"},`,
	}
	choices := []string{
		`"choices":[{"index":0,"delta":{"content":"x"},"token_ids":[5],"finish_reason":null}]`,
		`"choices":[{"index":0,"delta":{"content":"y"},"logprobs":null,"finish_reason":"length","token_ids":[6,7]}]`,
		`"choices" : [ {"text":"t","token_ids":[1,2]} ]`,
		`"choices":[]`,
		`"choices":[{"delta":{"role":"assistant","content":""}}]`,
		`"choices":[{"delta":{"content":"z"},"finish_reason":"stop"}]`,
		`"choices":{"not":"an array"}`,
		`"error":{"message":"boom"}`,
	}
	ends := []string{`}`, `,"usage":null}`, `,"prompt_token_ids":[9]}`, `,"choices":[{"token_ids":[3]}]}`,
		`,"usage":{"prompt_tokens":1}}`, ``, `,}`}
	// same scans p with the head and whole, and says how they differ ("" when they do not).
	same := func(head *chunkHead, ids []uint32, p string) (idChunk, bool, string) {
		var withHead, whole []string
		a, okA := scanIDChunk([]byte(p), slices.Clone(ids), nil, func(d []byte) { withHead = append(withHead, string(d)) }, head)
		b, okB := scanIDChunk([]byte(p), slices.Clone(ids), nil, func(d []byte) { whole = append(whole, string(d)) }, nil)
		if okA != okB || !reflect.DeepEqual(a, b) || !slices.Equal(withHead, whole) {
			return b, okB, fmt.Sprintf("%v %+v %q, read whole %v %+v %q", okA, a, withHead, okB, b, whole)
		}
		return b, okB, ""
	}
	// Every chunk twice in a row: the second is read from its choices on when the first kept a head.
	for _, st := range starts {
		for _, c := range choices {
			for _, e := range ends {
				var head chunkHead
				for range 2 {
					if _, _, diff := same(&head, []uint32{3}, st+c+e); diff != "" {
						t.Fatalf("chunk %q after head %q: %s", st+c+e, head.b, diff)
					}
				}
			}
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		var head chunkHead
		ids := []uint32{3}
		p := ""
		for i := range rapid.IntRange(1, 8).Draw(t, "chunks") {
			if p == "" || !rapid.Bool().Draw(t, fmt.Sprint("repeat", i)) {
				p = starts[rapid.IntRange(0, len(starts)-1).Draw(t, fmt.Sprint("start", i))] +
					choices[rapid.IntRange(0, len(choices)-1).Draw(t, fmt.Sprint("choices", i))] +
					ends[rapid.IntRange(0, len(ends)-1).Draw(t, fmt.Sprint("end", i))]
			}
			q := p
			if rapid.Bool().Draw(t, fmt.Sprint("truncate", i)) {
				q = p[:rapid.IntRange(0, len(p)).Draw(t, fmt.Sprint("at", i))]
			}
			b, ok, diff := same(&head, ids, q)
			if diff != "" {
				t.Fatalf("chunk %q after head %q: %s", q, head.b, diff)
			}
			if ok {
				ids = b.ids
			}
		}
	})
}
