package reasoning

// Pending is the text held back as a possible tag.
func (p *Parser) Pending() string { return p.pending }
