package tenant

import "sync"

// OtherLabel is the metric label of tenants beyond the bound.
const OtherLabel = "other"

// Labels maps tenant names to metric labels with a bounded set of values.
type Labels struct {
	mu    sync.Mutex
	max   int
	named map[string]struct{}
}

// NewLabels returns labels that name the given tenants and up to n more, first come; n <= 0
// names only the given ones.
func NewLabels(n int, known ...string) *Labels {
	l := &Labels{named: make(map[string]struct{}, max(n, 0)+len(known))}
	for _, k := range known {
		l.named[k] = struct{}{}
	}
	l.max = max(n, 0) + len(l.named)
	return l
}

// Label returns tenant's label: its name while the bound allows, else [OtherLabel].
func (l *Labels) Label(tenant string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.named[tenant]; ok {
		return tenant
	}
	if len(l.named) >= l.max {
		return OtherLabel
	}
	l.named[tenant] = struct{}{}
	return tenant
}
