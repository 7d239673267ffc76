// Package chattmpl compiles the Jinja subset Hugging Face chat templates use into Go closures, once at
// load, and renders them with jinja2's semantics under HF's environment (trim_blocks, lstrip_blocks,
// raise_exception, transformers' tojson). The interpreter the tokenizer otherwise uses
// (ardanlabs/jinja) looks every name up through scope maps and builds a loop map per iteration; here
// names are slots resolved at compile time and loop.* reads two integers, which makes a chat's render
// several times cheaper. Compile refuses anything outside the subset, and Render gives up (an error)
// on values the subset leaves alone, so the caller can fall back to the interpreter for both.
package chattmpl

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
)

// Template is a compiled chat template; safe for concurrent Render calls.
type Template struct {
	body  stmt
	slots map[string]int
	size  atomic.Int64 // the last output's length, to size the next one's buffer
}

// Compile compiles src, or refuses it with an error wrapping ErrUnsupported that says what it met.
func Compile(src string) (t *Template, err error) {
	segs, err := split(src)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	c := &compiler{segs: segs, slots: map[string]int{}}
	defer func() {
		if r := recover(); r != nil {
			ce, ok := r.(compileError)
			if !ok {
				panic(r)
			}
			t, err = nil, ce.err
		}
	}()
	body, _ := c.block()
	return &Template{body: body, slots: c.slots}, nil
}

// Render runs the template with vars as its globals. An error wraps ErrRaised when the template
// called raise_exception; any other error means the template did something this package does not
// render (a value it does not print, a method on the wrong type): the interpreter should run it.
func (t *Template) Render(vars map[string]Value) (out string, err error) {
	st := &state{vars: make([]Value, len(t.slots)), b: &strings.Builder{}}
	for name, v := range vars {
		if i, ok := t.slots[name]; ok {
			st.vars[i] = v
		}
	}
	st.b.Grow(int(t.size.Load()) + 256)
	defer func() {
		if r := recover(); r != nil {
			re, ok := r.(renderError)
			if !ok {
				re = renderError{fmt.Errorf("chattmpl: %v", r)}
			}
			out, err = "", re.err
		}
	}()
	t.body(st)
	t.size.Store(int64(st.b.Len()))
	return st.b.String(), nil
}

// Raised reports whether err is the template's raise_exception.
func Raised(err error) bool { return errors.Is(err, ErrRaised) }
