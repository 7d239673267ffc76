package body

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluicegw/sluice/internal/benchcpu"
)

// The hand-written scanner (jsonscan.go, jsonedit.go) against two libraries that could own the same
// jobs: github.com/tidwall/gjson + sjson (path queries and path edits on raw bytes) and
// github.com/go-json-experiment/json's jsontext (a validating token stream). Each job is done as the
// gateway needs it: the whole body validated, the routing fields read (chat: the message contents
// joined, as cache-aware routing wants), or the top-level edits of the PD legs made. The results
// must agree (TestJSONLibrariesAgree) before their speed means anything.

// libBodies are realistic request bodies: a short chat, a 2 KB multi-turn chat, a chat with a
// 100 KB prompt (with the escapes real text has), and a batch of 32 completion prompts of 1 KB.
func libBodies() []struct {
	name  string
	route Route
	body  []byte
} {
	var long strings.Builder
	for long.Len() < 100<<10 {
		long.WriteString(`The river ran \"fast\" past the mill;\nits water turned the wheel. `)
	}
	var batch strings.Builder
	batch.WriteString(`{"model":"meta-llama/Llama-3.1-8B-Instruct","max_tokens":64,"temperature":0.2,"prompt":[`)
	for i := range 32 {
		if i > 0 {
			batch.WriteByte(',')
		}
		batch.WriteString(`"` + strings.Repeat("summarise the following text in one line. ", 24) + strconv.Itoa(i) + `"`)
	}
	batch.WriteString(`],"stream":false}`)
	return []struct {
		name  string
		route Route
		body  []byte
	}{
		{"short_chat", RouteChat, []byte(`{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{"role":"system","content":"You are a helpful assistant."},` +
			`{"role":"user","content":"Write one short sentence about rivers."}],"max_tokens":64,"temperature":0.7,"stream":true}`)},
		{"chat_2KB", RouteChat, benchChatBody()},
		{"prompt_100KB", RouteChat, []byte(`{"model":"meta-llama/Llama-3.1-8B-Instruct","stream":true,"max_tokens":256,` +
			`"messages":[{"role":"system","content":"Summarise."},{"role":"user","content":"` + long.String() + `"}]}`)},
		{"batch_32x1KB", RouteCompletions, []byte(batch.String())},
	}
}

// routing is what ParseRequest reads for routing, in a form every implementation fills.
type routing struct {
	Model        string
	Stream       bool
	N            int
	IncludeUsage bool
	Text         string
}

func oursParse(route Route, body []byte) (routing, error) {
	r, err := ParseRequest(route, body)
	if err != nil {
		return routing{}, err
	}
	return routing{Model: r.Model, Stream: r.Stream, N: r.N, IncludeUsage: r.IncludeUsage, Text: r.Text}, nil
}

var errLibInvalid = errors.New("invalid JSON")

// gjsonParse validates the body, then queries each field by path.
func gjsonParse(route Route, body []byte) (routing, error) {
	if !gjson.ValidBytes(body) {
		return routing{}, errLibInvalid
	}
	var r routing
	r.N = 1
	res := gjson.GetManyBytes(body, "model", "stream", "n", "stream_options.include_usage")
	r.Model, r.Stream, r.IncludeUsage = res[0].Str, res[1].Bool(), res[3].Bool()
	if res[2].Exists() {
		r.N = int(res[2].Int())
	}
	var text []byte
	if route == RouteChat {
		gjson.GetBytes(body, "messages").ForEach(func(_, m gjson.Result) bool {
			if c := m.Get("content"); c.Type == gjson.String {
				if len(text) > 0 {
					text = append(text, ' ')
				}
				text = append(text, c.Str...)
			}
			return true
		})
	} else {
		p := gjson.GetBytes(body, "prompt")
		if p.IsArray() {
			p = p.Get("0")
		}
		text = append(text, p.Str...)
	}
	r.Text = string(text)
	return r, nil
}

// jsontextParse reads the body as a token stream, decoding the routing fields and skipping the rest.
func jsontextParse(d *jsontext.Decoder, route Route, body []byte) (routing, error) {
	d.Reset(bytes.NewReader(body), jsontext.AllowDuplicateNames(true))
	r := routing{N: 1}
	if t, err := d.ReadToken(); err != nil || t.Kind() != '{' {
		return r, errLibInvalid
	}
	var text []byte
	for d.PeekKind() != '}' {
		name, err := d.ReadToken()
		if err != nil {
			return r, err
		}
		switch name.String() {
		case "model":
			t, err := d.ReadToken()
			if err != nil {
				return r, err
			}
			r.Model = t.String()
		case "stream":
			t, err := d.ReadToken()
			if err != nil {
				return r, err
			}
			r.Stream = t.Kind() == 't'
		case "n":
			t, err := d.ReadToken()
			if err != nil {
				return r, err
			}
			n, _ := t.Int()
			r.N = int(n)
		case "stream_options":
			if d.PeekKind() != '{' {
				err = d.SkipValue()
				break
			}
			_, _ = d.ReadToken()
			for d.PeekKind() != '}' {
				k, err := d.ReadToken()
				if err != nil {
					return r, err
				}
				if k.String() == "include_usage" {
					t, err := d.ReadToken()
					if err != nil {
						return r, err
					}
					r.IncludeUsage = t.Kind() == 't'
				} else if err := d.SkipValue(); err != nil {
					return r, err
				}
			}
			_, err = d.ReadToken()
		case "messages":
			if route != RouteChat {
				err = d.SkipValue()
				break
			}
			if _, err = d.ReadToken(); err != nil { // [
				return r, err
			}
			for d.PeekKind() != ']' {
				if _, err = d.ReadToken(); err != nil { // {
					return r, err
				}
				for d.PeekKind() != '}' {
					k, err := d.ReadToken()
					if err != nil {
						return r, err
					}
					if k.String() == "content" && d.PeekKind() == '"' {
						t, err := d.ReadToken()
						if err != nil {
							return r, err
						}
						if len(text) > 0 {
							text = append(text, ' ')
						}
						text = append(text, t.String()...)
					} else if err := d.SkipValue(); err != nil {
						return r, err
					}
				}
				if _, err = d.ReadToken(); err != nil { // }
					return r, err
				}
			}
			_, err = d.ReadToken() // ]
		case "prompt":
			if route != RouteCompletions {
				err = d.SkipValue()
				break
			}
			if d.PeekKind() == '[' {
				_, _ = d.ReadToken()
				first := true
				for d.PeekKind() != ']' {
					t, err := d.ReadToken()
					if err != nil {
						return r, err
					}
					if first {
						text, first = append(text, t.String()...), false
					}
				}
				_, err = d.ReadToken()
			} else {
				var t jsontext.Token
				t, err = d.ReadToken()
				text = append(text, t.String()...)
			}
		default:
			err = d.SkipValue()
		}
		if err != nil {
			return r, err
		}
	}
	if _, err := d.ReadToken(); err != nil {
		return r, err
	}
	if _, err := d.ReadToken(); !errors.Is(err, io.EOF) {
		return r, errLibInvalid // trailing data
	}
	r.Text = string(text)
	return r, nil
}

// Top-level edits, as the PD legs make them: SGLang's bootstrap fields, vLLM's prefill body.
var (
	libBootstrap = []field{{"bootstrap_host", []byte(`"10.0.0.1"`)}, {"bootstrap_port", []byte("8998")},
		{"bootstrap_room", []byte("5764607523034234879")}}
	libVLLMPrefill = []field{{"kv_transfer_params", []byte(vllmPrefillKV)}, {"stream", []byte("false")}, {"max_tokens", []byte("1")},
		{"stream_options", nil}, {"min_tokens", nil}, {"min_completion_tokens", nil}}
)

// sjsonEdit validates the body, then applies each edit as a path edit (each one a pass and a copy).
func sjsonEdit(body []byte, edits []field) ([]byte, error) {
	if !gjson.ValidBytes(body) {
		return nil, errLibInvalid
	}
	out := body
	var err error
	for _, e := range edits {
		if e.value == nil {
			out, err = sjson.DeleteBytes(out, e.key)
		} else {
			out, err = sjson.SetRawBytes(out, e.key, e.value)
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// jsontextEdit streams the object from a decoder to an encoder, dropping the edited members and
// appending the new values. (The encoder re-checks and re-formats every value it writes, where the
// scanner copies the bytes as they were.)
func jsontextEdit(d *jsontext.Decoder, e *jsontext.Encoder, out *bytes.Buffer, body []byte, edits []field) ([]byte, error) {
	d.Reset(bytes.NewReader(body), jsontext.AllowDuplicateNames(true))
	out.Reset()
	e.Reset(out, jsontext.AllowDuplicateNames(true))
	if t, err := d.ReadToken(); err != nil || t.Kind() != '{' {
		return nil, errLibInvalid
	}
	if err := e.WriteToken(jsontext.BeginObject); err != nil {
		return nil, err
	}
	for d.PeekKind() != '}' {
		name, err := d.ReadToken()
		if err != nil {
			return nil, err
		}
		edited := false
		for _, ed := range edits {
			if name.String() == ed.key {
				edited = true
				break
			}
		}
		if edited {
			if err := d.SkipValue(); err != nil {
				return nil, err
			}
			continue
		}
		if err := e.WriteToken(name); err != nil { // before ReadValue, which voids the token
			return nil, err
		}
		v, err := d.ReadValue()
		if err != nil {
			return nil, err
		}
		if err := e.WriteValue(v); err != nil {
			return nil, err
		}
	}
	if _, err := d.ReadToken(); err != nil {
		return nil, err
	}
	for _, ed := range edits {
		if ed.value == nil {
			continue
		}
		if err := e.WriteToken(jsontext.String(ed.key)); err != nil {
			return nil, err
		}
		if err := e.WriteValue(ed.value); err != nil {
			return nil, err
		}
	}
	if err := e.WriteToken(jsontext.EndObject); err != nil {
		return nil, err
	}
	return bytes.TrimSpace(out.Bytes()), nil
}

// semantic decodes JSON for comparison.
func semantic(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("not JSON: %v: %.200s", err, b)
	}
	return v
}

// TestJSONLibrariesAgree: on every benchmark body the three implementations read the same routing
// fields and make the same edits.
func TestJSONLibrariesAgree(t *testing.T) {
	t.Parallel()
	d := jsontext.NewDecoder(bytes.NewReader(nil))
	e := jsontext.NewEncoder(io.Discard)
	var buf bytes.Buffer
	for _, tc := range libBodies() {
		t.Run(tc.name, func(t *testing.T) {
			want, err := oursParse(tc.route, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			g, err := gjsonParse(tc.route, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			j, err := jsontextParse(d, tc.route, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, g); diff != "" {
				t.Errorf("gjson (-ours +gjson):\n%s", diff)
			}
			if diff := cmp.Diff(want, j); diff != "" {
				t.Errorf("jsontext (-ours +jsontext):\n%s", diff)
			}
			for _, edits := range [][]field{libBootstrap, libVLLMPrefill} {
				ours, err := rewriteObject(tc.body, edits)
				if err != nil {
					t.Fatal(err)
				}
				s, err := sjsonEdit(tc.body, edits)
				if err != nil {
					t.Fatal(err)
				}
				jt, err := jsontextEdit(d, e, &buf, tc.body, edits)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(semantic(t, ours), semantic(t, s)); diff != "" {
					t.Errorf("sjson edit differs (-ours +sjson):\n%s", diff)
				}
				if diff := cmp.Diff(semantic(t, ours), semantic(t, jt)); diff != "" {
					t.Errorf("jsontext edit differs (-ours +jsontext):\n%s", diff)
				}
			}
		})
	}
}

// BenchmarkJSONParse: validating a body and reading its routing fields (ParseRequest's job).
func BenchmarkJSONParse(b *testing.B) {
	for _, tc := range libBodies() {
		d := jsontext.NewDecoder(bytes.NewReader(nil))
		for _, impl := range []struct {
			name string
			fn   func() error
		}{
			{"scanner", func() error { _, err := oursParse(tc.route, tc.body); return err }},
			{"gjson", func() error { _, err := gjsonParse(tc.route, tc.body); return err }},
			{"jsontext", func() error { _, err := jsontextParse(d, tc.route, tc.body); return err }},
		} {
			b.Run(tc.name+"/"+impl.name, func(b *testing.B) {
				b.SetBytes(int64(len(tc.body)))
				b.ReportAllocs()
				defer benchcpu.Start(b)()
				for b.Loop() {
					if err := impl.fn(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkJSONEdit: the PD legs' top-level edits (SGLang's bootstrap fields, vLLM's prefill body),
// the whole body validated and every other byte kept.
func BenchmarkJSONEdit(b *testing.B) {
	for _, tc := range libBodies() {
		d := jsontext.NewDecoder(bytes.NewReader(nil))
		e := jsontext.NewEncoder(io.Discard)
		var buf bytes.Buffer
		for _, ed := range []struct {
			name  string
			edits []field
		}{{"bootstrap", libBootstrap}, {"vllm_prefill", libVLLMPrefill}} {
			for _, impl := range []struct {
				name string
				fn   func() error
			}{
				{"scanner", func() error { _, err := rewriteObject(tc.body, ed.edits); return err }},
				{"sjson", func() error { _, err := sjsonEdit(tc.body, ed.edits); return err }},
				{"jsontext", func() error { _, err := jsontextEdit(d, e, &buf, tc.body, ed.edits); return err }},
			} {
				b.Run(tc.name+"/"+ed.name+"/"+impl.name, func(b *testing.B) {
					b.SetBytes(int64(len(tc.body)))
					b.ReportAllocs()
					defer benchcpu.Start(b)()
					for b.Loop() {
						if err := impl.fn(); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}
