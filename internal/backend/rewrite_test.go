package backend

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestInjectBootstrap(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		host    string
		port    int
		rooms   []uint64
		want    string
		wantErr bool
	}{
		{
			name:  "scalar appended, unknown fields byte-for-byte",
			body:  `{"model":"m", "x": {"deep" : [1, 2.50, "é"]},"messages":[]}`,
			host:  "10.0.0.5",
			port:  8998,
			rooms: []uint64{42},
			want:  `{"model":"m", "x": {"deep" : [1, 2.50, "é"]},"messages":[],"bootstrap_host":"10.0.0.5","bootstrap_port":8998,"bootstrap_room":42}`,
		},
		{
			name:  "null port",
			body:  `{"text":"hi"}`,
			host:  "h",
			rooms: []uint64{1},
			want:  `{"text":"hi","bootstrap_host":"h","bootstrap_port":null,"bootstrap_room":1}`,
		},
		{
			name:  "arrays for several rooms",
			body:  `{"n":3}`,
			host:  "h",
			port:  1,
			rooms: []uint64{7, 8, 9},
			want:  `{"n":3,"bootstrap_host":["h","h","h"],"bootstrap_port":[1,1,1],"bootstrap_room":[7,8,9]}`,
		},
		{
			name:  "arrays with null port",
			body:  `{}`,
			host:  "h",
			rooms: []uint64{7, 8},
			want:  `{"bootstrap_host":["h","h"],"bootstrap_port":[null,null],"bootstrap_room":[7,8]}`,
		},
		{
			name:  "existing fields replaced in place, whitespace kept",
			body:  "{\n  \"bootstrap_room\" : 5,\n  \"a\": 1,\n  \"bootstrap_host\": \"old\"\n}\n",
			host:  "new",
			port:  2,
			rooms: []uint64{6},
			want:  "{\n  \"bootstrap_room\" : 6,\n  \"a\": 1,\n  \"bootstrap_host\": \"new\",\"bootstrap_port\":2\n}\n",
		},
		{
			name:  "duplicate keys all replaced",
			body:  `{"bootstrap_room":1,"bootstrap_room":2}`,
			host:  "h",
			port:  3,
			rooms: []uint64{9},
			want:  `{"bootstrap_room":9,"bootstrap_room":9,"bootstrap_host":"h","bootstrap_port":3}`,
		},
		{
			name:  "host is JSON-escaped",
			body:  `{}`,
			host:  `a"b`,
			port:  1,
			rooms: []uint64{1},
			want:  `{"bootstrap_host":"a\"b","bootstrap_port":1,"bootstrap_room":1}`,
		},
		{name: "no rooms", body: `{}`, host: "h", wantErr: true},
		{name: "bad port", body: `{}`, host: "h", port: 70000, rooms: []uint64{1}, wantErr: true},
		{name: "not an object", body: `[1]`, host: "h", rooms: []uint64{1}, wantErr: true},
		{name: "malformed", body: `{"a":`, host: "h", rooms: []uint64{1}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := InjectBootstrap([]byte(tt.body), tt.host, tt.port, tt.rooms)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("InjectBootstrap() = %s, want error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("InjectBootstrap() error = %v", err)
			}
			if string(got) != tt.want {
				t.Errorf("InjectBootstrap() =\n%s\nwant\n%s", got, tt.want)
			}
			if !json.Valid(got) {
				t.Errorf("output is not valid JSON")
			}
		})
	}
}

func TestNewRoom(t *testing.T) {
	for _, v := range []uint64{0, 1, 1<<63 - 1, 1 << 63, ^uint64(0)} {
		r := NewRoom(func() uint64 { return v })
		if r > RoomMask || r != v&RoomMask {
			t.Errorf("NewRoom(%x) = %x", v, r)
		}
	}
	seq := []uint64{1, ^uint64(0), 5}
	i := 0
	rooms := NewRooms(func() uint64 { i++; return seq[i-1] }, 3)
	if diff := cmp.Diff([]uint64{1, RoomMask, 5}, rooms); diff != "" {
		t.Errorf("NewRooms() (-want +got):\n%s", diff)
	}
}

func TestVLLMPrefillBody(t *testing.T) {
	kv := `"kv_transfer_params":` + vllmPrefillKV
	tests := []struct {
		name  string
		route Route
		body  string
		want  string
	}{
		{
			name:  "chat with max_completion_tokens",
			route: RouteChat,
			body:  `{"model":"m","stream":true,"stream_options":{"include_usage":true},"n":1,"min_tokens":4,"max_completion_tokens":300,"max_tokens":5,"user":"u"}`,
			want:  `{"model":"m","stream":false,"n":1,"max_completion_tokens":1,"max_tokens":5,"user":"u",` + kv + `}`,
		},
		{
			name:  "chat without caps adds max_tokens",
			route: RouteChat,
			body:  `{"model":"m","messages":[]}`,
			want:  `{"model":"m","messages":[],"stream":false,"n":1,"max_tokens":1,` + kv + `}`,
		},
		{
			name:  "completions caps max_tokens even if max_completion_tokens present",
			route: RouteCompletions,
			body:  `{"max_tokens":100,"max_completion_tokens":7,"kv_transfer_params":{"old":1},"prompt":"p"}`,
			want:  `{"max_tokens":1,"max_completion_tokens":7,` + kv + `,"prompt":"p","stream":false,"n":1}`,
		},
		{
			name:  "stream_options removed when first",
			route: RouteCompletions,
			body:  `{"stream_options":{},"prompt":"p","min_tokens":1}`,
			want:  `{"prompt":"p","stream":false,"n":1,"max_tokens":1,` + kv + `}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := VLLMPrefillBody(tt.route, []byte(tt.body))
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
		{name: "malformed", resp: `{"kv_transfer_params":{`, wantErr: errSyntax},
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
	if _, err := VLLMDecodeBody([]byte(`{}`), nil); !errors.Is(err, ErrNoKVTransferParams) {
		t.Errorf("VLLMDecodeBody(nil params) error = %v", err)
	}
}

func TestMergeInputLogprobs(t *testing.T) {
	tests := []struct {
		name    string
		prefill string
		decode  string
		want    string
		wantErr bool
	}{
		{
			name:    "prepended",
			prefill: `{"text":"","meta_info":{"input_token_logprobs":[[-1.5,10,null],[-0.5,11,null]]}}`,
			decode:  `{"text":"out","meta_info":{"id":"r","input_token_logprobs":[[-0.25,12,null]],"x":1}}`,
			want:    `{"text":"out","meta_info":{"id":"r","input_token_logprobs":[[-1.5,10,null],[-0.5,11,null],[-0.25,12,null]],"x":1}}`,
		},
		{
			name:    "decode empty list",
			prefill: `{"meta_info":{"input_token_logprobs":[[-1,1,null]]}}`,
			decode:  `{"meta_info":{"input_token_logprobs":[ ]}}`,
			want:    `{"meta_info":{"input_token_logprobs":[[-1,1,null]]}}`,
		},
		{
			name:    "decode has none",
			prefill: `{"meta_info":{"input_token_logprobs":[[-1,1,null]]}}`,
			decode:  `{"text":"t","meta_info":{"id":"r"}}`,
			want:    `{"text":"t","meta_info":{"id":"r","input_token_logprobs":[[-1,1,null]]}}`,
		},
		{
			name:    "decode has no meta_info",
			prefill: `{"meta_info":{"input_token_logprobs":[[-1,1,null]]}}`,
			decode:  `{"text":"t"}`,
			want:    `{"text":"t","meta_info":{"input_token_logprobs":[[-1,1,null]]}}`,
		},
		{
			name:    "prefill has none: unchanged",
			prefill: `{"meta_info":{}}`,
			decode:  `{"text":"t","meta_info":{"input_token_logprobs":[[-2,2,null]]}}`,
			want:    `{"text":"t","meta_info":{"input_token_logprobs":[[-2,2,null]]}}`,
		},
		{
			name:    "batch paired by index",
			prefill: `[{"meta_info":{"input_token_logprobs":[[-1,1,null]]}},{"meta_info":{"input_token_logprobs":[[-3,3,null]]}}]`,
			decode:  `[{"meta_info":{"input_token_logprobs":[[-2,2,null]]}}, {"meta_info":{"input_token_logprobs":[]}}]`,
			want:    `[{"meta_info":{"input_token_logprobs":[[-1,1,null],[-2,2,null]]}}, {"meta_info":{"input_token_logprobs":[[-3,3,null]]}}]`,
		},
		{name: "shape mismatch", prefill: `[]`, decode: `{}`, wantErr: true},
		{name: "bad prefill", prefill: `{`, decode: `{}`, wantErr: true},
		{name: "bad decode", prefill: `{}`, decode: `{} x`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := MergeInputLogprobs([]byte(tt.prefill), []byte(tt.decode))
			if tt.wantErr {
				if err == nil {
					t.Fatalf("MergeInputLogprobs() = %s, want error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("MergeInputLogprobs() =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func BenchmarkInjectBootstrap(b *testing.B) {
	body := benchChatBody()
	rooms := []uint64{1234567890123456789}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := InjectBootstrap(body, "10.0.0.5", 8998, rooms); err != nil {
			b.Fatal(err)
		}
	}
}
