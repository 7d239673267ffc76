package tenant

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Budgets: per-tenant token and request rate limits, as token buckets refilled continuously at the
// per-minute rate and holding at most one minute's worth. A request takes one request unit and its
// prompt tokens (the estimate, or exact token ids) when it arrives; when it ends, the reservation is
// settled on the usage the engine reported (prompt + completion tokens), so a tenant is charged what
// it used, as OpenAI's tokens-per-minute limit does. A request larger than a whole minute's tokens is
// let through when the bucket is full (it then runs the bucket into debt), so it is never refused
// forever; over any minute a tenant thus gets its budget plus at most one request.
//
// Across gateway replicas (cluster coordination on), each replica enforces a share of every budget:
// a fraction of its rate and capacity, the fractions of one tenant summing to 1 over the fleet. Before
// the first grant, and whenever this replica has no coordinator, that is an even split, 1/m for a fleet
// of m (SetReplicas); with a coordinator it follows demand (SetShares, budget_shares.go): each replica
// reports the recent rate its tenants ask for (Demand) and the coordinator hands each replica its
// demand-weighted fraction, so a tenant whose traffic all lands on one replica gets about its whole
// budget there. Fractions from grants of different rounds may be in force at once for up to an
// exchange period, so the fleet's rate can overshoot a budget transiently by that much; a bucket
// moves proportionally on every change, so the buckets together never hold more than one budget's
// minute. Live changes carry a version (budget_version.go) that the coordination spreads to every
// replica. The x-ratelimit-limit-* headers name the whole budget; remaining and reset are this
// replica's.

// ErrRateLimited classifies a request refused by its tenant's budget (429 rate_limit_exceeded).
var ErrRateLimited = errors.New("tenant: rate limit exceeded")

// Budget is one tenant's limits; a value <= 0 means no limit of that kind.
type Budget struct {
	TokensPerMinute   int64
	RequestsPerMinute int64
}

func (b Budget) on() bool { return b.TokensPerMinute > 0 || b.RequestsPerMinute > 0 }

// BudgetConfig configures [Budgets].
type BudgetConfig struct {
	// Default is every tenant's budget unless Tenants names it.
	Default Budget
	// Tenants are per-tenant budgets.
	Tenants map[string]Budget
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Budgets enforces the budgets. It is safe for concurrent use.
type Budgets struct {
	now func() time.Time

	mu      sync.Mutex
	def     Budget
	tenants map[string]Budget
	buckets map[string]*buckets
	// share is the part of every budget this gateway enforces for a tenant not in shares: 1 alone, 1/m
	// of a fleet of m replicas (SetReplicas); shares are the demand-weighted fractions of a coordinator's
	// grant (SetShares). Together the fleet grants each tenant its budget.
	share  float64
	shares map[string]float64
	// version names the budgets in force (budget_version.go); origin names this replica in the versions
	// of its own live changes.
	version Version
	origin  string
}

type buckets struct {
	req, tok bucket
	// demand is the recent rate the tenant asked for here, refused requests included (Demand).
	demand demand
}

// bucket is a token bucket in units; its capacity is one minute's rate.
type bucket struct {
	level float64
	last  time.Time
}

// fill refills b to now at perMinute and returns its level.
func (b *bucket) fill(now time.Time, perMinute float64) float64 {
	c := perMinute
	if b.last.IsZero() {
		b.level, b.last = c, now
		return b.level
	}
	if d := now.Sub(b.last); d > 0 {
		b.level = math.Min(c, b.level+c*d.Minutes())
		b.last = now
	}
	return b.level
}

// wait is how long b needs to reach need units (capped at its capacity).
func (b *bucket) wait(need float64, perMinute float64) time.Duration {
	need = math.Min(need, perMinute)
	if b.level >= need {
		return 0
	}
	return time.Duration((need - b.level) / perMinute * float64(time.Minute))
}

// NewBudgets builds the budgets.
func NewBudgets(cfg BudgetConfig) *Budgets {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	b := &Budgets{now: cfg.Now, buckets: map[string]*buckets{}, share: 1}
	// The configured budgets are version 0: any live change anywhere in the fleet supersedes them.
	b.replaceLocked(Version{}, cfg.Default, cfg.Tenants)
	return b
}

// Set replaces the budgets live: a change made here, under a version newer than any this replica
// knows (budget_version.go), which cluster coordination then spreads to the fleet. A tenant's buckets
// keep what it used: a raised budget adds the difference at once, a lowered one caps the level at the
// new capacity.
func (b *Budgets) Set(def Budget, tenants map[string]Budget) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.replaceLocked(Version{Counter: b.version.Counter + 1, Origin: b.origin}, def, tenants)
}

// replaceLocked makes def and tenants, under version v, the budgets in force.
func (b *Budgets) replaceLocked(v Version, def Budget, tenants map[string]Budget) {
	old := b.snapshotLocked()
	b.def = def
	b.tenants = make(map[string]Budget, len(tenants))
	for k, v := range tenants {
		b.tenants[k] = v
	}
	b.version = v
	b.rescaleLocked(old, false)
}

// SetReplicas makes this gateway enforce an even split of every budget in a fleet of n gateway
// replicas (n < 1 counts as 1): 1/n of each rate and of each bucket's capacity for every tenant, so
// that n replicas that each see a part of a tenant's traffic grant it, together, its budget. It is
// SetShares(1/n, nil): before the first grant, and when a replica loses its coordinator.
func (b *Budgets) SetReplicas(n int) { b.SetShares(1/float64(max(n, 1)), nil) }

// bucketBudget is what a bucket pair was sized for: a budget at a share.
type bucketBudget struct {
	Budget
	share float64
}

func (b *Budgets) snapshotLocked() map[string]bucketBudget {
	old := make(map[string]bucketBudget, len(b.buckets))
	for t := range b.buckets {
		old[t] = bucketBudget{b.budgetLocked(t), b.shareLocked(t)}
	}
	return old
}

// rescaleLocked moves every bucket from its old budget and share to its budget and share now; with
// proportional (a share change) each keeps the fraction of its capacity it had, so the fleet's
// buckets together hold no more than before.
func (b *Budgets) rescaleLocked(old map[string]bucketBudget, proportional bool) {
	now := b.now()
	for t, bk := range b.buckets {
		was, is, share := old[t], b.budgetLocked(t), b.shareLocked(t)
		bk.req.rescale(now, rate(was.RequestsPerMinute, was.share), rate(is.RequestsPerMinute, share), proportional)
		bk.tok.rescale(now, rate(was.TokensPerMinute, was.share), rate(is.TokensPerMinute, share), proportional)
	}
}

// rate is a per-minute limit at a share (0: no limit).
func rate(perMinute int64, share float64) float64 {
	if perMinute <= 0 {
		return 0
	}
	return float64(perMinute) * share
}

// shareLocked is the part of tenant's budget this replica enforces.
func (b *Budgets) shareLocked(tenant string) float64 {
	if s, ok := b.shares[tenant]; ok {
		return s
	}
	return b.share
}

// rescale moves b from capacity was to is (<= 0: no limit, a full bucket when one is set again):
// proportionally (the same fraction full, debt included), or by adding a raise at once and capping
// at a lowered capacity.
func (b *bucket) rescale(now time.Time, was, is float64, proportional bool) {
	switch {
	case is <= 0:
		return
	case was <= 0:
		b.level, b.last = is, now
	case proportional:
		b.fill(now, was)
		b.level *= is / was
	default:
		b.fill(now, was)
		b.level = math.Min(is, b.level+math.Max(is-was, 0))
	}
}

// Get returns the current budgets.
func (b *Budgets) Get() (def Budget, tenants map[string]Budget) {
	b.mu.Lock()
	defer b.mu.Unlock()
	tenants = make(map[string]Budget, len(b.tenants))
	for k, v := range b.tenants {
		tenants[k] = v
	}
	return b.def, tenants
}

func (b *Budgets) budgetLocked(tenant string) Budget {
	if v, ok := b.tenants[tenant]; ok {
		return v
	}
	return b.def
}

// Quota is a tenant's state after a decision, for the OpenAI rate-limit headers.
type Quota struct {
	Budget
	RemainingRequests, RemainingTokens int64
	// ResetRequests and ResetTokens are the times until the buckets are full again.
	ResetRequests, ResetTokens time.Duration
}

// Header returns the x-ratelimit-* headers of q (only the kinds that have a limit).
func (q Quota) Header() http.Header {
	h := http.Header{}
	if q.RequestsPerMinute > 0 {
		h.Set("X-Ratelimit-Limit-Requests", strconv.FormatInt(q.RequestsPerMinute, 10))
		h.Set("X-Ratelimit-Remaining-Requests", strconv.FormatInt(q.RemainingRequests, 10))
		h.Set("X-Ratelimit-Reset-Requests", resetString(q.ResetRequests))
	}
	if q.TokensPerMinute > 0 {
		h.Set("X-Ratelimit-Limit-Tokens", strconv.FormatInt(q.TokensPerMinute, 10))
		h.Set("X-Ratelimit-Remaining-Tokens", strconv.FormatInt(q.RemainingTokens, 10))
		h.Set("X-Ratelimit-Reset-Tokens", resetString(q.ResetTokens))
	}
	return h
}

// resetString formats a reset time as OpenAI does ("1s", "6m0s", "20ms"): a Go duration, rounded
// up to the millisecond.
func resetString(d time.Duration) string {
	return ((d + time.Millisecond - 1) / time.Millisecond * time.Millisecond).String()
}

// Denied is the error of a refused request: ErrRateLimited, with the quota and when to retry.
type Denied struct {
	Quota      Quota
	RetryAfter time.Duration
	// Tokens reports whether the token budget (not the request budget) refused it.
	Tokens bool
}

func (d *Denied) Error() string {
	if d.Tokens {
		return "tenant token rate limit exceeded"
	}
	return "tenant request rate limit exceeded"
}

// Unwrap makes a Denied match ErrRateLimited.
func (d *Denied) Unwrap() error { return ErrRateLimited }

// Reservation is what a request took from its tenant's budget; settle it once when it ends.
type Reservation struct {
	b       *Budgets
	tenant  string
	tokens  int64
	settled atomic.Bool
}

// Reserve takes one request and tokens from tenant's budget. It returns the reservation (nil when
// the tenant has no budget) and the quota after it, or a *Denied error.
func (b *Budgets) Reserve(tenant string, tokens int64) (*Reservation, Quota, error) {
	tokens = max(tokens, 0)
	b.mu.Lock()
	defer b.mu.Unlock()
	bud := b.budgetLocked(tenant)
	if !bud.on() {
		return nil, Quota{}, nil
	}
	now := b.now()
	bk := b.buckets[tenant]
	if bk == nil {
		b.sweepLocked(now)
		bk = &buckets{}
		b.buckets[tenant] = bk
	}
	bk.demand.add(now, 1, float64(tokens))
	var d Denied
	share := b.shareLocked(tenant)
	rq, tk := rate(bud.RequestsPerMinute, share), rate(bud.TokensPerMinute, share)
	// A share below one request a minute (a small budget over many replicas) lets one through on a
	// full bucket and runs it into debt, as a large token request does.
	if rq > 0 && bk.req.fill(now, rq) < math.Min(1, rq) {
		d.RetryAfter = bk.req.wait(1, rq)
	}
	if tk > 0 {
		// A request larger than a minute's budget waits for a full bucket, then runs it into debt.
		if lvl := bk.tok.fill(now, tk); lvl < math.Min(float64(tokens), tk) {
			if w := bk.tok.wait(float64(tokens), tk); w > d.RetryAfter {
				d.RetryAfter, d.Tokens = w, true
			}
		}
	}
	if d.RetryAfter > 0 {
		d.Quota = quotaLocked(bk, bud, rq, tk)
		return nil, d.Quota, &d
	}
	if rq > 0 {
		bk.req.level--
	}
	if tk > 0 {
		bk.tok.level -= float64(tokens)
	}
	return &Reservation{b: b, tenant: tenant, tokens: tokens}, quotaLocked(bk, bud, rq, tk), nil
}

// quotaLocked is the quota of bud whose buckets run at rq and tk (this replica's share): the limits
// are the tenant's whole budget, what remains and the resets are this replica's.
func quotaLocked(bk *buckets, bud Budget, rq, tk float64) Quota {
	q := Quota{Budget: bud}
	if rq > 0 {
		q.RemainingRequests = max(int64(math.Floor(bk.req.level)), 0)
		q.ResetRequests = bk.req.wait(rq, rq)
	}
	if tk > 0 {
		q.RemainingTokens = max(int64(math.Floor(bk.tok.level)), 0)
		q.ResetTokens = bk.tok.wait(tk, tk)
	}
	return q
}

// sweepLocked drops the buckets that are full again: one is the same as none, so tenant names
// (which a header may mint) do not accumulate. It runs when a new tenant's bucket is made, at most
// once per bucket count doubling, so its cost is amortised.
func (b *Budgets) sweepLocked(now time.Time) {
	if len(b.buckets) < 64 || len(b.buckets)&(len(b.buckets)-1) != 0 {
		return
	}
	for t, bk := range b.buckets {
		bud, share := b.budgetLocked(t), b.shareLocked(t)
		rq, tk := rate(bud.RequestsPerMinute, share), rate(bud.TokensPerMinute, share)
		// A tenant still asking here keeps its bucket, so its demand is still reported.
		if (rq <= 0 || bk.req.fill(now, rq) >= rq) && (tk <= 0 || bk.tok.fill(now, tk) >= tk) && bk.demand.idle(now) {
			delete(b.buckets, t)
		}
	}
}

// Settle ends the reservation: with the usage the engine reported (used >= 0), the tenant is charged
// used tokens instead of the reservation; without (used < 0: a failure, or no usage reported), the
// reservation stands. Only the first call counts; a nil reservation does nothing.
func (r *Reservation) Settle(used int64) {
	if r == nil || !r.settled.CompareAndSwap(false, true) || used < 0 {
		return
	}
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	bk := b.buckets[r.tenant]
	bud := b.budgetLocked(r.tenant)
	if bk == nil || bud.TokensPerMinute <= 0 {
		return
	}
	tk := rate(bud.TokensPerMinute, b.shareLocked(r.tenant))
	bk.tok.fill(b.now(), tk)
	bk.tok.level = math.Min(tk, bk.tok.level-float64(used-r.tokens))
}
