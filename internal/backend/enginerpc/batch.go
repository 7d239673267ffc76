package enginerpc

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/sluicegw/sluice/internal/backend/body"
)

// Batches: a completions request with a list of prompts, or /generate with a list of texts or of
// input_ids lists, is one Generate per prompt, as the Rust gateway fans a batch out (one backend
// request per prompt), run at once; their answers merge into the one the engines' HTTP servers give:
// completions' choices numbered prompt by prompt (index = prompt * n + sample) with usage summed,
// /generate's list of objects in prompt order. SGLang PD's per-prompt bootstrap lists give each prompt
// its own. A streamed batch is refused with a 400 naming stream.

// batchField returns the field holding a batch of prompts and its items, or "" when the body is one
// prompt.
func batchField(route body.Route, raw []byte) (string, []json.RawMessage) {
	if route != body.RouteCompletions && route != body.RouteGenerate {
		// A chat is one prompt: no need to parse its body a second time (it was half the JSON decoding of
		// a PD chat's legs, issue #35).
		return "", nil
	}
	var probe struct {
		Prompt   json.RawMessage `json:"prompt"`
		Text     json.RawMessage `json:"text"`
		InputIDs json.RawMessage `json:"input_ids"`
	}
	if json.Unmarshal(raw, &probe) != nil {
		return "", nil
	}
	var field string
	var v json.RawMessage
	switch {
	case route == body.RouteCompletions:
		field, v = "prompt", probe.Prompt
	case route == body.RouteGenerate && !isNull(probe.InputIDs):
		field, v = "input_ids", probe.InputIDs
	case route == body.RouteGenerate:
		field, v = "text", probe.Text
	default:
		return "", nil
	}
	v = bytes.TrimSpace(v)
	if len(v) == 0 || v[0] != '[' {
		return "", nil
	}
	var items []json.RawMessage
	if json.Unmarshal(v, &items) != nil || len(items) < 2 {
		return "", nil // one prompt, or a list of token ids
	}
	for _, it := range items {
		it = bytes.TrimSpace(it)
		if len(it) == 0 || (it[0] != '"' && it[0] != '[') {
			return "", nil // a list of token ids is one prompt
		}
	}
	return field, items
}

// batch runs each prompt of a batch as its own request through the transport and merges the answers.
func (t *Transport) batch(req *http.Request, route body.Route, raw []byte, field string, items []json.RawMessage) (*http.Response, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return errorResponse(req, http.StatusBadRequest, "invalid JSON body: "+err.Error(), "invalid_request_error", "", "invalid_request_error"), nil
	}
	var stream bool
	_ = json.Unmarshal(fields["stream"], &stream)
	if stream {
		return errorResponse(req, http.StatusBadRequest, "a streamed batch of prompts is not served over the engines' gRPC protocols: send one prompt per streamed request",
			"invalid_request_error", "stream", "invalid_request_error"), nil
	}
	rid := req.Header.Get("X-Request-Id")
	if rid == "" {
		rid = t.newID()
	}
	answers := make([][]byte, len(items))
	statuses := make([]int, len(items))
	errs := make([]error, len(items))
	var wg sync.WaitGroup
	for i, item := range items {
		one := make(map[string]json.RawMessage, len(fields))
		for k, v := range fields {
			one[k] = v
		}
		one[field] = item
		perPrompt(one, fields, i, len(items))
		b, err := json.Marshal(one)
		if err != nil {
			return nil, err
		}
		sub := req.Clone(req.Context())
		sub.Body, sub.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
		sub.Header = req.Header.Clone()
		sub.Header.Set("X-Request-Id", rid+"-"+strconv.Itoa(i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i], answers[i], errs[i] = t.roundTripBytes(sub)
		}()
	}
	wg.Wait()
	for i := range items {
		if errs[i] != nil {
			return nil, errs[i]
		}
		if statuses[i] != http.StatusOK {
			return jsonResponse(req, statuses[i], answers[i]), nil
		}
	}
	merged, err := mergeBatch(route, rid, answers)
	if err != nil {
		return errorResponse(req, http.StatusBadGateway, err.Error(), "server_error", "", "bad_gateway"), nil
	}
	return jsonResponse(req, http.StatusOK, merged), nil
}

// roundTripBytes runs one prompt's unary request and reads its answer.
func (t *Transport) roundTripBytes(req *http.Request) (int, []byte, error) {
	resp, err := t.RoundTrip(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// mergeBatch joins the prompts' answers: /generate's objects (each one, or a list with n > 1) into one
// list; completions' choices, renumbered in prompt order, under the first answer's head with the
// batch's id and the usage summed.
func mergeBatch(route body.Route, rid string, answers [][]byte) ([]byte, error) {
	if route == body.RouteGenerate {
		var all []json.RawMessage
		for _, a := range answers {
			a = bytes.TrimSpace(a)
			if len(a) > 0 && a[0] == '[' {
				var list []json.RawMessage
				if err := json.Unmarshal(a, &list); err != nil {
					return nil, err
				}
				all = append(all, list...)
				continue
			}
			all = append(all, a)
		}
		return json.Marshal(all)
	}
	var head map[string]json.RawMessage
	if err := json.Unmarshal(answers[0], &head); err != nil {
		return nil, err
	}
	var choices []map[string]json.RawMessage
	var prompt, completion, cached int
	for _, a := range answers {
		var one struct {
			Choices []map[string]json.RawMessage `json:"choices"`
			Usage   struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
				Details          struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(a, &one); err != nil {
			return nil, err
		}
		for _, c := range one.Choices {
			c["index"] = json.RawMessage(strconv.Itoa(len(choices)))
			choices = append(choices, c)
		}
		prompt += one.Usage.PromptTokens
		completion += one.Usage.CompletionTokens
		cached += one.Usage.Details.Cached
	}
	var err error
	if head["id"], err = json.Marshal("cmpl-" + rid); err != nil {
		return nil, err
	}
	if head["choices"], err = json.Marshal(choices); err != nil {
		return nil, err
	}
	usage := map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
		"prompt_tokens_details": map[string]int{"cached_tokens": cached}}
	if head["usage"], err = json.Marshal(usage); err != nil {
		return nil, err
	}
	return json.Marshal(head)
}

// perPromptFields are the fields a batch gives per prompt: SGLang PD's handshake, a list with one entry
// per prompt.
var perPromptFields = []string{"bootstrap_host", "bootstrap_port", "bootstrap_room"}

// perPrompt sets a prompt's own entry of each per-prompt list.
func perPrompt(one, fields map[string]json.RawMessage, i, n int) {
	for _, k := range perPromptFields {
		v := bytes.TrimSpace(fields[k])
		if len(v) == 0 || v[0] != '[' {
			continue
		}
		var list []json.RawMessage
		if json.Unmarshal(v, &list) == nil && len(list) == n {
			one[k] = list[i]
		}
	}
}
