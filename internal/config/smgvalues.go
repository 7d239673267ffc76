package config

import (
	"errors"
	"fmt"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
)

// The flag.Value types of the Rust gateway's (SMG's) flags: refused and accepted-inert flags, its
// --backend, and the list forms its settings take.

// refusedValue is a refused SMG flag in the flag set (so that the config file reports it too).
type refusedValue struct {
	name string
	r    smgRefusal
}

func (v refusedValue) String() string   { return "" }
func (v refusedValue) IsBoolFlag() bool { return v.r.kind == argBool }
func (v refusedValue) Set(string) error {
	return fmt.Errorf("--%s is not supported: %s", v.name, v.r.reason)
}

// inertValue is an accepted SMG flag that needs nothing from sluice: its value is checked and its
// name recorded for the startup log.
type inertValue struct {
	name  string
	kind  argKind
	check func(string) error
	into  *[]string
}

func (v inertValue) String() string   { return "" }
func (v inertValue) IsBoolFlag() bool { return v.kind == argBool }
func (v inertValue) Set(s string) error {
	if v.kind == argBool {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return errors.New("want true or false")
		}
		if !b {
			return nil
		}
	} else if v.check != nil {
		if err := v.check(s); err != nil {
			return err
		}
	}
	if v.into != nil {
		*v.into = append(*v.into, v.name)
	}
	return nil
}

// backendValue is SMG's --backend (alias --runtime there): the engines sluice speaks set --runtime.
type backendValue struct{ p *string }

func (v backendValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}

func (v backendValue) Set(s string) error {
	switch s = strings.ToLower(strings.TrimSpace(s)); s {
	case ProtocolSGLang, ProtocolVLLM, ProtocolTRTLLM: // trtllm: TensorRT-LLM's gRPC, grpc:// workers only
		*v.p = s
		return nil
	case "tokenspeed":
		return fmt.Errorf("%s engines are not supported: sluice speaks SGLang's, vLLM's and TensorRT-LLM's APIs", s)
	case "openai", "anthropic", "gemini":
		return fmt.Errorf("sluice does not route to cloud providers (%s); it fronts self-hosted SGLang and vLLM engines", s)
	}
	return fmt.Errorf("want sglang, vllm or trtllm, got %q", s)
}

// floatListValue is a repeatable flag of numbers.
type floatListValue struct{ p *[]float64 }

func (v floatListValue) String() string {
	if v.p == nil {
		return ""
	}
	parts := make([]string, len(*v.p))
	for i, f := range *v.p {
		parts[i] = strconv.FormatFloat(f, 'g', -1, 64)
	}
	return strings.Join(parts, ",")
}

func (v floatListValue) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		f, err := strconv.ParseFloat(strings.TrimSpace(part), 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", part)
		}
		*v.p = append(*v.p, f)
	}
	return nil
}

// headerListValue is a repeatable list of header names; the first value given replaces the default.
type headerListValue struct {
	p   *[]string
	set *bool // a value was given: the default is gone
}

// newHeaderList binds a header list to p, holding defaults until a value is given.
func newHeaderList(p *[]string, defaults ...string) headerListValue {
	*p = defaults
	return headerListValue{p: p, set: new(bool)}
}

func (v headerListValue) String() string {
	if v.p == nil {
		return ""
	}
	return strings.Join(*v.p, ",")
}

func (v headerListValue) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		h := strings.ToLower(strings.TrimSpace(part))
		if h == "" || !validHeaderName(h) {
			return fmt.Errorf("%q is not a header name", part)
		}
		if !*v.set {
			*v.p = nil
			*v.set = true
		}
		if !slices.Contains(*v.p, h) {
			*v.p = append(*v.p, h)
		}
	}
	return nil
}

// validHeaderName reports an HTTP field name (RFC 9110 token).
func validHeaderName(h string) bool {
	return strings.IndexFunc(h, func(r rune) bool {
		return r > 0x7e || r <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r)
	}) < 0 && textproto.CanonicalMIMEHeaderKey(h) != ""
}
