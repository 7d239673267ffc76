package app

import "testing"

func TestWithDP(t *testing.T) {
	for _, tt := range []struct {
		spec  string
		ranks int
		want  string
	}{
		{"tcp://h:5557", 0, "tcp://h:5557"},
		{"tcp://h:5557", 1, "tcp://h:5557"},
		{"tcp://h:5557", 4, "tcp://h:5557?dp=4"},
		{"tcp://h:5557?replay=tcp://h:5558", 2, "tcp://h:5557?replay=tcp://h:5558&dp=2"},
		{"tcp://h:5557?dp=1", 4, "tcp://h:5557?dp=1"}, // the operator's word wins
	} {
		if got := withDP(tt.spec, tt.ranks); got != tt.want {
			t.Errorf("withDP(%q, %d) = %q, want %q", tt.spec, tt.ranks, got, tt.want)
		}
	}
}
