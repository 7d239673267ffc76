package stop

// NewCompacting is New with the emitted text dropped once at bytes are, so short tests exercise it.
func NewCompacting(p Params, at int) (*Matcher, error) {
	m, err := New(p)
	if m != nil {
		m.compactAt = at
	}
	return m, err
}
