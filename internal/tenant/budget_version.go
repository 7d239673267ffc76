package tenant

import "cmp"

// Version orders the live changes of the budgets across a fleet, Lamport-style: a change made on a
// replica (Set) takes the highest counter that replica knows plus one, and names the replica (Origin,
// the cluster replica id) to break ties between changes made on two replicas before either heard of
// the other's; the greater origin wins, so every replica settles on the same budgets. The versions are
// the replicas' own rather than a coordinator's: a change applies here at once, with or without a
// coordinator, and a coordinator elected later learns the newest version from the replicas' reports
// instead of from books that died with its predecessor. The budgets given by flags at startup are
// version 0 with no origin: any live change supersedes them, and a replica started later with other
// flags adopts the fleet's live budgets instead of overriding them.
type Version struct {
	Counter uint64
	Origin  string
}

// Newer reports whether v supersedes o.
func (v Version) Newer(o Version) bool {
	if v.Counter != o.Counter {
		return v.Counter > o.Counter
	}
	return cmp.Compare(v.Origin, o.Origin) > 0
}

// SetOrigin names this replica in the versions of its later live changes (cluster coordination sets
// it to the replica id when it starts).
func (b *Budgets) SetOrigin(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.origin = id
}

// Version is the version of the budgets in force.
func (b *Budgets) Version() Version {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.version
}

// Versioned returns the budgets in force with their version.
func (b *Budgets) Versioned() (Version, Budget, map[string]Budget) {
	b.mu.Lock()
	defer b.mu.Unlock()
	tenants := make(map[string]Budget, len(b.tenants))
	for k, v := range b.tenants {
		tenants[k] = v
	}
	return b.version, b.def, tenants
}

// Apply makes the budgets of a newer version, set on another replica, the ones in force here, and
// reports whether it did; an older or equal version changes nothing. A tenant's buckets keep what it
// used, as for Set.
func (b *Budgets) Apply(v Version, def Budget, tenants map[string]Budget) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !v.Newer(b.version) {
		return false
	}
	b.replaceLocked(v, def, tenants)
	return true
}
