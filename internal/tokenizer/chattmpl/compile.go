package chattmpl

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnsupported is Compile's refusal: the template uses something this compiler does not implement.
var ErrUnsupported = errors.New("chattmpl: unsupported template")

type (
	expr func(*state) Value
	stmt func(*state)
)

// compiler turns segments into closures. Variables are slots in one frame, resolved by name at compile
// time; a for loop restores the slots its body assigns when it ends (jinja2's loop scope).
type compiler struct {
	segs     []segment
	pos      int
	slots    map[string]int
	loops    int            // enclosing for loops, for loop.*
	assigned []map[int]bool // per enclosing loop: slots its body assigns
	toks     []token        // the current tag's tokens
	tp       int            // position in toks
	// The last sum of two or more terms parsed, and its token span, for output.
	sumTerms         []expr
	sumStart, sumEnd int
}

func refuse(format string, args ...any) {
	panic(compileError{fmt.Errorf("%w: "+format, append([]any{ErrUnsupported}, args...)...)})
}

type compileError struct{ err error }

func (c *compiler) slot(name string) int {
	i, ok := c.slots[name]
	if !ok {
		i = len(c.slots)
		c.slots[name] = i
	}
	return i
}

func (c *compiler) assign(name string) int {
	i := c.slot(name)
	for _, a := range c.assigned {
		a[i] = true
	}
	return i
}

// block compiles segments until a block tag whose first word is one of ends (or the source's end when
// ends is empty), returning the body and that tag's words.
func (c *compiler) block(ends ...string) (stmt, string) {
	var body []stmt
	for c.pos < len(c.segs) {
		s := c.segs[c.pos]
		c.pos++
		switch s.kind {
		case segComment:
		case segText:
			if s.body != "" {
				text := s.body
				body = append(body, func(st *state) { st.b.WriteString(text) })
			}
		case segVar:
			c.startTag(s.body)
			body = append(body, c.output())
		case segBlock:
			c.startTag(s.body)
			word := c.name()
			for _, e := range ends {
				if word == e {
					return seq(body), word
				}
			}
			body = append(body, c.statement(word))
		}
	}
	if len(ends) > 0 {
		refuse("missing {%% %s %%}", ends[0])
	}
	return seq(body), ""
}

func seq(body []stmt) stmt {
	switch len(body) {
	case 0:
		return func(*state) {}
	case 1:
		return body[0]
	}
	return func(st *state) {
		for _, s := range body {
			s(st)
		}
	}
}

func (c *compiler) statement(word string) stmt {
	switch word {
	case "if":
		return c.ifStmt()
	case "for":
		return c.forStmt()
	case "set":
		return c.setStmt()
	}
	refuse("statement %q", word)
	return nil
}

func (c *compiler) ifStmt() stmt {
	cond := c.expr()
	c.endTag()
	then, end := c.block("elif", "else", "endif")
	var els stmt = func(*state) {}
	switch end {
	case "elif":
		els = c.ifStmt()
	case "else":
		c.endTag()
		els, _ = c.block("endif")
		c.endTag()
	default:
		c.endTag()
	}
	return func(st *state) {
		if truthy(cond(st)) {
			then(st)
		} else {
			els(st)
		}
	}
}

func (c *compiler) forStmt() stmt {
	c.assigned = append(c.assigned, map[int]bool{})
	targets := []int{c.assign(c.name())}
	if c.isOp(",") {
		c.tp++
		targets = append(targets, c.assign(c.name()))
	}
	if c.name() != "in" {
		refuse("for without in")
	}
	iter := c.orExpr() // jinja2 parses the iterable without a conditional, which would take the filter's if
	var filter expr
	if c.isName("if") {
		c.tp++
		filter = c.expr()
	}
	if c.isName("recursive") {
		refuse("recursive loops")
	}
	c.endTag()
	c.loops++
	body, end := c.block("else", "endfor")
	c.loops--
	var els stmt
	if end == "else" {
		c.endTag()
		els, _ = c.block("endfor")
	}
	c.endTag()
	var saved []int
	for i := range c.assigned[len(c.assigned)-1] {
		saved = append(saved, i)
	}
	c.assigned = c.assigned[:len(c.assigned)-1]
	return func(st *state) {
		items := iterate(iter(st))
		keep := make([]Value, len(saved))
		for i, s := range saved {
			keep[i] = st.vars[s]
		}
		if filter != nil {
			var kept []Value
			for _, it := range items {
				bind(st, targets, it)
				if truthy(filter(st)) {
					kept = append(kept, it)
				}
			}
			items = kept
		}
		ls := &loopState{length: len(items)}
		st.loops = append(st.loops, ls)
		for i, it := range items {
			ls.index0 = i
			bind(st, targets, it)
			body(st)
		}
		st.loops = st.loops[:len(st.loops)-1]
		for i, s := range saved {
			st.vars[s] = keep[i]
		}
		if len(items) == 0 && els != nil {
			els(st)
		}
	}
}

func bind(st *state, targets []int, it Value) {
	if len(targets) == 1 {
		st.vars[targets[0]] = it
		return
	}
	if !it.IsList() || len(it.Items()) != len(targets) {
		fail("cannot unpack %s into %d names", kindName(it), len(targets))
	}
	for i, t := range targets {
		st.vars[t] = it.Items()[i]
	}
}

func (c *compiler) setStmt() stmt {
	name := c.name()
	if c.isOp(".") { // set ns.attr = ...
		c.tp++
		attr := c.name()
		c.op("=")
		ns := c.slot(name)
		v := c.expr()
		c.endTag()
		return func(st *state) {
			d := st.vars[ns]
			if !d.IsDict() {
				fail("cannot assign attribute on a non-namespace object")
			}
			d.AsDict().Set(attr, v(st))
		}
	}
	if !c.isOp("=") {
		refuse("set %s without = (block set or tuple)", name)
	}
	c.tp++
	slot := c.assign(name)
	v := c.expr()
	c.endTag()
	return func(st *state) { st.vars[slot] = v(st) }
}

// Tag-level token helpers.

func (c *compiler) startTag(body string) {
	toks, err := lexExpr(body)
	if err != nil {
		refuse("%v", err)
	}
	c.toks, c.tp = toks, 0
}

func (c *compiler) peek() token {
	if c.tp < len(c.toks) {
		return c.toks[c.tp]
	}
	return token{kind: tEOF}
}

func (c *compiler) isOp(op string) bool {
	t := c.peek()
	return t.kind == tOp && t.s == op
}

func (c *compiler) isName(n string) bool {
	t := c.peek()
	return t.kind == tName && t.s == n
}

func (c *compiler) op(op string) {
	if !c.isOp(op) {
		refuse("expected %q in %s", op, c.context())
	}
	c.tp++
}

func (c *compiler) name() string {
	t := c.peek()
	if t.kind != tName {
		refuse("expected a name in %s", c.context())
	}
	c.tp++
	return t.s
}

func (c *compiler) endTag() {
	if c.tp != len(c.toks) {
		refuse("unexpected tokens at the end of %s", c.context())
	}
}

func (c *compiler) context() string {
	var b strings.Builder
	for _, t := range c.toks {
		switch t.kind {
		case tString:
			fmt.Fprintf(&b, "%q ", t.s)
		case tInt:
			fmt.Fprintf(&b, "%d ", t.i)
		case tFloat:
			fmt.Fprintf(&b, "%g ", t.f)
		default:
			b.WriteString(t.s + " ")
		}
	}
	return strings.TrimSpace(b.String())
}
