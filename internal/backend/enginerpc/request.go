package enginerpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/jsonscan"
	"github.com/sluicegw/sluice/internal/reasoning"
	"github.com/sluicegw/sluice/internal/stop"
	"github.com/sluicegw/sluice/internal/tokenizer"
	"github.com/sluicegw/sluice/internal/toolcall"
)

// requestJSON is what the transport reads of a chat, completions or SGLang /generate body: the fields
// an HTTP engine would act on. Pointers tell an absent field from a zero, since the engines' defaults
// are not the zeros.
type requestJSON struct {
	Model               string          `json:"model"`
	Messages            json.RawMessage `json:"messages"`
	Tools               json.RawMessage `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	ChatTemplateKwargs  json.RawMessage `json:"chat_template_kwargs"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt"`
	Prompt              json.RawMessage `json:"prompt"`
	Text                json.RawMessage `json:"text"`      // /generate
	InputIDs            json.RawMessage `json:"input_ids"` // /generate
	SamplingParams      *samplingJSON   `json:"sampling_params"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	N                   *int                `json:"n"`
	MaxTokens           *int                `json:"max_tokens"`
	MaxCompletionTokens *int                `json:"max_completion_tokens"`
	Logprobs            json.RawMessage     `json:"logprobs"`
	Echo                bool                `json:"echo"`
	TopLogprobs         *int                `json:"top_logprobs"`
	ResponseFormat      *responseFormatJSON `json:"response_format"`
	// vLLM's other structured-output fields: refused over gRPC (unsupportedConstraintFields).
	StructuredOutputs json.RawMessage `json:"structured_outputs"`
	GuidedJSON        json.RawMessage `json:"guided_json"`
	GuidedRegex       json.RawMessage `json:"guided_regex"`
	GuidedChoice      json.RawMessage `json:"guided_choice"`
	GuidedGrammar     json.RawMessage `json:"guided_grammar"`
	samplingJSON

	BootstrapHost    json.RawMessage `json:"bootstrap_host"`
	BootstrapPort    json.RawMessage `json:"bootstrap_port"`
	BootstrapRoom    json.RawMessage `json:"bootstrap_room"`
	RoutedDPRank     *int32          `json:"routed_dp_rank"`
	KVTransferParams json.RawMessage `json:"kv_transfer_params"`
	ReturnLogprob    bool            `json:"return_logprob"`
	TopLogprobsNum   *int32          `json:"top_logprobs_num"`
	LogprobStartLen  *int32          `json:"logprob_start_len"`
}

type responseFormatJSON struct {
	Type       string          `json:"type"`
	JSONSchema *jsonSchemaJSON `json:"json_schema"`
}

type jsonSchemaJSON struct {
	Schema json.RawMessage `json:"schema"`
}

// samplingJSON holds the sampling fields, at the top of an OpenAI body and in /generate's
// sampling_params (where a few have other names: max_new_tokens, min_new_tokens, json_schema).
type samplingJSON struct {
	Temperature       *float32        `json:"temperature"`
	TopP              *float32        `json:"top_p"`
	TopK              *int32          `json:"top_k"`
	MinP              *float32        `json:"min_p"`
	FrequencyPenalty  *float32        `json:"frequency_penalty"`
	PresencePenalty   *float32        `json:"presence_penalty"`
	RepetitionPenalty *float32        `json:"repetition_penalty"`
	Stop              json.RawMessage `json:"stop"`
	StopTokenIDs      []uint32        `json:"stop_token_ids"`
	Seed              *int64          `json:"seed"`
	MinTokens         uint32          `json:"min_tokens"`
	IgnoreEOS         bool            `json:"ignore_eos"`
	SkipSpecialTokens *bool           `json:"skip_special_tokens"`
	NoStopTrim        bool            `json:"no_stop_trim"`
	IncludeStopStr    bool            `json:"include_stop_str_in_output"`
	Regex             *string         `json:"regex"`
	Ebnf              *string         `json:"ebnf"`
	N                 *int            `json:"n"`
	Bad               json.RawMessage `json:"bad"`           // TensorRT-LLM's bad words
	BadTokenIDs       []uint32        `json:"bad_token_ids"` // TensorRT-LLM's

	MaxNewTokens *int    `json:"max_new_tokens"`
	MinNewTokens uint32  `json:"min_new_tokens"`
	JSONSchema   *string `json:"json_schema"`
}

// constraint is a structured-output constraint; kind is "regex", "json_schema", "json_object" or
// "ebnf", each protocol naming its own field.
type constraint struct{ kind, value string }

// call is one request, converted: the prompt's token ids and what the engine and the text layer need.
type call struct {
	route        body.Route
	model        string
	requestID    string
	ids          []uint32
	text         string // the rendered prompt, for the engine's logs
	stream       bool
	includeUsage bool

	temperature, topP, minP  *float32
	topK                     *int32
	freqPen, presPen, repPen *float32
	maxTokens                *int
	stops                    []string
	stopIDs                  []uint32
	bad                      []string // TensorRT-LLM's bad words; the others' servers have none
	badIDs                   []uint32
	seed                     *int64
	minTokens                uint32
	ignoreEOS, includeStop   bool
	skipSpecial              bool
	constraint               *constraint
	bootstrap                *bootstrap
	dpRank                   *int32
	kvTransfer               *string // vLLM: kv_transfer_params as JSON
	wantKVBack               bool    // vLLM: the prefill leg; its answer carries kv_transfer_params
	stopParams               stop.Params
	eos                      []int
	lp                       lpRequest
	n                        int  // samples
	echo                     bool // completions: the prompt's text (and logprobs) before the answer's

	// The chat answer's parsers (empty: none) and the request's switch of the reasoning one.
	reasoningParser string
	reasoningOpts   reasoning.Options
	toolParser      string
}

// bootstrap is SGLang's PD handshake: the prefill worker's bootstrap server and the shared room.
type bootstrap struct {
	host string
	port int32
	room int32
}

func requestError(param, format string, args ...any) *body.RequestError {
	return &body.RequestError{Param: param, Message: fmt.Sprintf(format, args...)}
}

// parseCall converts a body of route for engine e: the chat rendered with the model's template and
// tokenized, a text prompt tokenized as the engine would (special tokens added), token ids kept; given,
// when not nil, is the prompt already tokenized (WithPrompt). Errors are *body.RequestError (a 400).
func parseCall(route body.Route, raw []byte, e *Engine, given *Prompt) (*call, error) {
	var r requestJSON
	if err := decodeRequest(raw, &r); err != nil {
		return nil, err
	}
	c := &call{route: route, model: r.Model, stream: r.Stream, eos: e.EOS}
	if c.model == "" {
		c.model = e.Model
	}
	c.includeUsage = r.StreamOptions != nil && r.StreamOptions.IncludeUsage
	s, maxTokens, err := c.setPrompt(&r, e, given)
	if err != nil {
		return nil, err
	}
	if err := refuseUnsupported(route, &r, &s); err != nil {
		return nil, err
	}
	if err := c.setLogprobs(&r); err != nil {
		return nil, err
	}
	c.n = 1
	if s.N != nil {
		c.n = *s.N
	} else if r.N != nil {
		c.n = *r.N
	}
	if route == body.RouteChat {
		if err := c.setParsers(&r, e); err != nil {
			return nil, err
		}
	}
	if err := c.setSampling(&r, &s, maxTokens, e); err != nil {
		return nil, err
	}
	return c, nil
}

// setPrompt sets the prompt's token ids by route and returns the sampling fields and max tokens the
// route reads: the body's own for chat and completions, sampling_params' for SGLang's /generate.
func (c *call) setPrompt(r *requestJSON, e *Engine, given *Prompt) (samplingJSON, *int, error) {
	s := r.samplingJSON
	maxTokens := r.MaxTokens
	var err error
	switch c.route {
	case body.RouteChat:
		if r.MaxCompletionTokens != nil {
			maxTokens = r.MaxCompletionTokens
		}
		err = c.renderChat(r, e.Tokenizer, given)
	case body.RouteCompletions:
		err = c.completionPrompt(r.Prompt, e.Tokenizer, given)
	case body.RouteGenerate:
		if r.SamplingParams != nil {
			s = *r.SamplingParams
			s.MinTokens = max(s.MinTokens, s.MinNewTokens)
		}
		maxTokens = s.MaxNewTokens
		err = c.generatePrompt(r, e.Tokenizer, given)
	default:
		return s, nil, requestError("", "route %s is not served over the engines' gRPC protocols", c.route)
	}
	if err != nil {
		return s, nil, err
	}
	if len(c.ids) == 0 {
		return s, nil, requestError("prompt", "the prompt is empty")
	}
	return s, maxTokens, nil
}

// maxN bounds n: every sample is state the gateway keeps for the answer.
const maxN = 128

// refuseUnsupported refuses, naming the field, what the gateway cannot yet serve over the engines' gRPC.
func refuseUnsupported(route body.Route, r *requestJSON, s *samplingJSON) error {
	n := r.N
	if s.N != nil {
		n = s.N
	}
	if n != nil && (*n < 1 || *n > maxN) {
		return requestError("n", "n must be between 1 and %d, got %d", maxN, *n)
	}
	if r.Echo && route != body.RouteCompletions {
		return requestError("echo", "echo is only served for completions over the engines' gRPC protocols")
	}
	return refuseConstraintFields(r)
}

// refuseConstraintFields refuses vLLM's structured_outputs and guided_* fields: an HTTP engine
// constrains its output by them, so dropping them would answer unconstrained text as if it were.
func refuseConstraintFields(r *requestJSON) error {
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"structured_outputs", r.StructuredOutputs}, {"guided_json", r.GuidedJSON}, {"guided_regex", r.GuidedRegex},
		{"guided_choice", r.GuidedChoice}, {"guided_grammar", r.GuidedGrammar}} {
		if !isNull(f.raw) {
			return requestError(f.name, "%s is not served over the engines' gRPC protocols: use response_format, regex or ebnf", f.name)
		}
	}
	return nil
}

// setSampling sets the sampling parameters, stop handling, constraint and PD handshake.
func (c *call) setSampling(r *requestJSON, s *samplingJSON, maxTokens *int, e *Engine) error {
	if maxTokens != nil && *maxTokens < 0 {
		return requestError("max_tokens", "max_tokens must be at least 0, got %d", *maxTokens)
	}
	c.maxTokens = maxTokens
	c.temperature, c.topP, c.topK, c.minP = s.Temperature, s.TopP, s.TopK, s.MinP
	c.freqPen, c.presPen, c.repPen = s.FrequencyPenalty, s.PresencePenalty, s.RepetitionPenalty
	c.stopIDs, c.seed, c.minTokens, c.ignoreEOS = s.StopTokenIDs, s.Seed, s.MinTokens, s.IgnoreEOS
	c.includeStop = s.NoStopTrim || s.IncludeStopStr
	c.skipSpecial = s.SkipSpecialTokens == nil || *s.SkipSpecialTokens
	stops, err := stopStrings(s.Stop)
	if err != nil {
		return err
	}
	c.stops = stops
	if c.bad, err = wordList("bad", s.Bad); err != nil {
		return err
	}
	c.badIDs = s.BadTokenIDs
	if err := c.setConstraint(r, s); err != nil {
		return err
	}
	if err := c.setHandshake(r); err != nil {
		return err
	}
	c.stopParams = stop.Params{
		Stop: c.stops, StopTokenIDs: toInts(c.stopIDs), EOS: e.EOS, IgnoreEOS: c.ignoreEOS,
		MinTokens: int(c.minTokens), IncludeStop: c.includeStop,
	}
	if err := c.stopParams.Validate(); err != nil {
		return requestError("stop", "%s", err.Error())
	}
	return nil
}

// setParsers picks the chat answer's parsers: the model's reasoning parser always, its tool-call
// parser when the request offers tools (and does not turn them off with tool_choice "none"), as vLLM
// parses calls only then. Tools without a tool-call parser are a 400: their calls would be raw text.
func (c *call) setParsers(r *requestJSON, e *Engine) error {
	c.reasoningParser = e.ReasoningParser
	if kw := bytes.TrimSpace(r.ChatTemplateKwargs); len(kw) > 0 && kw[0] == '{' {
		var k struct {
			EnableThinking *bool `json:"enable_thinking"`
		}
		if err := json.Unmarshal(kw, &k); err != nil {
			return requestError("chat_template_kwargs", "chat_template_kwargs.enable_thinking must be a boolean")
		}
		c.reasoningOpts.EnableThinking = k.EnableThinking
	}
	tools := bytes.TrimSpace(r.Tools)
	hasTools := len(tools) > 0 && !bytes.Equal(tools, []byte("null")) && !bytes.Equal(tools, []byte("[]"))
	if err := toolcall.RequireToolParser(c.model, hasTools, e.ToolCallParser); err != nil {
		return requestError("tools", "%s", err.Error())
	}
	if hasTools && !bytes.Equal(bytes.TrimSpace(r.ToolChoice), []byte(`"none"`)) {
		c.toolParser = e.ToolCallParser
	}
	return nil
}

func (c *call) renderChat(r *requestJSON, tok *tokenizer.Tokenizer, given *Prompt) error {
	if given != nil && given.Text != "" {
		c.text, c.ids = given.Text, given.IDs
		return nil
	}
	agp := r.AddGenerationPrompt == nil || *r.AddGenerationPrompt
	text, err := tok.RenderChat(tokenizer.Chat{Messages: r.Messages, Tools: r.Tools, AddGenerationPrompt: agp, TemplateKwargs: r.ChatTemplateKwargs})
	switch {
	case errors.Is(err, tokenizer.ErrBadChat):
		return requestError("messages", "%s", err.Error())
	case err != nil:
		// No template, or the template raised: the request cannot be served as written (vLLM answers
		// 400 for both).
		return requestError("messages", "%s", err.Error())
	}
	c.text = text
	c.ids = tok.EncodeUint32(text)
	return nil
}

func (c *call) completionPrompt(raw json.RawMessage, tok *tokenizer.Tokenizer, given *Prompt) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return requestError("prompt", "prompt is required")
	}
	switch raw[0] {
	case '"':
		if err := json.Unmarshal(raw, &c.text); err != nil {
			return requestError("prompt", "prompt: %s", err.Error())
		}
		c.ids = encodeText(tok, c.text, given)
		return nil
	case '[':
		var ids []uint32
		if err := json.Unmarshal(raw, &ids); err == nil {
			c.ids = ids
			return knownIDs("prompt", ids, tok)
		}
		var one []string
		if err := json.Unmarshal(raw, &one); err == nil && len(one) == 1 {
			c.text = one[0]
			c.ids = encodeText(tok, c.text, given)
			return nil
		}
		var lists [][]uint32
		if err := json.Unmarshal(raw, &lists); err == nil && len(lists) == 1 {
			c.ids = lists[0]
			return knownIDs("prompt", c.ids, tok)
		}
		return requestError("prompt", "a batch of prompts is not supported over the engines' gRPC protocols yet: send one prompt per request")
	}
	return requestError("prompt", "prompt must be a string, a list of token ids, or a list of one of them")
}

func (c *call) generatePrompt(r *requestJSON, tok *tokenizer.Tokenizer, given *Prompt) error {
	if ids := bytes.TrimSpace(r.InputIDs); len(ids) > 0 && !bytes.Equal(ids, []byte("null")) {
		if err := json.Unmarshal(ids, &c.ids); err != nil {
			return requestError("input_ids", "input_ids must be one list of token ids (batches are not supported over the engines' gRPC protocols yet)")
		}
		return knownIDs("input_ids", c.ids, tok)
	}
	text := bytes.TrimSpace(r.Text)
	if len(text) == 0 || text[0] != '"' {
		return requestError("text", "text must be one string (batches are not supported over the engines' gRPC protocols yet), or give input_ids")
	}
	if err := json.Unmarshal(text, &c.text); err != nil {
		return requestError("text", "text: %s", err.Error())
	}
	c.ids = encodeText(tok, c.text, given)
	return nil
}

// knownIDs refuses a prompt given as token ids that names no token of the model: over HTTP the engine
// refuses it itself, and an engine's gRPC servicer would run it.
func knownIDs(field string, ids []uint32, tok *tokenizer.Tokenizer) error {
	var u *tokenizer.UnknownTokenError
	if err := tok.CheckIDs(ids); errors.As(err, &u) {
		return requestError(field, "%s[%d]: token id %d is not in the model's vocabulary", field, u.Index, u.ID)
	} else if err != nil {
		return requestError(field, "%s: %s", field, err.Error())
	}
	return nil
}

// encodeText tokenizes a text prompt with special tokens added, as the engines do, unless given
// already holds this text's ids.
func encodeText(tok *tokenizer.Tokenizer, text string, given *Prompt) []uint32 {
	if given != nil && text != "" && given.Text == text {
		return given.IDs
	}
	return tok.EncodeSpecialUint32(text)
}

func stopStrings(raw json.RawMessage) ([]string, error) { return wordList("stop", raw) }

// wordList reads a field that is one string or a list of strings (stop, bad).
func wordList(param string, raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, requestError(param, "%s: %s", param, err.Error())
		}
		return []string{s}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, requestError(param, "%s must be a string or a list of strings", param)
	}
	return list, nil
}

func (c *call) setConstraint(r *requestJSON, s *samplingJSON) error {
	var cs []constraint
	if rf := r.ResponseFormat; rf != nil {
		switch rf.Type {
		case "json_object":
			cs = append(cs, constraint{"json_object", `{"type":"object"}`})
		case "json_schema":
			if rf.JSONSchema == nil || len(rf.JSONSchema.Schema) == 0 {
				return requestError("response_format", "response_format json_schema needs json_schema.schema")
			}
			cs = append(cs, constraint{"json_schema", string(rf.JSONSchema.Schema)})
		case "", "text":
		default:
			return requestError("response_format", "unknown response_format type %q", rf.Type)
		}
	}
	if s.JSONSchema != nil {
		cs = append(cs, constraint{"json_schema", *s.JSONSchema})
	}
	if s.Regex != nil {
		cs = append(cs, constraint{"regex", *s.Regex})
	}
	if s.Ebnf != nil {
		cs = append(cs, constraint{"ebnf", *s.Ebnf})
	}
	if len(cs) > 1 {
		return requestError("response_format", "only one of response_format, regex, ebnf and json_schema may be given")
	}
	if len(cs) == 1 {
		c.constraint = &cs[0]
	}
	return nil
}

// roomModulus is the largest multiple of 720720 (the least common multiple of 1..16) that fits in an
// int32. SGLang's gRPC bootstrap_room is an int32 where its HTTP room (and dispatch's) is 63 bits;
// reducing modulo this keeps room % dp_size, which is how an engine without rank hints finds the
// prefill's rank (body.AlignRoom), for every DP size up to 16.
const roomModulus = math.MaxInt32 / 720720 * 720720

func (c *call) setHandshake(r *requestJSON) error {
	c.dpRank = r.RoutedDPRank
	if kv := bytes.TrimSpace(r.KVTransferParams); len(kv) > 0 && !bytes.Equal(kv, []byte("null")) {
		if kv[0] != '{' {
			return requestError("kv_transfer_params", "kv_transfer_params must be an object")
		}
		s := string(kv)
		c.kvTransfer = &s
		if m, ok := jsonscan.FindMember(kv, 0, "do_remote_decode"); ok {
			c.wantKVBack, _ = jsonscan.ParseBool(m.Value(kv))
		}
	}
	room := bytes.TrimSpace(r.BootstrapRoom)
	if len(room) == 0 || bytes.Equal(room, []byte("null")) {
		return nil
	}
	var b bootstrap
	roomN, err := strconv.ParseUint(string(room), 10, 64)
	if err != nil {
		return requestError("bootstrap_room", "bootstrap_room must be one non-negative integer over the engines' gRPC protocols")
	}
	b.room = int32(roomN % roomModulus)
	if host := bytes.TrimSpace(r.BootstrapHost); !bytes.Equal(host, []byte("null")) {
		var ok bool
		if b.host, ok = unquote(host); !ok {
			return requestError("bootstrap_host", "bootstrap_host must be a string")
		}
	}
	if p := bytes.TrimSpace(r.BootstrapPort); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		port, ok := jsonscan.ParseInt(p)
		if !ok || port < 0 || port > 65535 {
			return requestError("bootstrap_port", "bootstrap_port must be a port number")
		}
		b.port = int32(port)
	}
	c.bootstrap = &b
	return nil
}

func toInts(ids []uint32) []int {
	if len(ids) == 0 {
		return nil
	}
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}
