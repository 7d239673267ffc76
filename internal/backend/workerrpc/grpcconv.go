package workerrpc

import (
	"encoding/json"
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	workerv1 "github.com/sluicegw/sluice/gen/sluice/worker/v1"
	"github.com/sluicegw/sluice/internal/backend/body"
)

// ChatMessage is a chat message reduced to what a worker-protocol prompt carries.
type ChatMessage struct {
	Role    string
	Content string
}

// RenderChatPrompt renders a conversation as the prompt text of the worker protocol: one
// "role: content\n" line per message, in order. Engines behind the worker protocol (and the
// simulator) receive chat requests in this form; anything that compares or hashes prompts must
// render them the same way.
func RenderChatPrompt(messages []ChatMessage) string {
	n := 0
	for _, m := range messages {
		n += len(m.Role) + len(m.Content) + 3
	}
	var b strings.Builder
	b.Grow(n)
	for _, m := range messages {
		b.WriteString(m.Role)
		b.WriteString(": ")
		b.WriteString(m.Content)
		b.WriteByte('\n')
	}
	return b.String()
}

// ParseChatMessages decodes an OpenAI messages array. A string content is taken as is; an array of
// content parts contributes the text of its "text" parts joined by "\n"; null or missing content (an
// assistant tool call) is empty.
func ParseChatMessages(raw []byte) ([]ChatMessage, error) {
	var wire []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &wire); err != nil {
		return nil, &body.RequestError{Param: "messages", Message: "messages: " + err.Error()}
	}
	out := make([]ChatMessage, len(wire))
	for i, w := range wire {
		out[i].Role = w.Role
		if len(w.Content) == 0 || body.IsNull(w.Content) {
			continue
		}
		switch w.Content[0] {
		case '"':
			if err := json.Unmarshal(w.Content, &out[i].Content); err != nil {
				return nil, body.Invalid(fmt.Sprintf("messages[%d].content", i), "bad content: %v", err)
			}
		case '[':
			var parts []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}
			if err := json.Unmarshal(w.Content, &parts); err != nil {
				return nil, body.Invalid(fmt.Sprintf("messages[%d].content", i), "bad content parts: %v", err)
			}
			var b strings.Builder
			for _, p := range parts {
				if p.Type != "text" {
					continue
				}
				if b.Len() > 0 {
					b.WriteByte('\n')
				}
				b.WriteString(p.Text)
			}
			out[i].Content = b.String()
		default:
			return nil, body.Invalid(fmt.Sprintf("messages[%d].content", i), "content must be a string or an array of parts")
		}
	}
	return out, nil
}

// grpcCall is a generation request converted to the worker protocol: one sub-request per
// (prompt, sample), in the order prompt-major (sub-request i = prompt i/n, sample i%n), which is also
// the OpenAI choice index.
type grpcCall struct {
	route        body.Route
	model        string
	requestID    string
	prompts      []*workerv1.Prompt
	batched      bool // the client sent a list of prompts (generate answers with a list)
	n            int
	stream       bool
	includeUsage bool
	sampling     *workerv1.SamplingParams
	bootstrap    []*workerv1.Bootstrap // nil, one (shared) or one per sub-request
	kv           *workerv1.KVTransferParams
	inputLogprob bool
	typedAnswer  bool // a unary decode answer is kept as an Answer (answer.go)
}

func (c *grpcCall) subs() int { return len(c.prompts) * c.n }

// multi reports whether the response lists several results (generate answers with an array).
func (c *grpcCall) multi() bool { return c.batched || c.n > 1 }

func (c *grpcCall) bootstrapFor(i int) *workerv1.Bootstrap {
	switch len(c.bootstrap) {
	case 0:
		return nil
	case 1:
		return c.bootstrap[0]
	}
	return c.bootstrap[i]
}

// Top-level fields the conversion consumes; every other field goes to SamplingParams.extra.
var consumedFields = map[string]bool{
	"model": true, "messages": true, "prompt": true, "text": true, "input_ids": true,
	"stream": true, "stream_options": true, "n": true, "max_tokens": true, "max_completion_tokens": true,
	"temperature": true, "top_p": true, "top_k": true, "stop": true, "seed": true, "min_tokens": true,
	"ignore_eos": true, "sampling_params": true, "bootstrap_host": true, "bootstrap_port": true,
	"bootstrap_room": true, "kv_transfer_params": true, "rid": true, "return_logprob": true,
}

// Fields of /generate's sampling_params the conversion maps; the rest goes to extra.
var generateSamplingFields = map[string]bool{
	"max_new_tokens": true, "temperature": true, "top_p": true, "top_k": true, "stop": true,
	"min_new_tokens": true, "ignore_eos": true, "n": true, "sampling_seed": true, "seed": true,
}

// buildCall converts an OpenAI/SGLang JSON body into worker-protocol sub-requests. Errors are
// *body.RequestError (answered 400).
func buildCall(route body.Route, raw []byte, requestID string) (*grpcCall, error) {
	c := &grpcCall{route: route, n: 1, requestID: requestID, sampling: &workerv1.SamplingParams{}}
	fields, scanErr := body.TopMembers(raw)
	if scanErr != nil {
		return nil, &body.RequestError{Message: "malformed JSON: " + scanErr.Error(), Malformed: true}
	}
	extra := map[string]any{}
	dec := func(param string, raw json.RawMessage, dst any) error {
		if raw == nil {
			return nil
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			return body.Invalid(param, "%s: %v", param, err)
		}
		return nil
	}
	if err := dec("model", fields["model"], &c.model); err != nil {
		return nil, err
	}
	if c.requestID == "" {
		// SGLang's rid names the request in engine logs; a list (batch form) is ignored.
		_ = json.Unmarshal(fields["rid"], &c.requestID)
	}
	if err := dec("stream", fields["stream"], &c.stream); err != nil {
		return nil, err
	}
	if so := fields["stream_options"]; so != nil {
		var opts struct {
			IncludeUsage bool `json:"include_usage"`
		}
		if err := dec("stream_options", so, &opts); err != nil {
			return nil, err
		}
		c.includeUsage = opts.IncludeUsage
	}

	var err error
	switch route {
	case body.RouteChat:
		raw := fields["messages"]
		if raw == nil {
			return nil, body.Invalid("messages", "messages is required")
		}
		msgs, err := ParseChatMessages(raw)
		if err != nil {
			return nil, err
		}
		c.prompts = []*workerv1.Prompt{textPrompt(RenderChatPrompt(msgs))}
	case body.RouteCompletions:
		c.prompts, c.batched, err = completionPrompts(fields["prompt"])
	case body.RouteGenerate:
		c.prompts, c.batched, err = generatePrompts(fields["text"], fields["input_ids"])
	default:
		return nil, fmt.Errorf("backend: route %d not supported over gRPC", route)
	}
	if err != nil {
		return nil, err
	}

	sp := c.sampling
	if route == body.RouteGenerate {
		if err := c.generateSampling(fields["sampling_params"], extra); err != nil {
			return nil, err
		}
		if err := dec("return_logprob", fields["return_logprob"], &c.inputLogprob); err != nil {
			var list []bool // the batch form
			if dec("return_logprob", fields["return_logprob"], &list) != nil {
				return nil, err
			}
			for _, v := range list {
				c.inputLogprob = c.inputLogprob || v
			}
		}
	} else {
		var n *int
		if err := dec("n", fields["n"], &n); err != nil {
			return nil, err
		}
		if n != nil {
			c.n = *n
		}
		maxKey := "max_tokens"
		if route == body.RouteChat && fields["max_completion_tokens"] != nil {
			maxKey = "max_completion_tokens"
		}
		if err := dec(maxKey, fields[maxKey], &sp.MaxTokens); err != nil {
			return nil, err
		}
		if err := dec("temperature", fields["temperature"], &sp.Temperature); err != nil {
			return nil, err
		}
		if err := dec("top_p", fields["top_p"], &sp.TopP); err != nil {
			return nil, err
		}
		if err := dec("top_k", fields["top_k"], &sp.TopK); err != nil {
			return nil, err
		}
		if sp.Stop, err = stopList("stop", fields["stop"]); err != nil {
			return nil, err
		}
		if err := dec("seed", fields["seed"], &sp.Seed); err != nil {
			return nil, err
		}
		if err := dec("min_tokens", fields["min_tokens"], &sp.MinTokens); err != nil {
			return nil, err
		}
		if err := dec("ignore_eos", fields["ignore_eos"], &sp.IgnoreEos); err != nil {
			return nil, err
		}
	}
	if c.n < 1 || c.n > body.MaxN {
		return nil, body.Invalid("n", "n must be between 1 and %d", body.MaxN)
	}

	if err := c.handshake(fields); err != nil {
		return nil, err
	}
	for k, raw := range fields {
		if consumedFields[k] {
			continue
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, body.Invalid(k, "%s: %v", k, err)
		}
		extra[k] = v
	}
	if len(extra) > 0 {
		s, err := structpb.NewStruct(extra)
		if err != nil {
			return nil, body.Invalid("", "unsupported parameter value: %v", err)
		}
		sp.Extra = s
	}
	return c, nil
}

func textPrompt(s string) *workerv1.Prompt {
	return &workerv1.Prompt{Input: &workerv1.Prompt_Text{Text: s}}
}

func idsPrompt(ids []uint32) *workerv1.Prompt {
	return &workerv1.Prompt{Input: &workerv1.Prompt_TokenIds{TokenIds: &workerv1.TokenIds{Ids: ids}}}
}

// completionPrompts handles a string, a list of strings, a list of ids, or a list of id lists.
func completionPrompts(raw json.RawMessage) ([]*workerv1.Prompt, bool, error) {
	if raw == nil {
		return nil, false, body.Invalid("prompt", "prompt is required")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, false, body.Invalid("prompt", "prompt: %v", err)
		}
		return []*workerv1.Prompt{textPrompt(s)}, false, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil || len(items) == 0 {
		return nil, false, body.Invalid("prompt", "prompt must be a string or a non-empty array")
	}
	switch items[0][0] {
	case '"':
		var ss []string
		if err := json.Unmarshal(raw, &ss); err != nil {
			return nil, false, body.Invalid("prompt", "prompt: %v", err)
		}
		out := make([]*workerv1.Prompt, len(ss))
		for i, s := range ss {
			out[i] = textPrompt(s)
		}
		return out, true, nil
	case '[':
		var ids [][]uint32
		if err := json.Unmarshal(raw, &ids); err != nil {
			return nil, false, body.Invalid("prompt", "prompt: %v", err)
		}
		out := make([]*workerv1.Prompt, len(ids))
		for i, s := range ids {
			out[i] = idsPrompt(s)
		}
		return out, true, nil
	}
	var ids []uint32
	if err := json.Unmarshal(raw, &ids); err != nil {
		return nil, false, body.Invalid("prompt", "prompt: %v", err)
	}
	return []*workerv1.Prompt{idsPrompt(ids)}, false, nil
}

// generatePrompts handles /generate's text (string or list) or input_ids (list or list of lists).
func generatePrompts(text, inputIDs json.RawMessage) ([]*workerv1.Prompt, bool, error) {
	switch {
	case text != nil && text[0] == '"':
		var s string
		if err := json.Unmarshal(text, &s); err != nil {
			return nil, false, body.Invalid("text", "text: %v", err)
		}
		return []*workerv1.Prompt{textPrompt(s)}, false, nil
	case text != nil:
		var ss []string
		if err := json.Unmarshal(text, &ss); err != nil || len(ss) == 0 {
			return nil, false, body.Invalid("text", "text must be a string or a non-empty array of strings")
		}
		out := make([]*workerv1.Prompt, len(ss))
		for i, s := range ss {
			out[i] = textPrompt(s)
		}
		return out, true, nil
	case inputIDs != nil:
		var one []uint32
		if err := json.Unmarshal(inputIDs, &one); err == nil {
			return []*workerv1.Prompt{idsPrompt(one)}, false, nil
		}
		var many [][]uint32
		if err := json.Unmarshal(inputIDs, &many); err != nil || len(many) == 0 {
			return nil, false, body.Invalid("input_ids", "input_ids must be a list of token ids or of lists")
		}
		out := make([]*workerv1.Prompt, len(many))
		for i, ids := range many {
			out[i] = idsPrompt(ids)
		}
		return out, true, nil
	}
	return nil, false, body.Invalid("text", "one of text or input_ids is required")
}

func stopList(param string, raw json.RawMessage) ([]string, error) {
	if raw == nil {
		return nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, body.Invalid(param, "%s: %v", param, err)
		}
		return []string{s}, nil
	}
	var ss []string
	if err := json.Unmarshal(raw, &ss); err != nil {
		return nil, body.Invalid(param, "%s must be a string or an array of strings", param)
	}
	return ss, nil
}

// generateSampling maps /generate's sampling_params (an object, or a per-prompt list of which the
// first element is used: the worker protocol has one set of sampling parameters per call).
func (c *grpcCall) generateSampling(raw json.RawMessage, extra map[string]any) error {
	if raw == nil {
		return nil
	}
	if raw[0] == '[' {
		var list []json.RawMessage
		if err := json.Unmarshal(raw, &list); err != nil {
			return body.Invalid("sampling_params", "sampling_params: %v", err)
		}
		if len(list) == 0 {
			return nil
		}
		raw = list[0]
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return body.Invalid("sampling_params", "sampling_params must be an object")
	}
	sp := c.sampling
	dec := func(key string, dst any) error {
		v := fields[key]
		if v == nil || body.IsNull(v) {
			return nil
		}
		if err := json.Unmarshal(v, dst); err != nil {
			return body.Invalid("sampling_params."+key, "sampling_params.%s: %v", key, err)
		}
		return nil
	}
	var n *int
	var err error
	for _, step := range []error{
		dec("max_new_tokens", &sp.MaxTokens),
		dec("temperature", &sp.Temperature),
		dec("top_p", &sp.TopP),
		dec("top_k", &sp.TopK),
		dec("min_new_tokens", &sp.MinTokens),
		dec("ignore_eos", &sp.IgnoreEos),
		dec("n", &n),
		dec("seed", &sp.Seed),
		dec("sampling_seed", &sp.Seed),
	} {
		if step != nil {
			return step
		}
	}
	if n != nil {
		c.n = *n
	}
	if v := fields["stop"]; v != nil && !body.IsNull(v) {
		if sp.Stop, err = stopList("sampling_params.stop", v); err != nil {
			return err
		}
	}
	for k, v := range fields {
		if generateSamplingFields[k] || body.IsNull(v) {
			continue
		}
		var x any
		if err := json.Unmarshal(v, &x); err != nil {
			return body.Invalid("sampling_params."+k, "sampling_params.%s: %v", k, err)
		}
		extra[k] = x
	}
	return nil
}

// handshake reads the PD handshake the dispatcher put in the body: SGLang-style bootstrap fields
// (scalars, or arrays with one entry per sub-request) or vLLM-style kv_transfer_params.
func (c *grpcCall) handshake(fields map[string]json.RawMessage) error {
	if kv := fields["kv_transfer_params"]; kv != nil {
		var w struct {
			DoRemoteDecode  bool     `json:"do_remote_decode"`
			DoRemotePrefill bool     `json:"do_remote_prefill"`
			RemoteEngineID  *string  `json:"remote_engine_id"`
			RemoteBlockIDs  []uint32 `json:"remote_block_ids"`
			RemoteHost      *string  `json:"remote_host"`
			RemotePort      *uint32  `json:"remote_port"`
		}
		if err := json.Unmarshal(kv, &w); err != nil {
			return body.Invalid("kv_transfer_params", "kv_transfer_params: %v", err)
		}
		c.kv = &workerv1.KVTransferParams{
			DoRemoteDecode:  w.DoRemoteDecode,
			DoRemotePrefill: w.DoRemotePrefill,
			RemoteBlockIds:  w.RemoteBlockIDs,
		}
		if w.RemoteEngineID != nil {
			c.kv.RemoteEngineId = *w.RemoteEngineID
		}
		if w.RemoteHost != nil {
			c.kv.RemoteHost = *w.RemoteHost
		}
		if w.RemotePort != nil {
			c.kv.RemotePort = *w.RemotePort
		}
	}
	roomRaw := fields["bootstrap_room"]
	if roomRaw == nil {
		return nil
	}
	subs := c.subs()
	if roomRaw[0] != '[' {
		var b workerv1.Bootstrap
		var port *uint32
		if err := json.Unmarshal(roomRaw, &b.Room); err != nil {
			return body.Invalid("bootstrap_room", "bootstrap_room: %v", err)
		}
		if h := fields["bootstrap_host"]; h != nil {
			if err := json.Unmarshal(h, &b.Host); err != nil {
				return body.Invalid("bootstrap_host", "bootstrap_host: %v", err)
			}
		}
		if p := fields["bootstrap_port"]; p != nil {
			if err := json.Unmarshal(p, &port); err != nil {
				return body.Invalid("bootstrap_port", "bootstrap_port: %v", err)
			}
			if port != nil {
				b.Port = *port
			}
		}
		if subs > 1 {
			return body.Invalid("bootstrap_room", "one bootstrap_room for %d sub-requests: each needs its own", subs)
		}
		c.bootstrap = []*workerv1.Bootstrap{&b}
		return nil
	}
	var rooms []uint64
	var hosts []string
	var ports []*uint32
	if err := json.Unmarshal(roomRaw, &rooms); err != nil {
		return body.Invalid("bootstrap_room", "bootstrap_room: %v", err)
	}
	if h := fields["bootstrap_host"]; h != nil {
		if err := json.Unmarshal(h, &hosts); err != nil {
			return body.Invalid("bootstrap_host", "bootstrap_host: %v", err)
		}
	}
	if p := fields["bootstrap_port"]; p != nil {
		if err := json.Unmarshal(p, &ports); err != nil {
			return body.Invalid("bootstrap_port", "bootstrap_port: %v", err)
		}
	}
	if len(rooms) < subs {
		return body.Invalid("bootstrap_room", "bootstrap_room has %d entries for %d sub-requests", len(rooms), subs)
	}
	c.bootstrap = make([]*workerv1.Bootstrap, subs)
	for i := range subs {
		b := &workerv1.Bootstrap{Room: rooms[i]}
		if i < len(hosts) {
			b.Host = hosts[i]
		}
		if i < len(ports) && ports[i] != nil {
			b.Port = *ports[i]
		}
		c.bootstrap[i] = b
	}
	return nil
}

// prefillRequest builds sub-request i's PrefillRequest.
func (c *grpcCall) prefillRequest(i int) *workerv1.PrefillRequest {
	r := &workerv1.PrefillRequest{
		RequestId:           c.subID(i),
		Model:               c.model,
		Prompt:              c.prompts[i/c.n],
		Sampling:            c.sampling,
		ReturnInputLogprobs: c.inputLogprob,
	}
	if b := c.bootstrapFor(i); b != nil {
		r.Handshake = &workerv1.PrefillRequest_Bootstrap{Bootstrap: b}
	} else if c.kv != nil {
		r.Handshake = &workerv1.PrefillRequest_KvTransfer{KvTransfer: c.kv}
	}
	return r
}

// decodeRequest builds sub-request i's DecodeRequest; withHandshake is false for regular workers.
func (c *grpcCall) decodeRequest(i int, withHandshake bool) *workerv1.DecodeRequest {
	r := &workerv1.DecodeRequest{
		RequestId: c.subID(i),
		Model:     c.model,
		Prompt:    c.prompts[i/c.n],
		Sampling:  c.sampling,
	}
	if !withHandshake {
		return r
	}
	if b := c.bootstrapFor(i); b != nil {
		r.Handshake = &workerv1.DecodeRequest_Bootstrap{Bootstrap: b}
	} else if c.kv != nil {
		r.Handshake = &workerv1.DecodeRequest_KvTransfer{KvTransfer: c.kv}
	}
	return r
}

func (c *grpcCall) subID(i int) string {
	if c.subs() == 1 || c.requestID == "" {
		return c.requestID
	}
	return fmt.Sprintf("%s-%d", c.requestID, i)
}
