package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// namedEvents splits a named-event SSE body into (event, data) pairs and checks each data names its
// event as "type".
func namedEvents(t *testing.T, body []byte) (names []string, data []map[string]any) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	var name string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var d map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil {
				t.Fatalf("data %q: %v", line, err)
			}
			if d["type"] != name {
				t.Errorf("event %q carries type %v", name, d["type"])
			}
			names = append(names, name)
			data = append(data, d)
		case line != "":
			t.Errorf("unexpected SSE line %q", line)
		}
	}
	return names, data
}

func TestResponsesAPI(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Mode: ModeInstant, Protocol: ProtocolVLLM, Models: []string{"m"}})
	c := testClient(t)
	status, body := post(t, c, e.URL()+"/v1/responses", `{"model":"m","instructions":"be brief","input":"say hello","max_output_tokens":3}`)
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	r := decodeJSON[struct {
		Object, Status, Model string
		Output                []struct {
			Type, Role string
			Content    []struct{ Type, Text string }
		}
		Usage struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
			TotalTokens  int `json:"total_tokens"`
		}
	}](t, body)
	if r.Object != "response" || r.Model != "m" || len(r.Output) != 1 || r.Output[0].Content[0].Type != "output_text" ||
		r.Output[0].Content[0].Text == "" || r.Usage.OutputTokens != 3 || r.Usage.TotalTokens != r.Usage.InputTokens+3 {
		t.Fatalf("response %s", body)
	}
	if r.Status != "incomplete" {
		t.Errorf("status %q, want incomplete (max_output_tokens ended it)", r.Status)
	}

	status, body = post(t, c, e.URL()+"/v1/responses", `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}],"stream":true}`)
	if status != 200 {
		t.Fatalf("stream %d %s", status, body)
	}
	names, data := namedEvents(t, body)
	if len(names) < 6 || names[0] != "response.created" || names[len(names)-1] != "response.completed" {
		t.Fatalf("events %v", names)
	}
	var text strings.Builder
	for i, n := range names {
		if n == "response.output_text.delta" {
			text.WriteString(data[i]["delta"].(string))
		}
		if int(data[i]["sequence_number"].(float64)) != i {
			t.Errorf("event %d has sequence_number %v", i, data[i]["sequence_number"])
		}
	}
	final := data[len(data)-1]["response"].(map[string]any)
	got := final["output"].([]any)[0].(map[string]any)["content"].([]any)[0].(map[string]any)["text"]
	if text.String() == "" || got != text.String() {
		t.Errorf("deltas %q, final text %q", text.String(), got)
	}

	status, body = post(t, c, e.URL()+"/v1/responses", `{"model":"m","input":"x","previous_response_id":"resp_1"}`)
	if status != 400 || !strings.Contains(string(body), `"error":{`) {
		t.Errorf("previous_response_id: %d %s", status, body)
	}
}

func TestMessagesAPI(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Mode: ModeInstant, Protocol: ProtocolSGLang, Models: []string{"m"}})
	c := testClient(t)
	status, body := post(t, c, e.URL()+"/v1/messages", `{"model":"m","max_tokens":2,"system":"be brief","messages":[{"role":"user","content":"hi"}]}`)
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	m := decodeJSON[struct {
		Type, Role string
		Content    []struct{ Type, Text string }
		Usage      struct {
			OutputTokens int `json:"output_tokens"`
		}
	}](t, body)
	if m.Type != "message" || len(m.Content) != 1 || m.Content[0].Type != "text" || m.Usage.OutputTokens != 2 {
		t.Fatalf("message %s", body)
	}
	if !strings.Contains(string(body), `"stop_reason":"max_tokens"`) {
		t.Errorf("stop reason: %s", body)
	}
	status, body = post(t, c, e.URL()+"/v1/messages", `{"model":"m","max_tokens":3,"stream":true,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`)
	if status != 200 {
		t.Fatalf("stream %d %s", status, body)
	}
	names, _ := namedEvents(t, body)
	want := []string{"message_start", "content_block_start", "content_block_delta", "content_block_delta", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Errorf("events %v, want %v", names, want)
	}
	status, body = post(t, c, e.URL()+"/v1/messages", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if status != 400 || !strings.Contains(string(body), `"type":"error"`) || !strings.Contains(string(body), "max_tokens") {
		t.Errorf("missing max_tokens: %d %s", status, body)
	}
}

// TestConversationDisaggregation: the rules of the engines' disaggregation apply to these routes as
// to chat. An SGLang decode engine refuses a request without a bootstrap room; a vLLM decode engine
// computes the prompt itself.
func TestConversationDisaggregation(t *testing.T) {
	t.Parallel()
	sg := startEngine(t, Config{Mode: ModeInstant, Protocol: ProtocolSGLang, Role: RoleDecode, Models: []string{"m"}})
	vl := startEngine(t, Config{Mode: ModeInstant, Protocol: ProtocolVLLM, Role: RoleDecode, Models: []string{"m"}})
	c := testClient(t)
	body := `{"model":"m","input":"hi","max_output_tokens":2}`
	if status, b := post(t, c, sg.URL()+"/v1/responses", body); status != 400 || !strings.Contains(string(b), "without bootstrap room") {
		t.Errorf("sglang decode: %d %s", status, b)
	}
	if status, b := post(t, c, vl.URL()+"/v1/responses", body); status != 200 {
		t.Errorf("vllm decode: %d %s", status, b)
	}
	if got := vl.Stats().RecomputedPrompts; got != 1 {
		t.Errorf("vllm decode recomputed %d prompts, want 1", got)
	}
}
