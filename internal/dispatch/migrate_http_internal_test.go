package dispatch

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
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
			sc, ok := scanIDChunk([]byte(c.in), []uint32{3}, nil, nil)
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
