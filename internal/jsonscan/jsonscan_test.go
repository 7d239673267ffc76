package jsonscan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
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
		_, err := CheckTopObject(b)
		i := SkipWS(b, 0)
		want := json.Valid(b) && i < len(b) && b[i] == '{'
		if (err == nil) != want {
			t.Fatalf("CheckTopObject(%q) err = %v, json.Valid+object = %v", b, err, want)
		}
		if err != nil {
			return
		}
		// Every string member decodes like encoding/json does (for valid UTF-8).
		var ref map[string]json.RawMessage
		if err := json.Unmarshal(b, &ref); err != nil {
			t.Fatalf("json.Unmarshal: %v", err)
		}
		it := NewObjIter(b, 0)
		for {
			m, ok := it.Next()
			if !ok {
				break
			}
			raw := m.Value(b)
			if raw[0] != '"' || !utf8.Valid(raw) || bytes.Contains(raw, []byte(`\ud`)) || bytes.Contains(raw, []byte(`\uD`)) {
				continue
			}
			got, ok := Unquote(raw)
			var want string
			_ = json.Unmarshal(raw, &want)
			if !ok || got != want {
				t.Fatalf("Unquote(%s) = %q, %v; want %q", raw, got, ok, want)
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
		got, ok := Unquote([]byte(tt.raw))
		var ref string
		if err := json.Unmarshal([]byte(tt.raw), &ref); err != nil {
			t.Fatal(err)
		}
		if !ok || got != tt.want || got != ref {
			t.Errorf("Unquote(%s) = %q, %v; want %q (encoding/json %q)", tt.raw, got, ok, tt.want, ref)
		}
	}
}

func TestScannerDepthLimit(t *testing.T) {
	t.Parallel()
	deep := `{"a":` + strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1) + `}`
	if _, err := CheckTopObject([]byte(deep)); err == nil {
		t.Fatal("nesting beyond MaxDepth accepted")
	}
	ok := `{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`
	if _, err := CheckTopObject([]byte(ok)); err != nil {
		t.Fatalf("nesting of 100 rejected: %v", err)
	}
}

// TestArrIterNextStartIsNext: a walk that reads each element itself (NextStart, then ValueDone) sees
// the same elements, the same closing bracket and the same errors as Next.
func TestArrIterNextStartIsNext(t *testing.T) {
	for _, in := range []string{`[]`, ` [ 1 , [2, {"a":[3]}] ,"x" ] `, `[1,]`, `[1 2]`, `[`, `[1`, `[,1]`, `{}`} {
		type span struct{ s, e int }
		var want, got []span
		a := NewArrIter([]byte(in), 0)
		for {
			s, e, ok := a.Next()
			if !ok {
				break
			}
			want = append(want, span{s, e})
		}
		b := NewArrIter([]byte(in), 0)
		for {
			s, ok := b.NextStart()
			if !ok {
				break
			}
			e, err := SkipValue([]byte(in), s)
			if err != nil {
				b.Fail(err)
				break
			}
			b.ValueDone(e)
			got = append(got, span{s, e})
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || (a.Err == nil) != (b.Err == nil) || a.Close != b.Close {
			t.Errorf("%q: NextStart walk %v err %v close %d, Next walk %v err %v close %d", in, got, b.Err, b.Close, want, a.Err, a.Close)
		}
		if a.Err == nil && a.Close == 0 {
			t.Errorf("%q: clean walk without its closing bracket", in)
		}
	}
}

// An iterator resumed at a member's value walks the rest of the object as the whole walk does: the
// same members, the same end, the same verdict.
func TestResumeObjIterIsNextKey(t *testing.T) {
	walk := func(it ObjIter, b []byte, first Member, resumed bool) (keys []string, close int, err error) {
		for {
			m := first
			if !resumed {
				var ok bool
				if m, ok = it.NextKey(); !ok {
					return keys, it.Close, it.Err
				}
			}
			resumed = false
			end, err := SkipValueDepth(b, m.ValStart, 1)
			if err != nil {
				return keys, -1, err
			}
			keys = append(keys, m.Key(b))
			it.ValueDone(end)
		}
	}
	for _, s := range append(scannerSeeds, ` {"x":1, "y" : [2], "z":{"a":"b"} } `, `{"x":1,"y":2`, `{"x":1,"y":2,}`) {
		b := []byte(s)
		it := NewObjIter(b, 0)
		for n := 1; ; n++ {
			m, ok := it.NextKey()
			if !ok {
				break
			}
			wantKeys, wantClose, wantErr := walk(it, b, m, true)
			gotKeys, gotClose, gotErr := walk(ResumeObjIter(b, m.ValStart, n), b, m, true)
			if !slices.Equal(gotKeys, wantKeys) || gotClose != wantClose || (gotErr == nil) != (wantErr == nil) {
				t.Errorf("%q resumed at member %d: %q %d %v, want %q %d %v", s, n, gotKeys, gotClose, gotErr, wantKeys, wantClose, wantErr)
			}
			end, err := SkipValueDepth(b, m.ValStart, 1)
			if err != nil {
				break
			}
			it.ValueDone(end)
		}
	}
}
