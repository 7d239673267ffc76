package sim

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"
)

// OpenAI's Responses API and Anthropic's Messages API, as both engines serve them: SGLang
// (http_server.py /v1/responses, serving_responses.py; entrypoints/anthropic/serving_messages.py
// /v1/messages) and vLLM (entrypoints/openai/responses, entrypoints/anthropic/api_router.py
// /v1/messages). The simulator turns each request into the chat request it amounts to and runs it
// through the same model (scheduler, prefill, decode, disaggregation rules: an SGLang PD engine
// refuses it without a bootstrap room, a vLLM decode engine recomputes the prompt), then answers in
// the API's own shape. Streams are named SSE events ("event: <type>" then "data: <json>") and end when
// the response is complete, without [DONE].
//
// Simplifications: text only (no tools, reasoning items, images or documents; their blocks are
// ignored), one output message, no stored responses (previous_response_id is refused, store is
// ignored), and n = 1.

type convAPI int

const (
	convResponses convAPI = iota
	convMessages
)

func (e *Engine) conversationRoutes(handle func(string, http.HandlerFunc)) {
	handle("POST /v1/responses", func(w http.ResponseWriter, r *http.Request) { e.serveConversation(w, r, convResponses) })
	handle("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) { e.serveConversation(w, r, convMessages) })
}

// convRequest is the union of the fields read from both APIs' requests.
type convRequest struct {
	Model string `json:"model"`
	// Responses
	Input              json.RawMessage `json:"input"`
	Instructions       string          `json:"instructions"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	PreviousResponseID string          `json:"previous_response_id"`
	// Messages
	System        json.RawMessage `json:"system"`
	Messages      json.RawMessage `json:"messages"`
	MaxTokens     *int            `json:"max_tokens"`
	StopSequences []string        `json:"stop_sequences"`
	// both
	Stream      bool     `json:"stream"`
	Temperature *float64 `json:"temperature"`
	TopP        *float64 `json:"top_p"`
}

// chatBody is the chat request a Responses or Messages request amounts to.
func (c *convRequest) chatBody(api convAPI) ([]byte, error) {
	var msgs []map[string]any
	add := func(role string, content json.RawMessage) error {
		text, err := blockText(content)
		if err != nil {
			return err
		}
		msgs = append(msgs, map[string]any{"role": role, "content": text})
		return nil
	}
	body := map[string]any{"model": c.Model, "stream": c.Stream}
	if c.Temperature != nil {
		body["temperature"] = *c.Temperature
	}
	if c.TopP != nil {
		body["top_p"] = *c.TopP
	}
	switch api {
	case convResponses:
		if c.PreviousResponseID != "" {
			return nil, requestError("previous_response_id", "previous_response_id is not supported: the simulator stores no responses")
		}
		if c.Instructions != "" {
			msgs = append(msgs, map[string]any{"role": "system", "content": c.Instructions})
		}
		var s string
		if json.Unmarshal(c.Input, &s) == nil {
			msgs = append(msgs, map[string]any{"role": "user", "content": s})
		} else {
			var items []struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			}
			if err := json.Unmarshal(c.Input, &items); err != nil || len(items) == 0 {
				return nil, requestError("input", "input must be a string or a non-empty list of input items")
			}
			for _, it := range items {
				role := it.Role
				if role == "" {
					role = "user"
				}
				if err := add(role, it.Content); err != nil {
					return nil, requestError("input", "%v", err)
				}
			}
		}
		if c.MaxOutputTokens != nil {
			body["max_tokens"] = *c.MaxOutputTokens
		}
	case convMessages:
		if len(c.System) > 0 && string(c.System) != "null" {
			if err := add("system", c.System); err != nil {
				return nil, requestError("system", "%v", err)
			}
		}
		var items []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(c.Messages, &items); err != nil || len(items) == 0 {
			return nil, requestError("messages", "messages must be a non-empty list")
		}
		for _, it := range items {
			if err := add(it.Role, it.Content); err != nil {
				return nil, requestError("messages", "%v", err)
			}
		}
		if c.MaxTokens == nil {
			return nil, requestError("max_tokens", "Field required: max_tokens")
		}
		body["max_tokens"] = *c.MaxTokens
		if len(c.StopSequences) > 0 {
			body["stop"] = c.StopSequences
		}
	}
	body["messages"] = msgs
	return json.Marshal(body)
}

// blockText is the text of a content: a string, or the text of its text blocks (Responses'
// input_text/output_text, Anthropic's text).
func blockText(raw json.RawMessage) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", errors.New("content must be a string or a list of content blocks")
	}
	var out []byte
	for _, b := range blocks {
		switch b.Type {
		case "text", "input_text", "output_text":
			if len(out) > 0 {
				out = append(out, ' ')
			}
			out = append(out, b.Text...)
		}
	}
	return string(out), nil
}

func (e *Engine) serveConversation(w http.ResponseWriter, r *http.Request, api convAPI) {
	e.stats.seen.Add(1)
	e.stats.inFlight.Add(1)
	defer e.stats.inFlight.Add(-1)
	ctx := r.Context()
	bp := getBuf()
	body, err := readBody(r.Body, *bp)
	*bp = body[:0]
	body = append([]byte(nil), body...)
	putBuf(bp)
	if err != nil {
		e.countFailure()
		e.writeConvError(w, api, schemaError("reading body: %v", err))
		return
	}
	rf := e.faults.Load().forRequest(e.cfg.Role, r.URL.Path, true, e.randFloat)
	if err := e.applyRequestFaults(ctx, &rf); err != nil {
		e.countFailure()
		if status := rf.errorStatus; status != 0 {
			e.writeConvError(w, api, abortError(errInjected, status, "injected fault: status %d %s", status, http.StatusText(status)))
			return
		}
		panic(http.ErrAbortHandler)
	}
	var req convRequest
	if err := json.Unmarshal(body, &req); err != nil {
		e.countFailure()
		e.writeConvError(w, api, schemaError("malformed JSON body: %v", err))
		return
	}
	chat, err := req.chatBody(api)
	if err != nil {
		e.countFailure()
		e.writeConvError(w, api, err)
		return
	}
	job, err := e.parseJob(apiChat, chat, r.Header)
	if err != nil {
		e.countFailure()
		e.writeConvError(w, api, err)
		return
	}
	job.created = time.Now().Unix()
	if api == convResponses {
		job.id = e.newID("resp_")
	} else {
		job.id = e.newID("msg_")
	}
	release := e.claimRooms(job.samples)
	defer release()
	if req.Stream {
		e.streamConversation(w, r, api, job, &rf)
		return
	}
	results, err := e.runJob(ctx, job, &rf, func(int, string) error { return nil })
	if err != nil {
		e.countFailure()
		if ctx.Err() != nil && e.baseCtx.Err() == nil {
			return
		}
		e.writeConvError(w, api, err)
		return
	}
	e.stats.completed.Add(1)
	writeJSON(w, http.StatusOK, convObject(api, job, &results[0], "completed"))
}

// convObject is the final response object (Responses) or message (Messages).
func convObject(api convAPI, job *genJob, res *sampleResult, status string) map[string]any {
	if api == convMessages {
		stop, seq := "end_turn", any(nil)
		switch {
		case res.matched != "":
			stop, seq = "stop_sequence", res.matched
		case res.finish == "length":
			stop = "max_tokens"
		}
		return map[string]any{"id": job.id, "type": "message", "role": "assistant", "model": job.model,
			"content":     []map[string]any{{"type": "text", "text": res.text}},
			"stop_reason": stop, "stop_sequence": seq,
			"usage": map[string]int{"input_tokens": res.promptTokens, "output_tokens": res.completionTokens}}
	}
	out := map[string]any{"id": job.id, "object": "response", "created_at": job.created, "model": job.model,
		"status": status, "output": []any{}, "usage": nil, "incomplete_details": nil}
	if res != nil {
		if res.finish == "length" && status == "completed" {
			out["status"] = "incomplete"
			out["incomplete_details"] = map[string]string{"reason": "max_output_tokens"}
		}
		out["output"] = []any{responseMessage(job, res.text, "completed")}
		out["usage"] = map[string]any{"input_tokens": res.promptTokens, "output_tokens": res.completionTokens,
			"total_tokens":         res.promptTokens + res.completionTokens,
			"input_tokens_details": map[string]int{"cached_tokens": res.cachedTokens}}
	}
	return out
}

func responseMessage(job *genJob, text, status string) map[string]any {
	content := []any{}
	if status == "completed" {
		content = []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}
	}
	return map[string]any{"type": "message", "id": "msg_" + job.id, "status": status, "role": "assistant", "content": content}
}

// convStream writes named SSE events, flushing each.
type convStream struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	seq int
	api convAPI
}

func (s *convStream) event(typ string, payload map[string]any) error {
	payload["type"] = typ
	if s.api == convResponses {
		payload["sequence_number"] = s.seq
		s.seq++
	}
	b, err := json.Marshal(payload)
	if err != nil {
		return err
	}
	out := make([]byte, 0, len(b)+len(typ)+16)
	out = append(append(append(out, "event: "...), typ...), "\ndata: "...)
	out = append(append(out, b...), '\n', '\n')
	if _, err := s.w.Write(out); err != nil {
		return err
	}
	return s.rc.Flush()
}

func (e *Engine) streamConversation(w http.ResponseWriter, r *http.Request, api convAPI, job *genJob, rf *requestFaults) {
	h := w.Header()
	h["Content-Type"] = sseContentType
	h["Cache-Control"] = noCache
	w.WriteHeader(http.StatusOK)
	s := &convStream{w: w, rc: http.NewResponseController(w), api: api}
	var err error
	if api == convResponses {
		if err = s.event("response.created", map[string]any{"response": convObject(api, job, nil, "in_progress")}); err == nil {
			err = s.event("response.output_item.added", map[string]any{"output_index": 0, "item": responseMessage(job, "", "in_progress")})
		}
		if err == nil {
			err = s.event("response.content_part.added", map[string]any{"item_id": "msg_" + job.id, "output_index": 0, "content_index": 0,
				"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
		}
	} else {
		err = s.event("message_start", map[string]any{"message": map[string]any{"id": job.id, "type": "message", "role": "assistant",
			"model": job.model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil,
			"usage": map[string]int{"input_tokens": len(job.samples[0].prompt.ids), "output_tokens": 0}}})
		if err == nil {
			err = s.event("content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
		}
	}
	if err != nil {
		return
	}
	emitted := 0
	emit := func(_ int, delta string) error {
		if emitted++; rf.dieAfter > 0 && emitted >= rf.dieAfter {
			return errDie
		}
		if api == convResponses {
			return s.event("response.output_text.delta", map[string]any{"item_id": "msg_" + job.id, "output_index": 0, "content_index": 0, "delta": delta})
		}
		return s.event("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "text_delta", "text": delta}})
	}
	results, err := e.runJob(r.Context(), job, rf, emit)
	if err != nil {
		e.countFailure()
		if errors.Is(err, errDie) {
			panic(http.ErrAbortHandler)
		}
		if r.Context().Err() != nil {
			return
		}
		ee := asEngineError(err)
		if api == convMessages {
			_ = s.event("error", map[string]any{"error": map[string]any{"type": anthropicErrorType(ee.status), "message": ee.msg}})
		} else {
			_ = s.event("error", map[string]any{"code": pythonStatusName(ee.status), "message": ee.msg, "param": nil})
		}
		return
	}
	e.stats.completed.Add(1)
	res := &results[0]
	if api == convResponses {
		final := convObject(api, job, res, "completed")
		_ = s.event("response.output_text.done", map[string]any{"item_id": "msg_" + job.id, "output_index": 0, "content_index": 0, "text": res.text})
		_ = s.event("response.content_part.done", map[string]any{"item_id": "msg_" + job.id, "output_index": 0, "content_index": 0,
			"part": map[string]any{"type": "output_text", "text": res.text, "annotations": []any{}}})
		_ = s.event("response.output_item.done", map[string]any{"output_index": 0, "item": responseMessage(job, res.text, "completed")})
		_ = s.event("response.completed", map[string]any{"response": final})
		return
	}
	msg := convObject(api, job, res, "")
	_ = s.event("content_block_stop", map[string]any{"index": 0})
	_ = s.event("message_delta", map[string]any{"delta": map[string]any{"stop_reason": msg["stop_reason"], "stop_sequence": msg["stop_sequence"]},
		"usage": map[string]int{"output_tokens": res.completionTokens}})
	_ = s.event("message_stop", map[string]any{})
}

// anthropicErrorType is the Anthropic error type of an HTTP status.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable:
		return "overloaded_error"
	}
	return "api_error"
}

// writeConvError answers a refused request in the API's error shape: Anthropic's
// {"type":"error","error":{"type","message"}} (vLLM's translate_error_response) for Messages, the
// nested OpenAI error for Responses (SGLang's handler for /v1/responses, vLLM's ErrorResponse).
func (e *Engine) writeConvError(w http.ResponseWriter, api convAPI, err error) {
	ee := asEngineError(err)
	if api == convMessages {
		writeJSON(w, ee.status, map[string]any{"type": "error", "error": map[string]any{"type": anthropicErrorType(ee.status), "message": ee.msg}})
		return
	}
	var param any
	if ee.param != "" {
		param = ee.param
	}
	writeJSON(w, ee.status, map[string]any{"error": map[string]any{"message": ee.msg, "type": vllmErrorType(ee.status), "param": param, "code": ee.status}})
}
