package tokenizer_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/tokenizer"
)

// In the fixture, id b < 256 is the token of byte b, so ids spell raw bytes.

func decodeFixture(t testing.TB, cleanUp bool) *tokenizer.Tokenizer {
	t.Helper()
	f := fixture{
		merges: [][2]string{{"Ġ", "a"}, {"ä", "½"}, {"ä½", "ł"}}, // " a", then 你 (E4 BD A0) in two merges
		added: []map[string]any{
			{"id": 300, "content": "<|s|>", "special": true},
			{"id": 301, "content": "<t>", "special": false},
			{"id": 302, "content": "<n>\n", "special": false},   // '\n' is not in the byte table: decoded as written
			{"id": 303, "content": "Ġ<g>", "special": false},    // every rune is: decoded through the table, as tokenizers does
			{"id": 310, "content": "<|eos|>", "special": false}, // special through tokenizer_config's eos_token
		},
		config: map[string]any{"eos_token": "<|eos|>", "clean_up_tokenization_spaces": cleanUp},
	}
	tk, err := tokenizer.Load(f.write(t))
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func TestDecode(t *testing.T) {
	t.Parallel()
	tk := decodeFixture(t, false)
	const ni = 258 // 你
	tests := []struct {
		ids  []int
		skip bool
		want string
	}{
		{nil, false, ""},
		{[]int{'h', 'i', 256, ' ', ni}, false, "hi a 你"},
		{[]int{300, 'x', 301, 302, 303, 310}, false, "<|s|>x<t><n>\n <g><|eos|>"},
		{[]int{300, 'x', 301, 302, 303, 310}, true, "x<t><n>\n <g>"},
		{[]int{257}, false, "\uFFFD"},                       // E4 BD, cut short
		{[]int{257, 0xA0}, false, "你"},                      // ... completed by the next token
		{[]int{257, 300, 0xA0}, false, "\uFFFD<|s|>\uFFFD"}, // an added token between breaks it
		{[]int{257, 300, 0xA0}, true, "你"},                  // unless it is skipped
		{[]int{0xF0, 0x9F, 0x98, 0x80}, false, "😀"},
		{[]int{0xF0, 0x9F, 0x98}, false, "\uFFFD"},
		// Unicode 15.1 §3.9 (U+FFFD substitution of maximal subparts), Table 3-11's example.
		{[]int{0x61, 0xF1, 0x80, 0x80, 0xE1, 0x80, 0xC2, 0x62, 0x80, 0x63, 0x80, 0xBF, 0x64}, false, "a\uFFFD\uFFFD\uFFFDb\uFFFDc\uFFFD\uFFFDd"},
		{[]int{0xC0, 0xAF}, false, "\uFFFD\uFFFD"},             // overlong
		{[]int{0xE0, 0x80, 0x80}, false, "\uFFFD\uFFFD\uFFFD"}, // overlong: E0 takes A0-BF next
		{[]int{0xED, 0xA0, 0x80}, false, "\uFFFD\uFFFD\uFFFD"}, // surrogate
		{[]int{0xF4, 0x90, 0x80, 0x80}, false, "\uFFFD\uFFFD\uFFFD\uFFFD"},
		{[]int{0xF5, 0xFF, 0xFE}, false, "\uFFFD\uFFFD\uFFFD"},
		{[]int{0xEF, 0xBF, 0xBD}, false, "\uFFFD"}, // a real U+FFFD
	}
	for _, tc := range tests {
		got, err := tk.Decode(tc.ids, tc.skip)
		if err != nil || got != tc.want {
			t.Errorf("Decode(%v, %v) = %q, %v; want %q", tc.ids, tc.skip, got, err, tc.want)
		}
	}
}

func TestDecodeUnknownID(t *testing.T) {
	t.Parallel()
	tk := decodeFixture(t, false)
	for _, id := range []int{-1, 304, 311, 1 << 30} { // 304 is a hole between added ids
		_, err := tk.Decode([]int{'a', id}, false)
		var u *tokenizer.UnknownTokenError
		if !errors.As(err, &u) || u.ID != id || u.Index != 1 || !strings.Contains(err.Error(), "tokens[1]") {
			t.Errorf("Decode(id %d): %v, want an UnknownTokenError for tokens[1]", id, err)
		}
	}
}

func TestDecodeCleanUp(t *testing.T) {
	t.Parallel()
	const text = "a , b . I do n't know , it 's ' x ' ok ?"
	for _, tc := range []struct {
		cleanUp bool
		want    string
	}{{false, text}, {true, "a, b. I don't know, it's'x'ok?"}} {
		tk := decodeFixture(t, tc.cleanUp)
		if got, err := tk.Decode(bytesIDs(text), false); err != nil || got != tc.want {
			t.Errorf("clean_up_tokenization_spaces %v: Decode = %q, %v; want %q", tc.cleanUp, got, err, tc.want)
		}
	}
}

func bytesIDs(s string) []int {
	out := make([]int, len(s))
	for i := range len(s) {
		out[i] = int(s[i])
	}
	return out
}

// TestCheckIDs: ids a client sends as a prompt are checked as Decode checks them; the first unknown
// one is named with its position.
func TestCheckIDs(t *testing.T) {
	t.Parallel()
	tk := decodeFixture(t, false)
	if err := tk.CheckIDs([]uint32{'a', 'b', 256, 300, 310}); err != nil {
		t.Errorf("CheckIDs(known ids) = %v, want nil", err)
	}
	for _, id := range []uint32{304, 311, 1 << 30, 1<<32 - 1} { // 304 is a hole between added ids
		err := tk.CheckIDs([]uint32{'a', id, 1 << 31})
		var u *tokenizer.UnknownTokenError
		if !errors.As(err, &u) || u.ID != int(id) || u.Index != 1 {
			t.Errorf("CheckIDs(id %d): %v, want an UnknownTokenError for index 1", id, err)
		}
	}
}
