package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/jsonscan"
)

// plain turns a template value back into what encoding/json decodes (numbers as float64).
func plain(v jinja.Value) any {
	switch {
	case v.IsNone():
		return nil
	case v.IsBool():
		return v.AsBool()
	case v.IsInt():
		return float64(v.AsInt())
	case v.IsFloat():
		return v.AsFloat()
	case v.IsString():
		return v.AsString()
	case v.IsList():
		out := []any{}
		for _, it := range v.AsList().Items {
			out = append(out, plain(it))
		}
		return out
	case v.IsDict():
		out := map[string]any{}
		for _, k := range v.AsDict().Keys {
			x, _ := v.AsDict().Get(k)
			out[k] = plain(x)
		}
		return out
	}
	return "?"
}

// FuzzParseValue (through interpreterValue, the interpreter's values for the same data): parseValue accepts exactly the JSON encoding/json accepts (UTF-8 input: the HTTP
// layer refuses other bodies) and decodes the same values.
func FuzzParseValue(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5,-0,1e3,"x\n\u00e9\ud83d\ude00\ud800"],"b":{"c":null,"d":true,"e":false}}`, `[]`, `{}`, `"\/\b\f\r\t\\\""`,
		`[1,]`, `{"a" 1}`, `01`, `1.`, `-`, `"\x"`, `"\u12"`, "\"\x01\"", `[[[[`, `{"a":1}x`, `123456789012345678901234567890`, ` "s" `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !utf8.Valid(data) {
			return
		}
		v, err := parseValue(data)
		var want any
		wantErr := json.Unmarshal(data, &want)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("parseValue(%q) error %v, encoding/json error %v", data, err, wantErr)
		}
		if err != nil {
			return
		}
		if diff := cmp.Diff(want, plain(interpreterValue(v)), cmp.Comparer(func(a, b float64) bool { return a == b || math.Abs(a-b) <= 1e-9*math.Abs(a) })); diff != "" {
			t.Fatalf("parseValue(%q) (-encoding/json +ours):\n%s", data, diff)
		}
	})
}

func TestParseValueKeepsOrderAndDepthLimit(t *testing.T) {
	v, err := parseValue([]byte(`{"z":1,"a":2,"m":{"y":1,"b":2},"z":3}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(v.AsDict().Keys(), ","); got != "z,a,m" {
		t.Errorf("keys %s, want z,a,m (a repeated key keeps its place)", got)
	}
	if z, _ := v.AsDict().Get("z"); z.AsInt() != 3 {
		t.Errorf("z = %v, want the last value 3", z)
	}
	deep := bytes.Repeat([]byte("["), jsonscan.MaxDepth+1)
	if _, err := parseValue(deep); !errors.Is(err, jsonscan.ErrSyntax) || !strings.Contains(err.Error(), "nesting too deep") {
		t.Errorf("parseValue(%d brackets): %v, want nesting too deep", len(deep), err)
	}
}
