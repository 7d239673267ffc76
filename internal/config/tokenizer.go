package config

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
)

// TokenizerConfig names the models the gateway tokenizes itself (internal/tokenizer): with one, the
// gateway answers /tokenize and /v1/tokenize for that model instead of forwarding them.
type TokenizerConfig struct {
	// Paths maps a model name to its Hugging Face model directory (tokenizer.json,
	// tokenizer_config.json) (--tokenizer-path MODEL=DIR, repeatable). The key "" is the directory
	// given without a model (SMG's --tokenizer-path DIR): the tokenizer of every model that has no
	// directory of its own.
	Paths map[string]string
	// ModelPath is SMG's --model-path (alias --model) as given. A local directory is the tokenizer
	// source of every model without one of its own, as a bare --tokenizer-path is (which wins when both
	// are given); anything else (a hub id) is accepted and not used, since sluice downloads nothing:
	// engine-gRPC workers are then asked for their tokenizer (GetTokenizer).
	ModelPath string
}

func (s *flagSet) registerTokenizer() {
	s.section("Tokenizers")
	s.add(tokenizerPathValue{&s.cfg.Tokenizer.Paths}, "tokenizer-path", "[MODEL=]DIR",
		"Hugging Face model directory (tokenizer.json, tokenizer_config.json with its chat_template) of a model, "+
			"loaded at startup: the gateway then answers /tokenize and /v1/tokenize for it in vLLM's shape. "+
			"Repeatable; DIR alone applies to every model without its own.")
	s.str(&s.cfg.Tokenizer.ModelPath, "model-path", "PATH", "",
		"SMG's model path: a local directory (tokenizer.json, tokenizer_config.json) is the tokenizer of every model "+
			"without its own, as a bare --tokenizer-path DIR is (which wins over it). A hub id is accepted and not used "+
			"(sluice downloads nothing): engine-gRPC workers are then asked for their tokenizer.")
	s.alias("model", "model-path", "Alias of --model-path: a local directory is a tokenizer source, as --tokenizer-path DIR.")
}

// useModelPath makes a local --model-path directory the default tokenizer directory, unless a bare
// --tokenizer-path gave one; a path that is no local directory is recorded as an inert SMG flag.
func (c *Config) useModelPath() {
	t := &c.Tokenizer
	if t.ModelPath == "" {
		return
	}
	if st, err := os.Stat(t.ModelPath); err != nil || !st.IsDir() {
		c.InertSMGFlags = append(c.InertSMGFlags, "model-path")
		return
	}
	if _, given := t.Paths[""]; given {
		return
	}
	if t.Paths == nil {
		t.Paths = map[string]string{}
	}
	t.Paths[""] = t.ModelPath
}

// tokenizerPathValue is a repeatable MODEL=DIR (or DIR) flag.
type tokenizerPathValue struct{ p *map[string]string }

func (v tokenizerPathValue) String() string {
	if v.p == nil {
		return ""
	}
	return perModelString(*v.p)
}

func (v tokenizerPathValue) Set(s string) error {
	s = strings.TrimSpace(s)
	model, dir, ok := strings.Cut(s, "=")
	if !ok {
		model, dir = "", s
	}
	model, dir = strings.TrimSpace(model), strings.TrimSpace(dir)
	switch {
	case dir == "":
		return fmt.Errorf("want MODEL=DIR or DIR, got %q", s)
	case ok && model == "":
		return fmt.Errorf("empty model name in %q", s)
	}
	if *v.p == nil {
		*v.p = map[string]string{}
	}
	if prev, dup := (*v.p)[model]; dup {
		if model == "" {
			return fmt.Errorf("a directory without a model is given twice (%s and %s)", prev, dir)
		}
		return fmt.Errorf("model %q is given twice (%s and %s)", model, prev, dir)
	}
	(*v.p)[model] = dir
	return nil
}

// perModelString shows a per-model flag's value as it is given: MODEL=VALUE pairs and the bare VALUE
// for every other model, sorted, comma-separated.
func perModelString(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k == "" {
			parts = append(parts, m[k])
		} else {
			parts = append(parts, k+"="+m[k])
		}
	}
	return strings.Join(parts, ",")
}
