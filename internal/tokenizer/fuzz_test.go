package tokenizer_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/sluicegw/sluice/internal/tokenizer"
)

// FuzzEncodeIsLossless: byte-level BPE loses nothing, so the tokens spelled back into bytes are the
// NFC form of the text, whatever the text (the splitter must also always advance, or this hangs).
func FuzzEncodeIsLossless(f *testing.F) {
	tk, err := tokenizer.Load(fixture{
		merges: [][2]string{{"a", "a"}, {"Ġ", "a"}, {"Ġ", "Ġ"}, {"1", "2"}},
		added:  []map[string]any{{"id": 300, "content": "<|x|>", "special": true}},
	}.write(f))
	if err != nil {
		f.Fatal(err)
	}
	unbyte := map[rune]byte{}
	for b := range 256 {
		r, _ := utf8.DecodeRuneInString(byteLevel(byte(b)))
		unbyte[r] = byte(b)
	}
	for _, s := range []string{"", "aa aaa  a\n\n \t x", "12 123 ١٢", "e\u0301 <|x|><|x| 'll 's", "\xff\xfe", "  \r\n  \u00a0\u3000x", "😀👩‍👩‍👧"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var got strings.Builder
		for i, tok := range tk.TokenStrings(tk.Encode(s)) {
			if tok == "<|x|>" {
				got.WriteString(tok)
				continue
			}
			for _, r := range tok {
				b, ok := unbyte[r]
				if !ok {
					t.Fatalf("token %d %q is not byte-level", i, tok)
				}
				got.WriteByte(b)
			}
		}
		// Added tokens are matched before normalization; the rest is NFC-normalized.
		var want strings.Builder
		for i, part := range strings.Split(s, "<|x|>") {
			if i > 0 {
				want.WriteString("<|x|>")
			}
			want.WriteString(norm.NFC.String(part))
		}
		if got.String() != want.String() {
			t.Fatalf("Encode(%q) spells %q, want %q", s, got.String(), want.String())
		}
	})
}
