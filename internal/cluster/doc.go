// Package cluster makes prefill admission one limit for a whole fleet of gateway replicas: the limit N of
// a prefill worker (and, with decode seats on, the seat limit of a decode worker) is the fleet's, and each
// replica enforces a leased share of it locally, through admission's per-worker caps (no network hop on
// the request path).
//
// # Members, coordinator, exchanges
//
// A replica's id is the base URL of its admin listener. The members are the --admission-peers list
// (static mode) or the endpoints of the gateway's headless Service (Kubernetes mode, from an EndpointSlice
// informer). The coordinator is the lowest live member (static: the smallest id among the members heard
// from within a lease, by reports or pings in either direction, and not refusing connections since, nor
// leaving) or the holder of a coordination.k8s.io Lease (client-go leader election, identity = replica id,
// released on shutdown).
//
// Every period each replica reports to the coordinator (sluice.cluster.v1.AdmissionCoordinationService/
// Exchange, on the admin listener, behind the admin API key; the coordinator reports to itself without the
// network): per worker the slots it holds, its demand (slots held plus the requests it has waiting that the
// worker could serve) and the cap it enforces, naming the grant (term, version) that cap came from. The
// answer is a grant: a share per worker, leased for Lease from the moment the report was sent, and the
// members it was computed over. A replica enforces its share as a cap next to the local limit; before its
// first grant it admits nothing.
//
// # Shares
//
// Each allocation round (at most one per period, plus one when a member starts reporting) splits each
// worker's budget max-min fair over the demand of the members that report (water-filling), then spreads
// what is left evenly as headroom. When the budget is smaller than the number of members with demand (the
// floor of the even split is 0), members take turns of a lease: a unit stays with its holder for a lease,
// then goes to the member that has gone longest without one; the others get 0 and wait, so the floor costs
// no overshoot, and no member with demand starves. See fairShares.
//
// # The invariant, and why the sum of shares never exceeds N
//
// The coordinator keeps, per member and worker, a reservation: the most slots the member may hold. For a
// member that reported in the current term it is the maximum of the slots it held and the cap it enforced
// at its last report, and of every grant issued since that it may have received (grants it has not yet
// acknowledged). A replica changes its cap only when a grant arrives or its lease ends, and its slots held
// only grow below its cap, so the reservation bounds it until the member reports again. Lowering a share
// revokes nothing: the reservation stays at the slots held until they drain below the new share.
//
// A share above a member's reservation is a raise. The coordinator raises only from the budget nobody may
// be holding: N minus the reservations of all members (members that do not report are counted as below).
// So the reservations sum to at most N whenever anything is raised, and every replica's slots stay within
// its reservation: the fleet never holds more than N slots on a worker.
//
// Elections can disagree (a Lease can be held twice under clock skew; static election is each replica's
// own view; a partition can split the fleet, or leave a replica reachable from two coordinators that cannot
// reach each other). So a coordinator trusts only what it learned in its own term, and counts every member
// that does not report to it at no less than that member's even split of N (see Failures): whatever
// coordinator a member follows, and whatever it is granted there, the coordinators that can raise never
// hand out, between them, more than the members' even splits, which sum to N. A coordinator raises
// nothing while a member it can reach has not reported to it in this term (it may follow a coordinator
// that can reach us, and of two coordinators that reach each other neither raises, until one steps down);
// it only renews or lowers shares.
//
// # Failures
//
//   - A replica that stops hearing from its coordinator keeps its share until the lease ends, then falls
//     back to an even split of N over the members of its last grant and those the membership source
//     lists (floor, one more for the first N mod m; a member back since that grant counts, as its
//     coordinator counts us), never above its last granted share. The fallback only ever lowers what it
//     may hold.
//   - The coordinator counts a member that stopped reporting at the larger of its reservation and its
//     even split (the reservation shrinks as the member's Ping answers show its slots drain), and a member
//     it cannot reach and never heard from in this term at its even split, once two leases of the term
//     have passed (by then any larger share an earlier coordinator leased it has ended).
//   - A member silent for a lease that refuses connections (nothing listens: the process is gone), or that
//     the membership source no longer lists (its pod is gone), is dead: its reservation is released. A
//     killed replica's share returns to the others one lease after they last heard from it.
//   - A coordinator that dies is replaced at the next election (static: peers stop counting it live when it
//     refuses connections; Kubernetes: its Lease expires, or is released on shutdown). The new one renews
//     what members report and raises once every reachable member has reported and the dead one is known
//     dead, about one lease later.
//
// The bound holds exactly, under any partition, kill and restart, as long as every prefill ends within a
// lease of its admission (the property test drives random faults under that condition), with two
// exceptions that no lease scheme can tell from a crash. (1) A replica taken for dead while it still
// serves (its connections actively refused by a firewall, or its pod deleted while its node is cut off):
// its reservation is released, so the fleet may exceed N by up to its fallback share (its even split) for
// as long as it serves unheard, plus what it held above that until those prefills end. (2) A prefill that
// outlives a lease, admitted under a share larger than its replica's even split, when that replica is then
// heard by no coordinator while one counts it at its even split and raises the others: the fleet may
// exceed N by at most that excess, until the prefill ends. A lease longer than the longest prefill closes (2).
//
// # Decode seats
//
// With decode seats on (--decode-max-inflight-requests-per-worker), the seat limit of a decode worker is
// the fleet's too. A decode worker's seats are one more key in the same books (DecodeKey: "decode:"
// followed by its seat key, URL or URL@rank), under the fleet's decode limit (the smallest positive one
// reported) instead of the prefill limit: reservations, raises, even splits and fallbacks are all kept per
// key and counted against that key's side, so everything above holds for seats as for slots, with a decode
// leg in place of a prefill (the lease must outlast the longest decode for the exact bound). A replica
// enforces its seat shares through admission's seat caps (Controller.SetSeatCaps). The fleet bound is the
// flag's number: with "auto" there is none to share (each replica bounds seats by the engine's window on
// its own), and a replica with seats off holds no seats, so it bounds nothing.
//
// A fleet whose limits differ uses the smallest positive one. Demand is what Local reports (the gateway
// spreads its waiting requests evenly over the workers that serve their model, rounded up).
//
// # Tenant budgets
//
// With Deps.Budgets set (the gateway's tenant budgets, internal/tenant Budgets; budgets.go), the exchange
// also carries the tenants' budgets and their demand. A budget is a rate, not a bound on what is held, so
// none of the books above are kept for it: each round simply splits every budget into fractions that sum
// to 1 over the members.
//
//   - Live changes. SetTenantBudgets on one replica applies there at once under a version newer than any
//     it knows (a Lamport counter, the replica id breaking ties: tenant.Version). Each report names the
//     version a replica enforces, with the budgets when it is newer than the one its last grant named; the
//     coordinator keeps the newest it was sent (across terms too) and names it in every grant, with the
//     budgets when the member's is older; a replica applies only a newer version (keeping what its tenants
//     used). A coordinator elected later knows nothing at first, names an older version, and so is sent
//     the newest at the next report: an election never rolls budgets back. Every replica enforces a change
//     within about two exchange periods. The budgets given by flags are version 0: a replica started
//     later with other flags adopts the fleet's live budgets, and flags that differ between replicas stay
//     each replica's own until the first live change.
//   - Shares by demand. Each report lists the recent demand (EWMA rates of requests and reserved tokens,
//     refused ones included) of at most MaxTenantDemand tenants with a budget, the largest first. Each
//     round gives every member its fraction of each tenant listed anywhere (tenantFractions): a member that
//     does not report counts at its even split 1/m, and the reporting ones share the rest in proportion to
//     their demand plus a floor of 1/20 of the mean (an idle member keeps about 1/(21m), so it serves a
//     tenant's first requests at once). Tenants listed nowhere, and all of them from an older coordinator,
//     keep the even split 1/m. A replica whose lease ends without a new grant falls back to the even split
//     over the members of its last grant; before its first grant it splits evenly over the static peers.
//   - Overshoot. The fractions of one round sum to 1, but a member enforces those of its last grant, so for
//     up to an exchange period fractions of two rounds are in force at once and the fleet may grant a
//     tenant more than its rate (and a member cut off keeps its fraction for a lease before falling back).
//     Buckets move proportionally on every change, so what the fleet holds never exceeds one minute's
//     budget by more than that.
//   - Mixed versions. An older replica ignores the new fields: it enforces 1/m of every budget, which is
//     how the coordinator counts it (it reports no tenant_shares), so the fractions still sum to 1; it
//     neither sends nor applies live changes, which then stay on the replicas where they were made. Under
//     an older coordinator, newer replicas get no fractions and split evenly.
//
// # Concurrency Model
//
// [Replica.Run] owns every goroutine the package starts and returns only after all of them ended: the
// exchange loop (in Run's goroutine), the ping loop (which starts one goroutine per peer per round and
// waits for them), and in Kubernetes mode the EndpointSlice informer (stopped with factory.Shutdown) and
// the leader elector (its callbacks only set fields under a mutex). Only the exchange loop changes what
// the replica enforces (replicaState, under Replica.mu) and calls Local.SetCaps; it never holds Replica.mu
// while calling Local or the network. The coordinator's books are guarded by their own mutex and touched
// by the exchange loop (self-reports, term start and stop), the Exchange handler and ping answers; the
// peer table has its own mutex and is never held while taking another lock. Handlers check that Run has
// published its state (an atomic flag) before touching it.
package cluster
