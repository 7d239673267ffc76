package alias

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	t.Parallel()
	good := []struct {
		in   string
		want Rule
	}{
		{"chat=llama-3.1-8b:90,llama-3.1-8b-rc:10", Rule{"chat", []Target{{"llama-3.1-8b", 90}, {"llama-3.1-8b-rc", 10}}}},
		{"chat=llama-3.1-8b", Rule{"chat", []Target{{"llama-3.1-8b", 1}}}},
		{" chat = a:0 , b:3 ", Rule{"chat", []Target{{"a", 0}, {"b", 3}}}},
		{"m=org/model:v2:5", Rule{"m", []Target{{"org/model:v2", 5}}}}, // a colon in the name
	}
	for _, tt := range good {
		got, err := Parse(tt.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("Parse(%q) (-want +got):\n%s", tt.in, diff)
		}
		if again, err := Parse(got.String()); err != nil || !cmp.Equal(again, got) {
			t.Errorf("Parse(String()) of %q = %+v, %v", tt.in, again, err)
		}
	}
	for _, in := range []string{"chat", "=a:1", "chat=", "chat=a:1,a:2", "chat=chat:1", "chat=a:0", "chat=a:-1", "chat=a:2000000"} {
		if _, err := Parse(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q) err = %v, want ErrInvalid", in, err)
		}
	}
}

// share counts n resolutions of alias per target.
func share(t *testing.T, tb *Table, alias string, n int, session func(i int) string) map[string]int {
	t.Helper()
	got := map[string]int{}
	for i := range n {
		target, ok := tb.Resolve(alias, session(i))
		if !ok {
			t.Fatalf("%s is not resolved as an alias", alias)
		}
		got[target]++
	}
	return got
}

func within(t *testing.T, what string, got map[string]int, n int, want map[string]float64) {
	t.Helper()
	for model, w := range want {
		if frac := float64(got[model]) / float64(n); frac < w-0.05 || frac > w+0.05 {
			t.Errorf("%s: %s got %.3f of the requests, want %.2f ± 0.05 (counts %v)", what, model, frac, w, got)
		}
	}
}

// TestWeights: over 2,000 requests each target's share is its weight's within ±5 points, without a
// session (seeded source) and with 2,000 different sessions (hashed); a name that is no alias passes.
func TestWeights(t *testing.T) {
	t.Parallel()
	r, _ := Parse("chat=stable:90,canary:10")
	src := rand.New(rand.NewPCG(1, 2))
	var seen []string
	tb, err := New([]Rule{r}, Options{Uint64N: src.Uint64N, OnResolve: func(a, m string) { seen = append(seen, a+">"+m) }})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	within(t, "no session", share(t, tb, "chat", n, func(int) string { return "" }), n, map[string]float64{"stable": 0.9, "canary": 0.1})
	within(t, "one session each", share(t, tb, "chat", n, func(i int) string { return fmt.Sprint("session-", i) }), n, map[string]float64{"stable": 0.9, "canary": 0.1})
	if len(seen) != 2*n || seen[0] != "chat>stable" && seen[0] != "chat>canary" {
		t.Fatalf("OnResolve saw %d resolutions (first %q), want %d", len(seen), seen[0], 2*n)
	}
	if m, ok := tb.Resolve("stable", "s"); ok || m != "stable" {
		t.Fatalf("Resolve of a served model = %q, %v; want it unchanged", m, ok)
	}
}

// TestSticky: one session always resolves to one target, and both targets get sessions.
func TestSticky(t *testing.T) {
	t.Parallel()
	r, _ := Parse("chat=a:50,b:50")
	tb, err := New([]Rule{r}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for i := range 50 {
		s := fmt.Sprint("conv-", i)
		first, _ := tb.Resolve("chat", s)
		targets[first] = true
		for range 20 {
			if got, _ := tb.Resolve("chat", s); got != first {
				t.Fatalf("session %s moved from %s to %s", s, first, got)
			}
		}
	}
	if len(targets) != 2 {
		t.Fatalf("50 sessions went to %v only", targets)
	}
}

// TestLiveChange: Set replaces a rule for the next request, Delete removes it, and neither accepts
// an invalid rule.
func TestLiveChange(t *testing.T) {
	t.Parallel()
	r, _ := Parse("chat=a:1")
	tb, err := New([]Rule{r}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := tb.Resolve("chat", ""); got != "a" {
		t.Fatalf("before: %s", got)
	}
	if err := tb.Set(Rule{"chat", []Target{{"a", 0}, {"b", 5}}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := tb.Resolve("chat", ""); got != "b" {
		t.Fatalf("after Set: %s, want b (a weighs 0)", got)
	}
	if err := tb.Set(Rule{"chat", nil}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Set of a rule without targets: %v", err)
	}
	if diff := cmp.Diff([]Rule{{"chat", []Target{{"a", 0}, {"b", 5}}}}, tb.Rules()); diff != "" {
		t.Fatalf("Rules (-want +got):\n%s", diff)
	}
	if !tb.Delete("chat") || tb.Delete("chat") {
		t.Fatal("Delete should report the alias once")
	}
	if got, ok := tb.Resolve("chat", ""); ok || got != "chat" {
		t.Fatalf("after Delete: %s, %v", got, ok)
	}
	if _, err := New([]Rule{r, r}, Options{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("New with an alias twice: %v", err)
	}
}
