package stop_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"

	"github.com/sluicegw/sluice/internal/stop"
)

type tok struct {
	id   int
	text string
}

// texts is tokens of id 1 with these texts.
func texts(ts ...string) []tok {
	out := make([]tok, len(ts))
	for i, s := range ts {
		out[i] = tok{1, s}
	}
	return out
}

// run feeds toks until done and returns each Feed's emit, the Finish text last when Feed never said done.
// The emitted text is dropped once compactAt bytes are.
func run(t testing.TB, p stop.Params, toks []tok, compactAt int) (emits []string, end stop.End) {
	t.Helper()
	m, err := stop.NewCompacting(p, compactAt)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range toks {
		emit, done := m.Feed(k.id, k.text)
		emits = append(emits, emit)
		if done {
			return emits, m.Result()
		}
	}
	return append(emits, m.Finish()), m.Result()
}

func TestMatcher(t *testing.T) {
	t.Parallel()
	const eos, im = 9, 8
	tests := []struct {
		name  string
		p     stop.Params
		toks  []tok
		emits []string // per Feed, then Finish's when no Feed said done
		end   stop.End
	}{
		{"no stops: nothing held", stop.Params{}, texts("ab", "c"),
			[]string{"ab", "c", ""}, stop.End{StopToken: -1}},
		{"stop split across 3 tokens", stop.Params{Stop: []string{"STOP"}}, texts("xS", "T", "O", "Py"),
			[]string{"x", "", "", ""}, stop.End{Reason: "stop", StopString: "STOP", StopToken: -1}},
		{"held text that does not complete is released", stop.Params{Stop: []string{"STOP"}}, texts("xST", "Ox", "y"),
			[]string{"x", "STOx", "y", ""}, stop.End{StopToken: -1}},
		{"only the longest suffix that begins a stop is held", stop.Params{Stop: []string{"abc"}}, texts("aab", "x"),
			[]string{"a", "abx", ""}, stop.End{StopToken: -1}},
		{"overlapping stops: the first completed wins", stop.Params{Stop: []string{"abc", "bc", "ab"}}, texts("xa", "bc"),
			[]string{"x", ""}, stop.End{Reason: "stop", StopString: "ab", StopToken: -1}},
		{"overlapping stops, one token apart", stop.Params{Stop: []string{"abc", "bc"}}, texts("xa", "b", "c"),
			[]string{"x", "", ""}, stop.End{Reason: "stop", StopString: "abc", StopToken: -1}},
		{"same end: list order", stop.Params{Stop: []string{"bc", "abc"}}, texts("xabc"),
			[]string{"xa"}, stop.End{Reason: "stop", StopString: "bc", StopToken: -1}},
		{"a stop that is a prefix of another ends first", stop.Params{Stop: []string{"<end>", "<e"}}, texts("x<", "end>"),
			[]string{"x", ""}, stop.End{Reason: "stop", StopString: "<e", StopToken: -1}},
		{"text after the stop in its token is dropped", stop.Params{Stop: []string{"."}}, texts("hi. more"),
			[]string{"hi"}, stop.End{Reason: "stop", StopString: ".", StopToken: -1}},
		{"include_stop_str_in_output", stop.Params{Stop: []string{"STOP"}, IncludeStop: true}, texts("xS", "T", "OPy"),
			[]string{"xS", "T", "OP"}, stop.End{Reason: "stop", StopString: "STOP", StopToken: -1}},
		{"unicode stop", stop.Params{Stop: []string{"終わり"}}, texts("a終", "わ", "りb"),
			[]string{"a", "", ""}, stop.End{Reason: "stop", StopString: "終わり", StopToken: -1}},
		{"unicode: a rune's prefix bytes never match", stop.Params{Stop: []string{"é!"}}, texts("è", "!"),
			[]string{"è", "!", ""}, stop.End{StopToken: -1}},
		{"stop string inside min_tokens", stop.Params{Stop: []string{"ab"}, MinTokens: 2}, texts("ab", "x", "ab"),
			[]string{"ab", "x", ""}, stop.End{Reason: "stop", StopString: "ab", StopToken: -1}},
		{"stop string begun inside min_tokens, ended after", stop.Params{Stop: []string{"abc"}, MinTokens: 1}, texts("xab", "c"),
			[]string{"x", ""}, stop.End{Reason: "stop", StopString: "abc", StopToken: -1}},
		{"stop token inside min_tokens is text", stop.Params{StopTokenIDs: []int{im}, MinTokens: 1}, []tok{{im, "<im>"}, {im, "<im>"}},
			[]string{"<im>", ""}, stop.End{Reason: "stop", StopToken: im}},
		{"eos inside min_tokens is text", stop.Params{EOS: []int{eos}, MinTokens: 1}, []tok{{eos, ""}, {1, "a"}, {eos, ""}},
			[]string{"", "a", ""}, stop.End{Reason: "stop", StopToken: -1}},
		{"stop token's text dropped, held text released", stop.Params{Stop: []string{"ab"}, StopTokenIDs: []int{im}}, []tok{{1, "xa"}, {im, "b"}},
			[]string{"x", "a"}, stop.End{Reason: "stop", StopToken: im}},
		{"stop token kept with include", stop.Params{StopTokenIDs: []int{im}, IncludeStop: true}, []tok{{1, "x"}, {im, "<im>"}},
			[]string{"x", "<im>"}, stop.End{Reason: "stop", StopToken: im}},
		{"eos: stop_reason None", stop.Params{EOS: []int{eos}}, []tok{{1, "x"}, {eos, ""}},
			[]string{"x", ""}, stop.End{Reason: "stop", StopToken: -1}},
		{"generation_config eos: reported by id", stop.Params{GenerationEOS: []int{im}}, []tok{{1, "x"}, {im, ""}},
			[]string{"x", ""}, stop.End{Reason: "stop", StopToken: im}},
		{"ignore_eos", stop.Params{EOS: []int{eos}, GenerationEOS: []int{im}, StopTokenIDs: []int{7}, IgnoreEOS: true},
			[]tok{{eos, "e"}, {im, "i"}, {7, "s"}, {1, "x"}},
			[]string{"e", "i", ""}, stop.End{Reason: "stop", StopToken: 7}},
		{"max_tokens releases the held text", stop.Params{Stop: []string{"abc"}, MaxTokens: 2}, texts("x", "ab", "c"),
			[]string{"x", "ab"}, stop.End{Reason: "length", StopToken: -1}},
		{"a stop string on the last token is stop", stop.Params{Stop: []string{"ab"}, MaxTokens: 2}, texts("xa", "b"),
			[]string{"x", ""}, stop.End{Reason: "stop", StopString: "ab", StopToken: -1}},
		{"empty stop list", stop.Params{Stop: []string{}}, texts("a", "b"),
			[]string{"a", "b", ""}, stop.End{StopToken: -1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, at := range []int{1, 512} {
				emits, end := run(t, tc.p, tc.toks, at)
				if strings.Join(emits, "|") != strings.Join(tc.emits, "|") || len(emits) != len(tc.emits) {
					t.Errorf("compacting at %d: emits %q, want %q", at, emits, tc.emits)
				}
				if end != tc.end {
					t.Errorf("compacting at %d: end %+v, want %+v", at, end, tc.end)
				}
			}
		})
	}
}

func TestNewAndValidateReject(t *testing.T) {
	t.Parallel()
	for _, p := range []stop.Params{
		{Stop: []string{"a", ""}},
		{MinTokens: -1},
		{MaxTokens: -1},
		{MinTokens: 3, MaxTokens: 2},
	} {
		if _, err := stop.New(p); err == nil {
			t.Errorf("New(%+v) accepted", p)
		}
		if err := p.Validate(); err == nil {
			t.Errorf("Validate(%+v) accepted", p)
		}
	}
	ok := stop.Params{Stop: []string{"a"}, StopTokenIDs: []int{7}, MinTokens: 2, MaxTokens: 2}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(%+v): %v", ok, err)
	}
}

func TestFeedAfterDone(t *testing.T) {
	t.Parallel()
	m, err := stop.New(stop.Params{Stop: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, done := m.Feed(1, "xa"); !done {
		t.Fatal("no stop")
	}
	if s, done := m.Feed(1, "more"); s != "" || !done {
		t.Errorf("Feed after done = %q, %v", s, done)
	}
	if s := m.Finish(); s != "" {
		t.Errorf("Finish after done = %q", s)
	}
}

// reference is what the generation's output is, computed on the whole text rather than a token at a
// time: the tokens up to max_tokens or the first stop token after min_tokens; the stop string occurrence
// that ends first (ties: list order) among those ending after the min_tokens tokens' text, cut at its
// start (or end with IncludeStop).
func reference(p stop.Params, toks []tok) (string, stop.End) {
	n := len(toks)
	if p.MaxTokens > 0 {
		n = min(n, p.MaxTokens)
	}
	isIn := func(ids []int, id int) bool {
		for _, x := range ids {
			if x == id {
				return true
			}
		}
		return false
	}
	stopAt, stopID := -1, -1
	for i := p.MinTokens; i < n; i++ {
		id := toks[i].id
		if isIn(p.StopTokenIDs, id) || !p.IgnoreEOS && isIn(p.GenerationEOS, id) {
			stopAt, stopID = i, id
			break
		}
		if !p.IgnoreEOS && isIn(p.EOS, id) {
			stopAt = i
			break
		}
	}
	last := n
	if stopAt >= 0 {
		last = stopAt
	}
	var b strings.Builder
	boundary := 0
	for i := range last {
		if i == p.MinTokens {
			boundary = b.Len()
		}
		b.WriteString(toks[i].text)
	}
	if last <= p.MinTokens {
		boundary = b.Len()
	}
	text := b.String()
	best, bestStart, bestEnd := -1, 0, len(text)+1
	for i, s := range p.Stop {
		for from := 0; ; from++ {
			j := strings.Index(text[from:], s)
			if j < 0 {
				break
			}
			if e := from + j + len(s); e > boundary {
				if e < bestEnd {
					best, bestStart, bestEnd = i, from+j, e
				}
				break
			}
			from += j
		}
	}
	switch {
	case best >= 0:
		if p.IncludeStop {
			return text[:bestEnd], stop.End{Reason: "stop", StopString: p.Stop[best], StopToken: -1}
		}
		return text[:bestStart], stop.End{Reason: "stop", StopString: p.Stop[best], StopToken: -1}
	case stopAt >= 0:
		if p.IncludeStop {
			text += toks[stopAt].text
		}
		return text, stop.End{Reason: "stop", StopToken: stopID}
	case p.MaxTokens > 0 && len(toks) >= p.MaxTokens:
		return text, stop.End{Reason: "length", StopToken: -1}
	}
	return text, stop.End{StopToken: -1}
}

// TestMatchesReference: for random token texts and stop sets over a small alphabet (so stops happen),
// the streamed emits join to the whole-text reference, and what is held back is the least it can be: the
// longest suffix of the unemitted text that begins a stop string, never more than the longest stop
// string less one character.
func TestMatchesReference(t *testing.T) {
	t.Parallel()
	alphabet := []rune("abcé")
	str := func(minLen, maxLen int) *rapid.Generator[string] {
		return rapid.Custom(func(t *rapid.T) string {
			rs := rapid.SliceOfN(rapid.SampledFrom(alphabet), minLen, maxLen).Draw(t, "runes")
			return string(rs)
		})
	}
	id := rapid.IntRange(0, 6)
	// Ten times rapid's 100 cases: 100 seldom draw a stop string spanning tokens with IncludeStop and
	// compaction (a bug there went unseen); 1000 take well under a second.
	for range 10 {
		rapid.Check(t, property(id, str))
	}
}

func property(id *rapid.Generator[int], str func(int, int) *rapid.Generator[string]) func(*rapid.T) {
	return func(t *rapid.T) {
		p := stop.Params{
			Stop:          rapid.SliceOfN(str(1, 4), 0, 4).Draw(t, "stop"),
			StopTokenIDs:  rapid.SliceOfN(id, 0, 1).Draw(t, "stopIDs"),
			EOS:           rapid.SliceOfN(id, 0, 1).Draw(t, "eos"),
			GenerationEOS: rapid.SliceOfN(id, 0, 1).Draw(t, "genEOS"),
			IgnoreEOS:     rapid.Bool().Draw(t, "ignoreEOS"),
			MinTokens:     rapid.IntRange(0, 4).Draw(t, "min"),
			IncludeStop:   rapid.Bool().Draw(t, "include"),
		}
		if rapid.Bool().Draw(t, "limited") {
			p.MaxTokens = rapid.IntRange(p.MinTokens, 30).Draw(t, "max")
		}
		n := rapid.IntRange(0, 30).Draw(t, "n")
		toks := make([]tok, n)
		for i := range toks {
			// Mostly not a stop id; short texts, so stop strings often span tokens.
			toks[i] = tok{rapid.IntRange(0, 40).Draw(t, "id"), str(0, 2).Draw(t, "text")}
		}
		maxRunes := 0
		for _, s := range p.Stop {
			maxRunes = max(maxRunes, utf8.RuneCountInString(s))
		}

		m, err := stop.NewCompacting(p, rapid.SampledFrom([]int{1, 2, 5, 512}).Draw(t, "compactAt"))
		if err != nil {
			t.Fatal(err)
		}
		var got, seen strings.Builder // emitted; all text fed
		done := false
		for _, k := range toks {
			emit, d := m.Feed(k.id, k.text)
			got.WriteString(emit)
			if done = d; done {
				break
			}
			seen.WriteString(k.text)
			held := seen.String()[got.Len():]
			if !strings.HasPrefix(seen.String(), got.String()) {
				t.Fatalf("emitted %q is not a prefix of the text %q", got.String(), seen.String())
			}
			if m.Held() != len(held) {
				t.Fatalf("Held() = %d, text held is %q", m.Held(), held)
			}
			if r := utf8.RuneCountInString(held); r > max(maxRunes-1, 0) {
				t.Fatalf("held %q: %d characters, longest stop %d", held, r, maxRunes)
			}
			if least := longestStopPrefix(seen.String(), p); !p.IncludeStop && len(held) != least || p.IncludeStop && held != "" {
				t.Fatalf("held %q after %q, the least is %d bytes", held, seen.String(), least)
			}
		}
		if !done {
			got.WriteString(m.Finish())
		}
		want, wantEnd := reference(p, toks)
		if got.String() != want {
			t.Fatalf("streamed %q, reference %q", got.String(), want)
		}
		if m.Result() != wantEnd {
			t.Fatalf("end %+v, reference %+v", m.Result(), wantEnd)
		}
	}
}

// longestStopPrefix is the length of the longest suffix of s that is a proper prefix of a stop string.
func longestStopPrefix(s string, p stop.Params) int {
	best := 0
	for _, st := range p.Stop {
		for k := 1; k < len(st); k++ {
			if strings.HasSuffix(s, st[:k]) {
				best = max(best, k)
			}
		}
	}
	return best
}
