package main

import (
	"bytes"
	"os"
	"testing"
)

// TestCommittedDashboardIsFresh: deploy/grafana/sluice.json is exactly what this program writes
// (regenerate with `go run ./deploy/grafana/gen -o deploy/grafana/sluice.json`).
func TestCommittedDashboardIsFresh(t *testing.T) {
	want, err := render()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../sluice.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("deploy/grafana/sluice.json is stale: run go run ./deploy/grafana/gen -o deploy/grafana/sluice.json")
	}
}
