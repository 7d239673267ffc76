package body

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRequestInjectBootstrap: the parsed request appends the fields to the body it read, and
// rewrites any other body (a copy, one with bootstrap fields of its own), with the same bytes as
// InjectBootstrap.
func TestRequestInjectBootstrap(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		body string
		want string
	}{
		{"appended before the closing whitespace", "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"}\"}] \n}\n",
			"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"}\"}],\"bootstrap_host\":\"h\",\"bootstrap_port\":9,\"bootstrap_room\":3 \n}\n"},
		{"its own room replaced", `{"model":"m","bootstrap_room":1,"messages":[{"role":"user","content":"x"}]}`,
			`{"model":"m","bootstrap_room":3,"messages":[{"role":"user","content":"x"}],"bootstrap_host":"h","bootstrap_port":9}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := ParseRequest(RouteChat, []byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range [][]byte{r.Body, []byte(tt.body)} { // the body read, and a copy
				got, err := r.InjectBootstrap(b, "h", 9, []uint64{3}, false)
				if err != nil || string(got) != tt.want {
					t.Errorf("InjectBootstrap = %s, %v; want %s", got, err, tt.want)
				}
			}
		})
	}
}

func TestInjectBootstrap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		body    string
		host    string
		port    int
		rooms   []uint64
		asList  bool
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
			name:   "arrays for a batch of three prompts",
			body:   `{"text":["a","b","c"]}`,
			host:   "h",
			port:   1,
			rooms:  []uint64{7, 8, 9},
			asList: true,
			want:   `{"text":["a","b","c"],"bootstrap_host":["h","h","h"],"bootstrap_port":[1,1,1],"bootstrap_room":[7,8,9]}`,
		},
		{
			name:   "arrays with null port",
			body:   `{}`,
			host:   "h",
			rooms:  []uint64{7, 8},
			asList: true,
			want:   `{"bootstrap_host":["h","h"],"bootstrap_port":[null,null],"bootstrap_room":[7,8]}`,
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
		{
			name:   "a batch of one prompt still gets lists",
			body:   `{"text":["a"]}`,
			host:   "[::1]",
			port:   8998,
			rooms:  []uint64{3},
			asList: true,
			want:   `{"text":["a"],"bootstrap_host":["[::1]"],"bootstrap_port":[8998],"bootstrap_room":[3]}`,
		},
		{name: "no rooms", body: `{}`, host: "h", wantErr: true},
		{name: "several rooms but scalars asked", body: `{}`, host: "h", rooms: []uint64{1, 2}, wantErr: true},
		{name: "bad port", body: `{}`, host: "h", port: 70000, rooms: []uint64{1}, wantErr: true},
		{name: "not an object", body: `[1]`, host: "h", rooms: []uint64{1}, wantErr: true},
		{name: "malformed", body: `{"a":`, host: "h", rooms: []uint64{1}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := InjectBootstrap([]byte(tt.body), tt.host, tt.port, tt.rooms, tt.asList)
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
	t.Parallel()
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

// Rooms go one per prompt, as mini_lb's _get_request_batch_size and the Rust gateway send them:
// never one per sample (the engine repeats the list n times itself).
func TestSGLangRooms(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		req    Request
		count  int
		asList bool
	}{
		{"single prompt", Request{N: 1}, 1, false},
		{"n > 1 is not a count of rooms", Request{N: 4}, 1, false},
		{"batch", Request{N: 1, BatchSize: 3}, 3, true},
		{"batch of one is a list", Request{N: 1, BatchSize: 1}, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if c, l := SGLangRooms(&tt.req); c != tt.count || l != tt.asList {
				t.Errorf("SGLangRooms() = %d, %t; want %d, %t", c, l, tt.count, tt.asList)
			}
		})
	}
	if c, l := WorkerRPCRooms(&Request{N: 2, BatchSize: 3}); c != 6 || !l {
		t.Errorf("WorkerRPCRooms(2 x 3) = %d, %t; want 6 rooms as a list", c, l)
	}
	if c, l := WorkerRPCRooms(&Request{N: 1}); c != 1 || l {
		t.Errorf("WorkerRPCRooms(1) = %d, %t; want one scalar room", c, l)
	}
}

func TestBootstrapHost(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"http://10.0.0.5:30000":       "10.0.0.5",
		"http://prefill-0.svc:30000/": "prefill-0.svc",
		"http://[fd00::5]:30000":      "[fd00::5]", // mini_lb wraps IPv6 literals (maybe_wrap_ipv6_address)
		"https://[::1]":               "[::1]",
		"grpc://h:1":                  "h",
	} {
		if got := BootstrapHost(in); got != want {
			t.Errorf("BootstrapHost(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSingleSampleBody(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		route   Route
		body    string
		want    string
		wantErr bool
	}{
		{"chat n replaced", RouteChat, `{"model":"m","n":3,"messages":[]}`, `{"model":"m","n":1,"messages":[]}`, false},
		{"completions", RouteCompletions, `{"prompt":"p","n" : 2}`, `{"prompt":"p","n" : 1}`, false},
		{"generate sampling_params.n", RouteGenerate, `{"text":"t","sampling_params":{"n":4,"temperature":0.7}}`,
			`{"text":"t","sampling_params":{"n":1,"temperature":0.7}}`, false},
		{"generate per-prompt list refused", RouteGenerate, `{"text":["a"],"sampling_params":[{"n":2}]}`, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SingleSampleBody(tt.route, []byte(tt.body))
			if (err != nil) != tt.wantErr {
				t.Fatalf("SingleSampleBody() error = %v, wantErr %t", err, tt.wantErr)
			}
			if string(got) != tt.want {
				t.Errorf("SingleSampleBody() = %s, want %s", got, tt.want)
			}
		})
	}
}

// mini_lb's generate_stream prepends the prefill's input_token_logprobs to every decode frame.
func TestMergeStreamInputLogprobs(t *testing.T) {
	t.Parallel()
	prefill := []byte(`{"text":"","meta_info":{"id":"p","input_token_logprobs":[[-1,5,null]]},"index":1}`)
	got, err := MergeStreamInputLogprobs(prefill, []byte(`{"text":"a","meta_info":{"input_token_logprobs":[[-2,6,null]]},"index":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"text":"a","meta_info":{"input_token_logprobs":[[-1,5,null],[-2,6,null]]},"index":1}`; string(got) != want {
		t.Errorf("merged frame = %s, want %s", got, want)
	}
	for _, frame := range []string{"[DONE]", `{"text":"no meta"}`} {
		if got, _ := MergeStreamInputLogprobs(prefill, []byte(frame)); string(got) != frame {
			t.Errorf("frame %s changed to %s", frame, got)
		}
	}
	if i := FrameIndex(prefill); i != 1 {
		t.Errorf("FrameIndex = %d, want 1", i)
	}
	if i := FrameIndex([]byte(`{"text":"x"}`)); i != 0 {
		t.Errorf("FrameIndex(no index) = %d, want 0", i)
	}
}

func TestMergeInputLogprobs(t *testing.T) {
	t.Parallel()
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

func TestAlignRoom(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		room      uint64
		dp, rank  int
		want      uint64
		unchanged bool
	}{
		{room: 103, dp: 4, rank: 1, want: 101},
		{room: 100, dp: 4, rank: 3, want: 103},
		{room: RoomMask, dp: 4, rank: 3, want: RoomMask}, // 2^63-1 is 3 mod 4
		{room: RoomMask - 3, dp: 8, rank: 7, want: RoomMask},
		{room: RoomMask - 1, dp: 4, rank: 3, want: RoomMask},
		{room: RoomMask, dp: 3, rank: 2, want: RoomMask - 2}, // would reach 2^63 without the step back
		{room: 77, dp: 1, rank: 0, unchanged: true},
		{room: 77, dp: 4, rank: -1, unchanged: true},
	} {
		got := AlignRoom(tc.room, tc.dp, tc.rank)
		if tc.unchanged {
			tc.want = tc.room
		}
		if got != tc.want || got > RoomMask || (!tc.unchanged && got%uint64(tc.dp) != uint64(tc.rank)) {
			t.Errorf("AlignRoom(%d, %d, %d) = %d, want %d", tc.room, tc.dp, tc.rank, got, tc.want)
		}
	}
}

func TestSGLangRankHints(t *testing.T) {
	t.Parallel()
	body := []byte(`{"text":"x","bootstrap_room":4}`)
	p, d, err := SGLangRankHints(body, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if string(p) != `{"text":"x","bootstrap_room":4,"routed_dp_rank":2}` ||
		string(d) != `{"text":"x","bootstrap_room":4,"disagg_prefill_dp_rank":2,"routed_dp_rank":1}` {
		t.Errorf("legs:\n%s\n%s", p, d)
	}
	p, d, _ = SGLangRankHints(body, -1, -1)
	if string(p) != string(body) || string(d) != string(body) {
		t.Errorf("no ranks changed the body: %s %s", p, d)
	}
	p, d, _ = SGLangRankHints(body, -1, 3)
	if string(p) != string(body) || string(d) != `{"text":"x","bootstrap_room":4,"routed_dp_rank":3}` {
		t.Errorf("decode rank only: %s %s", p, d)
	}
}

// FuzzPlainHost holds the parse-free reading of a worker URL's host to url.Parse's: wherever plainHost
// answers, it answers what parsedHost does.
func FuzzPlainHost(f *testing.F) {
	for _, s := range []string{"http://10.0.0.5:30000", "http://prefill-0.svc:30000/", "http://[fd00::5]:30000", "https://[::1]",
		"grpc://h:1", "http://[1.2.3.4]:1", "http://u@h:1", "http://h:x", "http://h:1/p?q", "://h", "1http://h", "http://h%41",
		"http://[::1%25eth0]:1", "http://H_1.example:8080/v1/", "http://h:", "http://[::1]x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		if got, ok := plainHost(in); ok {
			if want := parsedHost(in); got != want {
				t.Fatalf("plainHost(%q) = %q, url.Parse reads %q", in, got, want)
			}
		}
	})
}

// TestPlainHostTakesWorkerURLs checks that the usual worker URLs take the parse-free path (the point
// of it), and that what it refuses still gets its host through url.Parse.
func TestPlainHostTakesWorkerURLs(t *testing.T) { // not parallel: AllocsPerRun
	for _, in := range []string{"http://10.0.0.5:30000", "http://prefill-0.svc:30000/", "http://[fd00::5]:30000", "grpc://h:1",
		"https://prefill.ns.svc.cluster.local"} {
		if _, ok := plainHost(in); !ok {
			t.Errorf("plainHost(%q) refused a plain worker URL", in)
		}
	}
	if got := BootstrapHost("http://user@h:1"); got != "h" {
		t.Errorf("BootstrapHost with user info = %q, want h (through url.Parse)", got)
	}
	if allocs := testing.AllocsPerRun(100, func() { _ = BootstrapHost("http://10.0.0.5:30000") }); allocs != 0 {
		t.Errorf("BootstrapHost of a plain URL allocates %v times, want 0", allocs)
	}
}

// BenchmarkInjectBootstrap adds the bootstrap fields to a 2 kB chat body: appended by the request
// that parsed it, and, as the baseline, by the rewrite that scans it again.
func BenchmarkInjectBootstrap(b *testing.B) {
	reqBody := benchChatBody()
	r, err := ParseRequest(RouteChat, reqBody)
	if err != nil {
		b.Fatal(err)
	}
	rooms := []uint64{1234567890123456789}
	for _, bb := range []struct {
		name   string
		inject func() ([]byte, error)
	}{
		{"append", func() ([]byte, error) { return r.InjectBootstrap(reqBody, "10.0.0.5", 8998, rooms, false) }},
		{"rewrite", func() ([]byte, error) { return InjectBootstrap(reqBody, "10.0.0.5", 8998, rooms, false) }},
	} {
		b.Run(bb.name, func(b *testing.B) {
			b.SetBytes(int64(len(reqBody)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bb.inject(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
