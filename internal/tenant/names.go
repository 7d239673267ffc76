package tenant

// MaxNameLen bounds a tenant name, from any source.
const MaxNameLen = 64

// ValidName reports whether s may name a tenant: 1 to MaxNameLen printable ASCII characters, no space.
func ValidName(s string) bool {
	if s == "" || len(s) > MaxNameLen {
		return false
	}
	for i := range len(s) {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
