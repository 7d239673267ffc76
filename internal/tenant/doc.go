// Package tenant holds the tenants' data: each tenant's token and request budgets ([Budgets],
// budget.go), the names a tenant may have ([ValidName]) and their metric labels ([Labels]). Which
// tenant a request belongs to is decided at the edge, from its credential or a header
// (internal/auth's TenantResolver); this package imports nothing of sluice, so cluster coordination
// can import it. Across gateway replicas, cluster coordination (internal/cluster) sets the fraction
// of each budget a replica enforces from the demand the replicas report ([Budgets.SetShares],
// [Budgets.Demand]; budget_shares.go) and spreads live changes by their [Version] ([Budgets.Apply];
// budget_version.go).
//
// Tenant names reach metric labels through [Labels], which bounds their cardinality: the first N
// distinct names seen (after the ones configured, e.g. with a weight) keep their own label, every
// later one is reported as "other", so a caller minting header values cannot grow the series.
//
// # Concurrency Model
//
// [Labels] guards its set with a mutex, taken once per request to name a label. [Budgets] guards its
// buckets with one mutex, taken once when a request arrives (Reserve) and once when it ends
// (Reservation.Settle, at most once); the coordination's calls (Demand, SetShares, Apply, Versioned)
// take it once each, per exchange period.
package tenant
