package openai

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	openaiv1 "github.com/sluicegw/sluice/gen/sluice/openai/v1"
	workerv1 "github.com/sluicegw/sluice/gen/sluice/worker/v1"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/backend/workerrpc"
	"github.com/sluicegw/sluice/internal/jsonx"
	"github.com/sluicegw/sluice/internal/reqcheck"
)

// The typed path (#23). A request every field of which this file understands goes to dispatch as
// what the JSON path would have read from its body: the routing fields (body.Request, as
// body.ParseRequest fills them) and the worker-protocol call (workerrpc.Call, as workerrpc.BuildCall
// builds it), both taken from the message itself. A worker speaking the worker protocol then gets the
// call with no JSON in between; an HTTP engine gets the JSON, rendered only for its leg.
//
// Anything else goes as JSON, exactly as before, so that its answer (an error included) is the one
// the JSON path gives: a value reqcheck or the conversion refuses, a missing model or messages, tool
// definitions, logit_bias, response_format, content that is neither text nor a list of parts, a
// prompt of mixed kinds, extra_body values that are not scalars or that name a field the request
// already has or the conversion reads.

// The fields a JSON body takes from extra_body that the worker call maps to sampling parameters; any
// other extra_body key the conversion reads (consumedFields in workerrpc) makes the request go as JSON.
var extraSampling = map[string]bool{"top_k": true, "min_tokens": true, "ignore_eos": true}

// extraRefused are the extra_body keys the typed path leaves to the JSON path: the request messages'
// own fields (protojson's output would hold them) and what workerrpc's conversion consumes.
var extraRefused = map[string]bool{
	"model": true, "messages": true, "prompt": true, "max_tokens": true, "max_completion_tokens": true,
	"temperature": true, "top_p": true, "n": true, "stream": true, "stream_options": true, "stop": true,
	"presence_penalty": true, "frequency_penalty": true, "seed": true, "logprobs": true, "top_logprobs": true,
	"user": true, "tools": true, "tool_choice": true, "response_format": true, "logit_bias": true,
	"echo": true, "suffix": true, "text": true, "input_ids": true, "sampling_params": true,
	"bootstrap_host": true, "bootstrap_port": true, "bootstrap_room": true, "kv_transfer_params": true,
	"rid": true, "return_logprob": true, "extra_body": true,
}

// converter gathers one request's typed form; ok turns false at the first thing it leaves to JSON.
type converter struct {
	ok    bool
	chk   reqcheck.Checker
	num   []byte // scratch for the values reqcheck reads
	br    body.Request
	sp    *workerv1.SamplingParams
	extra map[string]*structpb.Value
}

func newConverter(api reqcheck.API, route body.Route) *converter {
	return &converter{ok: true, chk: reqcheck.New(api), br: body.Request{Route: route, N: 1}, sp: &workerv1.SamplingParams{}}
}

// check runs reqcheck's rule for key on raw.
func (c *converter) check(key string, raw []byte) {
	if c.ok && c.chk.Member([]byte(key), raw) != nil {
		c.ok = false
	}
}

func (c *converter) checkFloat(key string, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		c.ok = false // protojson writes them as strings, which reqcheck refuses
		return
	}
	c.num = strconv.AppendFloat(c.num[:0], v, 'g', -1, 64)
	c.check(key, c.num)
}

func (c *converter) checkInt(key string, v int64) {
	c.num = strconv.AppendInt(c.num[:0], v, 10)
	c.check(key, c.num)
}

// setExtra puts a field the worker protocol has no field for into SamplingParams.extra, as the JSON
// path does with every member it does not consume.
func (c *converter) setExtra(key string, v *structpb.Value) {
	if c.extra == nil {
		c.extra = map[string]*structpb.Value{}
	}
	c.extra[key] = v
}

func (c *converter) optFloat(key string, v *float64) {
	if v != nil {
		c.checkFloat(key, *v)
		c.setExtra(key, structpb.NewNumberValue(*v))
	}
}

func (c *converter) stringField(key, v string) {
	if v != "" { // protojson leaves out an empty non-optional string
		c.setExtra(key, structpb.NewStringValue(v))
	}
}

// common reads the fields chat and completions share. stream is the RPC's (the message's own stream
// field is ignored, as the JSON path forces it too).
func (c *converter) common(model string, maxTokens, n, seed *int32, temperature, topP *float64, stop *structpb.Value,
	so *openaiv1.StreamOptions, stream bool) {
	if model == "" {
		c.ok = false // "model is required"
		return
	}
	c.br.Model = model
	if maxTokens != nil {
		c.checkInt("max_tokens", int64(*maxTokens))
		c.sp.MaxTokens = uint32(max(*maxTokens, 0))
	}
	if n != nil {
		if *n < 1 || *n > body.MaxN {
			c.ok = false
			return
		}
		c.br.N = int(*n)
	}
	if seed != nil {
		c.checkInt("seed", int64(*seed))
		s := int64(*seed)
		c.sp.Seed = &s
	}
	if temperature != nil {
		c.checkFloat("temperature", *temperature)
		c.sp.Temperature = temperature
	}
	if topP != nil {
		c.checkFloat("top_p", *topP)
		c.sp.TopP = topP
	}
	if stop != nil {
		c.stop(stop)
	}
	c.br.Stream = stream
	if stream && so != nil {
		c.br.IncludeUsage = so.GetIncludeUsage()
	}
}

// stop reads a string or a list of strings; null is "no stop".
func (c *converter) stop(v *structpb.Value) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NullValue:
	case *structpb.Value_StringValue:
		c.sp.Stop = []string{k.StringValue}
	case *structpb.Value_ListValue:
		vals := k.ListValue.GetValues()
		c.sp.Stop = make([]string, len(vals))
		for i, e := range vals {
			s, ok := e.GetKind().(*structpb.Value_StringValue)
			if !ok {
				c.ok = false
				return
			}
			c.sp.Stop[i] = s.StringValue
		}
	default:
		c.ok = false
	}
}

// extraBody reads extra_body: scalars whose keys name no field of the request, checked by reqcheck as
// the top-level members the JSON path makes of them.
func (c *converter) extraBody(s *structpb.Struct) {
	for k, v := range s.GetFields() {
		if !c.ok {
			return
		}
		if extraRefused[k] {
			c.ok = false
			return
		}
		switch x := v.GetKind().(type) {
		case *structpb.Value_NumberValue:
			c.checkFloat(k, x.NumberValue)
		case *structpb.Value_BoolValue:
			c.check(k, strconv.AppendBool(c.num[:0], x.BoolValue))
		case *structpb.Value_StringValue:
			c.num = jsonx.AppendString(c.num[:0], x.StringValue)
			c.check(k, c.num)
		case *structpb.Value_NullValue:
			continue // the JSON path drops null members
		default:
			c.ok = false
			return
		}
		if !c.ok {
			return
		}
		if extraSampling[k] {
			c.extraSampling(k, v)
			continue
		}
		if k == "priority" {
			c.priority(v)
		}
		c.setExtra(k, v)
	}
}

// extraSampling maps the extra_body fields the worker protocol has sampling fields for.
func (c *converter) extraSampling(k string, v *structpb.Value) {
	if _, null := v.GetKind().(*structpb.Value_NullValue); null {
		return
	}
	switch k {
	case "ignore_eos":
		b, ok := v.GetKind().(*structpb.Value_BoolValue)
		c.ok = c.ok && ok
		c.sp.IgnoreEos = ok && b.BoolValue
	case "top_k":
		n, ok := integer(v, math.MinInt32, math.MaxInt32)
		c.ok = c.ok && ok
		c.sp.TopK = int32(n)
	case "min_tokens":
		n, ok := integer(v, 0, math.MaxUint32)
		c.ok = c.ok && ok
		c.sp.MinTokens = uint32(n)
	}
}

// priority reads SGLang's priority, which the JSON path lifts from extra_body to the top level.
func (c *converter) priority(v *structpb.Value) {
	if _, null := v.GetKind().(*structpb.Value_NullValue); null {
		return
	}
	n, ok := integer(v, math.MinInt32, math.MaxInt32)
	if !ok {
		c.ok = false
		return
	}
	c.br.Priority, c.br.HasPriority = int(n), true
}

// integer returns a number value that is an integer in [lo, hi].
func integer(v *structpb.Value, lo, hi float64) (int64, bool) {
	x, ok := v.GetKind().(*structpb.Value_NumberValue)
	if !ok || x.NumberValue != math.Trunc(x.NumberValue) || x.NumberValue < lo || x.NumberValue > hi {
		return 0, false
	}
	return int64(x.NumberValue), true
}

// done finishes the checks between fields and builds the call; nil when the request goes as JSON.
func (c *converter) done(prompts []*workerv1.Prompt, batched bool) (*body.Request, *workerrpc.Call) {
	if !c.ok || c.chk.Done() != nil {
		return nil, nil
	}
	if len(c.extra) > 0 {
		c.sp.Extra = &structpb.Struct{Fields: c.extra}
	}
	call, err := workerrpc.NewCall(workerrpc.CallSpec{Route: c.br.Route, Model: c.br.Model, Prompts: prompts, Batched: batched,
		N: c.br.N, Stream: c.br.Stream, IncludeUsage: c.br.IncludeUsage, Sampling: c.sp})
	if err != nil {
		return nil, nil
	}
	return &c.br, call
}

// typedChat converts a chat request; nil when it goes as JSON.
func typedChat(m *openaiv1.CreateChatCompletionRequest, stream bool) (*body.Request, *workerrpc.Call) {
	if len(m.GetTools()) > 0 || m.GetToolChoice() != nil || m.GetResponseFormat() != nil || len(m.GetLogitBias()) > 0 ||
		len(m.GetMessages()) == 0 {
		return nil, nil
	}
	c := newConverter(reqcheck.Chat, body.RouteChat)
	c.common(m.GetModel(), m.MaxTokens, m.N, m.Seed, m.Temperature, m.TopP, m.GetStop(), m.GetStreamOptions(), stream)
	if m.MaxCompletionTokens != nil {
		// It wins over max_tokens, in the worker call as in reqcheck's min_tokens rule.
		c.checkInt("max_completion_tokens", int64(*m.MaxCompletionTokens))
		c.sp.MaxTokens = uint32(max(*m.MaxCompletionTokens, 0))
	}
	c.optFloat("presence_penalty", m.PresencePenalty)
	c.optFloat("frequency_penalty", m.FrequencyPenalty)
	if m.Logprobs != nil {
		c.setExtra("logprobs", structpb.NewBoolValue(*m.Logprobs))
	}
	if m.TopLogprobs != nil {
		c.checkInt("top_logprobs", int64(*m.TopLogprobs))
		c.setExtra("top_logprobs", structpb.NewNumberValue(float64(*m.TopLogprobs)))
	}
	c.stringField("user", m.GetUser())
	c.extraBody(m.GetExtraBody())
	if !c.ok {
		return nil, nil
	}
	msgs, text, ok := chatMessages(m.GetMessages())
	if !ok {
		return nil, nil
	}
	c.br.Text, c.br.PromptChars = text, len(text)
	return c.done([]*workerv1.Prompt{textPrompt(workerrpc.RenderChatPrompt(msgs))}, false)
}

// chatMessages reads the conversation as the two readers of the JSON path do: the worker prompt's
// messages (workerrpc.ParseChatMessages: the text of "text" parts joined by "\n") and the routing
// text (body.ParseRequest: every string content and every part's string "text", joined by a space).
func chatMessages(in []*openaiv1.ChatMessage) ([]workerrpc.ChatMessage, string, bool) {
	out := make([]workerrpc.ChatMessage, len(in))
	n := 0
	for _, m := range in {
		n += len(m.GetContent().GetStringValue()) + 1
	}
	text := make([]byte, 0, n)
	for i, m := range in {
		if m.GetRole() == "" {
			return nil, "", false // protojson leaves it out: "role is required"
		}
		out[i].Role = m.GetRole()
		switch k := m.GetContent().GetKind().(type) {
		case nil, *structpb.Value_NullValue:
		case *structpb.Value_StringValue:
			out[i].Content = k.StringValue
			if len(text) > 0 {
				text = append(text, ' ')
			}
			text = append(text, k.StringValue...)
		case *structpb.Value_ListValue:
			var b strings.Builder
			for _, p := range k.ListValue.GetValues() {
				part := p.GetStructValue()
				if part == nil {
					return nil, "", false
				}
				t, hasText := part.GetFields()["text"]
				if hasText {
					s, isString := t.GetKind().(*structpb.Value_StringValue)
					if !isString {
						return nil, "", false
					}
					if len(text) > 0 {
						text = append(text, ' ')
					}
					text = append(text, s.StringValue...)
				}
				if part.GetFields()["type"].GetStringValue() != "text" {
					continue
				}
				if b.Len() > 0 {
					b.WriteByte('\n')
				}
				b.WriteString(t.GetStringValue())
			}
			out[i].Content = b.String()
		default:
			return nil, "", false
		}
	}
	return out, string(text), true
}

// typedCompletion converts a completions request; nil when it goes as JSON.
func typedCompletion(m *openaiv1.CreateCompletionRequest, stream bool) (*body.Request, *workerrpc.Call) {
	c := newConverter(reqcheck.Completions, body.RouteCompletions)
	c.common(m.GetModel(), m.MaxTokens, m.N, m.Seed, m.Temperature, m.TopP, m.GetStop(), m.GetStreamOptions(), stream)
	c.optFloat("presence_penalty", m.PresencePenalty)
	c.optFloat("frequency_penalty", m.FrequencyPenalty)
	if m.Logprobs != nil {
		c.checkInt("logprobs", int64(*m.Logprobs))
		c.setExtra("logprobs", structpb.NewNumberValue(float64(*m.Logprobs)))
	}
	if m.Echo != nil {
		c.setExtra("echo", structpb.NewBoolValue(*m.Echo))
	}
	c.stringField("suffix", m.GetSuffix())
	c.stringField("user", m.GetUser())
	c.extraBody(m.GetExtraBody())
	if !c.ok {
		return nil, nil
	}
	prompts, batched, ok := completionPrompts(&c.br, m.GetPrompt())
	if !ok {
		return nil, nil
	}
	return c.done(prompts, batched)
}

// completionPrompts reads a prompt of one kind: a string, a list of strings, a list of token ids or
// a list of token id lists, with the routing fields body.ParseRequest takes from it.
func completionPrompts(br *body.Request, v *structpb.Value) ([]*workerv1.Prompt, bool, bool) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		br.Text, br.PromptChars = k.StringValue, len(k.StringValue)
		return []*workerv1.Prompt{textPrompt(k.StringValue)}, false, true
	case *structpb.Value_ListValue:
		vals := k.ListValue.GetValues()
		if len(vals) == 0 {
			return nil, false, false
		}
		switch vals[0].GetKind().(type) {
		case *structpb.Value_StringValue:
			out := make([]*workerv1.Prompt, len(vals))
			for i, e := range vals {
				s, ok := e.GetKind().(*structpb.Value_StringValue)
				if !ok {
					return nil, false, false
				}
				out[i] = textPrompt(s.StringValue)
				br.PromptChars += escapedLen(s.StringValue)
			}
			br.Text, br.BatchSize = vals[0].GetStringValue(), len(vals)
			return out, true, true
		case *structpb.Value_NumberValue:
			ids, ok := tokenIDs(vals)
			br.PromptTokenIDs = len(ids)
			return []*workerv1.Prompt{idsPrompt(ids)}, false, ok
		case *structpb.Value_ListValue:
			out := make([]*workerv1.Prompt, len(vals))
			for i, e := range vals {
				l, ok := e.GetKind().(*structpb.Value_ListValue)
				if !ok {
					return nil, false, false
				}
				ids, ok := tokenIDs(l.ListValue.GetValues())
				if !ok {
					return nil, false, false
				}
				out[i] = idsPrompt(ids)
				br.PromptTokenIDs += len(ids)
			}
			br.BatchSize = len(vals)
			return out, true, true
		}
	}
	return nil, false, false
}

// tokenIDs reads token ids, integers that fit a uint32 as the worker protocol carries them.
func tokenIDs(vals []*structpb.Value) ([]uint32, bool) {
	ids := make([]uint32, len(vals))
	for i, e := range vals {
		n, ok := integer(e, 0, math.MaxUint32)
		if !ok {
			return nil, false
		}
		ids[i] = uint32(n)
	}
	return ids, true
}

func textPrompt(s string) *workerv1.Prompt {
	return &workerv1.Prompt{Input: &workerv1.Prompt_Text{Text: s}}
}

func idsPrompt(ids []uint32) *workerv1.Prompt {
	return &workerv1.Prompt{Input: &workerv1.Prompt_TokenIds{TokenIds: &workerv1.TokenIds{Ids: ids}}}
}

// typedRequest converts the generation requests the typed path knows; nil when m goes as JSON.
func typedRequest(m proto.Message, stream bool) (*body.Request, *workerrpc.Call) {
	switch r := m.(type) {
	case *openaiv1.CreateChatCompletionRequest:
		return typedChat(r, stream)
	case *openaiv1.CreateCompletionRequest:
		return typedCompletion(r, stream)
	}
	return nil, nil
}

// escapedLen is the length of s inside the JSON the JSON path renders (protojson's escapes, then
// encoding/json's HTML escapes), which ParseRequest counts for the strings of a prompt batch.
func escapedLen(s string) int {
	n := 0
	for _, r := range s {
		switch {
		case r == '"' || r == '\\' || r == '\b' || r == '\f' || r == '\n' || r == '\r' || r == '\t':
			n += 2
		case r < 0x20 || r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029':
			n += 6
		default:
			n += utf8.RuneLen(r)
		}
	}
	return n
}
