package toolcall_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/sluicegw/sluice/internal/toolcall"
)

// counter makes ids call_0, call_1, ... so whole and streamed parses can be compared.
func counter() toolcall.Options {
	n := 0
	return toolcall.Options{NewID: func() string { n++; return fmt.Sprintf("call_%d", n-1) }}
}

// stream parses text pushed in the given pieces and folds the deltas into a whole answer, checking
// the deltas' shape on the way: a call's first delta has its id and name and no arguments, later ones
// only arguments, and indexes count up from 0.
// tb is what stream needs of *testing.T and *rapid.T.
type tb interface {
	Helper()
	Fatal(...any)
	Fatalf(string, ...any)
}

func stream(t tb, parser string, pieces []string) (string, []toolcall.ToolCall) {
	t.Helper()
	p, err := toolcall.New(parser, counter())
	if err != nil {
		t.Fatal(err)
	}
	var content strings.Builder
	var calls []toolcall.ToolCall
	fold := func(d toolcall.Delta) {
		content.WriteString(d.Content)
		for _, c := range d.Calls {
			switch {
			case c.Index == len(calls):
				if c.ID == "" || c.Name == "" || c.Arguments != "" {
					t.Fatalf("first delta of call %d = %+v, want id and name only", c.Index, c)
				}
				calls = append(calls, toolcall.ToolCall{ID: c.ID, Name: c.Name})
			case c.Index == len(calls)-1:
				if c.ID != "" || c.Name != "" || c.Arguments == "" {
					t.Fatalf("later delta of call %d = %+v, want arguments only", c.Index, c)
				}
				calls[c.Index].Arguments += c.Arguments
			default:
				t.Fatalf("delta for call %d while %d were announced", c.Index, len(calls))
			}
		}
	}
	for _, s := range pieces {
		fold(p.Push(s))
	}
	fold(p.Flush())
	return content.String(), calls
}

// runes cuts s into single characters, the finest split a detokenizer can give.
func runes(s string) []string {
	var r []string
	for _, c := range s {
		r = append(r, string(c))
	}
	return r
}

type call struct {
	name string
	args map[string]any
}

func check(t *testing.T, gotCalls []toolcall.ToolCall, want []call) {
	t.Helper()
	if len(gotCalls) != len(want) {
		t.Fatalf("got %d calls %+v, want %d", len(gotCalls), gotCalls, len(want))
	}
	for i, c := range gotCalls {
		var args map[string]any
		if err := json.Unmarshal([]byte(c.Arguments), &args); err != nil {
			t.Fatalf("call %d arguments %q: %v", i, c.Arguments, err)
		}
		if c.Name != want[i].name || !cmp.Equal(args, want[i].args) {
			t.Errorf("call %d = %s(%s), want %s(%v)", i, c.Name, c.Arguments, want[i].name, want[i].args)
		}
	}
}

// Cases from smg's own tests, lightseekorg/smg at 9553df28f962e99f4ed577c8cbdedb2f7cde1833,
// crates/tool_parser/tests/tool_parser_qwen.rs, and at 0b96bf60533314f11624f89b8db9715e023cded8,
// crates/tool_parser/tests/tool_parser_deepseek.rs. content is ours where smg keeps only the text
// before the first call (marked "smg: ..."). Each case is parsed whole, streamed one character at a
// time, and streamed in the upstream test's own chunks where it has them.
func TestUpstreamCases(t *testing.T) {
	for _, tt := range []struct {
		name    string
		parser  string
		input   string
		chunks  []string
		content string
		calls   []call
	}{
		{name: "qwen test_qwen_single_tool", parser: "qwen",
			input: "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Beijing\", \"units\": \"celsius\"}}\n</tool_call>",
			calls: []call{{"get_weather", map[string]any{"city": "Beijing", "units": "celsius"}}}},
		{name: "qwen test_qwen_multiple_sequential_tools", parser: "qwen",
			input:   "Let me help you with that.\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"Qwen model\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"translate\", \"arguments\": {\"text\": \"Hello\", \"to\": \"zh\"}}\n</tool_call>",
			content: "Let me help you with that.\n",
			calls:   []call{{"search", map[string]any{"query": "Qwen model"}}, {"translate", map[string]any{"text": "Hello", "to": "zh"}}}},
		{name: "qwen test_qwen_pretty_printed_json", parser: "hermes",
			input: "<tool_call>\n{\n    \"name\": \"create_document\",\n    \"arguments\": {\n        \"title\": \"Test Document\",\n        \"content\": \"This is a test\",\n        \"metadata\": {\n            \"author\": \"Qwen\",\n            \"tags\": [\"test\", \"example\"]\n        }\n    }\n}\n</tool_call>",
			calls: []call{{"create_document", map[string]any{"title": "Test Document", "content": "This is a test",
				"metadata": map[string]any{"author": "Qwen", "tags": []any{"test", "example"}}}}}},
		{name: "qwen test_qwen_with_text_between", parser: "qwen",
			input: "First, let me search for information.\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"test\"}}\n</tool_call>\n\nNow I'll translate something.\n\n<tool_call>\n{\"name\": \"translate\", \"arguments\": {\"text\": \"world\", \"to\": \"es\"}}\n</tool_call>\nDone!",
			// smg: "First, let me search for information.\n"
			content: "First, let me search for information.\n\n\nNow I'll translate something.\n\n\nDone!",
			calls:   []call{{"search", map[string]any{"query": "test"}}, {"translate", map[string]any{"text": "world", "to": "es"}}}},
		{name: "qwen test_qwen_empty_arguments", parser: "qwen",
			input: "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
			calls: []call{{"get_time", map[string]any{}}}},
		{name: "qwen test_qwen_with_newlines_in_strings", parser: "qwen",
			input: "<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"content\": \"Line 1\\nLine 2\\nLine 3\", \"path\": \"/tmp/test.txt\"}}\n</tool_call>",
			calls: []call{{"write_file", map[string]any{"content": "Line 1\nLine 2\nLine 3", "path": "/tmp/test.txt"}}}},
		{name: "qwen test_qwen_incomplete_tags missing closing tag", parser: "qwen",
			input:   "<tool_call>\n{\"name\": \"test\", \"arguments\": {}}",
			content: "<tool_call>\n{\"name\": \"test\", \"arguments\": {}}"},
		{name: "qwen test_qwen_incomplete_tags missing opening tag", parser: "qwen",
			input:   "{\"name\": \"test\", \"arguments\": {}}\n</tool_call>",
			content: "{\"name\": \"test\", \"arguments\": {}}\n</tool_call>"},
		{name: "qwen test_qwen_real_world_output", parser: "qwen",
			input: "I'll help you search for information and perform calculations.\n\n<tool_call>\n{\n    \"name\": \"web_search\",\n    \"arguments\": {\n        \"query\": \"quantum computing breakthroughs 2024\",\n        \"language\": \"en\",\n        \"region\": \"us\",\n        \"safe_search\": true\n    }\n}\n</tool_call>\n\nLet me also calculate something for you:\n\n<tool_call>\n{\n    \"name\": \"calculator\",\n    \"arguments\": {\n        \"expression\": \"sqrt(144) + 3^2\",\n        \"precision\": 2\n    }\n}\n</tool_call>\n\nThese tools will provide the information you need.",
			// smg: "I'll help you search for information and perform calculations.\n\n"
			content: "I'll help you search for information and perform calculations.\n\n\n\nLet me also calculate something for you:\n\n\n\nThese tools will provide the information you need.",
			calls: []call{{"web_search", map[string]any{"query": "quantum computing breakthroughs 2024", "language": "en", "region": "us", "safe_search": true}},
				{"calculator", map[string]any{"expression": "sqrt(144) + 3^2", "precision": 2.0}}}},
		{name: "qwen test_qwen_xml_tag_arrives_in_parts", parser: "qwen",
			chunks: []string{"<to", "ol_", "cal", "l>\n", "{", `"`, "na", "me", `"`, ": ", `"`, "tra", "nsl",
				"ate", `"`, ", ", `"`, "arg", "ume", "nts", `"`, ": {", `"`, "tex", "t",
				`"`, ": ", `"`, "hel", "lo", `"`, "}}\n", "</t", "ool", "_ca", "ll>"},
			calls: []call{{"translate", map[string]any{"text": "hello"}}}},
		{name: "qwen test_buffer_efficiency_with_multiple_tools", parser: "qwen",
			input: "<tool_call>\n{\"name\": \"tool1\", \"arguments\": {\"a\": 1}}\n</tool_call><tool_call>\n{\"name\": \"tool2\", \"arguments\": {\"b\": 2}}\n</tool_call><tool_call>\n{\"name\": \"tool3\", \"arguments\": {\"c\": 3}}\n</tool_call>",
			calls: []call{{"tool1", map[string]any{"a": 1.0}}, {"tool2", map[string]any{"b": 2.0}}, {"tool3", map[string]any{"c": 3.0}}}},
		{name: "deepseek test_deepseek_complete_parsing", parser: "deepseek",
			input: "Let me help you with that.\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"location\": \"Tokyo\", \"units\": \"celsius\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>\nThe weather in Tokyo is...",
			// smg: "Let me help you with that.\n"
			content: "Let me help you with that.\n\nThe weather in Tokyo is...",
			calls:   []call{{"get_weather", map[string]any{"location": "Tokyo", "units": "celsius"}}}},
		{name: "deepseek test_deepseek_multiple_tools", parser: "deepseek_v3",
			input: "<｜tool▁calls▁begin｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>search\n```json\n{\"query\": \"rust programming\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>translate\n```json\n{\"text\": \"Hello World\", \"to\": \"ja\"}\n```<｜tool▁call▁end｜>\n<｜tool▁calls▁end｜>",
			calls: []call{{"search", map[string]any{"query": "rust programming"}}, {"translate", map[string]any{"text": "Hello World", "to": "ja"}}}},
		{name: "deepseek test_deepseek_streaming", parser: "deepseek",
			chunks: []string{"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>", "function<｜tool▁sep｜>get_weather\n", "```json\n",
				`{"location": `, `"Beijing", `, `"units": "metric"}`, "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
			calls: []call{{"get_weather", map[string]any{"location": "Beijing", "units": "metric"}}}},
		{name: "deepseek test_deepseek_nested_json", parser: "deepseek",
			input: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>process\n```json\n{\n    \"data\": {\n        \"nested\": {\n            \"deep\": [1, 2, 3]\n        }\n    }\n}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
			calls: []call{{"process", map[string]any{"data": map[string]any{"nested": map[string]any{"deep": []any{1.0, 2.0, 3.0}}}}}}},
		{name: "deepseek test_deepseek_streaming_final_chunk_strips_fence_and_markers", parser: "deepseek",
			chunks: []string{"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n",
				"{\"location\": \"Tokyo\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
			calls: []call{{"get_weather", map[string]any{"location": "Tokyo"}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			input := tt.input
			if input == "" {
				input = strings.Join(tt.chunks, "")
			}
			content, calls, err := toolcall.Parse(tt.parser, counter(), input)
			if err != nil {
				t.Fatal(err)
			}
			if content != tt.content {
				t.Errorf("whole content = %q, want %q", content, tt.content)
			}
			check(t, calls, tt.calls)
			for _, pieces := range [][]string{runes(input), tt.chunks} {
				if pieces == nil {
					continue
				}
				sc, scalls := stream(t, tt.parser, pieces)
				if len(tt.calls) > 0 && (sc != content || !cmp.Equal(scalls, calls)) {
					t.Errorf("streamed in %d pieces = %q %+v, whole = %q %+v", len(pieces), sc, scalls, content, calls)
				}
			}
		})
	}
}

// smg's test_deepseek_malformed_json_handling: the call that does not parse is dropped, the other
// stays. And when none parses the text is the content (smg's fallback in parse_complete).
func TestMalformed(t *testing.T) {
	input := "<｜tool▁calls▁begin｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>broken\n```json\n{invalid json}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>valid\n```json\n{\"key\": \"value\"}\n```<｜tool▁call▁end｜>\n<｜tool▁calls▁end｜>"
	_, calls, _ := toolcall.Parse("deepseek", counter(), input)
	check(t, calls, []call{{"valid", map[string]any{"key": "value"}}})

	for _, tt := range []struct{ parser, input string }{
		{"qwen", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }}\n</tool_call>"},
		{"qwen", "<tool_call>\nnot json\n</tool_call>"},
		{"qwen", "<tool_call>\n{\"name\": \"f\", \"arguments\": {}} trailing\n</tool_call>"},
		{"deepseek", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
	} {
		content, calls, _ := toolcall.Parse(tt.parser, counter(), tt.input)
		if content != tt.input || len(calls) != 0 {
			t.Errorf("Parse(%q) = %q %+v, want the text as content and no calls", tt.input, content, calls)
		}
	}
}

func TestNames(t *testing.T) {
	for _, n := range []string{"qwen", "hermes", "deepseek", "deepseek_v3"} {
		if !toolcall.Known(n) {
			t.Errorf("Known(%q) = false", n)
		}
	}
	if _, err := toolcall.New("llama", toolcall.Options{}); err == nil || !strings.Contains(err.Error(), "deepseek, deepseek_v3, deepseekv3, hermes, qwen, qwen25") {
		t.Errorf("New(llama) error = %v, want one listing the names", err)
	}
}

func TestRequireToolParser(t *testing.T) {
	if err := toolcall.RequireToolParser("m", false, ""); err != nil {
		t.Errorf("no tools: %v", err)
	}
	if err := toolcall.RequireToolParser("m", true, "qwen"); err != nil {
		t.Errorf("tools and a parser: %v", err)
	}
	if err := toolcall.RequireToolParser("m", true, ""); !errors.Is(err, toolcall.ErrNoToolParser) || !strings.Contains(err.Error(), "model m") {
		t.Errorf("tools without a parser: %v, want ErrNoToolParser naming the model", err)
	}
}

// The default ids are OpenAI's shape and differ between calls.
func TestDefaultIDs(t *testing.T) {
	_, calls, _ := toolcall.Parse("qwen", toolcall.Options{}, strings.Repeat("<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", 2))
	if len(calls) != 2 || !strings.HasPrefix(calls[0].ID, "call_") || len(calls[0].ID) != 29 || calls[0].ID == calls[1].ID {
		t.Fatalf("calls = %+v, want two distinct call_ ids of 24 characters", calls)
	}
}

// A random well-formed answer (text, calls in either format, random JSON layout) parses whole to what
// it was made of, and streamed in random pieces to the same.
func TestStreamEqualsWhole(t *testing.T) {
	texts := []string{"Sure.", "Let me check.\n", "\n", "  ", "a < b", "<tool", "<｜tool", "`x`", "思考", "```json\n{}\n```"}
	keys := []string{"city", "q", "path", "n", "é"}
	values := []string{`"Paris"`, `"a \"quoted\" }"`, `"{[<tool_call>]}"`, `3`, `-1.5e3`, `true`, `null`, `["x", {"y": []}]`, `"\u00e9\n"`, "\"```\""}
	rapid.Check(t, func(t *rapid.T) {
		parser := rapid.SampledFrom([]string{"qwen", "deepseek"}).Draw(t, "parser")
		sp := func() string { return rapid.SampledFrom([]string{"", " ", "\n", "\n  "}).Draw(t, "space") }
		var b strings.Builder
		var want []call
		var wantArgs []string
		var content strings.Builder
		lead := rapid.SampledFrom(texts).Draw(t, "lead")
		b.WriteString(lead)
		content.WriteString(lead)
		n := rapid.IntRange(1, 3).Draw(t, "calls")
		if parser == "deepseek" {
			b.WriteString(dsCallsBegin + sp())
		}
		for i := range n {
			name := rapid.SampledFrom([]string{"get_weather", "f", "search_web"}).Draw(t, "name")
			var a strings.Builder
			a.WriteString("{" + sp())
			args := map[string]any{}
			for j, k := range rapid.SliceOfNDistinct(rapid.SampledFrom(keys), 0, 3, rapid.ID[string]).Draw(t, "keys") {
				if j > 0 {
					a.WriteString("," + sp())
				}
				v := rapid.SampledFrom(values).Draw(t, "value")
				fmt.Fprintf(&a, "%q:%s%s", k, sp(), v)
				var x any
				_ = json.Unmarshal([]byte(v), &x)
				args[k] = x
			}
			a.WriteString(sp() + "}")
			want = append(want, call{name, args})
			wantArgs = append(wantArgs, a.String())
			if parser == "qwen" {
				fmt.Fprintf(&b, "<tool_call>%s{%s\"name\":%s%q,%s\"arguments\":%s%s%s}%s</tool_call>", sp(), sp(), sp(), name, sp(), sp(), a.String(), sp(), sp())
				if i < n-1 {
					b.WriteString(sp())
				}
			} else {
				fmt.Fprintf(&b, "%sfunction%s%s\n```json\n%s%s%s\n```%s%s", dsCallBegin, dsSep, name, sp(), a.String(), sp(), dsCallEnd, sp())
			}
		}
		if parser == "deepseek" {
			b.WriteString(dsCallsEnd)
		}
		if rapid.Bool().Draw(t, "tail") {
			tail := rapid.SampledFrom(texts).Draw(t, "tail text")
			b.WriteString(tail)
			if strings.TrimSpace(tail) != "" {
				content.WriteString(tail)
			}
		}
		input := b.String()

		gotContent, calls, err := toolcall.Parse(parser, counter(), input)
		if err != nil {
			t.Fatal(err)
		}
		if gotContent != content.String() {
			t.Fatalf("input %q: content %q, want %q", input, gotContent, content.String())
		}
		if len(calls) != len(want) {
			t.Fatalf("input %q: %d calls, want %d", input, len(calls), len(want))
		}
		for i, c := range calls {
			if c.Name != want[i].name || c.Arguments != wantArgs[i] {
				t.Fatalf("input %q: call %d = %s %q, want %s %q", input, i, c.Name, c.Arguments, want[i].name, wantArgs[i])
			}
		}

		var pieces []string
		for rest := input; rest != ""; {
			k := rapid.IntRange(1, len(rest)).Draw(t, "cut")
			pieces = append(pieces, rest[:k])
			rest = rest[k:]
		}
		sc, scalls := stream(t, parser, pieces)
		if sc != gotContent || !cmp.Equal(scalls, calls) {
			t.Fatalf("input %q in %q: streamed %q %+v, whole %q %+v", input, pieces, sc, scalls, gotContent, calls)
		}
	})
}

const (
	dsCallsBegin = "<｜tool▁calls▁begin｜>"
	dsCallsEnd   = "<｜tool▁calls▁end｜>"
	dsCallBegin  = "<｜tool▁call▁begin｜>"
	dsCallEnd    = "<｜tool▁call▁end｜>"
	dsSep        = "<｜tool▁sep｜>"
)
