package tokenizer_test

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"

	"github.com/sluicegw/sluice/internal/tokenizer"
)

// TestDecodeStreamUnknownID: an unknown id is an error and leaves the stream as it was.
func TestDecodeStreamUnknownID(t *testing.T) {
	t.Parallel()
	tk := decodeFixture(t, false)
	d := tk.NewDecodeStream(false)
	if _, err := d.Step(0xE4); err != nil {
		t.Fatal(err)
	}
	var u *tokenizer.UnknownTokenError
	if _, err := d.Step(304); !errors.As(err, &u) || u.ID != 304 || u.Index != -1 {
		t.Errorf("Step(304): %v, want an UnknownTokenError", err)
	}
	// The held byte still completes.
	if s, err := d.Step(0xBD); s != "" || err != nil {
		t.Errorf("Step(0xBD) = %q, %v", s, err)
	}
	if s, err := d.Step(0xA0); s != "你" || err != nil {
		t.Errorf("Step(0xA0) = %q, %v, want 你", s, err)
	}
}

// streamOf is the text of ids decoded one Step at a time and flushed. Equal to Decode's, it shows no Step
// wrote U+FFFD for bytes a later id completed: Decode has the character there.
func streamOf(t *testing.T, tk *tokenizer.Tokenizer, ids []int, skip bool) string {
	t.Helper()
	d := tk.NewDecodeStream(skip)
	var b strings.Builder
	for i, id := range ids {
		s, err := d.Step(id)
		if err != nil {
			t.Fatalf("Step(ids[%d] = %d): %v", i, id, err)
		}
		b.WriteString(s)
	}
	b.WriteString(d.Flush())
	return b.String()
}

// idPool is what random sequences draw from: bytes (every lead, continuation and invalid byte), the
// merged tokens (one a character's first two bytes), added tokens special or not.
var idPool = func() []int {
	p := []int{256, 257, 258, 300, 301, 302, 303, 310, ' ', ',', '.', '\'', 'n', 't', 's', 'x'}
	for b := 0x80; b < 0x100; b++ {
		p = append(p, b)
	}
	return p
}()

func randomIDs(r *rand.Rand) []int {
	ids := make([]int, r.IntN(40))
	for i := range ids {
		ids[i] = idPool[r.IntN(len(idPool))]
	}
	return ids
}

// TestDecodeStreamIsDecode: whatever the ids, the stream's text is Decode's, with clean-up on or off and
// special tokens skipped or not.
func TestDecodeStreamIsDecode(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for _, cleanUp := range []bool{false, true} {
		tk := decodeFixture(t, cleanUp)
		for range 5000 {
			ids := randomIDs(r)
			for _, skip := range []bool{false, true} {
				want, err := tk.Decode(ids, skip)
				if err != nil {
					t.Fatal(err)
				}
				if got := streamOf(t, tk, ids, skip); got != want {
					t.Fatalf("clean-up %v, skip %v, ids %v: stream %q, Decode %q", cleanUp, skip, ids, got, want)
				}
			}
		}
	}
}

// TestDecodeStreamHoldsIncomplete: a character split over tokens comes out whole with its last byte, and
// bytes that can never be one come out at once.
func TestDecodeStreamHoldsIncomplete(t *testing.T) {
	t.Parallel()
	tk := decodeFixture(t, false)
	d := tk.NewDecodeStream(false)
	for i, step := range []struct {
		id   int
		want string
	}{
		{'a', "a"}, {0xF0, ""}, {0x9F, ""}, {0x98, ""}, {0x80, "😀"},
		{257, ""}, {0xA0, "你"},
		{0xE4, ""}, {'b', "\uFFFDb"}, // cut short by an ASCII byte
		{0xE0, ""}, {0x80, "\uFFFD\uFFFD"}, // E0 80 can never begin a character
		{0xC3, ""},
	} {
		if got, err := d.Step(step.id); err != nil || got != step.want {
			t.Fatalf("step %d (id %#x) = %q, %v; want %q", i, step.id, got, err, step.want)
		}
	}
	if got := d.Flush(); got != "\uFFFD" {
		t.Errorf("Flush = %q, want U+FFFD for the C3 held", got)
	}
	if got := d.Flush(); got != "" {
		t.Errorf("second Flush = %q", got)
	}
}

// FuzzDecodeStream: stream and Decode agree on any ids (each fuzz byte picks one from idPool), and
// Decode(Encode(s)) is the NFC form of s.
func FuzzDecodeStream(f *testing.F) {
	tk := decodeFixture(f, true)
	tkNoClean := decodeFixture(f, false)
	f.Add([]byte{1, 2, 3, 200, 17, 90}, "a , b 你好 😀 <|s|><t>")
	f.Fuzz(func(t *testing.T, picks []byte, s string) {
		ids := make([]int, len(picks))
		for i, p := range picks {
			ids[i] = idPool[int(p)%len(idPool)]
		}
		for _, k := range []*tokenizer.Tokenizer{tk, tkNoClean} {
			for _, skip := range []bool{false, true} {
				want, err := k.Decode(ids, skip)
				if err != nil {
					t.Fatal(err)
				}
				if got := streamOf(t, k, ids, skip); got != want {
					t.Fatalf("skip %v, ids %v: stream %q, Decode %q", skip, ids, got, want)
				}
			}
		}
		// Without added tokens (which all need a '<'), encoding loses nothing but what NFC changes, and
		// decoding replaces invalid bytes as Decode of the bytes does.
		s = strings.ReplaceAll(s, "<", "")
		got, err := tkNoClean.Decode(tkNoClean.Encode(s), false)
		if err != nil {
			t.Fatal(err)
		}
		want, err := tkNoClean.Decode(bytesIDs(norm.NFC.String(s)), false)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("Decode(Encode(%q)) = %q, want %q", s, got, want)
		}
	})
}
