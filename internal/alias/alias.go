// Package alias maps the model names clients ask for to the models workers serve, with weights: an
// alias such as chat=llama-3.1-8b:90,llama-3.1-8b-rc:10 sends about 90 % of its requests to the first
// target and 10 % to the canary. A request that names a session goes to the same target every time
// (the session is hashed onto the weights, so no table of sessions is kept and every gateway replica
// agrees); one without a session draws from the injected random source.
//
// A Table is safe for concurrent use; Set and Delete change it live and take effect for the next
// Resolve.
package alias

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

// ErrInvalid wraps every malformed rule.
var ErrInvalid = errors.New("invalid model alias")

// maxWeight bounds one target's weight: weights are shares, and a bound keeps the sum far from overflow.
const maxWeight = 1_000_000

// Target is one served model and its share of the alias's requests.
type Target struct {
	Model  string
	Weight int
}

// Rule is one alias and its targets, in the order given.
type Rule struct {
	Alias   string
	Targets []Target
}

// String is the flag form: alias=model:weight,model:weight.
func (r Rule) String() string {
	parts := make([]string, len(r.Targets))
	for i, t := range r.Targets {
		parts[i] = t.Model + ":" + strconv.Itoa(t.Weight)
	}
	return r.Alias + "=" + strings.Join(parts, ",")
}

// Validate checks the rule: a name, at least one target with a positive total weight, no target
// twice, and no target named like the alias (it would hide the model it stands for).
func (r Rule) Validate() error {
	if strings.TrimSpace(r.Alias) == "" {
		return fmt.Errorf("%w: empty alias name", ErrInvalid)
	}
	if len(r.Targets) == 0 {
		return fmt.Errorf("%w: %s has no target", ErrInvalid, r.Alias)
	}
	total := 0
	for i, t := range r.Targets {
		switch {
		case strings.TrimSpace(t.Model) == "":
			return fmt.Errorf("%w: %s: empty target model", ErrInvalid, r.Alias)
		case t.Model == r.Alias:
			return fmt.Errorf("%w: %s: a target cannot be the alias itself", ErrInvalid, r.Alias)
		case t.Weight < 0 || t.Weight > maxWeight:
			return fmt.Errorf("%w: %s: weight %d of %s is not in 0..%d", ErrInvalid, r.Alias, t.Weight, t.Model, maxWeight)
		case slices.ContainsFunc(r.Targets[:i], func(o Target) bool { return o.Model == t.Model }):
			return fmt.Errorf("%w: %s: target %s given twice", ErrInvalid, r.Alias, t.Model)
		}
		total += t.Weight
	}
	if total == 0 {
		return fmt.Errorf("%w: %s: the weights add up to 0", ErrInvalid, r.Alias)
	}
	return nil
}

// Parse reads the flag form "alias=model[:weight],model[:weight]..."; a target without a weight
// weighs 1, so chat=llama-3.1-8b is a plain rename.
func Parse(s string) (Rule, error) {
	name, list, ok := strings.Cut(s, "=")
	if !ok {
		return Rule{}, fmt.Errorf("%w: %q: want alias=model[:weight] with more targets after commas", ErrInvalid, s)
	}
	r := Rule{Alias: strings.TrimSpace(name)}
	for part := range strings.SplitSeq(list, ",") {
		part = strings.TrimSpace(part)
		model, w := part, 1
		// The weight is after the last colon, and only when it is a number: model names may hold colons.
		if i := strings.LastIndexByte(part, ':'); i >= 0 {
			if n, err := strconv.Atoi(part[i+1:]); err == nil {
				model, w = strings.TrimSpace(part[:i]), n
			}
		}
		r.Targets = append(r.Targets, Target{Model: model, Weight: w})
	}
	if err := r.Validate(); err != nil {
		return Rule{}, err
	}
	return r, nil
}

// Options configures a Table.
type Options struct {
	// Uint64N draws a uniform number in [0, n) for requests without a session; nil = math/rand/v2.
	// Tests inject a seeded source.
	Uint64N func(n uint64) uint64
	// OnResolve is called with every resolution (metrics); nil = none.
	OnResolve func(alias, target string)
}

// compiled is a rule ready to draw from: cumulative weights.
type compiled struct {
	rule  Rule
	cum   []uint64
	total uint64
}

// Table is the live set of aliases.
type Table struct {
	o     Options
	rules atomic.Pointer[map[string]*compiled] // replaced whole on every change: readers never lock
}

// New builds a table of rules (each validated; an alias given twice is an error).
func New(rules []Rule, o Options) (*Table, error) {
	if o.Uint64N == nil {
		o.Uint64N = rand.Uint64N
	}
	t := &Table{o: o}
	m := map[string]*compiled{}
	for _, r := range rules {
		if _, dup := m[r.Alias]; dup {
			return nil, fmt.Errorf("%w: alias %s given twice", ErrInvalid, r.Alias)
		}
		c, err := compile(r)
		if err != nil {
			return nil, err
		}
		m[r.Alias] = c
	}
	t.rules.Store(&m)
	return t, nil
}

func compile(r Rule) (*compiled, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	c := &compiled{rule: Rule{Alias: r.Alias, Targets: slices.Clone(r.Targets)}}
	for _, t := range r.Targets {
		c.total += uint64(t.Weight)
		c.cum = append(c.cum, c.total)
	}
	return c, nil
}

// Resolve returns the model to serve a request for model: a target of its alias, or model itself
// (aliased false) when model is no alias. A non-empty session always gets the same target while
// the rule is unchanged.
func (t *Table) Resolve(model, session string) (target string, aliased bool) {
	if t == nil {
		return model, false
	}
	c, ok := (*t.rules.Load())[model]
	if !ok {
		return model, false
	}
	var x uint64
	if session != "" {
		h := fnv.New64a()
		h.Write([]byte(model))
		h.Write([]byte{0})
		h.Write([]byte(session))
		x = h.Sum64() % c.total
	} else {
		x = t.o.Uint64N(c.total)
	}
	i, _ := slices.BinarySearchFunc(c.cum, x, func(cum, x uint64) int {
		if cum <= x {
			return -1
		}
		return 1
	})
	target = c.rule.Targets[i].Model
	if t.o.OnResolve != nil {
		t.o.OnResolve(model, target)
	}
	return target, true
}

// Set adds or replaces one rule, live.
func (t *Table) Set(r Rule) error {
	c, err := compile(r)
	if err != nil {
		return err
	}
	for {
		old := t.rules.Load()
		m := make(map[string]*compiled, len(*old)+1)
		for k, v := range *old {
			m[k] = v
		}
		m[r.Alias] = c
		if t.rules.CompareAndSwap(old, &m) {
			return nil
		}
	}
}

// Delete removes an alias, live; it reports whether there was one.
func (t *Table) Delete(alias string) bool {
	for {
		old := t.rules.Load()
		if _, ok := (*old)[alias]; !ok {
			return false
		}
		m := make(map[string]*compiled, len(*old))
		for k, v := range *old {
			if k != alias {
				m[k] = v
			}
		}
		if t.rules.CompareAndSwap(old, &m) {
			return true
		}
	}
}

// Rules lists the rules, sorted by alias.
func (t *Table) Rules() []Rule {
	m := *t.rules.Load()
	out := make([]Rule, 0, len(m))
	for _, c := range m {
		out = append(out, Rule{Alias: c.rule.Alias, Targets: slices.Clone(c.rule.Targets)})
	}
	slices.SortFunc(out, func(a, b Rule) int { return strings.Compare(a.Alias, b.Alias) })
	return out
}
