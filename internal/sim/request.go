package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
)

// apiKind is the HTTP API a generation came through.
type apiKind int

const (
	apiGenerate apiKind = iota
	apiChat
	apiCompletion
)

// apiRequest is the union of the fields the simulator reads from /generate, /v1/chat/completions and
// /v1/completions bodies. Unknown fields are ignored, as engines accept many extra parameters.
type apiRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	Text                json.RawMessage `json:"text"`
	InputIDs            json.RawMessage `json:"input_ids"`
	SamplingParams      *samplingParams `json:"sampling_params"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	N                   *int            `json:"n"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	Seed                *int64          `json:"seed"`
	Stop                json.RawMessage `json:"stop"`
	IgnoreEOS           bool            `json:"ignore_eos"`
	BootstrapHost       json.RawMessage `json:"bootstrap_host"`
	BootstrapPort       json.RawMessage `json:"bootstrap_port"`
	BootstrapRoom       json.RawMessage `json:"bootstrap_room"`
	KVTransferParams    *kvParams       `json:"kv_transfer_params"`
	RoutedDPRank        *int            `json:"routed_dp_rank"`
	DataParallelRank    *int            `json:"data_parallel_rank"` // deprecated alias of routed_dp_rank
	DisaggPrefillDPRank *int            `json:"disagg_prefill_dp_rank"`
	RID                 json.RawMessage `json:"rid"`
	ReturnLogprob       json.RawMessage `json:"return_logprob"`
	ReturnTokenIDs      bool            `json:"return_token_ids"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type samplingParams struct {
	MaxNewTokens *int            `json:"max_new_tokens"`
	Temperature  *float64        `json:"temperature"`
	TopP         *float64        `json:"top_p"`
	N            *int            `json:"n"`
	Stop         json.RawMessage `json:"stop"`
	IgnoreEOS    bool            `json:"ignore_eos"`
	Seed         *int64          `json:"sampling_seed"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// ridString returns the request id a /generate body names, if it is a single string.
func ridString(raw json.RawMessage) string {
	var s string
	if len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
		return s
	}
	return ""
}

// genJob is one parsed generation request: its samples and how to answer.
type genJob struct {
	api          apiKind
	model        string
	stream       bool
	includeUsage bool
	batch        bool // /generate with a text array: answer with an array
	n            int
	samples      []sampleSpec
	id           string
	created      int64
	// inputLogprobs: /generate asked for return_logprob. Only an engine that computed the prompt reports
	// meta_info.input_token_logprobs (SGLang PD: the prefill leg; decode reports none).
	inputLogprobs bool
	decodeRole    bool
	// returnTokenIDs: completions' return_token_ids, the prompt's ids in each sample's first chunk and
	// each chunk's new ids (vLLM's serving_completion.py, SGLang's serving_completions.py); vLLM's chat
	// takes it too (serving_chat.py: the prompt's ids on the first chunk, beside choices, and each
	// choice's new ids).
	returnTokenIDs bool
	// tokens tokenizes a text prompt and the generated text into the ids the engine shows: the
	// simulator's word tokens, or with ByteTokenIDs the bytes.
	tokens func(dst []uint32, text string) []uint32
}

// maxN bounds the samples of one request (a simulator limit, not an engine's).
const maxN = 128

// parseJob turns a request body into a job for this engine. A non-nil job comes back with a request
// error once the body parsed as JSON, so that the caller knows whether the client asked to stream.
func (e *Engine) parseJob(api apiKind, body []byte, hdr http.Header) (*genJob, error) {
	var req apiRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, schemaError("malformed JSON body: %v", err)
	}
	job := &genJob{api: api, stream: req.Stream, model: req.Model, id: ridString(req.RID)}
	switch {
	case api == apiChat:
		job.id = e.newID("chatcmpl-")
	case api == apiCompletion:
		job.id = e.newID("cmpl-")
	case job.id == "":
		job.id = e.newID("")
	}
	job.decodeRole = e.cfg.Role == RoleDecode
	if api == apiGenerate && len(req.ReturnLogprob) > 0 && string(req.ReturnLogprob) != "false" && string(req.ReturnLogprob) != "null" {
		job.inputLogprobs = true
	}
	if req.StreamOptions != nil {
		job.includeUsage = req.StreamOptions.IncludeUsage
	}
	job.tokens = e.textTokens()
	job.returnTokenIDs = req.ReturnTokenIDs && (api == apiCompletion || api == apiChat && e.cfg.Protocol == ProtocolVLLM)
	if job.model == "" {
		job.model = e.cfg.Models[0]
	} else if api != apiGenerate && !slices.Contains(e.cfg.Models, job.model) {
		// vLLM OpenAIServing._check_model; SGLang serves any name (not modelled: 404 on both).
		return job, &engineError{kind: errModelNotFound, status: http.StatusNotFound, param: "model",
			msg: fmt.Sprintf("The model `%s` does not exist.", job.model)}
	}

	// Sampling parameters, as sent.
	sr := samplingRequest{n: 1, maxTokens: req.MaxTokens, temperature: req.Temperature, topP: req.TopP}
	if req.MaxCompletionTokens != nil {
		sr.maxTokens = req.MaxCompletionTokens
	}
	seed, stopRaw, ignoreEOS := req.Seed, req.Stop, req.IgnoreEOS
	if req.N != nil {
		sr.n = *req.N
	}
	if sp := req.SamplingParams; sp != nil {
		if sp.MaxNewTokens != nil {
			sr.maxTokens = sp.MaxNewTokens
		}
		if sp.Temperature != nil {
			sr.temperature = sp.Temperature
		}
		if sp.TopP != nil {
			sr.topP = sp.TopP
		}
		if sp.N != nil {
			sr.n = *sp.N
		}
		if len(sp.Stop) > 0 {
			stopRaw = sp.Stop
		}
		if sp.Seed != nil {
			seed = sp.Seed
		}
		ignoreEOS = ignoreEOS || sp.IgnoreEOS
	}
	stops, err := stringOrList(stopRaw, "stop")
	if err != nil {
		return job, err
	}
	prompts, batch, err := e.parsePrompts(api, &req)
	if err != nil {
		return job, err
	}
	job.batch = batch
	lens := make([]int, len(prompts))
	for i, p := range prompts {
		lens[i] = len(p.ids)
	}
	if err := e.validate(lens, &sr); err != nil {
		return job, err
	}
	job.n = max(sr.n, 1) // SGLang: n <= 1 is one sample; vLLM refused n < 1 above
	if job.n > maxN {
		return job, requestError("n", "n must be at most %d in the simulator, got %d", maxN, job.n)
	}
	var reqSeed int64
	if seed != nil {
		reqSeed = *seed
	}
	greedy := sr.temperature != nil && *sr.temperature == 0
	job.samples = make([]sampleSpec, len(prompts)*job.n)
	for i := range job.samples {
		p := prompts[i/job.n]
		// Without max_tokens a generation ends "naturally" (its EOS), never past the context.
		mt, natural := min(e.cfg.DefaultMaxTokens, e.cfg.ContextLength-len(p.ids)), !ignoreEOS
		if sr.maxTokens != nil {
			mt, natural = *sr.maxTokens, false
		}
		job.samples[i] = sampleSpec{
			prompt: p, maxTokens: mt, naturalStop: natural, stop: stops,
			reqSeed: reqSeed, seeded: seed != nil, greedy: greedy, choice: i, rid: job.id,
		}
		if len(job.samples) > 1 {
			job.samples[i].rid = job.id + "_" + strconv.Itoa(i) // io_struct _normalize_rid: f"{rid}_{i}"
		}
	}
	if err := e.assignHandshakes(job, &req, len(prompts)); err != nil {
		return job, err
	}
	hint, err := e.resolveRankHint(api, &req, hdr)
	if err != nil {
		return job, err
	}
	e.assignRanks(job.samples, hint)
	return job, nil
}

func (e *Engine) parsePrompts(api apiKind, req *apiRequest) ([]*prompt, bool, error) {
	switch api {
	case apiChat:
		if len(req.Messages) == 0 {
			return nil, false, schemaError("messages must not be empty")
		}
		ids := make([]uint32, 0, 64)
		for i, m := range req.Messages {
			if m.Role == "" {
				return nil, false, schemaError("messages[%d].role is required", i)
			}
			ids = appendTokens(ids, m.Role)
			ids = appendTokens(ids, ":")
			text, err := messageText(m.Content)
			if err != nil {
				return nil, false, schemaError("messages[%d].content: %v", i, err)
			}
			ids = appendTokens(ids, text)
		}
		ids = appendTokens(ids, "assistant:")
		return []*prompt{newPrompt(ids)}, false, nil
	case apiCompletion:
		if len(req.Prompt) == 0 {
			return nil, false, schemaError("prompt is required")
		}
		ps, batch, err := promptList(req.Prompt, "prompt", e.textTokens())
		return ps, batch, err
	default:
		raw, field := req.Text, "text"
		if len(raw) == 0 || string(raw) == "null" {
			raw, field = req.InputIDs, "input_ids"
		}
		if len(raw) == 0 || string(raw) == "null" {
			return nil, false, schemaError("text or input_ids is required")
		}
		return promptList(raw, field, e.textTokens())
	}
}

// textTokens is how the engine tokenizes a text prompt and shows generated text as ids: its word
// tokens, or with ByteTokenIDs the bytes (a chat's rendered prompt stays in word tokens).
func (e *Engine) textTokens() func(dst []uint32, text string) []uint32 {
	if e.cfg.ByteTokenIDs {
		return appendByteTokens
	}
	return appendTokens
}

// promptList parses a string, a list of strings, a list of token ids or a list of lists of token ids;
// tokens tokenizes the strings.
func promptList(raw json.RawMessage, field string, tokens func([]uint32, string) []uint32) ([]*prompt, bool, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, false, schemaError("%s: %v", field, err)
		}
		return []*prompt{newPrompt(tokens(make([]uint32, 0, len(s)/3+1), s))}, false, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, false, schemaError("%s must be a string or an array", field)
	}
	if len(items) == 0 {
		return nil, false, schemaError("%s must not be empty", field)
	}
	first := bytes.TrimSpace(items[0])
	if len(first) > 0 && (first[0] == '-' || (first[0] >= '0' && first[0] <= '9')) {
		var ids []uint32
		if err := json.Unmarshal(raw, &ids); err != nil {
			return nil, false, schemaError("%s: %v", field, err)
		}
		return []*prompt{newPrompt(ids)}, false, nil
	}
	out := make([]*prompt, 0, len(items))
	for i, it := range items {
		it = bytes.TrimSpace(it)
		switch {
		case len(it) > 0 && it[0] == '"':
			var s string
			if err := json.Unmarshal(it, &s); err != nil {
				return nil, false, schemaError("%s[%d]: %v", field, i, err)
			}
			out = append(out, newPrompt(tokens(nil, s)))
		default:
			var ids []uint32
			if err := json.Unmarshal(it, &ids); err != nil {
				return nil, false, schemaError("%s[%d] must be a string or a list of token ids", field, i)
			}
			out = append(out, newPrompt(ids))
		}
	}
	return out, true, nil
}

func messageText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("want a string or an array of content parts")
	}
	var b []byte
	for _, p := range parts {
		if p.Type == "text" || p.Type == "" {
			b = append(b, p.Text...)
			b = append(b, ' ')
		}
	}
	return string(b), nil
}

func stringOrList(raw json.RawMessage, field string) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, schemaError("%s: %v", field, err)
		}
		return []string{s}, nil
	}
	var l []string
	if err := json.Unmarshal(raw, &l); err != nil {
		return nil, schemaError("%s must be a string or a list of strings", field)
	}
	return l, nil
}

// errMissingRoomMsg is the scheduler's answer to a PD request without a room (scheduler.py
// handle_generate_request, any disaggregation mode): an abort with status 400.
const errMissingRoomMsg = "Invalid request: Disaggregated request received without bootstrap room id"

// assignHandshakes gives each sample its disaggregation handshake and phase.
func (e *Engine) assignHandshakes(job *genJob, req *apiRequest, prompts int) error {
	if e.cfg.Role == RoleRegular {
		return nil // a non-disaggregated engine ignores bootstrap fields and kv_transfer_params
	}
	if e.cfg.Protocol == ProtocolVLLM {
		return e.assignKVParams(job.samples, req.KVTransferParams)
	}
	bs, err := normalizeBootstrap(req, prompts, job.n, job.batch)
	if err != nil {
		return err
	}
	for i := range job.samples {
		sp := &job.samples[i]
		pb := bs[i/job.n]
		if pb.room == nil {
			return abortError(errMissingRoom, http.StatusBadRequest, errMissingRoomMsg)
		}
		// A null port is the engine's own --disaggregation-bootstrap-port (scheduler.py).
		port := e.cfg.BootstrapPort
		if pb.port != nil {
			port = *pb.port
		}
		sp.hs = handshake{bootstrap: true, host: pb.host, port: port, room: *pb.room}
		sp.phase = phaseDecode
		if e.cfg.Role == RolePrefill {
			sp.phase = phasePrefill
		}
	}
	return nil
}

// assignKVParams gives a vLLM engine's samples their phase and KV connector parameters: a prefill
// given do_remote_decode produces KV, a decode consumes it with do_remote_prefill (or recomputes).
func (e *Engine) assignKVParams(samples []sampleSpec, kv *kvParams) error {
	for i := range samples {
		sp := &samples[i]
		switch {
		case e.cfg.Role == RolePrefill && kv != nil && kv.DoRemoteDecode:
			sp.phase, sp.hs.kv = phasePrefill, kv
		case e.cfg.Role == RoleDecode:
			sp.phase = phaseDecode
			if kv != nil && kv.DoRemotePrefill {
				if len(samples) > 1 {
					// One KV for several consumers: not modelled (the reference proxy skips the
					// prefill leg for n > 1).
					return requestError("kv_transfer_params", "kv_transfer_params with do_remote_prefill serve a single sample, got %d", len(samples))
				}
				sp.hs.kv = kv
			}
		}
	}
	return nil
}
