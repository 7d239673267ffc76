package chattmpl

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Values are the interpreter's (Value), so the messages the caller already built are read as
// they are; their semantics here are Python's, as jinja2 runs them.

type state struct {
	b     *strings.Builder
	vars  []Value
	loops []*loopState
}

type loopState struct{ index0, length int }

// renderError carries a failure out of the closures (a panic, recovered by Render): either the template
// raised, or it did something this package leaves to the interpreter.
type renderError struct{ err error }

func fail(format string, args ...any) {
	panic(renderError{fmt.Errorf("chattmpl: "+format, args...)})
}

func truthy(v Value) bool { return v.IsTruthy() }

func kindName(v Value) string {
	switch {
	case v.IsUndefined():
		return "undefined"
	case v.IsNone():
		return "none"
	case v.IsBool():
		return "bool"
	case v.IsInt():
		return "int"
	case v.IsFloat():
		return "float"
	case v.IsString():
		return "string"
	case v.IsList():
		return "list"
	case v.IsDict():
		return "dict"
	}
	return "callable"
}

// str is Python's str() as jinja2 prints a value (undefined prints nothing); lists and dicts (Python's
// repr) are left to the interpreter.
func str(v Value) string {
	switch {
	case v.IsString():
		return v.AsString()
	case v.IsUndefined():
		return ""
	case v.IsNone():
		return "None"
	case v.IsBool():
		if v.AsBool() {
			return "True"
		}
		return "False"
	case v.IsInt():
		return strconv.FormatInt(v.AsInt(), 10)
	case v.IsFloat():
		return pyFloat(v.AsFloat())
	}
	fail("printing a %s", kindName(v))
	return ""
}

func writeValue(b *strings.Builder, v Value) {
	if v.IsString() {
		b.WriteString(v.AsString())
		return
	}
	b.WriteString(str(v))
}

// pyFloat is Python's repr of a float: the shortest round-tripping digits, fixed notation from 1e-4 to
// 1e16 with at least one decimal, exponent notation with two exponent digits outside.
func pyFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mant, exp, _ := strings.Cut(e, "e")
	x, _ := strconv.Atoi(exp)
	if x < -4 || x >= 16 {
		sign := "+"
		if x < 0 {
			sign, x = "-", -x
		}
		return fmt.Sprintf("%se%s%02d", mant, sign, x)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

func isNumber(v Value) bool { return v.IsInt() || v.IsFloat() || v.IsBool() }

func asFloat(v Value) float64 {
	switch {
	case v.IsInt():
		return float64(v.AsInt())
	case v.IsFloat():
		return v.AsFloat()
	case v.AsBool():
		return 1
	}
	return 0
}

func asInt(v Value) int64 {
	if v.IsInt() {
		return v.AsInt()
	}
	if v.AsBool() {
		return 1
	}
	return 0
}

// pyEq is Python's ==: numbers (bools included) by value, containers deeply, undefined equal to
// undefined (jinja2's Undefined.__eq__).
func pyEq(a, b Value) bool {
	if isNumber(a) && isNumber(b) {
		if a.IsFloat() || b.IsFloat() {
			return asFloat(a) == asFloat(b)
		}
		return asInt(a) == asInt(b)
	}
	switch {
	case a.IsString() && b.IsString():
		return a.AsString() == b.AsString()
	case a.IsList() && b.IsList():
		x, y := a.Items(), b.Items()
		if len(x) != len(y) {
			return false
		}
		for i := range x {
			if !pyEq(x[i], y[i]) {
				return false
			}
		}
		return true
	case a.IsDict() && b.IsDict():
		x, y := a.AsDict(), b.AsDict()
		if x == y {
			return true
		}
		if x.Len() != y.Len() {
			return false
		}
		for i, k := range x.Keys() {
			xv := x.Value(i)
			yv, ok := y.Get(k)
			if !ok || !pyEq(xv, yv) {
				return false
			}
		}
		return true
	case a.IsNone() && b.IsNone(), a.IsUndefined() && b.IsUndefined():
		return true
	}
	return false
}

func compareOp(op string, a, b Value) bool {
	switch op {
	case "==":
		return pyEq(a, b)
	case "!=":
		return !pyEq(a, b)
	case "in":
		return contains(b, a)
	case "not in":
		return !contains(b, a)
	}
	var c int
	switch {
	case isNumber(a) && isNumber(b):
		x, y := asFloat(a), asFloat(b)
		if a.IsFloat() || b.IsFloat() {
			c = cmpOrdered(x, y)
		} else {
			c = cmpOrdered(asInt(a), asInt(b))
		}
	case a.IsString() && b.IsString():
		c = strings.Compare(a.AsString(), b.AsString()) // UTF-8 byte order is code point order
	default:
		fail("%s %s %s", kindName(a), op, kindName(b))
	}
	switch op {
	case "<":
		return c < 0
	case ">":
		return c > 0
	case "<=":
		return c <= 0
	}
	return c >= 0
}

func cmpOrdered[T int64 | float64](x, y T) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

func contains(container, item Value) bool {
	switch {
	case container.IsString():
		if !item.IsString() {
			fail("'in <string>' requires a string")
		}
		return strings.Contains(container.AsString(), item.AsString())
	case container.IsList():
		for _, x := range container.Items() {
			if pyEq(x, item) {
				return true
			}
		}
		return false
	case container.IsDict():
		if !item.IsString() {
			return false
		}
		return container.AsDict().Has(item.AsString())
	}
	fail("'in' a %s", kindName(container))
	return false
}

func add(a, b Value) Value {
	switch {
	case a.IsString() && b.IsString():
		return NewString(a.AsString() + b.AsString())
	case a.IsList() && b.IsList():
		out := make([]Value, 0, len(a.Items())+len(b.Items()))
		out = append(append(out, a.Items()...), b.Items()...)
		return NewList(out)
	case isNumber(a) && isNumber(b):
		return arith("+", a, b)
	}
	fail("%s + %s", kindName(a), kindName(b))
	return Value{}
}

func arith(op string, a, b Value) Value {
	if op == "*" && (a.IsString() && b.IsInt() || a.IsInt() && b.IsString()) {
		s, n := a, b
		if a.IsInt() {
			s, n = b, a
		}
		return NewString(strings.Repeat(s.AsString(), int(max(n.AsInt(), 0))))
	}
	if !isNumber(a) || !isNumber(b) {
		fail("%s %s %s", kindName(a), op, kindName(b))
	}
	if op == "/" || a.IsFloat() || b.IsFloat() {
		x, y := asFloat(a), asFloat(b)
		switch op {
		case "+":
			return NewFloat(x + y)
		case "-":
			return NewFloat(x - y)
		case "*":
			return NewFloat(x * y)
		case "**":
			return NewFloat(math.Pow(x, y))
		}
		if y == 0 {
			fail("division by zero")
		}
		switch op {
		case "/":
			return NewFloat(x / y)
		case "//":
			return NewFloat(math.Floor(x / y))
		}
		return NewFloat(x - math.Floor(x/y)*y)
	}
	x, y := asInt(a), asInt(b)
	switch op {
	case "+":
		return NewInt(x + y)
	case "-":
		return NewInt(x - y)
	case "*":
		return NewInt(x * y)
	case "**":
		if y < 0 {
			return NewFloat(math.Pow(float64(x), float64(y)))
		}
		r := int64(1)
		for range y {
			r *= x
		}
		return NewInt(r)
	}
	if y == 0 {
		fail("division by zero")
	}
	q, m := x/y, x%y
	if m != 0 && (m < 0) != (y < 0) { // Python floors
		q--
		m += y
	}
	if op == "//" {
		return NewInt(q)
	}
	return NewInt(m)
}

// Python attributes that getattr would return as methods rather than fall through to an item: left to
// the interpreter unless called (method).
var dictMethods = map[string]bool{"items": true, "keys": true, "values": true, "get": true, "pop": true,
	"update": true, "copy": true, "clear": true, "setdefault": true, "fromkeys": true, "popitem": true}

var strMethods = map[string]bool{}

var listMethods = map[string]bool{"append": true, "extend": true, "insert": true, "remove": true, "pop": true,
	"clear": true, "index": true, "count": true, "sort": true, "reverse": true, "copy": true}

func init() {
	for _, m := range strings.Fields(`capitalize casefold center count encode endswith expandtabs find format
		format_map index isalnum isalpha isascii isdecimal isdigit isidentifier islower isnumeric isprintable
		isspace istitle isupper join ljust lower lstrip maketrans partition removeprefix removesuffix replace
		rfind rindex rjust rpartition rsplit rstrip split splitlines startswith strip swapcase title translate
		upper zfill`) {
		strMethods[m] = true
	}
}

// getattr is jinja2's environment.getattr: the attribute, else the item, else undefined; an
// undefined's attribute raises.
func getattr(obj Value, name string) Value {
	switch {
	case obj.IsDict():
		if dictMethods[name] {
			fail("the dict method %s as a value", name)
		}
		v, _ := obj.AsDict().Get(name)
		return v
	case obj.IsUndefined():
		fail("undefined has no attribute %s", name)
	case obj.IsString() && strMethods[name], obj.IsList() && listMethods[name]:
		fail("the %s method %s as a value", kindName(obj), name)
	}
	return Undefined()
}

// getitem is jinja2's environment.getitem: obj[key], else the attribute, else undefined.
func getitem(obj, key Value) Value {
	switch {
	case obj.IsDict():
		if !key.IsString() {
			return Undefined()
		}
		if v, ok := obj.AsDict().Get(key.AsString()); ok {
			return v
		}
		if dictMethods[key.AsString()] {
			fail("the dict method %s as a value", key.AsString())
		}
		return Undefined()
	case obj.IsList():
		if !key.IsInt() {
			fail("a list index of %s", kindName(key))
		}
		items := obj.Items()
		i := key.AsInt()
		if i < 0 {
			i += int64(len(items))
		}
		if i < 0 || i >= int64(len(items)) {
			return Undefined()
		}
		return items[i]
	case obj.IsString():
		if !key.IsInt() {
			fail("a string index of %s", kindName(key))
		}
		rs := []rune(obj.AsString())
		i := key.AsInt()
		if i < 0 {
			i += int64(len(rs))
		}
		if i < 0 || i >= int64(len(rs)) {
			return Undefined()
		}
		return NewString(string(rs[i]))
	case obj.IsUndefined():
		fail("undefined has no item")
	}
	fail("an item of a %s", kindName(obj))
	return Value{}
}

// slice is Python's obj[start:stop:step] on a list or a string (by code point).
func slice(obj, start, stop, step Value) Value {
	var n int
	switch {
	case obj.IsList():
		n = len(obj.Items())
	case obj.IsString():
		n = utf8.RuneCountInString(obj.AsString())
	default:
		fail("slicing a %s", kindName(obj))
	}
	st := int64(1)
	if !step.IsNone() {
		if !step.IsInt() || step.AsInt() == 0 {
			fail("slice step")
		}
		st = step.AsInt()
	}
	bound := func(v Value, def int64) int64 {
		if v.IsNone() {
			return def
		}
		if !v.IsInt() {
			fail("slice bound of %s", kindName(v))
		}
		i := v.AsInt()
		if i < 0 {
			i += int64(n)
			if i < 0 {
				if st < 0 {
					return -1
				}
				return 0
			}
		}
		if i >= int64(n) {
			if st < 0 {
				return int64(n) - 1
			}
			return int64(n)
		}
		return i
	}
	var lo, hi int64
	if st > 0 {
		lo, hi = bound(start, 0), bound(stop, int64(n))
	} else {
		lo, hi = bound(start, int64(n)-1), bound(stop, -1)
	}
	var idx []int64
	for i := lo; st > 0 && i < hi || st < 0 && i > hi; i += st {
		idx = append(idx, i)
	}
	if obj.IsList() {
		items := obj.Items()
		if st == 1 {
			return NewList(items[lo:max(lo, hi):max(lo, hi)])
		}
		out := make([]Value, len(idx))
		for k, i := range idx {
			out[k] = items[i]
		}
		return NewList(out)
	}
	rs := []rune(obj.AsString())
	out := make([]rune, len(idx))
	for k, i := range idx {
		out[k] = rs[i]
	}
	return NewString(string(out))
}

// iterate is what a for loop runs over: a list's items, a dict's keys, a string's characters, nothing
// for undefined.
func iterate(v Value) []Value {
	switch {
	case v.IsList():
		return v.Items()
	case v.IsDict():
		keys := v.AsDict().Keys()
		out := make([]Value, len(keys))
		for i, k := range keys {
			out[i] = NewString(k)
		}
		return out
	case v.IsString():
		var out []Value
		for _, r := range v.AsString() {
			out = append(out, NewString(string(r)))
		}
		return out
	case v.IsUndefined():
		return nil
	}
	fail("iterating a %s", kindName(v))
	return nil
}

// isPySpace is Python's str.isspace() for one character: Unicode White_Space and U+001C..U+001F.
func isPySpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }

func pyStrip(s string, chars Value, left, right bool) string {
	f := isPySpace
	if !chars.IsNone() && !chars.IsUndefined() {
		if !chars.IsString() {
			fail("strip characters of %s", kindName(chars))
		}
		set := chars.AsString()
		f = func(r rune) bool { return strings.ContainsRune(set, r) }
	}
	if left {
		s = strings.TrimLeftFunc(s, f)
	}
	if right {
		s = strings.TrimRightFunc(s, f)
	}
	return s
}
