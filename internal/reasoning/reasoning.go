// Package reasoning separates a model's reasoning ("reasoning_content") from its answer ("content") in
// generated text, for the models that wrap their reasoning in <think>...</think>. The gateway needs it
// when it detokenizes engine output itself (engines in gRPC mode); engines serving HTTP parse their own.
//
// The parsers carry the names of the Rust gateway's registry (smg-project/smg,
// crates/reasoning_parser/src/factory.rs), which are also SGLang's and vLLM's --reasoning-parser names
// for the same models:
//
//   - qwen3: Qwen3. Its chat template decides whether the model thinks (enable_thinking, default true);
//     when it does, the answer starts inside the reasoning, with or without a <think> of its own (the
//     Qwen3-2507 templates write <think> into the prompt). SGLang's Qwen3Detector gets the same switch as
//     force_reasoning (python/sglang/srt/parser/reasoning_parser.py); smg's qwen3 always starts outside
//     and so is this parser with enable_thinking false.
//   - deepseek_r1: DeepSeek R1. The answer starts inside the reasoning (newer R1 templates write <think>
//     into the prompt; older R1 checkpoints emit it, and it is then dropped).
//
// Semantics shared by streaming and whole parsing: the first <think> before any </think> is a tag (it
// opens the reasoning, or is dropped when the reasoning is already open); the first </think> inside the
// reasoning closes it, and everything after it is the answer, tags included. Text is never trimmed:
// whitespace around the tags belongs to the side it is on, as in smg and vLLM (SGLang strips it).
// Streaming holds back only the longest suffix of the unseen text that could still begin a tag, so
// streamed deltas concatenated equal the whole parse for any cut of the text into deltas.
package reasoning

import (
	"fmt"
	"slices"
	"strings"
)

// Tags of the <think> models.
const (
	ThinkStart = "<think>"
	ThinkEnd   = "</think>"
)

// Parser names, as smg's --reasoning-parser spells them.
const (
	Qwen3      = "qwen3"
	DeepSeekR1 = "deepseek_r1"
)

// Names lists the parsers this package has, sorted.
func Names() []string { return []string{DeepSeekR1, Qwen3} }

// Known reports whether name is a parser of this package.
func Known(name string) bool { return slices.Contains(Names(), name) }

// Options are the request's switches a parser honours.
type Options struct {
	// EnableThinking is the chat template's enable_thinking (chat_template_kwargs); nil is the
	// template's default, true. Only qwen3 reads it: deepseek_r1 always thinks.
	EnableThinking *bool
}

// Result is the text split in two. Streaming returns one per delta: the new text of each side.
type Result struct {
	Reasoning string
	Content   string
}

// Parser splits one generation; it is not safe for concurrent use.
type Parser struct {
	inReasoning bool
	// tagsDone: a </think> closed the reasoning, so nothing is a tag any more.
	tagsDone bool
	// startSeen: the one <think> that is a tag was consumed.
	startSeen bool
	pending   string
}

// New returns a parser for one generation of a model whose parser is name.
func New(name string, o Options) (*Parser, error) {
	switch name {
	case DeepSeekR1:
		return &Parser{inReasoning: true}, nil
	case Qwen3:
		return &Parser{inReasoning: o.EnableThinking == nil || *o.EnableThinking}, nil
	}
	return nil, fmt.Errorf("unknown reasoning parser %q (known: %s)", name, strings.Join(Names(), ", "))
}

// Parse splits a whole generation.
func Parse(name string, o Options, text string) (Result, error) {
	p, err := New(name, o)
	if err != nil {
		return Result{}, err
	}
	r := p.Push(text)
	f := p.Flush()
	return Result{Reasoning: r.Reasoning + f.Reasoning, Content: r.Content + f.Content}, nil
}

// InReasoning reports whether the text pushed so far ends inside the reasoning.
func (p *Parser) InReasoning() bool { return p.inReasoning }

// Push takes the next piece of generated text and returns what of each side is now certain.
func (p *Parser) Push(delta string) Result {
	var r Result
	s := p.pending + delta
	p.pending = ""
	for s != "" {
		if p.tagsDone {
			p.emit(&r, s)
			return r
		}
		i, tag := p.nextTag(s)
		if i < 0 {
			keep := partialSuffix(s, p.tags())
			p.emit(&r, s[:len(s)-keep])
			p.pending = s[len(s)-keep:]
			return r
		}
		p.emit(&r, s[:i])
		s = s[i+len(tag):]
		if tag == ThinkStart {
			p.startSeen, p.inReasoning = true, true
		} else {
			p.inReasoning, p.tagsDone = false, true
		}
	}
	return r
}

// Flush ends the generation: text held back as a possible tag is text after all.
func (p *Parser) Flush() Result {
	var r Result
	p.emit(&r, p.pending)
	p.pending = ""
	return r
}

func (p *Parser) emit(r *Result, s string) {
	if p.inReasoning {
		r.Reasoning += s
	} else {
		r.Content += s
	}
}

// tags are the tags that mean something in the current state.
func (p *Parser) tags() []string {
	var t []string
	if !p.startSeen {
		t = append(t, ThinkStart)
	}
	if p.inReasoning {
		t = append(t, ThinkEnd)
	}
	return t
}

// nextTag finds the first tag of the current state in s.
func (p *Parser) nextTag(s string) (int, string) {
	at, tag := -1, ""
	for _, t := range p.tags() {
		if i := strings.Index(s, t); i >= 0 && (at < 0 || i < at) {
			at, tag = i, t
		}
	}
	return at, tag
}

// partialSuffix is the length of the longest suffix of s that is a proper prefix of one of tags.
func partialSuffix(s string, tags []string) int {
	best := 0
	for _, t := range tags {
		for n := min(len(s), len(t)-1); n > best; n-- {
			// Most candidates fail on the last byte: check it before the rest.
			if t[n-1] == s[len(s)-1] && strings.HasSuffix(s, t[:n]) {
				best = n
				break
			}
		}
	}
	return best
}
