package enginerpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/backend/body"
)

// decodeBodies are bodies of every route with every field decodeRequest reads, in the shapes clients send.
var decodeBodies = []string{
	`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":8,"stream":true,"stream_options":{"include_usage":true}}`,
	`{"model":"m","messages":[],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"auto","chat_template_kwargs":{"enable_thinking":false},"add_generation_prompt":false}`,
	`{"model":"m","prompt":"once","echo":true,"logprobs":3,"n":2,"max_completion_tokens":5,"top_logprobs":2}`,
	`{"prompt":[[1,2,3]],"temperature":0.5,"top_p":0.9,"top_k":-1,"min_p":0,"frequency_penalty":-0.5,"presence_penalty":1.5,"repetition_penalty":1.1}`,
	`{"prompt":"x","stop":["a","b"],"stop_token_ids":[1,2],"seed":-9007199254740993,"min_tokens":3,"ignore_eos":true,"skip_special_tokens":false,"no_stop_trim":true,"include_stop_str_in_output":true}`,
	`{"prompt":"x","regex":"[a-z]+","ebnf":"root ::= \"a\"","bad":["x"],"bad_token_ids":[],"json_schema":"{}"}`,
	`{"text":"hello","sampling_params":{"max_new_tokens":16,"min_new_tokens":2,"n":3,"temperature":0,"stop":"\n","json_schema":"{\"type\":\"object\"}"},"return_logprob":true,"top_logprobs_num":2,"logprob_start_len":-1}`,
	`{"input_ids":[1,2,3],"sampling_params":null,"bootstrap_host":"10.0.0.1","bootstrap_port":8998,"bootstrap_room":12345,"routed_dp_rank":1}`,
	`{"prompt":"x","kv_transfer_params":{"do_remote_decode":true},"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object"}}}}`,
	`{"prompt":"x","response_format":{"type":"json_object"},"structured_outputs":{"regex":"a"},"guided_json":{},"guided_regex":"a","guided_choice":["a"],"guided_grammar":"g"}`,
	`{"prompt":"x","max_tokens":null,"n":null,"stream":null,"model":null,"stream_options":null,"response_format":null,"stop_token_ids":null,"seed":null}`,
	`{"prompt":"x","max_tokens":1,"max_tokens":2,"sampling_params":{"temperature":1},"sampling_params":{"top_p":0.5}}`,
	`{"model":"caf\u00e9 \ud83d\ude00","prompt":"x","\u006dax_tokens":4}`,
	` {"prompt":"x","unknown":{"deep":[1,{"a":null}]},"other":1e400} `,
	`{"prompt":"x","temperature":1e-50,"top_p":1E2}`,
}

// TestDecodeRequestMatchesEncodingJSON: what the hand decoder reads is what encoding/json read before
// it, field for field.
func TestDecodeRequestMatchesEncodingJSON(t *testing.T) {
	for _, b := range decodeBodies {
		var want, got requestJSON
		if err := json.Unmarshal([]byte(b), &want); err != nil {
			t.Fatalf("%s: encoding/json: %v", b, err)
		}
		if err := decodeRequest([]byte(b), &got); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", b, got, want)
		}
	}
}

// TestDecodeRequestErrors: malformed JSON is a malformed body; a value of the wrong type names its field.
func TestDecodeRequestErrors(t *testing.T) {
	for _, c := range []struct {
		body, param string
		malformed   bool
	}{
		{`{"prompt":"x"`, "", true},
		{`{"prompt":"x"} {}`, "", true},
		{`[1]`, "", true},
		{`{"prompt":"x",}`, "", true},
		{`{"max_tokens":"8"}`, "max_tokens", false},
		{`{"max_tokens":1.5}`, "max_tokens", false},
		{`{"max_tokens":1e300}`, "max_tokens", false},
		{`{"routed_dp_rank":2147483648}`, "routed_dp_rank", false},
		{`{"min_tokens":-1}`, "min_tokens", false},
		{`{"stop_token_ids":[1,"2"]}`, "stop_token_ids", false},
		{`{"stop_token_ids":{}}`, "stop_token_ids", false},
		{`{"temperature":"hot"}`, "temperature", false},
		{`{"temperature":1e39}`, "temperature", false},
		{`{"stream":1}`, "stream", false},
		{`{"model":1}`, "model", false},
		{`{"stream_options":[]}`, "stream_options", false},
		{`{"stream_options":{"include_usage":"yes"}}`, "stream_options.include_usage", false},
		{`{"sampling_params":"x"}`, "sampling_params", false},
		{`{"sampling_params":{"max_new_tokens":"x"}}`, "max_new_tokens", false},
		{`{"response_format":{"type":3}}`, "response_format.type", false},
		{`{"response_format":{"json_schema":"s"}}`, "response_format.json_schema", false},
		{`{"regex":false}`, "regex", false},
	} {
		var r requestJSON
		err := decodeRequest([]byte(c.body), &r)
		var re *body.RequestError
		if !errors.As(err, &re) {
			t.Errorf("%s: got %v, want a request error", c.body, err)
			continue
		}
		if re.Malformed != c.malformed || re.Param != c.param {
			t.Errorf("%s: got param %q malformed %v (%s), want %q %v", c.body, re.Param, re.Malformed, re.Message, c.param, c.malformed)
		}
	}
}

// TestDecodeRequestAllocations: decoding a chat leg allocates only the pointers it fills.
func TestDecodeRequestAllocations(t *testing.T) {
	b := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":8,"stream":true,"temperature":0.7,"bootstrap_host":"h","bootstrap_port":1,"bootstrap_room":2}`)
	allocs := testing.AllocsPerRun(100, func() {
		var r requestJSON
		if err := decodeRequest(b, &r); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 3 { // the model string, max_tokens' and temperature's pointers
		t.Errorf("decodeRequest allocates %v times, want at most 3", allocs)
	}
}

// knownKeys are the JSON names requestJSON reads, folded to lower case.
var knownKeys = func() map[string]bool {
	keys := map[string]bool{}
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for f := range t.Fields() {
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" {
				keys[strings.ToLower(name)] = true
			}
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				walk(ft)
			}
		}
	}
	walk(reflect.TypeFor[requestJSON]())
	return keys
}()

// foldedKey reports whether b has an object key that matches a known field only case-insensitively,
// where encoding/json and the decoder (like the engines) differ by design.
func foldedKey(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if k, ok := tok.(string); ok && knownKeys[strings.ToLower(k)] && !knownKeys[k] {
			return true
		}
	}
}

// FuzzDecodeRequest: on any body, the decoder agrees with encoding/json on what is valid JSON, and
// where both decode it, on every field. The two differ by design only where encoding/json folds a
// key's case or refuses an integral number written as a float (2.0), which the engines accept.
func FuzzDecodeRequest(f *testing.F) {
	for _, b := range decodeBodies {
		f.Add([]byte(b))
	}
	f.Add([]byte(`{"MAX_TOKENS":3}`))
	f.Add([]byte(`{"max_tokens":3.0}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var want, got requestJSON
		jerr := json.Unmarshal(b, &want)
		err := decodeRequest(b, &got)
		var re *body.RequestError
		if err != nil && !errors.As(err, &re) {
			t.Fatalf("%q: not a request error: %v", b, err)
		}
		malformed := re != nil && re.Malformed
		if !json.Valid(b) {
			if !malformed {
				t.Fatalf("%q: invalid JSON, decoder %v", b, err)
			}
			return
		}
		if !bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte("{")) {
			if !malformed { // a body that is not an object is refused as one; encoding/json read null as {}
				t.Fatalf("%q: not an object, decoder %v", b, err)
			}
			return
		}
		if malformed {
			t.Fatalf("%q: valid JSON object refused as malformed: %v", b, err)
		}
		switch {
		case err == nil && jerr == nil:
			if !reflect.DeepEqual(got, want) && !foldedKey(b) {
				t.Fatalf("%q:\n got %+v\nwant %+v", b, got, want)
			}
		case err != nil && jerr == nil:
			if !foldedKey(b) {
				t.Fatalf("%q: decoder refused what encoding/json read: %v", b, err)
			}
		}
	})
}

// TestSetHandshake: the bootstrap fields and kv_transfer_params' probe, read without encoding/json.
func TestSetHandshake(t *testing.T) {
	for _, c := range []struct {
		body       string
		param      string // the refused field, "" when read
		room, port int32
		host       string
		kvBack     bool
	}{
		{`{"bootstrap_host":"10.0.0.7","bootstrap_port":8998,"bootstrap_room":9000000000000000003}`, "", int32(9000000000000000003 % roomModulus), 8998, "10.0.0.7", false},
		{`{"bootstrap_host":null,"bootstrap_port":8998.0,"bootstrap_room":5}`, "", 5, 8998, "", false},
		{`{"bootstrap_host":"h","bootstrap_room":18446744073709551615}`, "", int32(18446744073709551615 % roomModulus), 0, "h", false},
		{`{"bootstrap_host":"h","bootstrap_room":-1}`, "bootstrap_room", 0, 0, "", false},
		{`{"bootstrap_host":"h","bootstrap_room":1.5}`, "bootstrap_room", 0, 0, "", false},
		{`{"bootstrap_host":7,"bootstrap_room":1}`, "bootstrap_host", 0, 0, "", false},
		{`{"bootstrap_host":"h","bootstrap_port":70000,"bootstrap_room":1}`, "bootstrap_port", 0, 0, "", false},
		{`{"bootstrap_host":"h","bootstrap_port":"8998","bootstrap_room":1}`, "bootstrap_port", 0, 0, "", false},
		{`{"kv_transfer_params":{"x":{"do_remote_decode":false},"do_remote_decode":true}}`, "", 0, 0, "", true},
		{`{"kv_transfer_params":{"do_remote_decode":"yes"}}`, "", 0, 0, "", false},
	} {
		var r requestJSON
		if err := decodeRequest([]byte(c.body), &r); err != nil {
			t.Fatalf("%s: %v", c.body, err)
		}
		var call call
		err := call.setHandshake(&r)
		var re *body.RequestError
		switch {
		case c.param != "":
			if !errors.As(err, &re) || re.Param != c.param {
				t.Errorf("%s: %v, want %s refused", c.body, err, c.param)
			}
		case err != nil:
			t.Errorf("%s: %v", c.body, err)
		case call.wantKVBack != c.kvBack:
			t.Errorf("%s: wantKVBack %v", c.body, call.wantKVBack)
		case c.room != 0 && (call.bootstrap == nil || call.bootstrap.room != c.room || call.bootstrap.port != c.port || call.bootstrap.host != c.host):
			t.Errorf("%s: bootstrap %+v, want room %d port %d host %q", c.body, call.bootstrap, c.room, c.port, c.host)
		}
	}
}
