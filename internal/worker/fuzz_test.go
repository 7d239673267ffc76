package worker

import (
	"net/url"
	"slices"
	"testing"
)

// FuzzSpecNormalized fuzzes the admin API's worker spec validation (the URL parser above all): it never
// panics, an accepted spec is normalised idempotently, and an accepted URL has a host, one of the four
// schemes, and no credentials, query or fragment (worker URLs end up in logs and metric labels).
func FuzzSpecNormalized(f *testing.F) {
	f.Add("http://10.0.0.5:30000", "prefill", "sglang", 8998, "m")
	f.Add("HTTPS://Engine.Example:443/v1/", "decode", "vllm", 0, "")
	f.Add("grpc://127.0.0.1:50051", "regular", "", 0, "a")
	f.Add("grpcs://[::1]:1", "", "grpc", 0, "")
	f.Add("http://user:pass@h:1", "regular", "sglang", 0, "")
	f.Add("http://h:99999", "regular", "sglang", 0, "")
	f.Add("http://h/%zz?x#y", "decode", "sglang", -1, " ")
	f.Fuzz(func(t *testing.T, rawURL, role, protocol string, port int, model string) {
		spec := Spec{URL: rawURL, Role: Role(role), Protocol: Protocol(protocol), BootstrapPort: port, Models: []string{model}}
		n, err := spec.Normalized()
		if err != nil {
			return
		}
		again, err := n.Normalized()
		if err != nil {
			t.Fatalf("normalised spec %+v does not normalise again: %v", n, err)
		}
		if again.URL != n.URL || again.Role != n.Role || again.Protocol != n.Protocol || !slices.Equal(again.Models, n.Models) {
			t.Fatalf("normalisation is not idempotent: %+v then %+v", n, again)
		}
		u, err := url.Parse(n.URL)
		if err != nil {
			t.Fatalf("normalised URL %q does not parse: %v", n.URL, err)
		}
		switch u.Scheme {
		case "http", "https", "grpc", "grpcs":
		default:
			t.Fatalf("scheme %q accepted", u.Scheme)
		}
		if u.Hostname() == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			t.Fatalf("accepted URL %q has no host, or has credentials, a query or a fragment", n.URL)
		}
	})
}
