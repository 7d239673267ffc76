package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// applyFile reads the YAML config file and sets, through the flag set, every
// key whose flag is not in shadow (already given on the command line or by
// the environment). Keys are flag names; unknown keys are errors.
func (s *flagSet) applyFile(path string, shadow map[string]bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	fail := func(line int, format string, a ...any) error {
		return fmt.Errorf("config file %s:%d: %s", path, line, fmt.Sprintf(format, a...))
	}

	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file sets nothing
		}
		return fmt.Errorf("config file %s: %w", path, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return fmt.Errorf("config file %s: want a single YAML document", path)
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil // only comments
	}
	if root.Kind != yaml.MappingNode {
		return fail(root.Line, "top level must be a mapping of flag names to values")
	}

	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		key := k.Value
		switch {
		case seen[key]:
			return fail(k.Line, "key %q given twice", key)
		case key == "config":
			return fail(k.Line, "key \"config\" is not allowed inside a config file")
		case s.fs.Lookup(key) == nil:
			if hint := suggestFlag(s.fs, key); hint != "" {
				return fail(k.Line, "unknown key %q: did you mean %q (--%s)?", key, hint, hint)
			}
			return fail(k.Line, "unknown key %q (keys are flag names without dashes; see sluice serve --help)", key)
		}
		seen[key] = true
		if shadow[key] {
			continue
		}
		values, err := fileValues(key, v)
		if err != nil {
			return fail(v.Line, "key %q: %v", key, err)
		}
		for _, val := range values {
			if err := s.fs.Set(key, val); err != nil {
				return fail(v.Line, "key %q: invalid value %q: %v", key, val, err)
			}
		}
	}
	return nil
}

// fileValues turns one YAML value into the flag values to Set, in order.
func fileValues(key string, v *yaml.Node) ([]string, error) {
	if v.Kind == yaml.AliasNode {
		v = v.Alias
	}
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Tag == "!!null" {
			return nil, errors.New("no value")
		}
		return []string{v.Value}, nil
	case yaml.SequenceNode:
		if !isRepeatable(key) {
			return nil, errors.New("takes a single value, not a list")
		}
		out := make([]string, 0, len(v.Content))
		for _, item := range v.Content {
			val, err := fileListItem(key, item)
			if err != nil {
				return nil, err
			}
			out = append(out, val)
		}
		return out, nil
	case yaml.MappingNode:
		if isSelectorFlag(key) {
			return selectorMapping(v)
		}
		if !isRepeatable(key) {
			return nil, errors.New("takes a single value, not a mapping")
		}
		val, err := fileListItem(key, v)
		if err != nil {
			return nil, err
		}
		return []string{val}, nil
	default:
		return nil, errors.New("unsupported YAML value")
	}
}

// fileListItem turns one element of a worker list into a flag value: a
// string as on the command line, or a mapping {url: ..., bootstrap-port: ...}
// (bootstrap-port for prefill only; null or "none" means no port).
func fileListItem(key string, item *yaml.Node) (string, error) {
	if item.Kind == yaml.AliasNode {
		item = item.Alias
	}
	switch item.Kind {
	case yaml.ScalarNode:
		if item.Tag == "!!null" {
			return "", errors.New("empty list item")
		}
		return item.Value, nil
	case yaml.MappingNode:
	default:
		return "", fmt.Errorf("line %d: list items must be strings or mappings", item.Line)
	}
	var url, port string
	for i := 0; i+1 < len(item.Content); i += 2 {
		k, v := item.Content[i], item.Content[i+1]
		if v.Kind != yaml.ScalarNode {
			return "", fmt.Errorf("line %d: %q must be a single value", v.Line, k.Value)
		}
		switch {
		case k.Value == "url":
			url = v.Value
		case k.Value == "bootstrap-port" && key == "prefill":
			if v.Tag != "!!null" {
				port = v.Value
			}
		default:
			allowed := `"url"`
			if key == "prefill" {
				allowed = `"url" and "bootstrap-port"`
			}
			return "", fmt.Errorf("line %d: unknown key %q in a %s entry (allowed: %s)", k.Line, k.Value, key, allowed)
		}
	}
	if url == "" {
		return "", fmt.Errorf("line %d: %s entry without \"url\"", item.Line, key)
	}
	if strings.ContainsFunc(url, func(r rune) bool { return r == ' ' || r == '\t' }) {
		return "", fmt.Errorf("line %d: url %q contains spaces", item.Line, url)
	}
	if port != "" {
		return url + " " + port, nil
	}
	return url, nil
}

// selectorMapping turns a YAML mapping of labels ({app: sglang, role: prefill})
// into selector flag values.
func selectorMapping(v *yaml.Node) ([]string, error) {
	out := make([]string, 0, len(v.Content)/2)
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, val := v.Content[i], v.Content[i+1]
		if val.Kind != yaml.ScalarNode || val.Tag == "!!null" {
			return nil, fmt.Errorf("line %d: label %q needs a single value", val.Line, k.Value)
		}
		out = append(out, k.Value+"="+val.Value)
	}
	return out, nil
}
