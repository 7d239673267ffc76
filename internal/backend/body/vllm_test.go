package body

import (
	"errors"
	"testing"

	"github.com/sluicegw/sluice/internal/jsonscan"
)

// The prefill body follows vLLM's toy_proxy_server.py send_request_to_service.
func TestVLLMPrefillBody(t *testing.T) {
	t.Parallel()
	kv := `"kv_transfer_params":` + vllmPrefillKV
	tests := []struct {
		name string
		body string
		want string
	}{
		{
			name: "chat with max_completion_tokens: both caps set to 1, min caps and stream_options removed",
			body: `{"model":"m","stream":true,"stream_options":{"include_usage":true},"n":1,"min_tokens":4,"min_completion_tokens":2,"max_completion_tokens":300,"max_tokens":5,"user":"u"}`,
			want: `{"model":"m","stream":false,"n":1,"max_completion_tokens":1,"max_tokens":1,"user":"u",` + kv + `}`,
		},
		{
			name: "no caps: max_tokens added",
			body: `{"model":"m","messages":[]}`,
			want: `{"model":"m","messages":[],` + kv + `,"stream":false,"max_tokens":1}`,
		},
		{
			name: "a client's own kv_transfer_params are replaced",
			body: `{"max_tokens":100,"kv_transfer_params":{"remote_host":"attacker"},"prompt":"p"}`,
			want: `{"max_tokens":1,` + kv + `,"prompt":"p","stream":false}`,
		},
		{
			name: "n left as sent",
			body: `{"stream_options":{},"prompt":"p","n":1}`,
			want: `{"prompt":"p","n":1,` + kv + `,"stream":false,"max_tokens":1}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := VLLMPrefillBody([]byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("VLLMPrefillBody() =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestExtractKVTransferParamsAndDecodeBody(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		resp    string
		want    string
		wantErr error
	}{
		{
			name: "present",
			resp: `{"id":"x","choices":[],"kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"e1","remote_block_ids":[1,2],"remote_host":"10.0.0.1","remote_port":5600}}`,
			want: `{"do_remote_prefill":true,"remote_engine_id":"e1","remote_block_ids":[1,2],"remote_host":"10.0.0.1","remote_port":5600}`,
		},
		{name: "missing", resp: `{"id":"x"}`, wantErr: ErrNoKVTransferParams},
		{name: "null", resp: `{"kv_transfer_params":null}`, wantErr: ErrNoKVTransferParams},
		{name: "not object", resp: `{"kv_transfer_params":[1]}`, wantErr: ErrNoKVTransferParams},
		{name: "malformed", resp: `{"kv_transfer_params":{`, wantErr: jsonscan.ErrSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ExtractKVTransferParams([]byte(tt.resp))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("ExtractKVTransferParams() error = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("ExtractKVTransferParams() = %s, %v; want %s", got, err, tt.want)
			}
			dec, err := VLLMDecodeBody([]byte(`{"model":"m","stream":true,"kv_transfer_params":null}`), got)
			if err != nil {
				t.Fatal(err)
			}
			if want := `{"model":"m","stream":true,"kv_transfer_params":` + tt.want + `}`; string(dec) != want {
				t.Errorf("VLLMDecodeBody() = %s, want %s", dec, want)
			}
		})
	}
	// Without params (EOS on the one token, or a connector that returns none) the decode recomputes:
	// the body goes as the client sent it, minus any kv_transfer_params of the client's.
	for in, want := range map[string]string{
		`{"model":"m"}`: `{"model":"m"}`,
		`{"model":"m","kv_transfer_params":{"remote_host":"attacker"}}`: `{"model":"m"}`,
	} {
		if got, err := VLLMDecodeBody([]byte(in), nil); err != nil || string(got) != want {
			t.Errorf("VLLMDecodeBody(%s, nil) = %s, %v; want %s", in, got, err, want)
		}
	}
}
