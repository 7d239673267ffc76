package cluster

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

func TestFairShares(t *testing.T) {
	c := func(id string, demand, held int, lastBonus uint64) claim {
		return claim{id: id, demand: demand, held: held, lastBonus: lastBonus}
	}
	for _, tc := range []struct {
		name      string
		budget    int
		claims    []claim
		want      []int
		wantBonus []bool
	}{
		{"skewed: the busy replica gets what the others leave", 8, []claim{c("a", 20, 0, 0), c("b", 1, 0, 0), c("c", 1, 0, 0)}, []int{6, 1, 1}, nil},
		{"all busy: even split, units left over go to the holders", 8, []claim{c("a", 9, 2, 0), c("b", 9, 3, 0), c("c", 9, 3, 0)}, []int{2, 3, 3}, nil},
		{"idle fleet: headroom spread evenly", 9, []claim{c("a", 0, 0, 0), c("b", 0, 0, 0), c("c", 0, 0, 0)}, []int{3, 3, 3}, nil},
		{"demand met, the rest is headroom", 10, []claim{c("a", 2, 0, 0), c("b", 1, 0, 0)}, []int{6, 4}, nil},
		{"budget below the claimants: one each, oldest bonus first", 2, []claim{c("a", 5, 1, 7), c("b", 5, 1, 3), c("c", 5, 0, 5)},
			[]int{0, 1, 1}, []bool{false, true, true}},
		{"a claim without demand gets nothing while another has demand", 1, []claim{c("a", 0, 0, 0), c("b", 3, 0, 9)}, []int{0, 1}, nil},
		{"zero budget", 0, []claim{c("a", 3, 2, 0)}, []int{0}, nil},
		{"negative budget (limit lowered below what is held)", -2, []claim{c("a", 3, 2, 0)}, []int{0}, nil},
		{"no claims", 5, nil, []int{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, bonus := fairShares(tc.budget, tc.claims)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("shares (-want +got):\n%s", diff)
			}
			want := tc.wantBonus
			if want == nil {
				want = make([]bool, len(tc.claims))
			}
			if diff := cmp.Diff(want, bonus); diff != "" {
				t.Errorf("bonus (-want +got):\n%s", diff)
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
				id:        fmt.Sprint(i),
				demand:    rapid.IntRange(0, 30).Draw(t, "demand"),
				held:      rapid.IntRange(0, 10).Draw(t, "held"),
				lastBonus: uint64(rapid.IntRange(0, 5).Draw(t, "lastBonus")),
			}
		}
		shares, _ := fairShares(budget, cs)
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

// TestFairSharesRotate: with a budget of 1 and three busy replicas, the unit visits each in turn when the
// caller records bonuses as the coordinator does.
func TestFairSharesRotate(t *testing.T) {
	cs := []claim{{id: "a", demand: 4}, {id: "b", demand: 4}, {id: "c", demand: 4}}
	var got []string
	for round := uint64(1); round <= 6; round++ {
		shares, bonus := fairShares(1, cs)
		for i := range cs {
			cs[i].held = shares[i]
			if bonus[i] {
				cs[i].lastBonus = round
				got = append(got, cs[i].id)
			}
		}
	}
	if want := []string{"a", "b", "c", "a", "b", "c"}; !slices.Equal(got, want) {
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
