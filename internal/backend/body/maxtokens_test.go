package body

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// maxOutputTokensJSON is what dispatch computed before MaxOutputTokens (one json.Unmarshal of the
// body): the reference the scanner must agree with on every case-sensitive body.
func maxOutputTokensJSON(body []byte) int64 {
	var b struct {
		MaxTokens           *int64 `json:"max_tokens"`
		MaxCompletionTokens *int64 `json:"max_completion_tokens"`
		SamplingParams      *struct {
			MaxNewTokens *int64 `json:"max_new_tokens"`
		} `json:"sampling_params"`
	}
	if json.Unmarshal(body, &b) != nil {
		return 0
	}
	var n *int64
	switch {
	case b.MaxCompletionTokens != nil:
		n = b.MaxCompletionTokens
	case b.MaxTokens != nil:
		n = b.MaxTokens
	case b.SamplingParams != nil:
		n = b.SamplingParams.MaxNewTokens
	}
	if n == nil || *n < 0 {
		return 0
	}
	return *n
}

var maxTokensCases = []struct {
	name, body string
	want       int64
}{
	{"absent", `{"model":"m","messages":[]}`, 0},
	{"max_tokens", `{"model":"m","max_tokens":8,"messages":[]}`, 8},
	{"completion first", `{"max_tokens":8,"max_completion_tokens":5}`, 5},
	{"completion null falls back", `{"max_tokens":8,"max_completion_tokens":null}`, 8},
	{"max_tokens null", `{"max_tokens":null}`, 0},
	{"negative", `{"max_tokens":-1}`, 0},
	{"negative completion wins", `{"max_tokens":8,"max_completion_tokens":-2}`, 0},
	{"sampling params", `{"text":"x","sampling_params":{"temperature":0,"max_new_tokens":12}}`, 12},
	{"sampling params without bound", `{"text":"x","sampling_params":{"temperature":0}}`, 0},
	{"sampling params null", `{"text":"x","sampling_params":null}`, 0},
	{"sampling params list", `{"text":["x","y"],"sampling_params":[{"max_new_tokens":3}]}`, 0},
	{"sampling params not an object", `{"sampling_params":3,"max_tokens":4}`, 0},
	{"max_tokens wins over sampling params", `{"max_tokens":4,"sampling_params":{"max_new_tokens":12}}`, 4},
	{"last duplicate wins", `{"max_tokens":4,"max_tokens":6}`, 6},
	{"fraction is not an int", `{"max_tokens":1.5}`, 0},
	{"integral float is not an int64", `{"max_tokens":2.0}`, 0},
	{"exponent", `{"max_tokens":1e2}`, 0},
	{"string", `{"max_tokens":"8"}`, 0},
	{"bad max_new_tokens spoils", `{"max_tokens":4,"sampling_params":{"max_new_tokens":"x"}}`, 0},
	{"overflow", `{"max_tokens":99999999999999999999}`, 0},
	{"escaped key", `{"max\u005ftokens":7}`, 7},
	{"nested keys ignored", `{"messages":[{"role":"user","content":"x","max_tokens":9}],"metadata":{"max_tokens":3}}`, 0},
	{"prompt mentions the key", `{"messages":[{"role":"user","content":"\"max_tokens\":9"}],"max_tokens":2}`, 2},
	{"not an object", `[1,2]`, 0},
	{"malformed", `{"max_tokens":8,`, 0},
	{"empty", ``, 0},
}

func TestMaxOutputTokens(t *testing.T) {
	for _, tc := range maxTokensCases {
		t.Run(tc.name, func(t *testing.T) {
			if got := MaxOutputTokens([]byte(tc.body)); got != tc.want {
				t.Errorf("MaxOutputTokens(%s) = %d, want %d", tc.body, got, tc.want)
			}
			if ref := maxOutputTokensJSON([]byte(tc.body)); ref != tc.want {
				t.Errorf("reference (json.Unmarshal) of %s = %d, want %d: the table no longer states the old behaviour", tc.body, ref, tc.want)
			}
		})
	}
}

// FuzzMaxOutputTokens checks the scanner against the json.Unmarshal reference on bodies whose keys
// are all lower case (encoding/json also matches keys case-insensitively; engines do not) and have no
// duplicate keys (encoding/json keeps decoding after a bad duplicate and fails the whole body).
func FuzzMaxOutputTokens(f *testing.F) {
	for _, tc := range maxTokensCases {
		f.Add(tc.body)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.ToLower(s) != s || strings.Contains(s, `\`) || !json.Valid([]byte(s)) || hasDuplicateKeys(s) {
			t.Skip()
		}
		if got, ref := MaxOutputTokens([]byte(s)), maxOutputTokensJSON([]byte(s)); got != ref {
			t.Errorf("MaxOutputTokens(%s) = %d, json.Unmarshal gives %d", s, got, ref)
		}
	})
}

// hasDuplicateKeys reports a key repeated within the top-level object or its sampling_params.
func hasDuplicateKeys(s string) bool {
	dup := func(raw json.RawMessage) bool {
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			return false
		}
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return false
			}
			k, _ := tok.(string)
			if seen[k] {
				return true
			}
			seen[k] = true
			var v json.RawMessage
			if dec.Decode(&v) != nil {
				return false
			}
		}
		return false
	}
	var top map[string]json.RawMessage
	if json.Unmarshal([]byte(s), &top) != nil {
		return false
	}
	return dup(json.RawMessage(s)) || dup(top["sampling_params"])
}

// BenchmarkMaxOutputTokens compares the scanner with the json.Unmarshal it replaced, on a chat body
// like the overhead scenario's (a 64-token prompt, max_tokens 8) and on a 2k-token one.
func BenchmarkMaxOutputTokens(b *testing.B) {
	for _, words := range []int{64, 2048} {
		body := []byte(`{"model":"sim-model","messages":[{"role":"user","content":"` +
			strings.Repeat("word ", words) + `"}],"max_tokens":8,"stream":false}`)
		for _, impl := range []struct {
			name string
			f    func([]byte) int64
		}{{"scan", MaxOutputTokens}, {"json", maxOutputTokensJSON}} {
			b.Run(impl.name+"/words="+strconv.Itoa(words), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if impl.f(body) != 8 {
						b.Fatal("wrong bound")
					}
				}
			})
		}
	}
}
