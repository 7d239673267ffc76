package reasoning_test

import (
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicegw/sluice/internal/reasoning"
)

var (
	on  = true
	off = false
)

// Cases from the upstream parsers' own tests, at smg-project/smg commit
// 3ea4297fd50579cba718d23f025d841b7ef8f125: crates/reasoning_parser/src/parsers/base.rs (BaseReasoningParser
// with always_in_reasoning=false is qwen3 with enable_thinking false here, with true it is deepseek_r1),
// qwen3.rs and deepseek_r1.rs. Each step is one delta pushed; want is what that delta returns.
func TestUpstreamCases(t *testing.T) {
	type step struct{ in, reasoning, content string }
	for _, tt := range []struct {
		name   string
		parser string
		think  *bool
		steps  []step
		whole  reasoning.Result // of the steps' concatenation
	}{
		{"base.rs test_detect_and_parse_reasoning", reasoning.Qwen3, &off,
			[]step{{"<think>with reasoning</think> and more text.", "with reasoning", " and more text."}},
			reasoning.Result{Reasoning: "with reasoning", Content: " and more text."}},
		{"base.rs test_detect_and_parse_no_reasoning", reasoning.Qwen3, &off,
			[]step{{"This is a test without reasoning.", "", "This is a test without reasoning."}},
			reasoning.Result{Content: "This is a test without reasoning."}},
		{"base.rs test_detect_and_parse_truncated_reasoning", reasoning.Qwen3, &off,
			[]step{{"<think>with truncated reasoning", "with truncated reasoning", ""}},
			reasoning.Result{Reasoning: "with truncated reasoning"}},
		{"base.rs test_whitespace_preserved_after_think_tags", reasoning.Qwen3, &off,
			[]step{{"<think>foo</think> hello world", "foo", " hello world"}},
			reasoning.Result{Reasoning: "foo", Content: " hello world"}},
		{"base.rs test_parse_streaming_partial_token", reasoning.Qwen3, &off,
			[]step{{"<thi", "", ""}},
			reasoning.Result{Content: "<thi"}},
		{"base.rs test_parse_streaming_no_end_token", reasoning.DeepSeekR1, nil,
			[]step{{"<think>with reasoning", "with reasoning", ""}},
			reasoning.Result{Reasoning: "with reasoning"}},
		{"base.rs test_always_in_reasoning_true", reasoning.DeepSeekR1, nil,
			[]step{{"no think tags here", "no think tags here", ""}},
			reasoning.Result{Reasoning: "no think tags here"}},
		{"base.rs test_buffer_loss_bug_fix", reasoning.Qwen3, &off,
			[]step{{"</", "", "</"}, {"answer", "", "answer"}},
			reasoning.Result{Content: "</answer"}},
		{"base.rs test_streaming_with_stream_reasoning_enabled", reasoning.Qwen3, &off,
			[]step{{"<think>reasoning ", "reasoning ", ""}, {"content ", "content ", ""}, {"more</think> normal", "more", " normal"}},
			reasoning.Result{Reasoning: "reasoning content more", Content: " normal"}},
		{"qwen3.rs test_qwen3_initial_state", reasoning.Qwen3, &off,
			[]step{{"This is normal content", "", "This is normal content"}},
			reasoning.Result{Content: "This is normal content"}},
		{"qwen3.rs test_qwen3_with_tokens", reasoning.Qwen3, nil,
			[]step{{"<think>reasoning</think>answer", "reasoning", "answer"}},
			reasoning.Result{Reasoning: "reasoning", Content: "answer"}},
		{"qwen3.rs test_qwen3_streaming", reasoning.Qwen3, &off,
			[]step{{"normal text ", "", "normal text "}, {"<think>reasoning", "reasoning", ""}},
			reasoning.Result{Reasoning: "reasoning", Content: "normal text "}},
		// qwen3.rs test_qwen_thinking_initial_state: smg's qwen3_thinking is qwen3 thinking here.
		{"qwen3.rs test_qwen_thinking_initial_state", reasoning.Qwen3, &on,
			[]step{{"This is reasoning content", "This is reasoning content", ""}},
			reasoning.Result{Reasoning: "This is reasoning content"}},
		{"deepseek_r1.rs test_deepseek_r1_initial_state", reasoning.DeepSeekR1, nil,
			[]step{{"This is reasoning content", "This is reasoning content", ""}},
			reasoning.Result{Reasoning: "This is reasoning content"}},
		{"deepseek_r1.rs test_deepseek_r1_with_end_token", reasoning.DeepSeekR1, nil,
			[]step{{"reasoning content</think>normal content", "reasoning content", "normal content"}},
			reasoning.Result{Reasoning: "reasoning content", Content: "normal content"}},
		{"deepseek_r1.rs test_deepseek_r1_streaming", reasoning.DeepSeekR1, nil,
			[]step{{"thinking about", "thinking about", ""}, {" the problem</think>answer", " the problem", "answer"}},
			reasoning.Result{Reasoning: "thinking about the problem", Content: "answer"}},
		// The template wrote <think> into the prompt (Qwen3-2507, enable_thinking default): no start tag.
		{"qwen3 thinking without a start tag", reasoning.Qwen3, nil,
			[]step{{"let me see\n</th", "let me see\n", ""}, {"ink>\n\n42", "", "\n\n42"}},
			reasoning.Result{Reasoning: "let me see\n", Content: "\n\n42"}},
		// With enable_thinking false the template closed an empty block itself: all is the answer.
		{"qwen3 not thinking", reasoning.Qwen3, &off,
			[]step{{"42</think>", "", "42</think>"}},
			reasoning.Result{Content: "42</think>"}},
		// After </think> nothing is a tag, and a second <think> inside the reasoning is text.
		{"tags after the first pair are text", reasoning.DeepSeekR1, nil,
			[]step{{"<think>a<think>b</think>c<think>d</think>", "a<think>b", "c<think>d</think>"}},
			reasoning.Result{Reasoning: "a<think>b", Content: "c<think>d</think>"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := reasoning.New(tt.parser, reasoning.Options{EnableThinking: tt.think})
			if err != nil {
				t.Fatal(err)
			}
			var all strings.Builder
			for i, s := range tt.steps {
				got := p.Push(s.in)
				if got.Reasoning != s.reasoning || got.Content != s.content {
					t.Errorf("step %d Push(%q) = %+v, want reasoning %q content %q", i, s.in, got, s.reasoning, s.content)
				}
				all.WriteString(s.in)
			}
			whole, err := reasoning.Parse(tt.parser, reasoning.Options{EnableThinking: tt.think}, all.String())
			if err != nil {
				t.Fatal(err)
			}
			if whole != tt.whole {
				t.Errorf("Parse(%q) = %+v, want %+v", all.String(), whole, tt.whole)
			}
		})
	}
}

func TestUnknownParser(t *testing.T) {
	_, err := reasoning.New("qwen", reasoning.Options{})
	if err == nil || !strings.Contains(err.Error(), "deepseek_r1, qwen3") {
		t.Fatalf("New(qwen) error = %v, want one listing the known parsers", err)
	}
}

// Streamed deltas concatenated equal the whole parse however the text is cut, and nothing is held back
// but a possible tag: after each delta the text not yet returned is a proper prefix of a tag.
func TestStreamEqualsWhole(t *testing.T) {
	pieces := []string{"<think>", "</think>", "<", "</", "<th", "</thin", "think>", ">", "a", " ", "\n", "é", "思"}
	rapid.Check(t, func(t *rapid.T) {
		name := rapid.SampledFrom(reasoning.Names()).Draw(t, "parser")
		var o reasoning.Options
		if rapid.Bool().Draw(t, "thinkingOff") {
			o.EnableThinking = &off
		}
		parts := rapid.SliceOf(rapid.SampledFrom(pieces)).Draw(t, "parts")
		text := strings.Join(parts, "")
		want, err := reasoning.Parse(name, o, text)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := reasoning.New(name, o)
		var got reasoning.Result
		rest := text
		for rest != "" {
			n := rapid.IntRange(1, len(rest)).Draw(t, "cut")
			r := p.Push(rest[:n])
			rest = rest[n:]
			got.Reasoning += r.Reasoning
			got.Content += r.Content
			if held := p.Pending(); !strings.HasPrefix(reasoning.ThinkStart, held) && !strings.HasPrefix(reasoning.ThinkEnd, held) || len(held) >= len(reasoning.ThinkEnd) {
				t.Fatalf("after %q: %q held back, not a partial tag", text[:len(text)-len(rest)], held)
			}
		}
		r := p.Flush()
		got.Reasoning += r.Reasoning
		got.Content += r.Content
		if got != want {
			t.Fatalf("text %q: streamed %+v, whole %+v", text, got, want)
		}
	})
}
