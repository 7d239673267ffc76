package cluster

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

func TestFairShares(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := func(id string, demand, held int) claim { return claim{id: id, demand: demand, held: held} }
	turn := func(cl claim, sticky bool, lastHeld time.Time) claim {
		cl.sticky, cl.lastHeld = sticky, lastHeld
		return cl
	}
	for _, tc := range []struct {
		name   string
		budget int
		claims []claim
		want   []int
	}{
		{"skewed: the busy replica gets what the others leave", 8, []claim{c("a", 20, 0), c("b", 1, 0), c("c", 1, 0)}, []int{6, 1, 1}},
		{"all busy: even split, units left over go to the holders", 8, []claim{c("a", 9, 2), c("b", 9, 3), c("c", 9, 3)}, []int{2, 3, 3}},
		{"idle fleet: headroom spread evenly", 9, []claim{c("a", 0, 0), c("b", 0, 0), c("c", 0, 0)}, []int{3, 3, 3}},
		{"demand met, the rest is headroom", 10, []claim{c("a", 2, 0), c("b", 1, 0)}, []int{6, 4}},
		{"budget below the claimants: a turn in progress keeps its unit, then the longest without one", 2,
			[]claim{turn(c("a", 5, 1), false, t0.Add(3*time.Second)), turn(c("b", 5, 1), true, t0.Add(3*time.Second)), turn(c("c", 5, 0), false, t0)},
			[]int{0, 1, 1}},
		{"never held goes first", 1, []claim{turn(c("a", 5, 0), false, t0), c("b", 5, 0)}, []int{0, 1}},
		{"a claim without demand gets nothing while another has demand", 1, []claim{c("a", 0, 0), c("b", 3, 0)}, []int{0, 1}},
		{"zero budget", 0, []claim{c("a", 3, 2)}, []int{0}},
		{"negative budget (limit lowered below what is held)", -2, []claim{c("a", 3, 2)}, []int{0}},
		{"no claims", 5, nil, []int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, fairShares(tc.budget, tc.claims)); diff != "" {
				t.Errorf("shares (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFairSharesProperties: for any budget and claims the shares sum to the budget, never exceed it, are
// max-min fair over demand (a claim below its demand gets at least every other claim's share minus one), and
// give every claim at least min(demand, floor(budget/claims)).
func TestFairSharesProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 6).Draw(t, "claims")
		budget := rapid.IntRange(-3, 40).Draw(t, "budget")
		cs := make([]claim, n)
		for i := range cs {
			cs[i] = claim{
				id:       fmt.Sprint(i),
				demand:   rapid.IntRange(0, 30).Draw(t, "demand"),
				held:     rapid.IntRange(0, 10).Draw(t, "held"),
				sticky:   rapid.Bool().Draw(t, "sticky"),
				lastHeld: time.Unix(int64(rapid.IntRange(0, 5).Draw(t, "lastHeld")), 0),
			}
		}
		shares := fairShares(budget, cs)
		sum := 0
		for _, s := range shares {
			if s < 0 {
				t.Fatalf("negative share %v", shares)
			}
			sum += s
		}
		want := max(budget, 0)
		if n == 0 {
			want = 0
		}
		if sum != want {
			t.Fatalf("shares %v sum to %d, want %d", shares, sum, want)
		}
		for i := range cs {
			if shares[i] < cs[i].demand {
				for j := range cs {
					if shares[j] > shares[i]+1 && shares[j] > 0 {
						t.Fatalf("not max-min fair: claim %d (demand %d) has %d while claim %d has %d: %v", i, cs[i].demand, shares[i], j, shares[j], shares)
					}
				}
			}
			if n > 0 && budget > 0 && shares[i] < min(cs[i].demand, budget/n) {
				t.Fatalf("claim %d got %d < min(demand %d, even split %d)", i, shares[i], cs[i].demand, budget/n)
			}
		}
	})
}

// TestFairSharesTurns: with a budget of 1 and three busy replicas, updating the claims as the coordinator
// does (a holder is sticky for a turn of 4 rounds), the unit visits each replica in turn, a turn at a time.
func TestFairSharesTurns(t *testing.T) {
	cs := []claim{{id: "a", demand: 4}, {id: "b", demand: 4}, {id: "c", demand: 4}}
	since := make([]int, len(cs))
	var got []string
	for round := 1; round <= 12; round++ {
		shares := fairShares(1, cs)
		for i := range cs {
			if shares[i] > 0 {
				if cs[i].held == 0 {
					since[i] = round
				}
				got = append(got, cs[i].id)
				cs[i].lastHeld = time.Unix(int64(round), 0)
			}
			cs[i].held = shares[i]
			cs[i].sticky = shares[i] > 0 && round-since[i] < 3
		}
	}
	if want := strings.Split("aaaabbbbcccc", ""); !slices.Equal(got, want) {
		t.Errorf("holders by round %v, want %v", got, want)
	}
}

func TestFallbackShare(t *testing.T) {
	members := []string{"a", "b", "c"}
	for _, tc := range []struct {
		limit int
		want  []int
	}{{10, []int{4, 3, 3}}, {2, []int{1, 1, 0}}, {3, []int{1, 1, 1}}, {0, []int{0, 0, 0}}} {
		var got []int
		sum := 0
		for _, m := range members {
			s := fallbackShare(tc.limit, members, m)
			got = append(got, s)
			sum += s
		}
		if !slices.Equal(got, tc.want) || sum != max(tc.limit, 0) {
			t.Errorf("limit %d: shares %v, want %v", tc.limit, got, tc.want)
		}
	}
	if s := fallbackShare(10, members, "stranger"); s != 0 {
		t.Errorf("non-member share %d, want 0", s)
	}
}
