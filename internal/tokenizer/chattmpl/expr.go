package chattmpl

import (
	"strings"
)

// Expressions, by jinja2's precedence (its parser.py): conditional, or, and, not, comparisons, + -,
// ~, * / // %, unary - +, then a primary with its postfixes, filters and tests.

func (c *compiler) expr() expr {
	a := c.orExpr()
	if !c.isName("if") {
		return a
	}
	c.tp++
	cond := c.orExpr()
	b := func(*state) Value { return Undefined() }
	if c.isName("else") {
		c.tp++
		b = c.expr()
	}
	return func(st *state) Value {
		if truthy(cond(st)) {
			return a(st)
		}
		return b(st)
	}
}

func (c *compiler) orExpr() expr {
	a := c.andExpr()
	for c.isName("or") {
		c.tp++
		l, r := a, c.andExpr()
		a = func(st *state) Value {
			if v := l(st); truthy(v) {
				return v
			}
			return r(st)
		}
	}
	return a
}

func (c *compiler) andExpr() expr {
	a := c.notExpr()
	for c.isName("and") {
		c.tp++
		l, r := a, c.notExpr()
		a = func(st *state) Value {
			if v := l(st); !truthy(v) {
				return v
			}
			return r(st)
		}
	}
	return a
}

func (c *compiler) notExpr() expr {
	if c.isName("not") {
		c.tp++
		a := c.notExpr()
		return func(st *state) Value { return NewBool(!truthy(a(st))) }
	}
	return c.compare()
}

func (c *compiler) compare() expr {
	a := c.math1()
	type link struct {
		op    string
		r     expr
		lit   string // r's value when r is a string literal
		isLit bool
	}
	var chain []link
scan:
	for {
		t := c.peek()
		var op string
		switch {
		case t.kind == tOp && (t.s == "==" || t.s == "!=" || t.s == "<" || t.s == ">" || t.s == "<=" || t.s == ">="):
			op = t.s
			c.tp++
		case t.kind == tName && t.s == "in":
			op = "in"
			c.tp++
		case t.kind == tName && t.s == "not" && c.tp+1 < len(c.toks) && c.toks[c.tp+1].kind == tName && c.toks[c.tp+1].s == "in":
			op = "not in"
			c.tp += 2
		}
		if op == "" {
			break scan
		}
		start := c.tp
		r := c.math1()
		lit, isLit := c.literalString(start)
		chain = append(chain, link{op, r, lit, isLit})
	}
	switch len(chain) {
	case 0:
		return a
	case 1:
		op, r := chain[0].op, chain[0].r
		if lit, ok := chain[0].lit, chain[0].isLit; ok && (op == "==" || op == "!=") {
			// x == 'literal', most of a chat template's conditions (message['role'] == 'user').
			ne := op == "!="
			return func(st *state) Value {
				v := a(st)
				if v.IsString() {
					return NewBool((v.AsString() == lit) != ne)
				}
				return NewBool(ne) // a string equals only a string
			}
		}
		return func(st *state) Value { return NewBool(compareOp(op, a(st), r(st))) }
	}
	return func(st *state) Value {
		l := a(st)
		for _, k := range chain {
			r := k.r(st)
			if !compareOp(k.op, l, r) {
				return NewBool(false)
			}
			l = r
		}
		return NewBool(true)
	}
}

func (c *compiler) binary(next func() expr, ops ...string) expr {
	a := next()
	for {
		t := c.peek()
		op := ""
		if t.kind == tOp {
			for _, o := range ops {
				if t.s == o {
					op = o
				}
			}
		}
		if op == "" {
			return a
		}
		c.tp++
		l, r := a, next()
		switch op {
		case "+":
			a = func(st *state) Value { return add(l(st), r(st)) }
		case "~":
			a = func(st *state) Value { return NewString(str(l(st)) + str(r(st))) }
		default:
			a = func(st *state) Value { return arith(op, l(st), r(st)) }
		}
	}
}

// math1 is + and -. A run of + is one sum: strings are concatenated with one allocation, and a sum
// that is a whole {{ }} is written term by term (output), the common shape of chat templates'
// output ('<tag>' + message['content'] + '</tag>').
func (c *compiler) math1() expr {
	start := c.tp
	terms := []expr{c.concat()}
	for c.isOp("+") || c.isOp("-") {
		minus := c.isOp("-")
		c.tp++
		r := c.concat()
		if !minus {
			terms = append(terms, r)
			continue
		}
		l := sum(terms)
		terms = []expr{func(st *state) Value { return arith("-", l(st), r(st)) }}
	}
	if len(terms) > 1 {
		c.sumTerms, c.sumStart, c.sumEnd = terms, start, c.tp
	}
	return sum(terms)
}

// sum is terms added left to right, as Python does; all strings, it is one concatenation.
func sum(terms []expr) expr {
	if len(terms) == 1 {
		return terms[0]
	}
	return func(st *state) Value {
		var buf [8]Value
		vs := evalInto(st, terms, buf[:0])
		if n, ok := stringsLen(vs); ok {
			var b strings.Builder
			b.Grow(n)
			for _, v := range vs {
				b.WriteString(v.AsString())
			}
			return NewString(b.String())
		}
		return addAll(vs)
	}
}

func addAll(vs []Value) Value {
	acc := vs[0]
	for _, v := range vs[1:] {
		acc = add(acc, v)
	}
	return acc
}

func evalInto(st *state, es []expr, out []Value) []Value {
	for _, e := range es {
		out = append(out, e(st))
	}
	return out
}

// stringsLen is the total length of vs when all are strings.
func stringsLen(vs []Value) (int, bool) {
	n := 0
	for _, v := range vs {
		if !v.IsString() {
			return 0, false
		}
		n += len(v.AsString())
	}
	return n, true
}

// output compiles a {{ }}: a sum that is the whole tag writes its string terms one after the other
// instead of building their concatenation.
func (c *compiler) output() stmt {
	c.sumTerms = nil
	e := c.expr()
	c.endTag()
	if terms := c.sumTerms; terms != nil && c.sumStart == 0 && c.sumEnd == len(c.toks) {
		return func(st *state) {
			var buf [8]Value
			vs := evalInto(st, terms, buf[:0])
			if _, ok := stringsLen(vs); !ok {
				writeValue(st.b, addAll(vs))
				return
			}
			for _, v := range vs {
				st.b.WriteString(v.AsString())
			}
		}
	}
	return func(st *state) { writeValue(st.b, e(st)) }
}
func (c *compiler) concat() expr { return c.binary(c.math2, "~") }
func (c *compiler) math2() expr  { return c.binary(c.pow, "*", "/", "//", "%") }
func (c *compiler) pow() expr    { return c.binary(func() expr { return c.unary(true) }, "**") }

func (c *compiler) unary(withFilter bool) expr {
	var a expr
	switch {
	case c.isOp("-"):
		c.tp++
		x := c.unary(false)
		a = func(st *state) Value {
			v := x(st)
			if v.IsFloat() {
				return NewFloat(-v.AsFloat()) // -0.0 stays negative, as Python's
			}
			return arith("-", NewInt(0), v)
		}
	case c.isOp("+"):
		c.tp++
		a = c.unary(false)
	default:
		a = c.primary()
	}
	a = c.postfix(a)
	if withFilter {
		a = c.filters(a)
	}
	return a
}

func (c *compiler) primary() expr {
	t := c.peek()
	c.tp++
	switch t.kind {
	case tString:
		s := t.s
		for c.peek().kind == tString { // adjacent literals concatenate
			s += c.peek().s
			c.tp++
		}
		v := NewString(s)
		return func(*state) Value { return v }
	case tInt:
		v := NewInt(t.i)
		return func(*state) Value { return v }
	case tFloat:
		v := NewFloat(t.f)
		return func(*state) Value { return v }
	case tName:
		return c.nameExpr(t.s)
	case tOp:
		switch t.s {
		case "(":
			if c.isOp(")") {
				refuse("empty tuple")
			}
			e := c.expr()
			if c.isOp(",") {
				refuse("tuples")
			}
			c.op(")")
			return e
		case "[":
			var items []expr
			for !c.isOp("]") {
				items = append(items, c.expr())
				if !c.isOp(",") {
					break
				}
				c.tp++
			}
			c.op("]")
			return func(st *state) Value {
				out := make([]Value, len(items))
				for i, e := range items {
					out[i] = e(st)
				}
				return NewList(out)
			}
		case "{":
			var keys, vals []expr
			for !c.isOp("}") {
				keys = append(keys, c.expr())
				c.op(":")
				vals = append(vals, c.expr())
				if !c.isOp(",") {
					break
				}
				c.tp++
			}
			c.op("}")
			return func(st *state) Value {
				d := NewDict()
				for i, k := range keys {
					kv := k(st)
					if !kv.IsString() {
						fail("dict keys other than strings")
					}
					d.AsDict().Set(kv.AsString(), vals[i](st))
				}
				return d
			}
		}
	}
	refuse("unexpected %q in %s", t.s, c.context())
	return nil
}

// nameExpr is a name: a constant, loop.<attr>, a builtin function's call, or a variable.
func (c *compiler) nameExpr(name string) expr {
	switch name {
	case "true", "True":
		return constant(NewBool(true))
	case "false", "False":
		return constant(NewBool(false))
	case "none", "None":
		return constant(None())
	case "loop":
		if c.loops == 0 {
			refuse("loop outside a for loop")
		}
		c.op(".")
		return loopAttr(c.name())
	}
	if c.isOp("(") {
		c.tp++
		args, kwargs := c.callArgs()
		return builtinCall(name, args, kwargs)
	}
	i := c.slot(name)
	return func(st *state) Value { return st.vars[i] }
}

func constant(v Value) expr { return func(*state) Value { return v } }

func loopAttr(attr string) expr {
	cur := func(st *state) *loopState { return st.loops[len(st.loops)-1] }
	switch attr {
	case "index0":
		return func(st *state) Value { return NewInt(int64(cur(st).index0)) }
	case "index":
		return func(st *state) Value { return NewInt(int64(cur(st).index0 + 1)) }
	case "revindex":
		return func(st *state) Value { l := cur(st); return NewInt(int64(l.length - l.index0)) }
	case "revindex0":
		return func(st *state) Value { l := cur(st); return NewInt(int64(l.length - l.index0 - 1)) }
	case "first":
		return func(st *state) Value { return NewBool(cur(st).index0 == 0) }
	case "last":
		return func(st *state) Value { l := cur(st); return NewBool(l.index0 == l.length-1) }
	case "length":
		return func(st *state) Value { return NewInt(int64(cur(st).length)) }
	}
	refuse("loop.%s", attr)
	return nil
}

// callArgs parses a call's arguments after its '(' through its ')'.
func (c *compiler) callArgs() ([]expr, map[string]expr) {
	var args []expr
	var kwargs map[string]expr
	for !c.isOp(")") {
		if t := c.peek(); t.kind == tName && c.tp+1 < len(c.toks) && c.toks[c.tp+1].kind == tOp && c.toks[c.tp+1].s == "=" {
			c.tp += 2
			if kwargs == nil {
				kwargs = map[string]expr{}
			}
			kwargs[t.s] = c.expr()
		} else {
			if kwargs != nil {
				refuse("a positional argument after a keyword one")
			}
			args = append(args, c.expr())
		}
		if !c.isOp(",") {
			break
		}
		c.tp++
	}
	c.op(")")
	return args, kwargs
}

func (c *compiler) postfix(a expr) expr {
	for {
		switch {
		case c.isOp("."):
			c.tp++
			attr := c.name()
			if c.isOp("(") {
				c.tp++
				args, kwargs := c.callArgs()
				a = method(a, attr, args, kwargs)
				continue
			}
			obj, isMethod := a, dictMethods[attr]
			a = func(st *state) Value {
				o := obj(st)
				if o.IsDict() && !isMethod { // message.content: the item, looked up directly
					v, _ := o.AsDict().Get(attr)
					return v
				}
				return getattr(o, attr)
			}
		case c.isOp("["):
			c.tp++
			a = c.subscript(a)
		case c.isOp("("):
			refuse("calling a value in %s", c.context())
		default:
			return a
		}
	}
}

func (c *compiler) subscript(obj expr) expr {
	var parts [3]expr
	n := 0
	isSlice := false
	for {
		if c.isOp(":") {
			isSlice = true
			c.tp++
			n++
			if n > 2 {
				refuse("a slice with more than three parts")
			}
			continue
		}
		if c.isOp("]") {
			c.tp++
			break
		}
		start := c.tp
		parts[n] = c.expr()
		if key, ok := c.literalString(start); ok && !isSlice && c.isOp("]") {
			c.tp++
			return constKeyItem(obj, key)
		}
	}
	if !isSlice {
		k := parts[0]
		if k == nil {
			refuse("an empty subscript")
		}
		return func(st *state) Value { return getitem(obj(st), k(st)) }
	}
	return func(st *state) Value {
		var b [3]Value
		for i, p := range parts {
			if p != nil {
				b[i] = p(st)
			} else {
				b[i] = None()
			}
		}
		return slice(obj(st), b[0], b[1], b[2])
	}
}

// literalString reports whether the tokens from start to here are one string literal, and its value.
func (c *compiler) literalString(start int) (string, bool) {
	if c.tp == start+1 && c.toks[start].kind == tString {
		return c.toks[start].s, true
	}
	return "", false
}

// constKeyItem is obj['key']: getitem, with a dict's lookup done without the key's closure.
func constKeyItem(obj expr, key string) expr {
	k := NewString(key)
	return func(st *state) Value {
		o := obj(st)
		if o.IsDict() {
			if v, ok := o.AsDict().Get(key); ok {
				return v
			}
		}
		return getitem(o, k)
	}
}

// filters parses `| name(args)` and `is [not] test args` after an operand, in any order.
func (c *compiler) filters(a expr) expr {
	for {
		switch {
		case c.isOp("|"):
			c.tp++
			name := c.name()
			var args []expr
			var kwargs map[string]expr
			if c.isOp("(") {
				c.tp++
				args, kwargs = c.callArgs()
			}
			a = filter(name, a, args, kwargs)
		case c.isName("is"):
			c.tp++
			neg := false
			if c.isName("not") {
				c.tp++
				neg = true
			}
			name := c.name()
			var args []expr
			if c.isOp("(") {
				c.tp++
				args, _ = c.callArgs()
			} else if t := c.peek(); t.kind == tString || t.kind == tInt || t.kind == tFloat ||
				t.kind == tName && t.s != "else" && t.s != "or" && t.s != "and" && t.s != "if" ||
				t.kind == tOp && (t.s == "(" || t.s == "[" || t.s == "{") {
				args = []expr{c.postfix(c.primary())}
			}
			tf := test(name, args)
			x := a
			a = func(st *state) Value { return NewBool(tf(st, x(st)) != neg) }
		default:
			return a
		}
	}
}
