package chattmpl

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ErrRaised is a template's raise_exception; the message follows it.
var ErrRaised = errors.New("chattmpl: the template raised")

func evalArgs(st *state, args []expr) []Value {
	out := make([]Value, len(args))
	for i, a := range args {
		out[i] = a(st)
	}
	return out
}

func arg(vs []Value, i int) Value {
	if i < len(vs) {
		return vs[i]
	}
	return None()
}

// builtinCall compiles a call of a global function: the ones HF's environment and jinja2 give
// templates that chat templates call. Any other is refused, so the interpreter renders the template.
func builtinCall(name string, args []expr, kwargs map[string]expr) expr {
	switch name {
	case "raise_exception":
		if len(args) != 1 || kwargs != nil {
			refuse("raise_exception takes one argument")
		}
		msg := args[0]
		return func(st *state) Value {
			panic(renderError{errors.Join(ErrRaised, errors.New(str(msg(st))))})
		}
	case "namespace":
		if len(args) != 0 {
			refuse("namespace with positional arguments")
		}
		return func(st *state) Value {
			d := NewDict()
			for k, e := range kwargs {
				d.AsDict().Set(k, e(st))
			}
			return d
		}
	case "range":
		if kwargs != nil || len(args) == 0 || len(args) > 3 {
			refuse("range's arguments")
		}
		return func(st *state) Value {
			vs := evalArgs(st, args)
			for _, v := range vs {
				if !v.IsInt() {
					fail("range of a %s", kindName(v))
				}
			}
			lo, hi, step := int64(0), vs[0].AsInt(), int64(1)
			if len(vs) > 1 {
				lo, hi = vs[0].AsInt(), vs[1].AsInt()
			}
			if len(vs) > 2 {
				step = vs[2].AsInt()
			}
			if step == 0 || (hi-lo)/step > 100000 {
				fail("range too long or with step 0")
			}
			var out []Value
			for i := lo; step > 0 && i < hi || step < 0 && i > hi; i += step {
				out = append(out, NewInt(i))
			}
			return NewList(out)
		}
	}
	refuse("function %s", name)
	return nil
}

// method compiles obj.name(args) for the str and dict methods chat templates call.
func method(obj expr, name string, args []expr, kwargs map[string]expr) expr {
	if kwargs != nil {
		refuse("keyword arguments to .%s()", name)
	}
	call := func(st *state) (Value, []Value) { return obj(st), evalArgs(st, args) }
	switch name {
	case "strip", "lstrip", "rstrip":
		left, right := name != "rstrip", name != "lstrip"
		return func(st *state) Value {
			o, a := call(st)
			return NewString(pyStrip(asStr(o, name), arg(a, 0), left, right))
		}
	case "startswith", "endswith":
		return func(st *state) Value {
			o, a := call(st)
			s := asStr(o, name)
			if len(a) != 1 || !a[0].IsString() {
				fail("%s takes one string", name)
			}
			if name == "startswith" {
				return NewBool(strings.HasPrefix(s, a[0].AsString()))
			}
			return NewBool(strings.HasSuffix(s, a[0].AsString()))
		}
	case "split":
		return func(st *state) Value {
			o, a := call(st)
			return pySplit(asStr(o, name), arg(a, 0), arg(a, 1))
		}
	case "upper", "lower":
		return func(st *state) Value {
			o, _ := call(st)
			s := asStr(o, name)
			if !isASCII(s) {
				fail("%s of non-ASCII text", name) // Python's case mappings differ from Go's in places
			}
			if name == "upper" {
				return NewString(strings.ToUpper(s))
			}
			return NewString(strings.ToLower(s))
		}
	case "replace":
		return func(st *state) Value {
			o, a := call(st)
			s := asStr(o, name)
			if len(a) != 2 || !a[0].IsString() || !a[1].IsString() || a[0].AsString() == "" {
				fail("replace's arguments")
			}
			return NewString(strings.ReplaceAll(s, a[0].AsString(), a[1].AsString()))
		}
	case "items", "keys", "values":
		return func(st *state) Value {
			o, a := call(st)
			if !o.IsDict() || len(a) != 0 {
				fail(".%s() of a %s", name, kindName(o))
			}
			return dictView(o.AsDict(), name)
		}
	case "get":
		return func(st *state) Value {
			o, a := call(st)
			if !o.IsDict() || len(a) == 0 || len(a) > 2 || !a[0].IsString() {
				fail(".get() of a %s", kindName(o))
			}
			if v, ok := o.AsDict().Get(a[0].AsString()); ok {
				return v
			}
			return arg(a, 1)
		}
	}
	refuse("method .%s()", name)
	return nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func asStr(v Value, op string) string {
	if !v.IsString() {
		fail(".%s() of a %s", op, kindName(v))
	}
	return v.AsString()
}

func dictView(d *Dict, which string) Value {
	out := make([]Value, d.Len())
	for i, k := range d.Keys() {
		v := d.Value(i)
		switch which {
		case "keys":
			out[i] = NewString(k)
		case "values":
			out[i] = v
		default:
			out[i] = NewList([]Value{NewString(k), v})
		}
	}
	return NewList(out)
}

// pySplit is str.split(sep, maxsplit): without sep, runs of whitespace and no empty parts.
func pySplit(s string, sep, maxsplit Value) Value {
	n := -1
	if !maxsplit.IsNone() {
		if !maxsplit.IsInt() {
			fail("split's maxsplit")
		}
		if n = int(maxsplit.AsInt()); n >= 0 {
			n++
		}
	}
	var parts []string
	switch {
	case sep.IsNone():
		if n != -1 {
			fail("split with maxsplit and no separator")
		}
		parts = strings.FieldsFunc(s, isPySpace)
	case sep.IsString() && sep.AsString() != "":
		parts = strings.SplitN(s, sep.AsString(), n)
	default:
		fail("split's separator")
	}
	out := make([]Value, len(parts))
	for i, p := range parts {
		out[i] = NewString(p)
	}
	return NewList(out)
}

// filter compiles x | name(args).
func filter(name string, x expr, args []expr, kwargs map[string]expr) expr {
	noArgs := func() {
		if len(args) != 0 || kwargs != nil {
			refuse("arguments to the %s filter", name)
		}
	}
	switch name {
	case "trim":
		if kwargs != nil || len(args) > 1 {
			refuse("trim's arguments")
		}
		return func(st *state) Value {
			v := x(st)
			a := evalArgs(st, args)
			return NewString(pyStrip(str(v), arg(a, 0), true, true))
		}
	case "length", "count":
		noArgs()
		return func(st *state) Value { return NewInt(int64(length(x(st)))) }
	case "string":
		noArgs()
		return func(st *state) Value { return NewString(str(x(st))) }
	case "list":
		noArgs()
		return func(st *state) Value {
			// No method or filter here changes a list in place, so a list is its own copy.
			return NewList(iterate(x(st)))
		}
	case "items":
		noArgs()
		return func(st *state) Value {
			v := x(st)
			if v.IsUndefined() {
				return NewList(nil)
			}
			if !v.IsDict() {
				fail("items of a %s", kindName(v))
			}
			return dictView(v.AsDict(), "items")
		}
	case "first", "last":
		noArgs()
		return func(st *state) Value {
			items := iterate(x(st))
			if len(items) == 0 {
				return Undefined()
			}
			if name == "first" {
				return items[0]
			}
			return items[len(items)-1]
		}
	case "join":
		if kwargs != nil || len(args) > 1 {
			refuse("join's arguments")
		}
		return func(st *state) Value {
			items := iterate(x(st))
			a := evalArgs(st, args)
			sep := ""
			if len(a) == 1 {
				sep = str(a[0])
			}
			parts := make([]string, len(items))
			for i, it := range items {
				parts[i] = str(it)
			}
			return NewString(strings.Join(parts, sep))
		}
	case "tojson":
		if len(args) > 0 {
			refuse("tojson's positional arguments")
		}
		for k := range kwargs {
			if k != "indent" {
				refuse("tojson's %s", k)
			}
		}
		indent := kwargs["indent"]
		return func(st *state) Value {
			v := x(st)
			var b strings.Builder
			ind := -1
			if indent != nil {
				iv := indent(st)
				if !iv.IsInt() && !iv.IsNone() {
					fail("tojson's indent")
				}
				if iv.IsInt() {
					ind = int(iv.AsInt())
				}
			}
			writeJSON(&b, v, ind, 0)
			return NewString(b.String())
		}
	case "selectattr", "rejectattr":
		if kwargs != nil || len(args) == 0 {
			refuse("%s's arguments", name)
		}
		reject := name == "rejectattr"
		var tf testFunc
		if len(args) > 1 {
			tname := ""
			if tn := args[1]; tn != nil {
				tname = staticString(tn)
			}
			tf = test(tname, args[2:])
		}
		return func(st *state) Value {
			items := iterate(x(st))
			attr := args[0](st)
			if !attr.IsString() || strings.Contains(attr.AsString(), ".") {
				fail("%s's attribute", name)
			}
			out := make([]Value, 0, len(items))
			for _, it := range items {
				v := getitem(it, attr)
				var ok bool
				if tf != nil {
					ok = tf(st, v)
				} else {
					ok = truthy(v)
				}
				if ok != reject {
					out = append(out, it)
				}
			}
			return NewList(out)
		}
	}
	refuse("filter %s", name)
	return nil
}

// staticString is a constant string argument's value (a test's name), read at compile time.
func staticString(e expr) string {
	defer func() {
		if recover() != nil {
			refuse("a test name that is not a constant")
		}
	}()
	v := e(nil)
	if !v.IsString() {
		refuse("a test name that is not a string")
	}
	return v.AsString()
}

func length(v Value) int {
	switch {
	case v.IsString():
		return utf8.RuneCountInString(v.AsString())
	case v.IsList():
		return len(v.Items())
	case v.IsDict():
		return v.AsDict().Len()
	case v.IsUndefined():
		return 0
	}
	fail("length of a %s", kindName(v))
	return 0
}

type testFunc func(*state, Value) bool

// test compiles `is name(args)`.
func test(name string, args []expr) testFunc {
	noArgs := func() {
		if len(args) != 0 {
			refuse("arguments to the %s test", name)
		}
	}
	one := func(f func(Value) bool) testFunc {
		noArgs()
		return func(_ *state, v Value) bool { return f(v) }
	}
	switch name {
	case "defined":
		return one(func(v Value) bool { return !v.IsUndefined() })
	case "undefined":
		return one(Value.IsUndefined)
	case "none":
		return one(Value.IsNone)
	case "string":
		return one(Value.IsString)
	case "mapping":
		return one(Value.IsDict)
	case "boolean":
		return one(Value.IsBool)
	case "true":
		return one(func(v Value) bool { return v.IsBool() && v.AsBool() })
	case "false":
		return one(func(v Value) bool { return v.IsBool() && !v.AsBool() })
	case "number":
		return one(isNumber)
	case "integer":
		return one(Value.IsInt)
	case "float":
		return one(Value.IsFloat)
	case "iterable", "sequence":
		return one(func(v Value) bool { return v.IsString() || v.IsList() || v.IsDict() || v.IsUndefined() })
	case "equalto", "eq", "==", "ne", "!=":
		if len(args) != 1 {
			refuse("the %s test takes one argument", name)
		}
		ne := name == "ne" || name == "!="
		return func(st *state, v Value) bool { return pyEq(v, args[0](st)) != ne }
	}
	refuse("test %s", name)
	return nil
}

// writeJSON is transformers' tojson: Python's json.dumps with ensure_ascii=False, keys in insertion
// order, separators ", " and ": " (", " becomes "," with an indent).
func writeJSON(b *strings.Builder, v Value, indent, depth int) {
	nl := func(d int) {
		if indent >= 0 {
			b.WriteByte('\n')
			b.WriteString(strings.Repeat(" ", indent*d))
		}
	}
	sep := ", "
	if indent >= 0 {
		sep = ","
	}
	switch {
	case v.IsNone():
		b.WriteString("null")
	case v.IsBool():
		b.WriteString(strconv.FormatBool(v.AsBool()))
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		f := v.AsFloat()
		if f != f || f > 1.7976931348623157e308 || f < -1.7976931348623157e308 {
			fail("tojson of a non-finite float")
		}
		b.WriteString(pyFloat(f))
	case v.IsString():
		writeJSONString(b, v.AsString())
	case v.IsList():
		items := v.Items()
		if len(items) == 0 {
			b.WriteString("[]")
			return
		}
		b.WriteByte('[')
		for i, it := range items {
			if i > 0 {
				b.WriteString(sep)
			}
			nl(depth + 1)
			writeJSON(b, it, indent, depth+1)
		}
		nl(depth)
		b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		if d.Len() == 0 {
			b.WriteString("{}")
			return
		}
		b.WriteByte('{')
		for i, k := range d.Keys() {
			if i > 0 {
				b.WriteString(sep)
			}
			nl(depth + 1)
			writeJSONString(b, k)
			b.WriteString(": ")
			item := d.Value(i)
			writeJSON(b, item, indent, depth+1)
		}
		nl(depth)
		b.WriteByte('}')
	default:
		fail("tojson of a %s", kindName(v))
	}
}

func writeJSONString(b *strings.Builder, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b.WriteString(s[start:i])
		switch c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			b.WriteString(`\u00`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
		start = i + 1
	}
	b.WriteString(s[start:])
	b.WriteByte('"')
}
