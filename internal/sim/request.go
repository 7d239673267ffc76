package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// apiKind is the HTTP API a generation came through.
type apiKind int

const (
	apiGenerate apiKind = iota
	apiChat
	apiCompletion
)

var errModelNotFound = errors.New("model not found")

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
	Seed                *int64          `json:"seed"`
	Stop                json.RawMessage `json:"stop"`
	IgnoreEOS           bool            `json:"ignore_eos"`
	BootstrapHost       json.RawMessage `json:"bootstrap_host"`
	BootstrapPort       json.RawMessage `json:"bootstrap_port"`
	BootstrapRoom       json.RawMessage `json:"bootstrap_room"`
	KVTransferParams    *kvParams       `json:"kv_transfer_params"`
	RID                 json.RawMessage `json:"rid"`
	ReturnLogprob       json.RawMessage `json:"return_logprob"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type samplingParams struct {
	MaxNewTokens *int            `json:"max_new_tokens"`
	Temperature  *float64        `json:"temperature"`
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
}

const maxN = 128

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBadRequest, fmt.Sprintf(format, args...))
}

// parseJob turns a request body into a job for this engine.
func (e *Engine) parseJob(api apiKind, body []byte) (*genJob, error) {
	var req apiRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, badRequest("malformed JSON body: %v", err)
	}
	job := &genJob{api: api, stream: req.Stream, model: req.Model, id: ridString(req.RID)}
	job.decodeRole = e.cfg.Role == RoleDecode
	if api == apiGenerate && len(req.ReturnLogprob) > 0 && string(req.ReturnLogprob) != "false" && string(req.ReturnLogprob) != "null" {
		job.inputLogprobs = true
	}
	if req.StreamOptions != nil {
		job.includeUsage = req.StreamOptions.IncludeUsage
	}
	if api != apiGenerate {
		if job.model == "" {
			job.model = e.cfg.Models[0]
		} else if !slices.Contains(e.cfg.Models, job.model) {
			return nil, fmt.Errorf("%w: the model `%s` does not exist", errModelNotFound, job.model)
		}
	} else if job.model == "" {
		job.model = e.cfg.Models[0]
	}

	// Sampling parameters.
	n := 1
	maxTokens := req.MaxTokens
	if req.MaxCompletionTokens != nil {
		maxTokens = req.MaxCompletionTokens
	}
	temperature, seed, stopRaw, ignoreEOS := req.Temperature, req.Seed, req.Stop, req.IgnoreEOS
	if req.N != nil {
		n = *req.N
	}
	if sp := req.SamplingParams; sp != nil {
		if sp.MaxNewTokens != nil {
			maxTokens = sp.MaxNewTokens
		}
		if sp.Temperature != nil {
			temperature = sp.Temperature
		}
		if sp.N != nil {
			n = *sp.N
		}
		if len(sp.Stop) > 0 {
			stopRaw = sp.Stop
		}
		if sp.Seed != nil {
			seed = sp.Seed
		}
		ignoreEOS = ignoreEOS || sp.IgnoreEOS
	}
	if n < 1 || n > maxN {
		return nil, badRequest("n must be between 1 and %d, got %d", maxN, n)
	}
	job.n = n
	stops, err := stringOrList(stopRaw, "stop")
	if err != nil {
		return nil, err
	}
	mt, natural := e.cfg.DefaultMaxTokens, !ignoreEOS
	if maxTokens != nil {
		if *maxTokens < 0 {
			return nil, badRequest("max_tokens must be >= 0, got %d", *maxTokens)
		}
		mt, natural = *maxTokens, false
	}
	var reqSeed int64
	if seed != nil {
		reqSeed = *seed
	}
	greedy := temperature != nil && *temperature == 0

	// Prompts.
	prompts, batch, err := e.parsePrompts(api, &req)
	if err != nil {
		return nil, err
	}
	job.batch = batch
	total := len(prompts) * n
	job.samples = make([]sampleSpec, total)
	for i := range job.samples {
		job.samples[i] = sampleSpec{
			prompt: prompts[i/n], maxTokens: mt, naturalStop: natural, stop: stops,
			reqSeed: reqSeed, greedy: greedy, choice: i,
		}
	}
	if err := e.assignHandshakes(job, &req); err != nil {
		return nil, err
	}
	return job, nil
}

func (e *Engine) parsePrompts(api apiKind, req *apiRequest) ([]*prompt, bool, error) {
	switch api {
	case apiChat:
		if len(req.Messages) == 0 {
			return nil, false, badRequest("messages must not be empty")
		}
		ids := make([]uint32, 0, 64)
		for i, m := range req.Messages {
			if m.Role == "" {
				return nil, false, badRequest("messages[%d].role is required", i)
			}
			ids = appendTokens(ids, m.Role)
			ids = appendTokens(ids, ":")
			text, err := messageText(m.Content)
			if err != nil {
				return nil, false, badRequest("messages[%d].content: %v", i, err)
			}
			ids = appendTokens(ids, text)
		}
		ids = appendTokens(ids, "assistant:")
		return []*prompt{newPrompt(ids)}, false, nil
	case apiCompletion:
		if len(req.Prompt) == 0 {
			return nil, false, badRequest("prompt is required")
		}
		ps, batch, err := promptList(req.Prompt, "prompt")
		return ps, batch, err
	default:
		raw, field := req.Text, "text"
		if len(raw) == 0 || string(raw) == "null" {
			raw, field = req.InputIDs, "input_ids"
		}
		if len(raw) == 0 || string(raw) == "null" {
			return nil, false, badRequest("text or input_ids is required")
		}
		return promptList(raw, field)
	}
}

// promptList parses a string, a list of strings, a list of token ids or a list of lists of token ids.
func promptList(raw json.RawMessage, field string) ([]*prompt, bool, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, false, badRequest("%s: %v", field, err)
		}
		return []*prompt{newPrompt(appendTokens(make([]uint32, 0, len(s)/3+1), s))}, false, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, false, badRequest("%s must be a string or an array", field)
	}
	if len(items) == 0 {
		return nil, false, badRequest("%s must not be empty", field)
	}
	first := bytes.TrimSpace(items[0])
	if len(first) > 0 && (first[0] == '-' || (first[0] >= '0' && first[0] <= '9')) {
		var ids []uint32
		if err := json.Unmarshal(raw, &ids); err != nil {
			return nil, false, badRequest("%s: %v", field, err)
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
				return nil, false, badRequest("%s[%d]: %v", field, i, err)
			}
			out = append(out, newPrompt(appendTokens(nil, s)))
		default:
			var ids []uint32
			if err := json.Unmarshal(it, &ids); err != nil {
				return nil, false, badRequest("%s[%d] must be a string or a list of token ids", field, i)
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
			return nil, badRequest("%s: %v", field, err)
		}
		return []string{s}, nil
	}
	var l []string
	if err := json.Unmarshal(raw, &l); err != nil {
		return nil, badRequest("%s must be a string or a list of strings", field)
	}
	return l, nil
}

// scalarOrList decodes a JSON scalar or a list of scalars into a list; null or absent gives nil.
func scalarOrList[T any](raw json.RawMessage, field string) ([]T, bool, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, false, nil
	}
	if raw[0] == '[' {
		var l []T
		if err := json.Unmarshal(raw, &l); err != nil {
			return nil, true, badRequest("%s: %v", field, err)
		}
		return l, true, nil
	}
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, false, badRequest("%s: %v", field, err)
	}
	return []T{v}, false, nil
}

// assignHandshakes gives each sample its disaggregation handshake and phase, and checks that this engine
// can serve the request (an SGLang decode engine needs bootstrap fields).
func (e *Engine) assignHandshakes(job *genJob, req *apiRequest) error {
	rooms, roomsList, err := scalarOrList[uint64](req.BootstrapRoom, "bootstrap_room")
	if err != nil {
		return err
	}
	hosts, hostsList, err := scalarOrList[string](req.BootstrapHost, "bootstrap_host")
	if err != nil {
		return err
	}
	ports, portsList, err := scalarOrList[*int](req.BootstrapPort, "bootstrap_port")
	if err != nil {
		return err
	}
	total := len(job.samples)
	hasBootstrap := len(rooms) > 0
	if hasBootstrap {
		for _, c := range []struct {
			name string
			n    int
			list bool
		}{{"bootstrap_room", len(rooms), roomsList}, {"bootstrap_host", len(hosts), hostsList}, {"bootstrap_port", len(ports), portsList}} {
			if c.list && c.n != total {
				return badRequest("%s has %d entries, want one per sample (%d)", c.name, c.n, total)
			}
			if !c.list && total > 1 && c.name == "bootstrap_room" {
				return badRequest("bootstrap_room must be a list of %d rooms (one per sample)", total)
			}
		}
	}
	at := func(i, n int) int {
		if n == 1 {
			return 0
		}
		return i
	}
	for i := range job.samples {
		sp := &job.samples[i]
		switch e.cfg.Role {
		case RolePrefill:
			if hasBootstrap && e.cfg.Protocol == ProtocolSGLang {
				sp.phase = phasePrefill
				sp.hs = handshake{bootstrap: true, room: rooms[at(i, len(rooms))]}
			} else if req.KVTransferParams != nil && req.KVTransferParams.DoRemoteDecode {
				sp.phase = phasePrefill
				sp.hs.kv = req.KVTransferParams
			}
		case RoleDecode:
			sp.phase = phaseDecode
			if e.cfg.Protocol == ProtocolSGLang {
				if !hasBootstrap || len(hosts) == 0 || len(ports) == 0 {
					return badRequest("a decode engine needs bootstrap_host, bootstrap_port and bootstrap_room")
				}
				p := ports[at(i, len(ports))]
				if p == nil || *p <= 0 || *p > 65535 {
					return badRequest("bootstrap_port must be a port number, the prefill engine has no bootstrap server")
				}
				sp.hs = handshake{bootstrap: true, host: hosts[at(i, len(hosts))], port: *p, room: rooms[at(i, len(rooms))]}
			} else if kv := req.KVTransferParams; kv != nil && kv.DoRemotePrefill {
				if total > 1 {
					return badRequest("kv_transfer_params with do_remote_prefill serve a single sample, got %d", total)
				}
				sp.hs.kv = kv
			}
		}
	}
	return nil
}
