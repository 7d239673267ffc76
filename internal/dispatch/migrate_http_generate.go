package dispatch

import (
	"encoding/json"
	"slices"
	"strconv"

	"github.com/sluicegw/sluice/internal/tokenizer"
	"github.com/sluicegw/sluice/internal/worker"
)

// How a SGLang /generate stream migrates (HTTP mode): the request's prompt is a token-id prompt
// (input_ids), the token-in/token-out form RL trainers and agents use. SGLang's stream gives the
// generated ids in every chunk (output_ids, cumulative as its text is, by default), so a
// continuation is a /generate with input_ids = prompt + output_ids and max_new_tokens reduced; its
// chunks are appended to what the client has: text, output_ids, completion_tokens, meta_info.id, and
// a length finish that names the request's max_new_tokens.

// generateMigration is a migratable /generate stream: the request's prompt ids and token budget,
// and what the client has of the generation.
type generateMigration struct {
	raw       []byte               // the client's body, read when a continuation is made (load)
	tok       *tokenizer.Tokenizer // the model's, for a text prompt; nil for input_ids
	loaded    bool                 // load read what follows
	tokenized bool                 // the prompt's ids are the gateway's tokenization of its text
	prompt    []uint32
	maxNew    int
	body      map[string]json.RawMessage // the client's body, for the continuations'
	params    map[string]json.RawMessage // its sampling_params

	last  []byte        // the last chunk the client got: cumulative, it holds the whole state
	sent  generatedText // what the client has of the generation, once a migration read it
	base  generatedText // what the current continuation's chunks are appended to
	cont  bool          // the frames read are a continuation's
	ended bool          // a continuation's chunk finished the generation
}

// generatedText is a /generate stream's state: its text, ids and counts so far.
type generatedText struct {
	text               string
	ids                []uint32
	id                 json.RawMessage // meta_info.id
	prompt, completion int
}

// guidedParams are the sampling_params of guided decoding: its state is the engine's, and no
// continuation can carry it.
var guidedParams = []string{"json_schema", "regex", "ebnf", "structural_tag"}

// load reads what a continuation needs from the client's body: a flat input_ids (or one text, with
// the model's tokenizer: its ids as SGLang's tokenizer_manager makes them, the special tokens
// included) and sampling_params.max_new_tokens (without it the engine's default would start again),
// and no guided decoding; false when it cannot go on from them.
func (gm *generateMigration) load() bool {
	if gm.loaded {
		return true
	}
	gm.body, gm.params, gm.prompt, gm.maxNew = nil, nil, nil, 0
	if json.Unmarshal(gm.raw, &gm.body) != nil || !gm.loadPrompt() ||
		json.Unmarshal(gm.body["sampling_params"], &gm.params) != nil || json.Unmarshal(gm.params["max_new_tokens"], &gm.maxNew) != nil {
		return false
	}
	for _, k := range guidedParams {
		if v, ok := gm.params[k]; ok && string(v) != "null" {
			return false
		}
	}
	gm.loaded = gm.maxNew > 0
	return gm.loaded
}

// loadPrompt reads the prompt's ids: input_ids, or the tokenization of a text prompt.
func (gm *generateMigration) loadPrompt() bool {
	if gm.tok == nil {
		return json.Unmarshal(gm.body["input_ids"], &gm.prompt) == nil && len(gm.prompt) > 0
	}
	var text string
	if json.Unmarshal(gm.body["text"], &text) != nil || text == "" {
		return false
	}
	for _, id := range gm.tok.EncodeSpecial(text) {
		gm.prompt = append(gm.prompt, uint32(id))
	}
	gm.tokenized = true
	return true
}

// generated is the engine's own count of what the client has (SGLang's completion_tokens, the length
// of its output_ids).
func (gm *generateMigration) generated() int { return gm.sent.completion }

// movable: once a chunk came (the first stream's last one holds the generation's state).
func (gm *generateMigration) movable() bool { return gm.cont || len(gm.last) > 0 }

func (gm *generateMigration) serves(p worker.Protocol) bool { return p == worker.ProtocolSGLang }

// finished reports whether the last chunk read finished the generation.
func (gm *generateMigration) finished() bool {
	if gm.cont {
		return gm.ended
	}
	if len(gm.last) == 0 {
		return false
	}
	_, _, _, ended, ok := parseGenerateChunk(gm.last)
	return !ok || ended // an error chunk ends the stream too
}

// continuation is the body of the /generate that goes on after the ids the client has.
func (gm *generateMigration) continuation() ([]uint32, []byte, bool) {
	if gm.tok != nil && !gm.cont && len(gm.last) == 0 {
		// A text prompt's stream that broke before its first chunk: nothing to check the gateway's
		// tokenization against, and nothing generated, so the request goes again as it was sent.
		return nil, gm.raw, true
	}
	if !gm.load() {
		return nil, nil, false
	}
	if !gm.cont && len(gm.last) > 0 { // the first stream's state, read only now
		g, _, meta, _, ok := parseGenerateChunk(gm.last)
		if !ok {
			return nil, nil, false
		}
		g.id = meta["id"]
		gm.sent = g
		if gm.tokenized && g.prompt != len(gm.prompt) {
			return nil, nil, false // the engine tokenized the text otherwise: its ids are not the gateway's
		}
	}
	produced := gm.sent.completion
	if produced >= gm.maxNew {
		return nil, nil, false
	}
	ids := prefixed(gm.prompt, gm.sent.ids)
	params := make(map[string]json.RawMessage, len(gm.params))
	for k, v := range gm.params {
		params[k] = v
	}
	params["max_new_tokens"] = json.RawMessage(strconv.Itoa(gm.maxNew - produced))
	if mn, ok := params["min_new_tokens"]; ok {
		var n int
		if json.Unmarshal(mn, &n) == nil {
			params["min_new_tokens"] = json.RawMessage(strconv.Itoa(max(n-produced, 0)))
		}
	}
	b := make(map[string]json.RawMessage, len(gm.body))
	for k, v := range gm.body {
		b[k] = v
	}
	delete(b, "text")
	var err error
	if b["input_ids"], err = json.Marshal(ids); err != nil {
		return nil, nil, false
	}
	if b["sampling_params"], err = json.Marshal(params); err != nil {
		return nil, nil, false
	}
	out, err := json.Marshal(b)
	if err != nil {
		return nil, nil, false
	}
	gm.base, gm.cont = gm.sent, true
	return ids, out, true
}

// finishReason is a continuation's finish_reason as the request's: a length finish names the
// request's max_new_tokens (SGLang's FINISH_LENGTH), not the continuation's.
func (gm *generateMigration) finishReason(raw json.RawMessage) json.RawMessage {
	var fr map[string]json.RawMessage
	if json.Unmarshal(raw, &fr) != nil || string(fr["type"]) != `"length"` {
		return raw
	}
	fr["length"] = json.RawMessage(strconv.Itoa(gm.maxNew))
	b, err := json.Marshal(fr)
	if err != nil {
		return raw
	}
	return b
}

// parseGenerateChunk reads one /generate chunk: its state, its object and meta_info, and whether it
// finished the generation; false for anything else (an error chunk).
func parseGenerateChunk(payload []byte) (g generatedText, c, meta map[string]json.RawMessage, ended, ok bool) {
	if json.Unmarshal(payload, &c) != nil || json.Unmarshal(c["meta_info"], &meta) != nil || meta == nil {
		return g, nil, nil, false, false
	}
	_ = json.Unmarshal(c["text"], &g.text)
	_ = json.Unmarshal(c["output_ids"], &g.ids)
	_ = json.Unmarshal(meta["prompt_tokens"], &g.prompt)
	_ = json.Unmarshal(meta["completion_tokens"], &g.completion)
	fr := meta["finish_reason"]
	return g, c, meta, len(fr) > 0 && string(fr) != "null", true
}

// frame takes one /generate chunk. The first stream's pass as they are, the last one kept (its
// output_ids are cumulative: it is all a migration needs); a continuation's are rewritten as the
// request's.
func (gm *generateMigration) frame(dst, payload []byte) ([]byte, bool) {
	if !gm.cont {
		gm.last = append(gm.last[:0], payload...)
		return append(dst, payload...), false
	}
	g, c, meta, ended, ok := parseGenerateChunk(payload)
	if !ok {
		return append(dst, payload...), true // an error chunk or something else: the client gets it, and the stream is over
	}
	gm.ended = gm.ended || ended
	if gm.base.id == nil { // it broke off before its first chunk: the continuation's id is the request's
		gm.base.id = meta["id"]
	}
	g.text, g.ids = gm.base.text+g.text, append(slices.Clip(gm.base.ids), g.ids...)
	g.prompt, g.completion, g.id = len(gm.prompt), gm.base.completion+g.completion, gm.base.id
	gm.sent = g
	c["text"], _ = json.Marshal(g.text)
	c["output_ids"], _ = json.Marshal(g.ids)
	meta["prompt_tokens"] = json.RawMessage(strconv.Itoa(g.prompt))
	meta["completion_tokens"] = json.RawMessage(strconv.Itoa(g.completion))
	meta["id"] = g.id
	meta["finish_reason"] = gm.finishReason(meta["finish_reason"])
	c["meta_info"], _ = json.Marshal(meta)
	b, err := json.Marshal(c)
	if err != nil {
		return append(dst, payload...), ended
	}
	gm.last = append(gm.last[:0], b...)
	return append(dst, b...), ended
}

// closing ends a stream that broke off after its finish: SGLang sends only [DONE] after it.
func (gm *generateMigration) closing(dst []byte) []byte { return append(dst, sseDone...) }

// lengthFinish ends a stream whose max_new_tokens were all generated: the last chunk again (its
// state is cumulative) with SGLang's length finish, then [DONE].
func (gm *generateMigration) lengthFinish(dst []byte) ([]byte, bool) {
	if len(gm.last) == 0 || !gm.load() {
		return dst, false
	}
	g, c, meta, ended, ok := parseGenerateChunk(gm.last)
	if !ok || ended || g.completion < gm.maxNew {
		return dst, false
	}
	meta["finish_reason"] = json.RawMessage(`{"type":"length","length":` + strconv.Itoa(gm.maxNew) + `}`)
	var err error
	if c["meta_info"], err = json.Marshal(meta); err != nil {
		return dst, false
	}
	b, err := json.Marshal(c)
	if err != nil {
		return dst, false
	}
	return append(appendData(dst, b), sseDone...), true
}
