package tenant_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/tenant"
)

func TestLabelsBounded(t *testing.T) {
	l := tenant.NewLabels(2, "vip")
	for i := range 5 {
		l.Label(fmt.Sprint("t", i))
	}
	for in, want := range map[string]string{"vip": "vip", "t0": "t0", "t1": "t1", "t2": "other", "t4": "other"} {
		if got := l.Label(in); got != want {
			t.Errorf("Label(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestValidName(t *testing.T) {
	for _, tt := range []struct {
		name string
		want bool
	}{
		{"team-a", true}, {"~!", true}, {strings.Repeat("a", tenant.MaxNameLen), true},
		{"", false}, {strings.Repeat("a", tenant.MaxNameLen+1), false}, {"two words", false}, {"é", false}, {"tab\t", false},
	} {
		if got := tenant.ValidName(tt.name); got != tt.want {
			t.Errorf("ValidName(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}
