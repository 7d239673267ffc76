package dispatch

import (
	"net/http"
	"slices"
	"testing"

	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/kvevents"
	"github.com/sluicegw/sluice/internal/placement"
	"github.com/sluicegw/sluice/internal/worker"
)

// TestPromptTokens: token-id prompts are used as given, without a tokenizer; what cannot be known
// exactly here gets no ids (and is routed by text).
func TestPromptTokens(t *testing.T) {
	x := &Dispatcher{d: Deps{Policies: mustSet(t, placement.PolicyKVAware)}}
	if !x.wantsTokens() {
		t.Fatal("kv_aware in use, but no tokens wanted")
	}
	tests := []struct {
		name  string
		route Route
		body  string
		want  []uint32
	}{
		{"completions token array", RouteCompletions, `{"model":"m","prompt":[5,6,7]}`, []uint32{5, 6, 7}},
		{"generate input_ids", RouteGenerate, `{"input_ids":[1,2]}`, []uint32{1, 2}},
		{"a batch of arrays", RouteCompletions, `{"model":"m","prompt":[[1,2],[3]]}`, nil},
		{"a batch of input_ids", RouteGenerate, `{"input_ids":[[1],[2]]}`, nil},
		{"text without a tokenizer", RouteCompletions, `{"model":"m","prompt":"hello"}`, nil},
		{"chat without a tokenizer", RouteChat, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			br, err := body.ParseRequest(tt.route, []byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := promptTokens(br, nil); !slices.Equal(got, tt.want) {
				t.Errorf("promptTokens = %v, want %v", got, tt.want)
			}
		})
	}
	if got := tokenArray([]byte(`{"prompt":[1,-2]}`), "prompt"); got != nil {
		t.Errorf("negative id: %v, want nil", got)
	}
	if (&Dispatcher{d: Deps{Policies: mustSet(t, placement.PolicyCacheAware)}}).wantsTokens() {
		t.Error("cache_aware wants no tokens: the tokenizer's CPU would be spent for nothing")
	}
}

// TestAdmissionChargesUncachedTokens: under kv_aware with exact tokens, the admission estimate is the
// token count and the charge on a worker leaves out the prefix its engine's events say it holds.
func TestAdmissionChargesUncachedTokens(t *testing.T) {
	reg := worker.NewRegistry(worker.RegistryOptions{StartReady: true})
	for _, u := range []string{"http://p0:1", "http://p1:1"} {
		if _, err := reg.Add(worker.Spec{URL: u, Role: worker.RolePrefill, Models: []string{"m"}}); err != nil {
			t.Fatal(err)
		}
	}
	idx, err := kvevents.NewIndex(kvevents.IndexConfig{})
	if err != nil {
		t.Fatal(err)
	}
	prompt := make([]uint32, 40)
	for i := range prompt {
		prompt[i] = uint32(100 + i)
	}
	idx.Apply("http://p1:1", 0, &kvevents.Batch{Events: []kvevents.Event{{
		Kind: kvevents.BlockStored, BlockSize: 16, TokenIDs: prompt[:32],
		BlockHashes: []kvevents.EngineHash{kvevents.IntHash(1), kvevents.IntHash(2)},
	}}})
	set, err := placement.NewSet(placement.Config{Settings: placement.Settings{Policy: placement.PolicyKVAware}, KVIndex: idx})
	if err != nil {
		t.Fatal(err)
	}
	x := &Dispatcher{cfg: Config{CharsPerToken: 4}, d: Deps{Registry: reg, Policies: set}}
	br, err := body.ParseRequest(RouteCompletions, []byte(`{"model":"m","prompt":"forty tokens of text, as the tokenizer saw them"}`))
	if err != nil {
		t.Fatal(err)
	}
	ar := x.admissionRequest(&Request{Header: http.Header{}}, br, &placement.Request{Model: "m", Text: br.Text, TokenIDs: prompt})
	if ar.Tokens != 40 || ar.CachedTokens == nil {
		t.Fatalf("tokens %d, hook %v: want the 40 exact tokens and a cached-prefix hook", ar.Tokens, ar.CachedTokens != nil)
	}
	if got := ar.CachedTokens("http://p1:1"); got != 32 {
		t.Errorf("cached on the engine holding two blocks = %d, want 32", got)
	}
	if got := ar.CachedTokens("http://p0:1"); got != 0 {
		t.Errorf("cached on the other engine = %d, want 0", got)
	}
	if got := ar.CachedTokens("http://gone:1"); got != 0 {
		t.Errorf("cached on an unknown worker = %d, want 0", got)
	}
	// Without token ids (no tokenizer for the model) the fallback's text estimate applies.
	ar = x.admissionRequest(&Request{Header: http.Header{}}, br, &placement.Request{Model: "m", Text: br.Text})
	if want := int64((len(br.Text) + 3) / 4); ar.Tokens != want {
		t.Errorf("text estimate %d, want %d", ar.Tokens, want)
	}
}

// TestReadChatFields: the fields that decide a chat's rendering, read as encoding/json read them (the
// last of a repeated key wins, null is absent), and a mistyped switch refuses the chat's tokens.
func TestReadChatFields(t *testing.T) {
	f, ok := readChatFields([]byte(`{"messages":[{"role":"user","content":"hi"}],"tools":[],"add_generation_prompt":true,` +
		`"add_generation_prompt":false,"chat_template_kwargs":{"k":1},"continue_final_message":null,"other":{"messages":1}}`))
	if !ok || string(f.Messages) != `[{"role":"user","content":"hi"}]` || string(f.Tools) != `[]` ||
		string(f.ChatTemplateKwargs) != `{"k":1}` || f.AddGenerationPrompt == nil || *f.AddGenerationPrompt || f.ContinueFinalMessage {
		t.Errorf("got %+v, %v", f, ok)
	}
	if f, ok := readChatFields([]byte(`{"add_generation_prompt":true,"add_generation_prompt":null,"continue_final_message":true,"chat_template":"t"}`)); !ok ||
		f.AddGenerationPrompt != nil || !f.ContinueFinalMessage || string(f.ChatTemplate) != `"t"` {
		t.Errorf("got %+v, %v", f, ok)
	}
	for _, b := range []string{`{"add_generation_prompt":"yes"}`, `{"continue_final_message":1}`, `[1]`, `{"messages":[}`} {
		if _, ok := readChatFields([]byte(b)); ok {
			t.Errorf("%s: read, want refused", b)
		}
	}
	if got := tokenArray([]byte(`{"prompt":"x","prompt":[3,4.0]}`), "prompt"); !slices.Equal(got, []uint32{3, 4}) {
		t.Errorf("tokenArray = %v, want the last prompt's [3 4]", got)
	}
	for _, b := range []string{`{"prompt":[]}`, `{"prompt":["a"]}`, `{"prompt":[4294967296]}`, `{"prompt":null}`, `{}`} {
		if got := tokenArray([]byte(b), "prompt"); got != nil {
			t.Errorf("%s: tokenArray = %v, want nil", b, got)
		}
	}
}
