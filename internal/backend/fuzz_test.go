package backend

import "testing"

// FuzzParseLoad: an engine's /v1/loads answer never panics the gateway and never yields negative
// counts (placement compares them).
func FuzzParseLoad(f *testing.F) {
	f.Add([]byte(`{"num_running_reqs":3,"num_waiting_reqs":1,"token_usage":0.5}`))
	f.Add([]byte(`{"loads":[{"num_running_reqs":1,"num_waiting_reqs":0,"token_usage":0.1},{"num_running_reqs":2}]}`))
	f.Add([]byte(`{"running":1,"waiting":2,"kv_cache_usage":0.3}`))
	f.Add([]byte(`{"num_running_reqs":-1,"num_waiting_reqs":1e300}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		l, err := parseLoad(in)
		if err != nil {
			return
		}
		if l.Running < 0 || l.Waiting < 0 {
			t.Fatalf("negative load %+v from %s", l, in)
		}
	})
}
