package apierror

import (
	"encoding/json"
	"testing"
)

// FuzzFromUpstream fuzzes the relay of an engine's error body: no panic, the engine's status is kept,
// and the client gets a well-formed OpenAI error body whatever the engine sent.
func FuzzFromUpstream(f *testing.F) {
	f.Add(400, []byte(`{"error":{"message":"max_tokens must be >= 0","type":"BadRequestError","param":"max_tokens","code":400}}`))
	f.Add(503, []byte(`{"object":"error","message":"The server is overloaded","type":"ServiceUnavailable","code":503}`))
	f.Add(500, []byte(`{"error":"boom"}`))
	f.Add(429, []byte(`not json`))
	f.Add(400, []byte(`{"error":{"message":12,"code":{"x":1}}}`))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		if status < 400 || status > 599 {
			return
		}
		e := FromUpstream(status, body, "upstream worker answered an error", nil)
		if e.Status != status {
			t.Fatalf("status %d became %d", status, e.Status)
		}
		var out struct {
			Error struct {
				Message string `json:"message"`
				Type    string `json:"type"`
				Code    string `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(e.JSON(), &out); err != nil {
			t.Fatalf("error body is not JSON: %v: %s", err, e.JSON())
		}
		if out.Error.Message == "" || out.Error.Type == "" || out.Error.Code == "" {
			t.Fatalf("incomplete error body %s", e.JSON())
		}
	})
}
