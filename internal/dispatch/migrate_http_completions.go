package dispatch

import (
	"encoding/json"
	"strconv"
)

// How a vLLM /v1/completions stream migrates (HTTP mode): the request's prompt is a token-id prompt.
// The gateway asks the engine for return_token_ids (vLLM's serving_completion.py then puts each
// chunk's new ids in choices[].token_ids, and the prompt's in the first chunk's prompt_token_ids), so
// it holds prompt + generated without tokenizing anything. A continuation is a /v1/completions with
// prompt = prompt + generated, max_tokens and min_tokens reduced by what was generated, and the same
// sampling parameters; its chunks go on as the request's: the first stream's id and created, usage
// counting the request's prompt once and every token the client got. The ids reach the client only
// when it asked for them; a continuation's prompt_token_ids never do (they are not the request's).

// completionMigration is a migratable vLLM completions stream.
type completionMigration struct {
	prompt    []uint32
	body      map[string]json.RawMessage // the client's body, for the continuations'
	maxTokens int                        // 0: none sent, the context's rest, which a continuation keeps
	minTokens int
	askedIDs  bool // the client asked for return_token_ids: they stay in its chunks

	ids         []uint32        // the generated ids the client has
	base        int             // len(ids) when the continuation being read started
	id, created json.RawMessage // the first stream's
	cont        bool            // the frames read are a continuation's
}

// completionOptsNotCarried are the completions options whose state or output a continuation cannot
// carry: the prompt echoed, logprobs (of the prompt, or of tokens with offsets into the text), guided
// decoding, and samples chosen among several.
var completionOptsNotCarried = []string{"echo", "logprobs", "prompt_logprobs", "suffix", "best_of", "response_format",
	"structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar", "guided_decoding_backend"}

// parseCompletionMigration reads what a continuation needs from a completions body: a token-id
// prompt (flat, or a list of one) and the token budget.
func parseCompletionMigration(b []byte) (*completionMigration, bool) {
	cm := &completionMigration{}
	if json.Unmarshal(b, &cm.body) != nil {
		return nil, false
	}
	if json.Unmarshal(cm.body["prompt"], &cm.prompt) != nil {
		var batch [][]uint32
		if json.Unmarshal(cm.body["prompt"], &batch) != nil || len(batch) != 1 {
			return nil, false
		}
		cm.prompt = batch[0]
	}
	if len(cm.prompt) == 0 {
		return nil, false
	}
	for _, k := range completionOptsNotCarried {
		if v, ok := cm.body[k]; ok && !isFalsy(v) {
			return nil, false
		}
	}
	if v, ok := cm.body["max_tokens"]; ok && string(v) != "null" && (json.Unmarshal(v, &cm.maxTokens) != nil || cm.maxTokens <= 0) {
		return nil, false
	}
	if v, ok := cm.body["min_tokens"]; ok && string(v) != "null" && json.Unmarshal(v, &cm.minTokens) != nil {
		return nil, false
	}
	var asked bool
	_ = json.Unmarshal(cm.body["return_token_ids"], &asked)
	cm.askedIDs = asked
	return cm, true
}

// isFalsy is a JSON value that leaves an option off: null or false (logprobs 0 still asks for the
// sampled tokens' logprobs).
func isFalsy(v json.RawMessage) bool {
	return string(v) == "null" || string(v) == "false"
}

// engineBody is the body sent to the engine: the client's, asking for the token ids.
func (cm *completionMigration) engineBody(b []byte) ([]byte, error) {
	if cm.askedIDs {
		return b, nil
	}
	m := make(map[string]json.RawMessage, len(cm.body)+1)
	for k, v := range cm.body {
		m[k] = v
	}
	m["return_token_ids"] = json.RawMessage("true")
	return json.Marshal(m)
}

func (cm *completionMigration) generated() int { return len(cm.ids) }

// continuation is the body of the completions request that goes on after the ids the client has.
func (cm *completionMigration) continuation() ([]uint32, []byte, bool) {
	produced := len(cm.ids)
	if cm.maxTokens > 0 && produced >= cm.maxTokens {
		return nil, nil, false
	}
	ids := prefixed(cm.prompt, cm.ids)
	b := make(map[string]json.RawMessage, len(cm.body)+1)
	for k, v := range cm.body {
		b[k] = v
	}
	var err error
	if b["prompt"], err = json.Marshal(ids); err != nil {
		return nil, nil, false
	}
	if cm.maxTokens > 0 {
		b["max_tokens"] = json.RawMessage(strconv.Itoa(cm.maxTokens - produced))
	}
	if cm.minTokens > 0 {
		b["min_tokens"] = json.RawMessage(strconv.Itoa(max(cm.minTokens-produced, 0)))
	}
	b["return_token_ids"] = json.RawMessage("true")
	out, err := json.Marshal(b)
	if err != nil {
		return nil, nil, false
	}
	cm.base, cm.cont = produced, true
	return ids, out, true
}

// frame takes one completions chunk: its ids are added to the generation's; the ids leave it when
// the client did not ask for them, and a continuation's chunk is rewritten as the request's.
func (cm *completionMigration) frame(payload []byte) ([]byte, bool) {
	var c map[string]json.RawMessage
	var choices []map[string]json.RawMessage
	if json.Unmarshal(payload, &c) != nil || json.Unmarshal(c["choices"], &choices) != nil {
		return nil, true // an error chunk or something else: the client gets it, and the stream is over
	}
	ended := false
	for _, ch := range choices {
		var ids []uint32
		_ = json.Unmarshal(ch["token_ids"], &ids)
		cm.ids = append(cm.ids, ids...)
		if fr, ok := ch["finish_reason"]; ok && string(fr) != "null" {
			ended = true
		}
		if !cm.askedIDs {
			delete(ch, "token_ids")
			delete(ch, "prompt_token_ids")
		} else if cm.cont {
			delete(ch, "prompt_token_ids")
		}
	}
	if !cm.cont {
		if cm.id == nil {
			cm.id, cm.created = c["id"], c["created"]
		}
		if cm.askedIDs {
			return nil, ended // as the engine sent it
		}
	} else {
		if cm.id == nil { // it broke off before its first chunk: the continuation's id is the request's
			cm.id, cm.created = c["id"], c["created"]
		}
		c["id"], c["created"] = cm.id, cm.created
		c["usage"] = cm.usage(c["usage"])
	}
	var err error
	if c["choices"], err = json.Marshal(choices); err != nil {
		return nil, ended
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil, ended
	}
	return b, ended
}

// usage is a continuation's usage as the request's: the request's prompt, and every generated token
// the client got (the continuation's prefill of them is counted in its own metric).
func (cm *completionMigration) usage(raw json.RawMessage) json.RawMessage {
	var u map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &u) != nil || u == nil {
		return raw
	}
	var completion int
	_ = json.Unmarshal(u["completion_tokens"], &completion)
	completion += cm.base
	u["prompt_tokens"] = json.RawMessage(strconv.Itoa(len(cm.prompt)))
	u["completion_tokens"] = json.RawMessage(strconv.Itoa(completion))
	u["total_tokens"] = json.RawMessage(strconv.Itoa(len(cm.prompt) + completion))
	delete(u, "prompt_tokens_details") // the continuation's cache hits are not the request's
	b, err := json.Marshal(u)
	if err != nil {
		return raw
	}
	return b
}
