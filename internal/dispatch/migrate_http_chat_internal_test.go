package dispatch

import (
	"context"
	"encoding/json"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/tokenizer"
	"github.com/sluicegw/sluice/internal/worker"
)

func TestCheckChatMigration(t *testing.T) {
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{`{"messages":[],"stream":true}`, true},
		{`{"messages":[],"tools":[],"logprobs":false,"response_format":{"type":"text"}}`, true},
		{`{"messages":[],"tools":[{"type":"function","function":{"name":"f"}}]}`, false},
		{`{"messages":[],"response_format":{"type":"json_object"}}`, false},
		{`{"messages":[],"logprobs":true}`, false},
		{`{"messages":[],"top_logprobs":2}`, false},
		{`{"messages":[],"structured_outputs":{"regex":"a+"}}`, false},
		{`{"messages":[],"echo":true}`, false},
	} {
		if _, ok := checkChatMigration([]byte(tc.body)); ok != tc.ok {
			t.Errorf("%s: may migrate %v, want %v", tc.body, ok, tc.ok)
		}
	}
}

// feed passes the first stream's chunks through cm and returns what the client got of each.
func feed(t *testing.T, cm *chatMigration, chunks ...string) []string {
	t.Helper()
	var out []string
	for _, c := range chunks {
		b, _ := cm.frame(nil, []byte(c))
		if !json.Valid(b) {
			t.Fatalf("chunk %s became %s", c, b)
		}
		out = append(out, string(b))
	}
	return out
}

const (
	chatRole    = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"prompt_token_ids":[1,2,3]}`
	chatContent = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":" a"},"logprobs":null,"finish_reason":null,"token_ids":[11]}]}`
	chatThought = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":"hm"},"logprobs":null,"finish_reason":null,"token_ids":[12]}]}`
	chatQuiet   = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":null,"token_ids":[13]}]}`
)

// The first stream's ids leave its chunks when the client did not ask for them, the rest unchanged;
// the continuation is a completion of prompt + generated ids with the budget reduced and the chat's
// own members gone.
func TestChatMigrationContinuesAsACompletion(t *testing.T) {
	raw := `{"model":"m","messages":[{"role":"user","content":"x"}],"max_completion_tokens":9,"min_tokens":3,"temperature":0,"seed":4,"stream":true,"tool_choice":"none","stream_options":{"include_usage":true}}`
	cm, ok := checkChatMigration([]byte(raw))
	if !ok {
		t.Fatal("refused")
	}
	got := feed(t, cm, chatRole, chatContent, chatContent)
	wantRole := `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`
	wantContent := `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":" a"},"logprobs":null,"finish_reason":null}]}`
	if got[0] != wantRole || got[1] != wantContent {
		t.Errorf("client got\n%s\n%s\nwant\n%s\n%s", got[0], got[1], wantRole, wantContent)
	}
	ids, b, ok := cm.continuation()
	if !ok || !slices.Equal(ids, []uint32{1, 2, 3, 11, 11}) || cm.continuationRoute() != body.RouteCompletions {
		t.Fatalf("continuation %v %s %v", ids, b, ok)
	}
	var cont map[string]any
	if err := json.Unmarshal(b, &cont); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"model": "m", "prompt": []any{1.0, 2.0, 3.0, 11.0, 11.0}, "max_tokens": 7.0, "min_tokens": 1.0,
		"temperature": 0.0, "seed": 4.0, "stream": true, "return_token_ids": true, "stream_options": map[string]any{"include_usage": true}}
	if !reflect.DeepEqual(cont, want) {
		t.Errorf("continuation body %v\nwant %v", cont, want)
	}
	// The completion's chunks come back as the request's chat chunks.
	out, ended := cm.frame(nil, []byte(`{"id":"cmpl-9","object":"text_completion","created":99,"model":"m","choices":[{"index":0,"text":" b","logprobs":null,"finish_reason":null,"stop_reason":null,"token_ids":[14],"prompt_token_ids":[1,2,3,11,11]}]}`))
	var c struct {
		ID, Object string
		Created    int
		Choices    []map[string]json.RawMessage
	}
	if err := json.Unmarshal(out, &c); err != nil || ended {
		t.Fatalf("%s: %v (ended %v)", out, err, ended)
	}
	if c.ID != "chatcmpl-1" || c.Object != "chat.completion.chunk" || c.Created != 7 || len(c.Choices) != 1 ||
		string(c.Choices[0]["delta"]) != `{"content":" b"}` || c.Choices[0]["token_ids"] != nil || c.Choices[0]["text"] != nil {
		t.Errorf("continued chunk %s", out)
	}
	out, _ = cm.frame(nil, []byte(`{"id":"cmpl-9","object":"text_completion","created":99,"model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`))
	var u struct{ Usage map[string]int }
	if err := json.Unmarshal(out, &u); err != nil || !reflect.DeepEqual(u.Usage, map[string]int{"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}) {
		t.Errorf("usage chunk %s: %v", out, err)
	}
}

// A stream whose answer so far is not plain content does not migrate: a reasoning delta (the engine's
// parser would be needed for the rest, even after content), or ids generated with no content yet.
func TestChatMigrationNeedsPlainContent(t *testing.T) {
	for name, chunks := range map[string][]string{
		"reasoning then content": {chatRole, chatThought, chatContent},
		"ids without content":    {chatRole, chatQuiet},
	} {
		cm, _ := checkChatMigration([]byte(`{"messages":[],"max_tokens":9}`))
		feed(t, cm, chunks...)
		if _, _, ok := cm.continuation(); ok {
			t.Errorf("%s: continued", name)
		}
	}
	cm, _ := checkChatMigration([]byte(`{"messages":[],"max_tokens":2}`))
	feed(t, cm, chatRole, chatContent, chatContent)
	if _, _, ok := cm.continuation(); ok {
		t.Error("continued with its budget spent")
	}
}

// A chat without a budget runs to the context's end; a completion's max_tokens has a default of its
// own (16 on vLLM's CompletionRequest), so the continuation asks for none explicitly.
func TestChatMigrationWithoutBudget(t *testing.T) {
	cm, _ := checkChatMigration([]byte(`{"messages":[],"max_tokens":null}`))
	feed(t, cm, chatRole, chatContent)
	_, b, ok := cm.continuation()
	var cont map[string]json.RawMessage
	if !ok || json.Unmarshal(b, &cont) != nil || string(cont["max_tokens"]) != "null" {
		t.Errorf("continuation %s (%v): want max_tokens null", b, ok)
	}
}

// A drain cuts only a stream that can go on elsewhere from what it has read; the others end on the
// draining engine rather than with an error.
func TestDrainCutsOnlyMovableStreams(t *testing.T) {
	for name, tc := range map[string]struct {
		chunks []string
		want   bool
	}{
		"content":              {[]string{chatRole, chatContent}, true},
		"role only":            {[]string{chatRole}, false},
		"reasoning, then text": {[]string{chatRole, chatThought, chatContent}, false},
	} {
		cm, _ := checkChatMigration([]byte(`{"messages":[],"max_tokens":9}`))
		var sse strings.Builder
		for _, c := range tc.chunks {
			sse.WriteString("data: " + c + "\n\n")
		}
		body := io.NopCloser(&frameReader{b: []byte(sse.String())})
		cut := false
		s := &migratingStream{ctx: context.Background(), api: cm, first: body, cur: body,
			stop: func(error) { cut = true }}
		for range tc.chunks { // one frame a read, and not the end: that would migrate
			s.fill()
		}
		if got := s.interrupt(); got != tc.want || cut != tc.want || s.drained.Load() != tc.want {
			t.Errorf("%s: interrupt %v, cut %v, drained %v; want %v", name, got, cut, s.drained.Load(), tc.want)
		}
	}
}

// A completion without max_tokens has the engines' default 16, so its continuation states what is left
// of it (it would otherwise get 16 more); with max_tokens null it runs to the context's end, and the
// continuation keeps the null.
func TestCompletionMigrationDefaultBudget(t *testing.T) {
	chunk := `{"id":"cmpl-1","object":"text_completion","created":7,"model":"m","choices":[{"index":0,"text":" a","logprobs":null,"finish_reason":null,"token_ids":[11]}]}`
	for body, want := range map[string]string{
		`{"prompt":[1,2,3]}`:                   "13",
		`{"prompt":[1,2,3],"max_tokens":null}`: "null",
		`{"prompt":[1,2,3],"max_tokens":5}`:    "2",
	} {
		cm, ok := checkCompletionMigration([]byte(body))
		if !ok {
			t.Fatalf("%s refused", body)
		}
		for range 3 {
			cm.frame(nil, []byte(chunk))
		}
		_, b, ok := cm.continuation()
		var cont map[string]json.RawMessage
		if !ok || json.Unmarshal(b, &cont) != nil || string(cont["max_tokens"]) != want {
			t.Errorf("%s: continuation %s (%v), want max_tokens %s", body, b, ok, want)
		}
	}
}

// Chats ask for the ids only while a vLLM engine over HTTP is registered; the answer follows the
// registry's changes.
func TestServesVLLMOverHTTP(t *testing.T) {
	reg := worker.NewRegistry(worker.RegistryOptions{StartReady: true})
	x := &Dispatcher{d: Deps{Registry: reg}}
	add := func(url string, p worker.Protocol) string {
		t.Helper()
		w, err := reg.Add(worker.Spec{URL: url, Role: worker.RoleDecode, Protocol: p, Models: []string{"m"}})
		if err != nil {
			t.Fatal(err)
		}
		return w.ID()
	}
	add("http://sglang:1", worker.ProtocolSGLang)
	add("grpc://vllm:1", worker.ProtocolVLLM)
	if x.servesVLLMOverHTTP() {
		t.Fatal("no vLLM engine over HTTP, yet chats would ask for ids")
	}
	id := add("http://vllm:2", worker.ProtocolVLLM)
	if scanned, cached := x.servesVLLMOverHTTP(), x.servesVLLMOverHTTP(); !scanned || !cached {
		t.Fatal("a vLLM engine over HTTP joined: chats must ask for ids")
	}
	if err := reg.Remove(id); err != nil {
		t.Fatal(err)
	}
	if x.servesVLLMOverHTTP() {
		t.Fatal("the vLLM engine over HTTP left, yet chats would ask for ids")
	}
}

// A chat that broke before its first token starts again elsewhere as the client sent it (a chat, its
// parsers run there); its chunks reach the client as the request's: the first stream's id and
// created, no second role, no prompt ids again.
func TestChatMigrationRestartsBeforeTheFirstToken(t *testing.T) {
	raw := `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":9,"stream":true}`
	cm, _ := checkChatMigration([]byte(raw))
	feed(t, cm, chatRole)
	ids, b, ok := cm.continuation()
	if !ok || cm.continuationRoute() != body.RouteChat || !slices.Equal(ids, []uint32{1, 2, 3}) {
		t.Fatalf("restart %v %s %v, route %v", ids, b, ok, cm.continuationRoute())
	}
	var sent, want map[string]any
	if json.Unmarshal(b, &sent) != nil || json.Unmarshal([]byte(raw), &want) != nil {
		t.Fatalf("body %s", b)
	}
	want["return_token_ids"] = true
	if !reflect.DeepEqual(sent, want) {
		t.Errorf("restart body %v, want the request's asking for ids %v", sent, want)
	}
	again := strings.ReplaceAll(chatRole, "chatcmpl-1", "chatcmpl-2")
	again = strings.ReplaceAll(again, `"created":7`, `"created":8`)
	out := feed(t, cm, again, strings.ReplaceAll(chatContent, "chatcmpl-1", "chatcmpl-2"))
	var c0, c1 struct {
		ID             string
		Created        int
		PromptTokenIDs []uint32 `json:"prompt_token_ids"`
		Choices        []struct{ Delta map[string]any }
	}
	if json.Unmarshal([]byte(out[0]), &c0) != nil || json.Unmarshal([]byte(out[1]), &c1) != nil {
		t.Fatalf("chunks %v", out)
	}
	if c0.ID != "chatcmpl-1" || c0.Created != 7 || c0.PromptTokenIDs != nil || c0.Choices[0].Delta["role"] != nil ||
		c1.ID != "chatcmpl-1" || c1.Choices[0].Delta["content"] != " a" {
		t.Errorf("restarted chunks %v", out)
	}
	if _, _, ok := cm.continuation(); !ok || cm.continuationRoute() != body.RouteCompletions {
		t.Error("after content, a restarted chat goes on as a completion")
	}
}

// A completion of a text prompt that broke before its first chunk (no ids to go on from) starts again
// as the client sent it; its chunks carry the request's id.
func TestCompletionMigrationRestartsATextPrompt(t *testing.T) {
	raw := `{"model":"m","prompt":"a text","max_tokens":9,"stream":true}`
	cm, _ := checkCompletionMigration([]byte(raw))
	if _, b, ok := cm.continuation(); !ok || string(b) != `{"model":"m","prompt":"a text","max_tokens":9,"stream":true,"return_token_ids":true}` {
		t.Fatalf("restart %s %v", b, ok)
	}
	out, _ := cm.frame(nil, []byte(`{"id":"cmpl-2","object":"text_completion","created":8,"model":"m","choices":[{"index":0,"text":" a","logprobs":null,"finish_reason":null,"prompt_token_ids":[1,2],"token_ids":[11]}]}`))
	if string(out) != `{"id":"cmpl-2","object":"text_completion","created":8,"model":"m","choices":[{"index":0,"text":" a","logprobs":null,"finish_reason":null}]}` {
		t.Errorf("restarted chunk %s", out)
	}
	if _, b, ok := cm.continuation(); !ok || !strings.Contains(string(b), `"prompt":[1,2,11]`) {
		t.Errorf("after its first ids the restarted stream goes on from them: %s %v", b, ok)
	}
}

// A /generate of a text prompt that broke before its first chunk goes again as it was sent: there is
// no engine count yet to check the gateway's tokenization against.
func TestGenerateMigrationRestartsATextPrompt(t *testing.T) {
	tk, err := tokenizer.Load("../sim/bytetokenizer")
	if err != nil {
		t.Fatal(err)
	}
	raw := `{"text":"ab","sampling_params":{"max_new_tokens":4},"stream":true}`
	gm := &generateMigration{raw: []byte(raw), tok: tk}
	if ids, b, ok := gm.continuation(); !ok || ids != nil || string(b) != raw {
		t.Fatalf("restart %v %s %v", ids, b, ok)
	}
	gm.frame(nil, []byte(`{"text":" x","output_ids":[32,120],"meta_info":{"id":"r","finish_reason":null,"prompt_tokens":2,"completion_tokens":1}}`))
	ids, b, ok := gm.continuation()
	if !ok || !slices.Equal(ids, []uint32{'a', 'b', 32, 120}) || !strings.Contains(string(b), `"max_new_tokens":3`) {
		t.Errorf("after a chunk: %v %s %v", ids, b, ok)
	}
}
