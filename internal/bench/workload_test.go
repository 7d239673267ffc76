package bench

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestText(t *testing.T) {
	tests := []struct {
		name   string
		tokens int
		want   int // length in bytes
	}{
		{"zero", 0, 0},
		{"one", 1, 3},
		{"many", 100, 399},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Text(42, tt.tokens)
			if len(got) != tt.want {
				t.Fatalf("len = %d, want %d", len(got), tt.want)
			}
			words := strings.Fields(got)
			if len(words) != tt.tokens {
				t.Fatalf("%d words, want %d", len(words), tt.tokens)
			}
			for _, w := range words {
				if len(w) != 3 || strings.Trim(w, "abcdefghijklmnopqrstuvwxyz") != "" {
					t.Fatalf("word %q is not three lowercase letters", w)
				}
			}
			if again := Text(42, tt.tokens); again != got {
				t.Fatal("not deterministic")
			}
		})
	}
	if Text(1, 50) == Text(2, 50) {
		t.Fatal("different seeds gave the same text")
	}
}

func mustGen(t *testing.T, cfg WorkloadConfig, seed int64) *Generator {
	t.Helper()
	g, err := NewGenerator(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestGeneratorDeterministic(t *testing.T) {
	cfgs := []WorkloadConfig{
		{Kind: WorkloadFixed, PromptTokens: 16, MaxTokens: 4},
		{Kind: WorkloadDist, PromptTokens: 1, MaxTokens: 1, Dist: DistLognormal, PromptTokensMin: 4, PromptTokensMax: 64, MaxTokensMin: 1, MaxTokensMax: 9},
		{Kind: WorkloadPrefix, PromptTokens: 8, MaxTokens: 4, Prefixes: 3, PrefixTokens: 32, Turns: 3, Conversations: 5},
	}
	for _, cfg := range cfgs {
		t.Run(cfg.Kind, func(t *testing.T) {
			a, b, c := mustGen(t, cfg, 7), mustGen(t, cfg, 7), mustGen(t, cfg, 8)
			same := 0
			for i := int64(0); i < 50; i++ {
				pa, pb := a.Prompt(i), b.Prompt(i)
				if diff := cmp.Diff(pa, pb); diff != "" {
					t.Fatalf("request %d differs between equal seeds (-a +b):\n%s", i, diff)
				}
				if cmp.Equal(pa, c.Prompt(i)) {
					same++
				}
			}
			if same == 50 {
				t.Fatal("another seed gave the same prompts")
			}
		})
	}
}

func TestGeneratorInvalid(t *testing.T) {
	tests := []struct {
		name string
		cfg  WorkloadConfig
	}{
		{"unknown kind", WorkloadConfig{Kind: "zipf", PromptTokens: 1, MaxTokens: 1}},
		{"zero prompt", WorkloadConfig{Kind: WorkloadFixed, PromptTokens: 0, MaxTokens: 1}},
		{"bad dist", WorkloadConfig{Kind: WorkloadDist, PromptTokens: 1, MaxTokens: 1, Dist: "pareto", PromptTokensMin: 1, PromptTokensMax: 2, MaxTokensMin: 1, MaxTokensMax: 2}},
		{"inverted bounds", WorkloadConfig{Kind: WorkloadDist, PromptTokens: 1, MaxTokens: 1, Dist: DistUniform, PromptTokensMin: 9, PromptTokensMax: 2, MaxTokensMin: 1, MaxTokensMax: 2}},
		{"prefix without turns", WorkloadConfig{Kind: WorkloadPrefix, PromptTokens: 1, MaxTokens: 1, Prefixes: 1, PrefixTokens: 1, Conversations: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewGenerator(tt.cfg, 1); err == nil {
				t.Fatal("want an error")
			}
		})
	}
}

func TestDistLengths(t *testing.T) {
	tests := []struct {
		name       string
		dist       string
		lo, hi     int
		wantMedian float64 // approximate
	}{
		{"uniform", DistUniform, 10, 110, 60},
		{"lognormal", DistLognormal, 16, 1024, 128}, // geometric mean of the bounds
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := mustGen(t, WorkloadConfig{Kind: WorkloadDist, PromptTokens: 1, MaxTokens: 1, Dist: tt.dist,
				PromptTokensMin: tt.lo, PromptTokensMax: tt.hi, MaxTokensMin: 1, MaxTokensMax: 1}, 3)
			var lens []float64
			for i := int64(0); i < 4000; i++ {
				p := g.Prompt(i)
				n := len(strings.Fields(p.Messages[0].Content))
				if n < tt.lo || n > tt.hi {
					t.Fatalf("prompt of %d tokens outside [%d, %d]", n, tt.lo, tt.hi)
				}
				if p.MaxTokens != 1 {
					t.Fatalf("max tokens %d, want 1", p.MaxTokens)
				}
				lens = append(lens, float64(n))
			}
			slices.Sort(lens)
			if med := Percentile(lens, 0.5); math.Abs(med-tt.wantMedian)/tt.wantMedian > 0.1 {
				t.Fatalf("median %v, want about %v", med, tt.wantMedian)
			}
		})
	}
}

func TestPrefixWorkload(t *testing.T) {
	cfg := WorkloadConfig{Kind: WorkloadPrefix, PromptTokens: 8, MaxTokens: 4, Prefixes: 3, PrefixTokens: 20, Turns: 4, Conversations: 6}
	g := mustGen(t, cfg, 5)
	type turnMsgs struct {
		turn int
		msgs []Message
	}
	convs := map[int64][]turnMsgs{}
	systems := map[string]bool{}
	systemOf := map[int64]string{}
	n := int64(cfg.Conversations * cfg.Turns * 3)
	for i := int64(0); i < n; i++ {
		p := g.Prompt(i)
		conv, turn, prefix := g.ConversationOf(i)
		if p.Messages[0].Role != "system" || len(strings.Fields(p.Messages[0].Content)) != cfg.PrefixTokens {
			t.Fatalf("request %d: first message %q is not a %d-token system prompt", i, p.Messages[0].Role, cfg.PrefixTokens)
		}
		if want := 2 + 2*turn; len(p.Messages) != want {
			t.Fatalf("request %d (turn %d): %d messages, want %d", i, turn, len(p.Messages), want)
		}
		if prefix < 0 || prefix >= cfg.Prefixes {
			t.Fatalf("prefix index %d out of range", prefix)
		}
		sys := p.Messages[0].Content
		systems[sys] = true
		if s, ok := systemOf[conv]; ok && s != sys {
			t.Fatalf("conversation %d changed its system prompt", conv)
		}
		systemOf[conv] = sys
		convs[conv] = append(convs[conv], turnMsgs{turn, p.Messages})
	}
	if len(systems) != cfg.Prefixes {
		t.Fatalf("%d distinct system prompts, want %d", len(systems), cfg.Prefixes)
	}
	if len(convs) != int(n)/cfg.Turns {
		t.Fatalf("%d conversations, want %d", len(convs), int(n)/cfg.Turns)
	}
	for conv, turns := range convs {
		if len(turns) != cfg.Turns {
			t.Fatalf("conversation %d has %d turns, want %d", conv, len(turns), cfg.Turns)
		}
		for k, tm := range turns {
			if tm.turn != k {
				t.Fatalf("conversation %d: turn %d came in position %d", conv, tm.turn, k)
			}
			if k == 0 {
				continue
			}
			prev := turns[k-1].msgs
			// The previous turn's prompt (all its messages) starts this turn's prompt.
			if diff := cmp.Diff(prev, tm.msgs[:len(prev)]); diff != "" {
				t.Fatalf("conversation %d turn %d does not extend turn %d:\n%s", conv, k, k-1, diff)
			}
		}
	}
}

func TestAppendBody(t *testing.T) {
	p := Prompt{Messages: []Message{{"system", "abc def"}, {"user", `quote " and \ back`}}, MaxTokens: 7}
	tests := []struct {
		name     string
		endpoint string
		stream   bool
		want     map[string]any
	}{
		{"chat", EndpointChat, false, map[string]any{
			"model": "m\"x", "max_tokens": 7.0, "stream": false,
			"messages": []any{map[string]any{"role": "system", "content": "abc def"}, map[string]any{"role": "user", "content": `quote " and \ back`}},
		}},
		{"completions stream", EndpointCompletions, true, map[string]any{
			"model": "m\"x", "max_tokens": 7.0, "stream": true, "stream_options": map[string]any{"include_usage": true},
			"prompt": "abc def\nquote \" and \\ back",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := AppendBody(nil, tt.endpoint, "m\"x", p, tt.stream, false)
			var got map[string]any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("invalid JSON %s: %v", b, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("body (-want +got):\n%s", diff)
			}
		})
	}
}
