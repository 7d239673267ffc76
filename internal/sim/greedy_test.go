package sim

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
)

// TestGreedyContinuation: at temperature 0 each token is a function of the whole context, so a
// generation continued from its prompt plus its first k output tokens (as a gateway migrating a
// stream sends it, as input_ids or as text) produces exactly the rest of the original output. A
// sampled generation keeps its own seed and is not bound by this.
func TestGreedyContinuation(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Protocol: ProtocolSGLang, Mode: ModeInstant, Seed: 7, InstantOutputTokens: 64})
	c := testClient(t)
	generate := func(body string) string {
		t.Helper()
		status, b := post(t, c, e.URL()+"/generate", body)
		if status != 200 {
			t.Fatalf("generate %s: %d %s", body, status, b)
		}
		var out struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		return out.Text
	}
	ids := func(v []uint32) string {
		b, _ := json.Marshal(v)
		return string(b)
	}
	const n = 12
	prompt := appendTokens(nil, "once upon a time there was a gateway")
	whole := generate(fmt.Sprintf(`{"input_ids":%s,"sampling_params":{"max_new_tokens":%d,"temperature":0}}`, ids(prompt), n))
	out := appendTokens(nil, whole)
	if len(out) != n {
		t.Fatalf("output %q is %d tokens, want %d", whole, len(out), n)
	}
	words := strings.Fields(whole)
	for _, k := range []int{1, 5, n - 1} {
		ctx := append(append([]uint32(nil), prompt...), out[:k]...)
		rest := generate(fmt.Sprintf(`{"input_ids":%s,"sampling_params":{"max_new_tokens":%d,"temperature":0}}`, ids(ctx), n-k))
		if want := " " + strings.Join(words[k:], " "); rest != want {
			t.Errorf("continued after %d tokens (input_ids): %q, want the original's rest %q", k, rest, want)
		}
		text := "once upon a time there was a gateway" + strings.Join(append([]string{""}, words[:k]...), " ")
		rest = generate(fmt.Sprintf(`{"text":%q,"sampling_params":{"max_new_tokens":%d,"temperature":0}}`, text, n-k))
		if want := " " + strings.Join(words[k:], " "); rest != want {
			t.Errorf("continued after %d tokens (text): %q, want the original's rest %q", k, rest, want)
		}
	}
	// The greedy output is the engine's (its seed), not the request's.
	seeded := generate(fmt.Sprintf(`{"input_ids":%s,"sampling_params":{"max_new_tokens":%d,"temperature":0,"seed":99}}`, ids(prompt), n))
	if seeded != whole {
		t.Errorf("greedy with a seed: %q, want the unseeded greedy output %q", seeded, whole)
	}
	other := startEngine(t, Config{Protocol: ProtocolSGLang, Mode: ModeInstant, Seed: 8, InstantOutputTokens: 64})
	status, b := post(t, c, other.URL()+"/generate", fmt.Sprintf(`{"input_ids":%s,"sampling_params":{"max_new_tokens":%d,"temperature":0}}`, ids(prompt), n))
	if status != 200 || strings.Contains(string(b), fmt.Sprintf("%q", whole)) {
		t.Errorf("an engine with another seed (another model) answered %d %s, want another output", status, b)
	}
}

// TestGreedyContinuationByteTokens: over the engine gRPC protocol with byte token ids (the ids a
// gateway's byte-level tokenizer decodes), the ids the client saw continue the context: prompt ids
// plus the first k output ids give the rest of the output ids.
func TestGreedyContinuationByteTokens(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Mode: ModeInstant, InstantOutputTokens: 32, GRPC: true, ByteTokenIDs: true, Seed: 5})
	client := sglangpb.NewSglangSchedulerClient(grpcConn(t, e))
	run := func(ids []uint32, maxNew int) []uint32 {
		t.Helper()
		req := sglangReq("r", "", maxNew, false)
		req.Tokenized = &sglangpb.TokenizedInput{InputIds: ids}
		_, done, err := sglangRun(t.Context(), client, req)
		if err != nil {
			t.Fatal(err)
		}
		return done.GetOutputIds()
	}
	prompt := []uint32{101, 7, 250, 3, 3, 9}
	whole := run(prompt, 10)
	if len(whole) < 10 {
		t.Fatalf("output ids %v: want the bytes of 10 words", whole)
	}
	// Cut after the first word's bytes, and after a few more: each word begins with its space.
	for _, k := range []int{0, 2, 5} {
		cut, words := 0, 0
		for cut < len(whole) && words <= k {
			cut++
			if cut < len(whole) && whole[cut] == ' ' {
				words++
			}
		}
		ctx := append(append([]uint32(nil), prompt...), whole[:cut]...)
		if rest := run(ctx, 10-(k+1)); !slices.Equal(rest, whole[cut:]) {
			t.Errorf("continued after %d words (%d ids): %v, want the original's rest %v", k+1, cut, rest, whole[cut:])
		}
	}
}

// TestGenerateOutputIDs: SGLang's /generate answers carry output_ids, cumulative in every streamed
// chunk as its text is (no --incremental-streaming-output), and they are the ids a continuation
// sends: prompt ids + the first k output_ids give the rest of the output_ids.
func TestGenerateOutputIDs(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Protocol: ProtocolSGLang, Mode: ModeInstant, Seed: 7, InstantOutputTokens: 64})
	c := testClient(t)
	type answer struct {
		Text      string   `json:"text"`
		OutputIDs []uint32 `json:"output_ids"`
	}
	prompt := appendTokens(nil, "output ids for a gateway")
	body := func(ids []uint32, n int, stream bool) string {
		b, _ := json.Marshal(ids)
		return fmt.Sprintf(`{"input_ids":%s,"sampling_params":{"max_new_tokens":%d,"temperature":0},"stream":%t}`, b, n, stream)
	}
	status, b := post(t, c, e.URL()+"/generate", body(prompt, 10, true))
	if status != 200 {
		t.Fatalf("stream: %d %s", status, b)
	}
	var last answer
	chunks := 0
	for _, ev := range sseEvents(t, b) {
		if ev == "[DONE]" {
			continue
		}
		var a answer
		if err := json.Unmarshal([]byte(ev), &a); err != nil {
			t.Fatalf("chunk %s: %v", ev, err)
		}
		if !slices.Equal(a.OutputIDs, appendTokens(nil, a.Text)) || len(a.OutputIDs) < len(last.OutputIDs) ||
			!slices.Equal(a.OutputIDs[:len(last.OutputIDs)], last.OutputIDs) {
			t.Errorf("chunk %d: output_ids %v for text %q after %v: want the cumulative ids of the text", chunks, a.OutputIDs, a.Text, last.OutputIDs)
		}
		last = a
		chunks++
	}
	if len(last.OutputIDs) != 10 || chunks < 10 {
		t.Fatalf("%d chunks, last output_ids %v: want 10 ids", chunks, last.OutputIDs)
	}
	status, b = post(t, c, e.URL()+"/generate", body(append(slices.Clip(prompt), last.OutputIDs[:4]...), 6, false))
	var rest answer
	if err := json.Unmarshal(b, &rest); status != 200 || err != nil {
		t.Fatalf("continuation: %d %s", status, b)
	}
	if !slices.Equal(rest.OutputIDs, last.OutputIDs[4:]) {
		t.Errorf("continued output_ids %v, want the rest of the original's %v", rest.OutputIDs, last.OutputIDs[4:])
	}
}

// vLLM's return_token_ids (serving_completion.py): the prompt's ids in the first chunk, each chunk's
// new ids in token_ids; prompt + token_ids continues the generation exactly, and without the flag
// no chunk carries ids.
func TestCompletionsReturnTokenIDs(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Protocol: ProtocolVLLM, Mode: ModeInstant, Seed: 7, InstantOutputTokens: 64})
	c := testClient(t)
	type choice struct {
		Text           string   `json:"text"`
		PromptTokenIDs []uint32 `json:"prompt_token_ids"`
		TokenIDs       []uint32 `json:"token_ids"`
	}
	type answer struct {
		Choices []choice `json:"choices"`
	}
	prompt := appendTokens(nil, "token ids for a gateway")
	body := func(ids []uint32, n int, stream, ask bool) string {
		b, _ := json.Marshal(ids)
		return fmt.Sprintf(`{"model":"sim-model","prompt":%s,"max_tokens":%d,"temperature":0,"stream":%t,"return_token_ids":%t}`, b, n, stream, ask)
	}
	read := func(ask bool) (text string, firstPrompt []uint32, ids []uint32, chunks int) {
		status, b := post(t, c, e.URL()+"/v1/completions", body(prompt, 10, true, ask))
		if status != 200 {
			t.Fatalf("stream: %d %s", status, b)
		}
		for _, ev := range sseEvents(t, b) {
			var a answer
			if ev == "[DONE]" {
				continue
			}
			if err := json.Unmarshal([]byte(ev), &a); err != nil || len(a.Choices) != 1 {
				t.Fatalf("chunk %s: %v", ev, err)
			}
			ch := a.Choices[0]
			if chunks == 0 {
				firstPrompt = ch.PromptTokenIDs
			} else if ch.PromptTokenIDs != nil {
				t.Errorf("chunk %d carries prompt_token_ids %v: only the first does", chunks, ch.PromptTokenIDs)
			}
			if ask && !slices.Equal(ch.TokenIDs, appendTokens(nil, ch.Text)) {
				t.Errorf("chunk %d: token_ids %v for text %q", chunks, ch.TokenIDs, ch.Text)
			}
			text += ch.Text
			ids = append(ids, ch.TokenIDs...)
			chunks++
		}
		return text, firstPrompt, ids, chunks
	}
	text, first, ids, _ := read(true)
	if !slices.Equal(first, prompt) || len(ids) != 10 {
		t.Fatalf("prompt_token_ids %v (want %v), %d token ids (want 10)", first, prompt, len(ids))
	}
	if _, p, none, _ := read(false); p != nil || none != nil {
		t.Errorf("without return_token_ids: prompt_token_ids %v, token_ids %v", p, none)
	}
	status, b := post(t, c, e.URL()+"/v1/completions", body(append(slices.Clip(prompt), ids[:4]...), 6, false, true))
	var rest answer
	if err := json.Unmarshal(b, &rest); status != 200 || err != nil || len(rest.Choices) != 1 {
		t.Fatalf("continuation: %d %s", status, b)
	}
	if got := rest.Choices[0]; !slices.Equal(got.TokenIDs, ids[4:]) || !strings.HasSuffix(text, got.Text) {
		t.Errorf("continued token_ids %v text %q, want the rest of the original's %v of %q", got.TokenIDs, got.Text, ids[4:], text)
	}
}

// vLLM's chat takes return_token_ids too (serving_chat.py): the prompt's ids beside the first chunk's
// choices, each choice's new ids in token_ids; a completion of prompt + the first ids continues the
// chat's answer exactly (what the gateway's HTTP chat migration relies on). SGLang's chat has no such
// field, and without the flag no chunk carries ids.
func TestChatReturnTokenIDs(t *testing.T) {
	t.Parallel()
	type chunk struct {
		PromptTokenIDs []uint32 `json:"prompt_token_ids"`
		Choices        []struct {
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
			TokenIDs     []uint32 `json:"token_ids"`
			FinishReason *string  `json:"finish_reason"`
		} `json:"choices"`
	}
	const chat = `{"model":"sim-model","messages":[{"role":"user","content":"continue me"}],"max_tokens":10,"temperature":0,"stream":true,"return_token_ids":%t}`
	read := func(t *testing.T, url string, ask, vllm bool) (text string, prompt, ids []uint32, idChunks int) {
		status, b := post(t, testClient(t), url+"/v1/chat/completions", fmt.Sprintf(chat, ask))
		if status != 200 {
			t.Fatalf("stream: %d %s", status, b)
		}
		for k, ev := range sseEvents(t, b) {
			var c chunk
			if ev == "[DONE]" {
				continue
			}
			if err := json.Unmarshal([]byte(ev), &c); err != nil || len(c.Choices) != 1 {
				t.Fatalf("chunk %s: %v", ev, err)
			}
			if k == 0 {
				prompt = c.PromptTokenIDs
			} else if c.PromptTokenIDs != nil {
				t.Errorf("chunk %d carries prompt_token_ids: only the first does", k)
			}
			ch := c.Choices[0]
			if ask && vllm && !slices.Equal(ch.TokenIDs, appendTokens(nil, ch.Delta.Content)) && (ch.TokenIDs != nil || ch.Delta.Content != "") {
				t.Errorf("chunk %d: token_ids %v for content %q", k, ch.TokenIDs, ch.Delta.Content)
			}
			if ch.TokenIDs != nil {
				idChunks++
			}
			text += ch.Delta.Content
			ids = append(ids, ch.TokenIDs...)
		}
		return text, prompt, ids, idChunks
	}
	e := startEngine(t, Config{Protocol: ProtocolVLLM, Mode: ModeInstant, Seed: 7, InstantOutputTokens: 64})
	text, prompt, ids, _ := read(t, e.URL(), true, true)
	if len(prompt) == 0 || len(ids) != 10 {
		t.Fatalf("prompt_token_ids %v, %d token ids (want 10)", prompt, len(ids))
	}
	if _, p, none, n := read(t, e.URL(), false, true); p != nil || none != nil || n != 0 {
		t.Errorf("without return_token_ids: prompt_token_ids %v, token_ids %v", p, none)
	}
	b, _ := json.Marshal(append(slices.Clip(prompt), ids[:4]...))
	status, rb := post(t, testClient(t), e.URL()+"/v1/completions",
		fmt.Sprintf(`{"model":"sim-model","prompt":%s,"max_tokens":6,"temperature":0,"return_token_ids":true}`, b))
	var rest struct {
		Choices []struct {
			Text     string   `json:"text"`
			TokenIDs []uint32 `json:"token_ids"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(rb, &rest); status != 200 || err != nil || len(rest.Choices) != 1 {
		t.Fatalf("continuation: %d %s", status, rb)
	}
	if !slices.Equal(rest.Choices[0].TokenIDs, ids[4:]) || !strings.HasSuffix(text, rest.Choices[0].Text) || rest.Choices[0].Text == "" {
		t.Errorf("continued %q %v, want the rest of %q %v", rest.Choices[0].Text, rest.Choices[0].TokenIDs, text, ids[4:])
	}
	sg := startEngine(t, Config{Protocol: ProtocolSGLang, Mode: ModeInstant, Seed: 7, InstantOutputTokens: 64})
	if _, p, none, n := read(t, sg.URL(), true, false); p != nil || none != nil || n != 0 {
		t.Errorf("SGLang's chat gave ids: prompt_token_ids %v, token_ids %v", p, none)
	}
}

// With ByteTokenIDs the HTTP engine tokenizes a text prompt into its bytes (the byte-level tokenizer
// a gateway can hold too) and shows generated text as bytes: a /generate of a text prompt reports
// the bytes' count as prompt_tokens, its output_ids are the text's bytes, and input_ids = the
// prompt's bytes + the output_ids of the first words give the rest of the text.
func TestGenerateByteTokenIDs(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Protocol: ProtocolSGLang, Mode: ModeInstant, Seed: 7, InstantOutputTokens: 64, ByteTokenIDs: true})
	c := testClient(t)
	type answer struct {
		Text      string   `json:"text"`
		OutputIDs []uint32 `json:"output_ids"`
		Meta      struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
		} `json:"meta_info"`
	}
	const prompt = "bytes for a gateway"
	status, b := post(t, c, e.URL()+"/generate", `{"text":"`+prompt+`","sampling_params":{"max_new_tokens":10,"temperature":0}}`)
	var whole answer
	if err := json.Unmarshal(b, &whole); status != 200 || err != nil {
		t.Fatalf("%d %s", status, b)
	}
	if whole.Meta.Prompt != len(prompt) || whole.Meta.Completion != 10 || !slices.Equal(whole.OutputIDs, appendByteTokens(nil, whole.Text)) {
		t.Fatalf("prompt_tokens %d (want %d), completion_tokens %d, output_ids %v for %q", whole.Meta.Prompt, len(prompt),
			whole.Meta.Completion, whole.OutputIDs, whole.Text)
	}
	cut := 0 // the bytes of the first 4 words (each starts with a space)
	for words := 0; cut < len(whole.Text) && words <= 4; cut++ {
		if whole.Text[cut] == ' ' {
			words++
		}
	}
	cut--
	ids, _ := json.Marshal(append(appendByteTokens(nil, prompt), whole.OutputIDs[:cut]...))
	status, b = post(t, c, e.URL()+"/generate", fmt.Sprintf(`{"input_ids":%s,"sampling_params":{"max_new_tokens":6,"temperature":0}}`, ids))
	var rest answer
	if err := json.Unmarshal(b, &rest); status != 200 || err != nil {
		t.Fatalf("continuation: %d %s", status, b)
	}
	if rest.Text != whole.Text[cut:] {
		t.Errorf("continued %q, want the rest of %q: %q", rest.Text, whole.Text, whole.Text[cut:])
	}
}
