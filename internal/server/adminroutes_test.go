package server

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// TestAdminAllowedMatchesHTTPRules reads the admin API's REST rules and checks that adminAllowed names
// each rule's method for its path, and no method the rules lack.
func TestAdminAllowedMatchesHTTPRules(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../proto/sluice/admin/v1/admin_http.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{} // concrete path -> methods
	for line := range strings.Lines(string(raw)) {
		method, tmpl, ok := strings.Cut(strings.TrimSpace(line), ": ")
		if !ok || !slices.Contains([]string{"get", "post", "patch", "delete", "put"}, method) {
			continue
		}
		path := strings.ReplaceAll(tmpl, "{id}", "w-1")
		want[path] = append(want[path], strings.ToUpper(method))
	}
	if len(want) < 5 {
		t.Fatalf("read only %d paths from the rules", len(want))
	}
	for path, methods := range want {
		got := adminAllowed(path)
		slices.Sort(got)
		slices.Sort(methods)
		if !slices.Equal(got, methods) {
			t.Errorf("%s: adminAllowed = %v, rules say %v", path, got, methods)
		}
	}
	for _, p := range []string{"/admin/v1/nothing", "/admin/v1/workers/a/b", "/v1/models"} {
		if got := adminAllowed(p); got != nil {
			t.Errorf("%s: adminAllowed = %v, want none", p, got)
		}
	}
}
