package config

import (
	"fmt"
	"strings"

	"github.com/sluicegw/sluice/internal/reasoning"
	"github.com/sluicegw/sluice/internal/toolcall"
)

// ParsersConfig names each model's reasoning and tool-call parsers (internal/reasoning,
// internal/toolcall). They matter only when the gateway detokenizes an engine's output itself
// (engines in gRPC mode); engines serving HTTP parse their own, so for them the names are only
// checked, kept and shown.
type ParsersConfig struct {
	// Reasoning maps a model to its reasoning parser (--reasoning-parser [MODEL=]NAME, repeatable);
	// the key "" is the parser of every model without its own (SMG's --reasoning-parser NAME).
	Reasoning map[string]string
	// ToolCall maps a model to its tool-call parser (--tool-call-parser [MODEL=]NAME), as Reasoning.
	ToolCall map[string]string
}

// ReasoningParser is the model's reasoning parser, "" for none.
func (c ParsersConfig) ReasoningParser(model string) string { return forModel(c.Reasoning, model) }

// ToolCallParser is the model's tool-call parser, "" for none.
func (c ParsersConfig) ToolCallParser(model string) string { return forModel(c.ToolCall, model) }

func forModel(m map[string]string, model string) string {
	if v, ok := m[model]; ok {
		return v
	}
	return m[""]
}

func (s *flagSet) registerParsers() {
	s.section("Parsers (engines in gRPC mode)")
	s.add(&parserValue{p: &s.cfg.Parsers.Reasoning, kind: "reasoning parser", names: reasoning.Names, known: reasoning.Known},
		"reasoning-parser", "[MODEL=]NAME",
		"Reasoning parser of a model's answers ("+strings.Join(reasoning.Names(), ", ")+"), for engines the gateway "+
			"detokenizes itself; HTTP engines parse their own. Repeatable; NAME alone applies to every model without its own.")
	s.add(&parserValue{p: &s.cfg.Parsers.ToolCall, kind: "tool-call parser", names: toolcall.Names, known: toolcall.Known},
		"tool-call-parser", "[MODEL=]NAME",
		"Tool-call parser of a model's answers ("+strings.Join(toolcall.Names(), ", ")+"), for engines the gateway "+
			"detokenizes itself; HTTP engines parse their own. Repeatable; NAME alone applies to every model without its own.")
}

// parserValue is a repeatable [MODEL=]NAME flag whose NAME must be one of names.
type parserValue struct {
	p     *map[string]string
	kind  string
	names func() []string
	known func(string) bool
}

func (v *parserValue) String() string {
	if v.p == nil {
		return ""
	}
	return perModelString(*v.p)
}

func (v *parserValue) Set(s string) error {
	s = strings.TrimSpace(s)
	model, name, ok := strings.Cut(s, "=")
	if !ok {
		model, name = "", s
	}
	model, name = strings.TrimSpace(model), strings.TrimSpace(name)
	switch {
	case name == "":
		return fmt.Errorf("want MODEL=NAME or NAME, got %q", s)
	case ok && model == "":
		return fmt.Errorf("empty model name in %q", s)
	case !v.known(name):
		return fmt.Errorf("unknown %s %q (valid: %s)", v.kind, name, strings.Join(v.names(), ", "))
	}
	if *v.p == nil {
		*v.p = map[string]string{}
	}
	if prev, dup := (*v.p)[model]; dup {
		if model == "" {
			return fmt.Errorf("a %s without a model is given twice (%s and %s)", v.kind, prev, name)
		}
		return fmt.Errorf("model %q is given twice (%s and %s)", model, prev, name)
	}
	(*v.p)[model] = name
	return nil
}
