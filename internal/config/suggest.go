package config

import (
	"flag"
	"strings"
)

// SuggestFlag names the flag of fs a mistyped name most likely meant (see suggestFlag); the CLI's
// subcommands use it for "did you mean".
func SuggestFlag(fs *flag.FlagSet, name string) string { return suggestFlag(fs, name) }

// suggestFlag names the flag a mistyped key most likely meant: the same name with dashes for
// underscores, else the nearest flag name by edit distance when it is close (at most a third of the
// key's length, and 3). "" when nothing is close.
func suggestFlag(fs *flag.FlagSet, key string) string {
	if dashed := strings.ReplaceAll(strings.TrimLeft(key, "-"), "_", "-"); fs.Lookup(dashed) != nil {
		return dashed
	}
	best, bestDist := "", min(3, len(key)/3)+1
	fs.VisitAll(func(f *flag.Flag) {
		if d := editDistance(key, f.Name); d < bestDist {
			best, bestDist = f.Name, d
		}
	})
	return best
}

// editDistance is the Levenshtein distance of a and b (bytes: flag names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
