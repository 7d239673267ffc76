package body

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"
)

var scannerSeeds = []string{
	`{}`, ` { } `, `{"a":1}`, `{"a":1,}`, `{,}`, `{"a" 1}`, `{"a":}`, `{"a":01}`, `{"a":-0.5e+3}`,
	`{"a":1.}`, `{"a":.5}`, `{"a":-}`, `{"a":1e}`, `{"a":"\u00e9\n\"x\\"}`, `{"a":"\x"}`, `{"a":"\u12"}`,
	"{\"a\":\"\x01\"}", `{"a":[1,[2,{"b":null}],true,false]}`, `{"a":[1,]}`, `{"a":tru}`, `{"a":nul}`,
	`{"a":1}x`, `{"a":1} {}`, `[1]`, `"x"`, ``, `{"a":{"b":{"c":[[[]]]}}}`, `{"a":"` + strings.Repeat("xy", 40) + `"}`,
	`{"a":"` + strings.Repeat("x", 13) + `\"` + strings.Repeat("é", 9) + `"}`, "{\"a\":\"\xff\xfe\"}",
	`{"a":[1 2]}`, `{"a":1 "b":2}`, `{"a":"\ud83d\ude00"}`, `{"a":"\ud83d"}`, `{"":1e700}`,
}

// The scanner accepts exactly the JSON objects encoding/json accepts.
func FuzzScannerMatchesEncodingJSON(f *testing.F) {
	for _, s := range scannerSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := checkTopObject(b)
		i := skipWS(b, 0)
		want := json.Valid(b) && i < len(b) && b[i] == '{'
		if (err == nil) != want {
			t.Fatalf("checkTopObject(%q) err = %v, json.Valid+object = %v", b, err, want)
		}
		if err != nil {
			return
		}
		// Every string member decodes like encoding/json does (for valid UTF-8).
		var ref map[string]json.RawMessage
		if err := json.Unmarshal(b, &ref); err != nil {
			t.Fatalf("json.Unmarshal: %v", err)
		}
		it := newObjIter(b, 0)
		for {
			m, ok := it.next()
			if !ok {
				break
			}
			raw := m.value(b)
			if raw[0] != '"' || !utf8.Valid(raw) || bytes.Contains(raw, []byte(`\ud`)) || bytes.Contains(raw, []byte(`\uD`)) {
				continue
			}
			got, ok := unquote(raw)
			var want string
			_ = json.Unmarshal(raw, &want)
			if !ok || got != want {
				t.Fatalf("unquote(%s) = %q, %v; want %q", raw, got, ok, want)
			}
		}
	})
}

func TestUnquoteSurrogates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw  string
		want string
	}{
		{`"\ud83d\ude00"`, "😀"},
		{`"a\ud83db"`, "a\ufffdb"},
		{`"\u00e9\t\/"`, "é\t/"},
		{`"plain"`, "plain"},
	}
	for _, tt := range tests {
		got, ok := unquote([]byte(tt.raw))
		var ref string
		if err := json.Unmarshal([]byte(tt.raw), &ref); err != nil {
			t.Fatal(err)
		}
		if !ok || got != tt.want || got != ref {
			t.Errorf("unquote(%s) = %q, %v; want %q (encoding/json %q)", tt.raw, got, ok, tt.want, ref)
		}
	}
}

func TestScannerDepthLimit(t *testing.T) {
	t.Parallel()
	deep := `{"a":` + strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1) + `}`
	if _, err := checkTopObject([]byte(deep)); err == nil {
		t.Fatal("nesting beyond maxDepth accepted")
	}
	ok := `{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`
	if _, err := checkTopObject([]byte(ok)); err != nil {
		t.Fatalf("nesting of 100 rejected: %v", err)
	}
}

// rewriteObject keeps the decoded object equal to the expected edit of the original, and keeps
// untouched members' bytes.
func TestRewriteObjectProperty(t *testing.T) {
	t.Parallel()
	keys := []string{"a", "b", "c", "d", "model", "stream"}
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 5).Draw(t, "members")
		var b strings.Builder
		ws := func() string { return rapid.SampledFrom([]string{"", " ", "\n  ", "\t"}).Draw(t, "ws") }
		b.WriteString("{" + ws())
		want := map[string]any{}
		for i := range n {
			if i > 0 {
				b.WriteString(ws() + "," + ws())
			}
			k := rapid.SampledFrom(keys).Draw(t, "key")
			v := rapid.IntRange(0, 99).Draw(t, "val")
			b.WriteString(`"` + k + `"` + ws() + ":" + ws() + strings.Repeat(" ", 0))
			vj, _ := json.Marshal(v)
			b.Write(vj)
			// encoding/json keeps the last duplicate; rewriteObject replaces all of them on set.
			want[k] = float64(v)
		}
		b.WriteString(ws() + "}")
		body := []byte(b.String())

		var edits []field
		used := map[string]bool{}
		for range rapid.IntRange(0, 3).Draw(t, "edits") {
			k := rapid.SampledFrom(keys).Draw(t, "ekey")
			if used[k] {
				continue
			}
			used[k] = true
			if rapid.Bool().Draw(t, "delete") {
				edits = append(edits, field{key: k})
				delete(want, k)
			} else {
				v := rapid.IntRange(100, 199).Draw(t, "eval")
				vj, _ := json.Marshal(v)
				edits = append(edits, field{key: k, value: vj})
				want[k] = float64(v)
			}
		}
		out, err := rewriteObject(body, edits)
		if err != nil {
			t.Fatalf("rewriteObject(%q): %v", body, err)
		}
		var got map[string]any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("output %q is not JSON: %v", out, err)
		}
		if len(got) != len(want) {
			t.Fatalf("rewriteObject(%q, %v) = %q; want keys %v", body, edits, out, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("rewriteObject(%q, %v) = %q; %s = %v, want %v", body, edits, out, k, got[k], v)
			}
		}
		if len(edits) == 0 && !bytes.Equal(out, body) {
			t.Fatalf("no edits changed %q to %q", body, out)
		}
	})
}

func TestRewriteObjectErrors(t *testing.T) {
	t.Parallel()
	for _, body := range []string{``, `[]`, `{"a":1`, `{"a":1}}`, `{"a":1} x`} {
		if _, err := rewriteObject([]byte(body), []field{{"x", []byte("1")}}); err == nil {
			t.Errorf("rewriteObject(%q) accepted", body)
		}
	}
}
