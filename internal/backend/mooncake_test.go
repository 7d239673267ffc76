package backend

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/backend/body"
)

func TestMooncakeEngineIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, hits := engineServer(t, map[string]route{
		"GET /query": {200, `{"1":{"engine_id":"b"},"0":{"engine_id":"a"}}`},
	})
	ids, err := (&Upstream{Client: testClient(t), APIKey: "k"}).MooncakeEngineIDs(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a", "b"}, ids); diff != "" {
		t.Errorf("ids by rank (-want +got):\n%s", diff)
	}
	if h := <-hits; h != "GET /query Bearer k" {
		t.Errorf("query %q", h)
	}
	for name, body := range map[string]string{
		"empty":        `{}`,
		"gap in ranks": `{"0":{"engine_id":"a"},"2":{"engine_id":"c"}}`,
		"no engine id": `{"0":{}}`,
		"not a rank":   `{"x":{"engine_id":"a"}}`,
	} {
		bad, _ := engineServer(t, map[string]route{"GET /query": {200, body}})
		if ids, err := (&Upstream{Client: testClient(t)}).MooncakeEngineIDs(ctx, bad); err == nil {
			t.Errorf("%s: ids %v, want an error", name, ids)
		}
	}
}

func TestMooncakeBodies(t *testing.T) {
	t.Parallel()
	p, err := body.MooncakePrefillBody([]byte(`{"model":"m","stream":true,"stream_options":{},"max_completion_tokens":7}`), "xfer-1")
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"model":"m","stream":false,"max_completion_tokens":1,"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"transfer_id":"xfer-1"},"max_tokens":1}`; string(p) != want {
		t.Errorf("prefill body\n%s\nwant\n%s", p, want)
	}
	d, err := body.MooncakeDecodeBody([]byte(`{"model":"m","kv_transfer_params":{"remote_host":"attacker"}}`), "http://[fd00::1]:8998", "e0", "xfer-1")
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"model":"m","kv_transfer_params":{"do_remote_decode":false,"do_remote_prefill":true,"remote_bootstrap_addr":"http://[fd00::1]:8998","remote_engine_id":"e0","transfer_id":"xfer-1"}}`; string(d) != want {
		t.Errorf("decode body\n%s\nwant\n%s", d, want)
	}
	for in, want := range map[[2]any]string{
		{"http://10.0.0.2:8010", 0}:  "http://10.0.0.2:8998",
		{"http://[fd00::1]:8010", 9}: "http://[fd00::1]:9",
	} {
		if got := MooncakeBootstrapAddr(in[0].(string), in[1].(int)); got != want {
			t.Errorf("MooncakeBootstrapAddr(%v) = %s, want %s", in, got, want)
		}
	}
}
