// Package tenant decides which tenant a request belongs to, the name that admission's fair queueing
// (internal/admission, Settings.Tenants), the per-tenant budgets and metrics use, and holds each
// tenant's token and request budgets ([Budgets], budget.go). Across gateway replicas, cluster
// coordination (internal/cluster) sets the fraction of each budget a replica enforces from the demand
// the replicas report ([Budgets.SetShares], [Budgets.Demand]; budget_shares.go) and spreads live
// changes by their [Version] ([Budgets.Apply]; budget_version.go).
//
// A tenant comes from the most trusted source configured that names one: the id of the API key the
// caller authenticated with (the keys file's ID column, or "api-key" for --api-key), then a JWT claim
// (--tenant-jwt-claim, read by internal/auth), then a request header (--tenant-header), which any
// caller can set and is therefore trusted least: it is read only when no credential names the caller.
// A request named by no source belongs to [admission.DefaultTenant].
//
// Tenant names reach metric labels through [Labels], which bounds their cardinality: the first N
// distinct names seen (after the ones configured, e.g. with a weight) keep their own label, every
// later one is reported as "other", so a caller minting header values cannot grow the series.
//
// # Concurrency Model
//
// A [Resolver] is immutable after New and safe for concurrent use. [Labels] guards its set with a
// mutex, taken once per request to name a label. [Budgets] guards its buckets with one mutex, taken
// once when a request arrives (Reserve) and once when it ends (Reservation.Settle, at most once); the
// coordination's calls (Demand, SetShares, Apply, Versioned) take it once each, per exchange period.
package tenant
