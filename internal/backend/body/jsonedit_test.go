package body

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

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
