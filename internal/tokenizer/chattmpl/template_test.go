package chattmpl

import (
	"errors"
	"strings"
	"testing"

	"github.com/ardanlabs/jinja"
)

// toJinja is v in the interpreter's values, to give both the same input.
func toJinja(v Value) jinja.Value {
	switch v.Kind() {
	case KindNone:
		return jinja.None()
	case KindBool:
		return jinja.NewBool(v.AsBool())
	case KindInt:
		return jinja.NewInt(v.AsInt())
	case KindFloat:
		return jinja.NewFloat(v.AsFloat())
	case KindString:
		return jinja.NewString(v.AsString())
	case KindList:
		items := make([]jinja.Value, len(v.Items()))
		for i, it := range v.Items() {
			items[i] = toJinja(it)
		}
		return jinja.NewList(items)
	case KindDict:
		d := jinja.NewDict()
		for i, k := range v.AsDict().Keys() {
			d.AsDict().Set(k, toJinja(v.AsDict().Value(i)))
		}
		return d
	}
	return jinja.Undefined()
}

func dict(kv ...any) Value {
	d := NewDict()
	for i := 0; i < len(kv); i += 2 {
		d.AsDict().Set(kv[i].(string), kv[i+1].(Value))
	}
	return d
}

func testVars() map[string]Value {
	msg := func(role, content string) Value {
		return dict("role", NewString(role), "content", NewString(content))
	}
	call := dict("id", NewString("abcdefghi"), "function", dict("name", NewString("f"),
		"arguments", dict("x", NewInt(1), "s", NewString("a\"b\n\u0001é"), "l", NewList([]Value{NewFloat(0.5), NewFloat(1e20), NewBool(true), None()}))))
	return map[string]Value{
		"messages": NewList([]Value{msg("system", "  sys \n"), msg("user", "hi"),
			dict("role", NewString("assistant"), "content", NewString(""), "tool_calls", NewList([]Value{call})),
			msg("user", "東京 🙂")}),
		"bos_token": NewString("<s>"),
		"n":         NewInt(7),
		"f":         NewFloat(2.5),
		"empty":     NewList(nil),
		"tools":     None(),
	}
}

// pythonDiffers are the templates below on which the interpreter differs from Python's jinja2, with
// jinja2's output (3.1.6, HF's environment: trim_blocks, lstrip_blocks, transformers' tojson), which
// the compiled form must give instead.
var pythonDiffers = map[string]string{
	// jinja2 drops the template's one final newline (keep_trailing_newline off); the interpreter keeps it.
	"a\n  {% if true %}\n  b\n  {% endif %}\nc\n":  "a\n  b\nc",
	"{# c #}\n  x {# d #}  y\n":                    "  x   y",
	"  {{ 'v' }}  \n{% if true %}w{% endif %}\n\n": "  v  \nw",
	// -n // 2 is (-n) // 2; a float prints as Python's repr; none ~ prints None.
	"{{ n // 2 }} {{ n % 3 }} {{ -n // 2 }} {{ n / 2 }} {{ f * 2 }} {{ n ** 2 }} {{ 'ab' ~ n ~ none }}": "3 1 -4 3.5 5.0 49 ab7None",
	// transformers' tojson keeps the keys' order and prints floats as Python does.
	"{{ messages[2].tool_calls[0].function.arguments | tojson(indent=2) }}": "{\n  \"x\": 1,\n  \"s\": \"a\\\"b\\n\\u0001é\",\n  \"l\": [\n    0.5,\n    1e+20,\n    true,\n    null\n  ]\n}",
	// Floats in JSON as Python's json.dumps writes them (the interpreter writes 2.0 as 2).
	"{{ [2.0, -0.0, 10000000000000000.0, 0.0001, 0.00001, 123456789012345678.0] | tojson }}": "[2.0, -0.0, 1e+16, 0.0001, 1e-05, 1.2345678901234568e+17]",
	// True == 1 in Python.
	"{{ messages[0] == messages[0] }} {{ messages[0] == messages[1] }} {{ 1 == 1.0 }} {{ true == 1 }}": "True False True True",
}

// TestTemplatesAreTheInterpreter runs small templates, one construct or whitespace rule each, through
// Compile and through the interpreter (which applies HF's trim_blocks and lstrip_blocks as jinja2
// does): the same text, or jinja2's where the interpreter is known to differ from it.
func TestTemplatesAreTheInterpreter(t *testing.T) {
	for _, src := range []string{
		// whitespace: trim_blocks, lstrip_blocks, - marks, comments, a final newline dropped
		"a\n  {% if true %}\n  b\n  {% endif %}\nc\n",
		"a  {%- if true -%}  b  {%- endif %}  c",
		"{# c #}\n  x {# d #}  y\n",
		"  {{ 'v' }}  \n{% if true %}w{% endif %}\n\n",
		"x\n    {%- for m in messages %}\n  {{ m.role }}\n{% endfor %}",
		"{% if true %}\r\nx{% endif %}",
		// loops
		"{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.length }}/{{ loop.revindex }}/{{ loop.first }}/{{ loop.last }};{% endfor %}",
		"{% for m in messages if m.role != 'system' %}{{ loop.index0 }}{{ m.role }}{% endfor %}",
		"{% for x in empty %}no{% else %}else{% endfor %}",
		"{% for k, v in messages[2].tool_calls[0].function.items() %}{{ k }}={{ v is mapping }};{% endfor %}",
		"{% set x = 1 %}{% for m in messages %}{% set x = 2 %}{% endfor %}{{ x }}",
		"{% set ns = namespace(c=0) %}{% for m in messages %}{% set ns.c = ns.c + 1 %}{% endfor %}{{ ns.c }}",
		"{% for m in messages[::-1] %}{{ m.role }}{% endfor %}|{% for m in messages[1:3] %}{{ m.role }}{% endfor %}|{{ messages[-1].content }}",
		// expressions, filters, tests, methods
		"{{ n // 2 }} {{ n % 3 }} {{ -n // 2 }} {{ n / 2 }} {{ f * 2 }} {{ n ** 2 }} {{ 'ab' ~ n ~ none }}",
		"{{ messages[0].content | trim }}|{{ messages[0].content.strip() }}|{{ messages[0].content.lstrip() }}|{{ 'xxaxx'.strip('x') }}",
		"{{ messages | length }} {{ 'é東' | length }} {{ messages | selectattr('role', 'equalto', 'user') | list | length }}",
		"{{ messages | rejectattr('tool_calls', 'undefined') | list | length }}",
		"{{ messages[2].tool_calls[0].function | tojson }}",
		"{{ [2.0, -0.0, 10000000000000000.0, 0.0001, 0.00001, 123456789012345678.0] | tojson }}",
		"{{ messages[2].tool_calls[0].function.arguments | tojson(indent=2) }}",
		"{{ 'a,b,,c'.split(',') | join('|') }} {{ ' a  b '.split() | length }} {{ 'x</think>y'.split('</think>')[-1] }}",
		"{{ messages[1].content.startswith('h') }} {{ 'hi' in messages[1].content }} {{ 'zz' not in 'abc' }} {{ 1 < 2 < 3 }}",
		"{{ tools is none }} {{ nothing is defined }} {{ n is number }} {{ 'x' is string }} {{ true is true }} {{ 0 is false }}",
		"{{ 'yes' if n > 3 else 'no' }} {{ 'only' if false }}| {{ n and 'a' }} {{ 0 or 'b' }} {{ not n }}",
		"{{ [1, 'a', none] | length }} {{ {'k': 1}.k }} {{ (n + 1) * 2 }} {{ messages[0]['role'] == 'system' }}",
		"{{ messages[0] == messages[0] }} {{ messages[0] == messages[1] }} {{ 1 == 1.0 }} {{ true == 1 }}",
		"{{ messages | first | tojson }} {{ (messages | last).role }} {{ range(3) | join(',') }}",
		"{% if messages[0].content.content is defined %}x{% else %}y{% endif %}",
	} {
		tmpl, err := Compile(src)
		if err != nil {
			t.Errorf("Compile(%q): %v", src, err)
			continue
		}
		ref, err := jinja.Compile(src)
		if err != nil {
			t.Fatalf("the interpreter refuses %q: %v", src, err)
		}
		vars := testVars()
		jv := map[string]jinja.Value{}
		for k, v := range vars {
			jv[k] = toJinja(v)
		}
		want, werr := ref.RenderValues(jv)
		got, gerr := tmpl.Render(vars)
		if werr != nil || gerr != nil {
			t.Errorf("%q: the interpreter %v, compiled %v", src, werr, gerr)
			continue
		}
		if py, ok := pythonDiffers[src]; ok {
			if want == py {
				t.Errorf("%q: the interpreter renders it as jinja2 does now: drop its pythonDiffers entry", src)
			}
			want = py
		}
		if got != want {
			t.Errorf("%q:\ncompiled %q\nwant     %q", src, got, want)
		}
	}
}

// TestRaiseAndLeftOver: raise_exception is ErrRaised with the template's message; what the compiled
// form does not render (printing a list) is an error that is not a raise.
func TestRaiseAndLeftOver(t *testing.T) {
	tmpl, err := Compile("{% if messages | length > 2 %}{{ raise_exception('too many: ' ~ messages | length) }}{% endif %}")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render(testVars())
	if !Raised(err) || !strings.Contains(err.Error(), "too many: 4") {
		t.Errorf("Render = %v, want ErrRaised with the message", err)
	}
	tmpl, err = Compile("{{ messages }}")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmpl.Render(testVars()); err == nil || Raised(err) {
		t.Errorf("printing a list: %v, want an error that is not a raise", err)
	}
	if _, err := Compile("{{ x | wordwrap }}"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("an unknown filter: %v, want ErrUnsupported", err)
	}
}
