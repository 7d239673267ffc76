package chattmpl

import "math"

// Kind is a Value's type, as JSON and the templates have them.
type Kind uint8

// The kinds of Value.
const (
	KindUndefined Kind = iota // a missing variable, key or index
	KindNone
	KindBool
	KindInt
	KindFloat
	KindString
	KindList
	KindDict
)

// Value is a template value. It is a plain struct, not an interface: making a string or a number
// allocates nothing, which the interpreter's values (an `any` inside) do for every one; and a dict is
// a slice of pairs, not a map, since a chat's dicts (messages, tool calls) have a handful of keys.
type Value struct {
	kind Kind
	n    int64 // bool (0 or 1), int, or a float's bits
	s    string
	l    *[]Value // a pointer, not the slice: the Value is 48 bytes, not 64
	d    *Dict
}

// Dict is a dict in insertion order, as Python's. Its first keys live in the struct itself, so a
// message's dict is one allocation.
type Dict struct {
	keys []string
	vals []Value
	kbuf [2]string
	vbuf [2]Value
}

// Undefined is the zero Value.
func Undefined() Value         { return Value{} }
func None() Value              { return Value{kind: KindNone} }
func NewString(s string) Value { return Value{kind: KindString, s: s} }
func NewInt(n int64) Value     { return Value{kind: KindInt, n: n} }
func NewFloat(f float64) Value { return Value{kind: KindFloat, n: int64(math.Float64bits(f))} }
func NewList(l []Value) Value  { return Value{kind: KindList, l: &l} }

// NewDict is an empty dict.
func NewDict() Value {
	d := &Dict{}
	d.keys, d.vals = d.kbuf[:0], d.vbuf[:0]
	return Value{kind: KindDict, d: d}
}

func NewBool(b bool) Value {
	if b {
		return Value{kind: KindBool, n: 1}
	}
	return Value{kind: KindBool}
}

func (v Value) Kind() Kind        { return v.kind }
func (v Value) IsUndefined() bool { return v.kind == KindUndefined }
func (v Value) IsNone() bool      { return v.kind == KindNone }
func (v Value) IsBool() bool      { return v.kind == KindBool }
func (v Value) IsInt() bool       { return v.kind == KindInt }
func (v Value) IsFloat() bool     { return v.kind == KindFloat }
func (v Value) IsString() bool    { return v.kind == KindString }
func (v Value) IsList() bool      { return v.kind == KindList }
func (v Value) IsDict() bool      { return v.kind == KindDict }
func (v Value) AsBool() bool      { return v.n != 0 }
func (v Value) AsInt() int64      { return v.n }
func (v Value) AsFloat() float64  { return math.Float64frombits(uint64(v.n)) }
func (v Value) AsString() string  { return v.s }
func (v Value) Items() []Value {
	if v.l == nil {
		return nil
	}
	return *v.l
}
func (v Value) AsDict() *Dict { return v.d }

// IsTruthy is Python's bool(v).
func (v Value) IsTruthy() bool {
	switch v.kind {
	case KindBool, KindInt:
		return v.n != 0
	case KindFloat:
		return v.AsFloat() != 0
	case KindString:
		return v.s != ""
	case KindList:
		return len(*v.l) > 0
	case KindDict:
		return len(v.d.keys) > 0
	}
	return false
}

// Get is d[key].
func (d *Dict) Get(key string) (Value, bool) {
	for i, k := range d.keys {
		if k == key {
			return d.vals[i], true
		}
	}
	return Value{}, false
}

// Set is d[key] = v: a new key goes last, an existing one keeps its place.
func (d *Dict) Set(key string, v Value) {
	for i, k := range d.keys {
		if k == key {
			d.vals[i] = v
			return
		}
	}
	d.keys = append(d.keys, key)
	d.vals = append(d.vals, v)
}

func (d *Dict) Has(key string) bool { _, ok := d.Get(key); return ok }
func (d *Dict) Len() int            { return len(d.keys) }

// Keys are d's keys in order; the caller does not modify them.
func (d *Dict) Keys() []string { return d.keys }

// Value is the value of the i-th key.
func (d *Dict) Value(i int) Value { return d.vals[i] }
