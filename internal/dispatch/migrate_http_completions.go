package dispatch

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"

	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/jsonscan"
	"github.com/sluicegw/sluice/internal/worker"
)

// How an OpenAI completions stream migrates (HTTP mode, vLLM and SGLang), its prompt token ids or one
// text. The gateway asks the engine for return_token_ids (vLLM's serving_completion.py and SGLang's
// serving_completions.py then put each chunk's new ids in choices[].token_ids, and the prompt's in the
// first chunk's prompt_token_ids), so it holds prompt + generated without tokenizing anything: a text
// prompt's ids are the engine's own. A continuation is a /v1/completions with
// prompt = prompt + generated, max_tokens and min_tokens reduced by what was generated, and the same
// sampling parameters; its chunks go on as the request's: the first stream's id and created, usage
// counting the request's prompt once and every token the client got. The ids reach the client only
// when it asked for them; a continuation's prompt_token_ids never do (they are not the request's).

// completionMigration is a migratable completions stream.
type completionMigration struct {
	idStream
}

// idStream is the state an OpenAI stream whose engine gives its token ids (return_token_ids) needs
// to go on as a completion: the completions and chat migrations share it.
type idStream struct {
	raw       []byte                     // the client's body, read when a continuation is made (load)
	askedIDs  bool                       // the client asked for return_token_ids: they stay in its chunks
	loaded    bool                       // load read body and the budget
	body      map[string]json.RawMessage // the client's body, for the continuations'
	maxTokens int                        // 0: none, the context's rest (max_tokens null)
	minTokens int

	prompt       []uint32        // the prompt's ids, load's
	enginePrompt []uint32        // the prompt's ids as the engine's first chunk gave them
	ids          []uint32        // the generated ids the client has
	base         int             // len(ids) when the continuation being read started
	id, created  json.RawMessage // the first stream's
	model        json.RawMessage
	cont         bool     // the frames read are a continuation's
	restarted    bool     // the stream started again elsewhere as the client sent it (restart)
	roleSent     bool     // a chat role went to the client: a restarted chat's is dropped
	ended        bool     // a chunk finished the generation, or an error chunk came
	finish       bool     // a chunk finished the generation
	afterFinish  bool     // a frame came after that chunk (the usage chunk)
	cut          [][2]int // the id members of the chunk scanned last, reused
	head         chunkHead
}

// engineBody is the body sent to the engine: the client's, asking for the token ids.
func (s *idStream) engineBody() ([]byte, error) {
	if s.askedIDs {
		return s.raw, nil
	}
	return body.SetMember(s.raw, "return_token_ids", []byte("true"))
}

func (s *idStream) generated() int { return len(s.ids) }

func (s *idStream) finished() bool { return s.ended }

// loadBody reads the client's body and min_tokens, once.
func (s *idStream) loadBody() bool {
	s.body, s.minTokens = nil, 0
	if json.Unmarshal(s.raw, &s.body) != nil {
		return false
	}
	v, ok := s.body["min_tokens"]
	return !ok || string(v) == "null" || json.Unmarshal(v, &s.minTokens) == nil
}

// continuationBody is the /v1/completions body that goes on after the ids the client has: the
// client's members but drop, the prompt's ids and the generated ones as the prompt, and the budget
// less what was generated (null for none: a completion's own default is 16); false when the budget is
// spent. The frames read next are the continuation's.
func (s *idStream) continuationBody(drop []string) ([]uint32, []byte, bool) {
	produced := len(s.ids)
	if s.maxTokens > 0 && produced >= s.maxTokens {
		return nil, nil, false
	}
	ids := prefixed(s.prompt, s.ids)
	b := make(map[string]json.RawMessage, len(s.body)+1)
	for k, v := range s.body {
		b[k] = v
	}
	for _, k := range drop {
		delete(b, k)
	}
	var err error
	if b["prompt"], err = json.Marshal(ids); err != nil {
		return nil, nil, false
	}
	b["max_tokens"] = json.RawMessage("null")
	if s.maxTokens > 0 {
		b["max_tokens"] = json.RawMessage(strconv.Itoa(s.maxTokens - produced))
	}
	if s.minTokens > 0 {
		b["min_tokens"] = json.RawMessage(strconv.Itoa(max(s.minTokens-produced, 0)))
	}
	b["return_token_ids"] = json.RawMessage("true")
	out, err := json.Marshal(b)
	if err != nil {
		return nil, nil, false
	}
	s.base, s.cont = produced, true
	return ids, out, true
}

// lengthFinish ends a stream whose token budget was all generated (load read it) as the engine
// would have: a chunk of object with choice's length finish, the usage when the client asked for it
// (stream_options.include_usage), and [DONE].
func (s *idStream) lengthFinish(dst []byte, object string, choice map[string]any) ([]byte, bool) {
	if s.ended || s.id == nil || s.maxTokens == 0 || len(s.ids) < s.maxTokens {
		return dst, false
	}
	choice["index"], choice["logprobs"], choice["finish_reason"] = 0, nil, "length"
	c := map[string]any{"id": s.id, "object": object, "created": s.created, "model": s.model, "choices": []any{choice}}
	usage := s.includeUsage()
	if usage {
		c["usage"] = nil
	}
	b, err := json.Marshal(c)
	if err != nil {
		return dst, false
	}
	dst = appendData(dst, b)
	if usage {
		if dst, err = s.appendUsage(dst, object); err != nil {
			return dst, false
		}
	}
	return append(dst, sseDone...), true
}

// closing ends a stream whose generation had ended (load read the body, when it could) but which
// broke off before [DONE], as the engine would have: the usage chunk the client asked for when the
// finish came and nothing after it (an error chunk has none), then [DONE].
func (s *idStream) closing(dst []byte, object string) []byte {
	if s.finish && !s.afterFinish && s.includeUsage() {
		if out, err := s.appendUsage(dst, object); err == nil {
			dst = out
		}
	}
	return append(dst, sseDone...)
}

// includeUsage says whether the client asked for the usage chunk (stream_options.include_usage).
func (s *idStream) includeUsage() bool {
	var opts struct {
		IncludeUsage bool `json:"include_usage"`
	}
	_ = json.Unmarshal(s.body["stream_options"], &opts)
	return opts.IncludeUsage
}

// appendUsage appends the usage chunk of object that ends a stream: the request's prompt and every
// token the client got.
func (s *idStream) appendUsage(dst []byte, object string) ([]byte, error) {
	prompt, completion := len(s.prompt), len(s.ids)
	b, err := json.Marshal(map[string]any{"id": s.id, "object": object, "created": s.created, "model": s.model, "choices": []any{},
		"usage": map[string]int{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}})
	if err != nil {
		return dst, err
	}
	return appendData(dst, b), nil
}

// restart is the body that starts a stream of which nothing was generated again elsewhere, as the
// client sent it (asking for the ids): whatever the engine's parsers, a retry of the whole request is
// exact. Its chunks are then read as the first stream's, stamped as the request's (restamp). False
// once something was generated.
func (s *idStream) restart() ([]uint32, []byte, bool) {
	if len(s.ids) > 0 {
		return nil, nil, false
	}
	b, err := s.engineBody()
	if err != nil {
		return nil, nil, false
	}
	s.restarted, s.cont = true, false
	return s.enginePrompt, b, true
}

// restamp makes a restarted stream's chunk the request's: the first stream's id and created, and no
// second role or prompt ids when the client has them.
func (s *idStream) restamp(payload []byte) []byte {
	var c map[string]json.RawMessage
	if s.id == nil || json.Unmarshal(payload, &c) != nil || c["choices"] == nil {
		return payload
	}
	c["id"], c["created"] = s.id, s.created
	if s.enginePrompt != nil {
		delete(c, "prompt_token_ids")
	}
	var choices []map[string]json.RawMessage
	if s.roleSent && json.Unmarshal(c["choices"], &choices) == nil {
		for _, ch := range choices {
			var d map[string]json.RawMessage
			if json.Unmarshal(ch["delta"], &d) == nil && d["role"] != nil {
				delete(d, "role")
				ch["delta"], _ = json.Marshal(d)
			}
		}
		c["choices"], _ = json.Marshal(choices)
	}
	b, err := json.Marshal(c)
	if err != nil {
		return payload
	}
	return b
}

// frame passes one chunk on: the first stream's scanned in place (its ids cut out when the client
// did not ask for them; delta, if not nil, gets each choice's delta), a continuation's rewritten by
// continued.
func (s *idStream) frame(dst, payload []byte, delta func(d []byte), continued func(payload []byte) ([]byte, bool)) ([]byte, bool) {
	s.afterFinish = s.finish
	if s.cont {
		out, ended := continued(payload)
		s.ended = s.ended || ended
		s.finish = s.finish || (ended && out != nil)
		if out == nil {
			return append(dst, payload...), ended
		}
		return append(dst, out...), ended
	}
	if s.restarted {
		payload = s.restamp(payload)
	}
	sc, ok := scanIDChunk(payload, s.ids, s.cut[:0], delta, &s.head)
	if !ok {
		s.ended = true
		return append(dst, payload...), true // an error chunk or something else: the client gets it, and the stream is over
	}
	s.ids, s.cut = sc.ids, sc.cut
	s.ended = s.ended || sc.ended
	s.finish = s.finish || sc.ended
	if s.enginePrompt == nil && len(sc.prompt) > 2 {
		s.enginePrompt = appendIDs(nil, sc.prompt)
	}
	if s.id == nil {
		s.id, s.created, s.model = memberCopy(payload, "id"), memberCopy(payload, "created"), memberCopy(payload, "model")
	}
	if s.askedIDs {
		return append(dst, payload...), sc.ended // as the engine sent it
	}
	return appendCut(dst, payload, sc.cut), sc.ended
}

// memberCopy is a copy of the value of b's top-level member key, or nil.
func memberCopy(b []byte, key string) json.RawMessage {
	if m, ok := jsonscan.FindMember(b, 0, key); ok {
		return append(json.RawMessage(nil), m.Value(b)...)
	}
	return nil
}

// completionOptsNotCarried are the completions options whose state or output a continuation cannot
// carry: the prompt echoed, logprobs (of the prompt, or of tokens with offsets into the text), guided
// decoding, and samples chosen among several.
var completionOptsNotCarried = []string{"echo", "logprobs", "prompt_logprobs", "suffix", "best_of", "response_format",
	"structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar", "guided_decoding_backend"}

// checkCompletionMigration says whether a completions body (with a token-id prompt of one) may
// migrate, reading its top-level members only: none of completionOptsNotCarried is on.
func checkCompletionMigration(b []byte) (*completionMigration, bool) {
	s, ok := newIDStream(b, completionOptsNotCarried)
	return &completionMigration{idStream: s}, ok
}

// newIDStream reads the top-level members of a body b: whether the client asked for the ids itself,
// and whether none of notCarried is on (null, false, an empty tools list or a text response_format
// are off).
func newIDStream(b []byte, notCarried []string) (idStream, bool) {
	s := idStream{raw: b}
	it := jsonscan.NewObjIter(b, 0)
	for {
		m, more := it.Next()
		if !more {
			break
		}
		if m.KeyIs(b, "return_token_ids") {
			s.askedIDs, _ = jsonscan.ParseBool(m.Value(b))
			continue
		}
		for _, k := range notCarried {
			if m.KeyIs(b, k) && !isFalsy(m.Value(b)) && !isPlainText(k, m.Value(b)) {
				return s, false
			}
		}
	}
	return s, it.Err == nil
}

// load reads what a continuation needs from the client's body: the token-id prompt (flat, or a list
// of one) and the token budget; false when it cannot go on from them.
func (cm *completionMigration) load() bool {
	if cm.loaded {
		return true
	}
	cm.prompt, cm.maxTokens = nil, 0
	if !cm.loadBody() {
		return false
	}
	if json.Unmarshal(cm.body["prompt"], &cm.prompt) != nil {
		var batch [][]uint32
		switch {
		case json.Unmarshal(cm.body["prompt"], &batch) == nil && len(batch) == 1:
			cm.prompt = batch[0]
		default: // a text: the engine's ids of it
			cm.prompt = cm.enginePrompt
		}
	}
	switch v, ok := cm.body["max_tokens"]; {
	case !ok:
		cm.maxTokens = completionsDefaultMaxTokens
	case string(v) == "null": // the context's rest (vLLM's get_max_tokens), which the continuation keeps
	case json.Unmarshal(v, &cm.maxTokens) != nil || cm.maxTokens <= 0:
		return false
	}
	cm.loaded = len(cm.prompt) > 0
	return cm.loaded
}

// isFalsy is a JSON value that leaves an option off: null or false (logprobs 0 still asks for the
// sampled tokens' logprobs).
func isFalsy(v []byte) bool {
	return string(v) == "null" || string(v) == "false"
}

// movable: once the first ids came (a text prompt's ids come with them).
func (cm *completionMigration) movable() bool { return len(cm.ids) > 0 }

func (cm *completionMigration) serves(p worker.Protocol) bool {
	return p == worker.ProtocolVLLM || p == worker.ProtocolSGLang
}

// completionsDefaultMaxTokens is max_tokens when a completion has none: the OpenAI default both
// engines' CompletionRequest take (vLLM's completion/protocol.py, SGLang's protocol.py). A
// continuation states what is left of it, since it would otherwise get 16 more.
const completionsDefaultMaxTokens = 16

// continuation is the body of the completions request that goes on after the ids the client has; a
// text prompt's stream that broke before its first ids starts again as it was sent.
func (cm *completionMigration) continuation() ([]uint32, []byte, bool) {
	if !cm.load() {
		return cm.restart()
	}
	return cm.continuationBody(nil)
}

// lengthFinish ends a completion whose max_tokens were all generated.
func (cm *completionMigration) lengthFinish(dst []byte) ([]byte, bool) {
	if !cm.load() {
		return dst, false
	}
	return cm.idStream.lengthFinish(dst, "text_completion", map[string]any{"text": "", "stop_reason": nil})
}

// closing ends a completion that broke off after its finish.
func (cm *completionMigration) closing(dst []byte) []byte {
	cm.load()
	return cm.idStream.closing(dst, "text_completion")
}

// frame takes one completions chunk: its ids are added to the generation's, and the ids leave it
// when the client did not ask for them. The first stream's chunks are scanned in place; a
// continuation's are rewritten as the request's.
func (cm *completionMigration) frame(dst, payload []byte) ([]byte, bool) {
	return cm.idStream.frame(dst, payload, nil, cm.continued)
}

// idChunk is what scanIDChunk found in a chunk.
type idChunk struct {
	ids    []uint32 // the ids so far with the chunk's appended
	prompt []byte   // the prompt_token_ids value, if the chunk has one
	ended  bool     // a choice has a finish_reason
	cut    [][2]int // the token_ids and prompt_token_ids members, each with its separator
}

// scanIDChunk reads an OpenAI chunk (a completion's or a chat's) without decoding it: its choices'
// token_ids (appended to ids) and finish_reason, the prompt_token_ids beside the choices (a chat's) or
// in one (a completion's), and where those id members are (appended to cut); delta, if not nil, gets
// each choice's delta (a chat's). False when the chunk has no choices array (an error chunk). head,
// if not nil, is the stream's chunkHead: a chunk that starts with it is read from its choices on.
func scanIDChunk(payload []byte, ids []uint32, cut [][2]int, delta func(d []byte), head *chunkHead) (idChunk, bool) {
	out := idChunk{ids: ids, cut: cut}
	found := false
	prevEnd := -1 // where the previous member's value ended, once a member is kept before
	top := jsonscan.NewObjIter(payload, 0)
	var m jsonscan.Member
	n := 0 // members read
	resumed := head.starts(payload)
	if resumed {
		top, m, n = jsonscan.ResumeObjIter(payload, len(head.b), head.n), head.member, head.n-1
	}
	for {
		n++
		if !resumed {
			var more bool
			if m, more = top.NextKey(); !more {
				break
			}
		}
		var err error
		if resumed || m.KeyIs(payload, "choices") { // read once, as it is scanned
			if !resumed && !found && len(out.cut) == 0 {
				head.keep(payload, m, n)
			}
			resumed, found = false, true
			m.ValEnd, err = scanChoices(payload, m.ValStart, &out, delta)
		} else {
			m.ValEnd, err = jsonscan.SkipValueDepth(payload, m.ValStart, 1)
		}
		if err != nil {
			return out, false
		}
		prevEnd = out.member(payload, m, prevEnd, false)
		top.ValueDone(m.ValEnd)
	}
	return out, found && top.Err == nil
}

// chunkHead is a chunk's start up to its choices' value, when none of it is cut. An engine starts
// every chunk of a stream with the same members (id, object, created, model: about half of a
// chunk's bytes), and scanIDChunk runs on every chunk of a stream that may migrate, so a chunk that
// starts with the same bytes is read from its choices on: the same bytes read the same way.
type chunkHead struct {
	b      []byte          // the chunk's bytes up to the choices' value
	member jsonscan.Member // the choices member, its value not read
	n      int             // its number among the chunk's members, from 1
}

// starts reports whether payload starts with the head (false for a nil or empty head).
func (h *chunkHead) starts(payload []byte) bool {
	return h != nil && len(h.b) > 0 && bytes.HasPrefix(payload, h.b)
}

// keep makes payload's start, up to the value of its choices member m (member n), the head.
func (h *chunkHead) keep(payload []byte, m jsonscan.Member, n int) {
	if h != nil {
		h.b, h.member, h.n = append(h.b[:0], payload[:m.ValStart]...), m, n
	}
}

// member takes one member m of an object in b whose previous member ended at prevEnd: the id members
// are noted and cut; it returns where the next member's cut may start.
func (out *idChunk) member(b []byte, m jsonscan.Member, prevEnd int, inChoice bool) int {
	cut := false
	switch {
	case inChoice && m.KeyIs(b, "token_ids"):
		out.ids, cut = appendIDs(out.ids, m.Value(b)), true
	case m.KeyIs(b, "prompt_token_ids"):
		out.prompt, cut = m.Value(b), true
	case inChoice && m.KeyIs(b, "finish_reason"):
		out.ended = out.ended || !jsonscan.IsNull(m.Value(b))
	}
	if cut {
		out.cut = append(out.cut, memberSpan(b, m, prevEnd))
	}
	if !cut || prevEnd >= 0 {
		return m.ValEnd
	}
	return prevEnd
}

// scanChoices reads the choices array at b[i] into out (each delta to delta, if not nil) and returns
// where it ends.
func scanChoices(b []byte, i int, out *idChunk, delta func(d []byte)) (int, error) {
	arr := jsonscan.NewArrIter(b, i)
	for {
		start, more := arr.NextStart()
		if !more {
			break
		}
		it := jsonscan.NewObjIter(b, start)
		prevEnd := -1
		for {
			m, more := it.Next()
			if !more {
				break
			}
			if delta != nil && m.KeyIs(b, "delta") {
				delta(m.Value(b))
			}
			prevEnd = out.member(b, m, prevEnd, true)
		}
		if it.Err != nil {
			return 0, it.Err
		}
		arr.ValueDone(it.Close + 1)
	}
	if arr.Err != nil {
		return 0, arr.Err
	}
	return arr.Close + 1, nil
}

// appendIDs appends the ids of a JSON array of integers.
func appendIDs(ids []uint32, raw []byte) []uint32 {
	arr := jsonscan.NewArrIter(raw, 0)
	for {
		s, e, more := arr.Next()
		if !more {
			return ids
		}
		if v, ok := jsonscan.ParseInt(raw[s:e]); ok && v >= 0 && v <= math.MaxUint32 {
			ids = append(ids, uint32(v))
		}
	}
}

// memberSpan is the span to cut to remove member m: after a kept member, from the end of the
// previous value (the comma before m included) to m's end; before any, m and the comma after it.
func memberSpan(b []byte, m jsonscan.Member, prevEnd int) [2]int {
	if prevEnd >= 0 {
		return [2]int{prevEnd, m.ValEnd}
	}
	end := jsonscan.SkipWS(b, m.ValEnd)
	if end < len(b) && b[end] == ',' {
		end = jsonscan.SkipWS(b, end+1)
	}
	return [2]int{m.KeyStart, end}
}

// appendCut appends b without the spans (in order, not overlapping) to out.
func appendCut(out, b []byte, spans [][2]int) []byte {
	at := 0
	for _, sp := range spans {
		out = append(out, b[at:sp[0]]...)
		at = sp[1]
	}
	return append(out, b[at:]...)
}

// continued rewrites a continuation's chunk as the request's.
func (cm *completionMigration) continued(payload []byte) ([]byte, bool) {
	var c map[string]json.RawMessage
	var choices []map[string]json.RawMessage
	if json.Unmarshal(payload, &c) != nil || json.Unmarshal(c["choices"], &choices) != nil {
		return nil, true // an error chunk or something else: the client gets it, and the stream is over
	}
	ended := false
	for _, ch := range choices {
		cm.ids = appendIDs(cm.ids, ch["token_ids"])
		if fr, ok := ch["finish_reason"]; ok && string(fr) != "null" {
			ended = true
		}
		if !cm.askedIDs {
			delete(ch, "token_ids")
		}
		delete(ch, "prompt_token_ids") // the continuation's prompt is not the request's
	}
	if cm.id == nil { // it broke off before its first chunk: the continuation's id is the request's
		cm.id, cm.created = c["id"], c["created"]
	}
	c["id"], c["created"] = cm.id, cm.created
	c["usage"] = rewriteUsage(c["usage"], len(cm.prompt), cm.base)
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

// rewriteUsage is a continuation's usage as the request's: the request's prompt, and every generated
// token the client got, base of them before the continuation (whose prefill of them is counted in its
// own metric).
func rewriteUsage(raw json.RawMessage, prompt, base int) json.RawMessage {
	var u map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &u) != nil || u == nil {
		return raw
	}
	var completion int
	_ = json.Unmarshal(u["completion_tokens"], &completion)
	completion += base
	u["prompt_tokens"] = json.RawMessage(strconv.Itoa(prompt))
	u["completion_tokens"] = json.RawMessage(strconv.Itoa(completion))
	u["total_tokens"] = json.RawMessage(strconv.Itoa(prompt + completion))
	delete(u, "prompt_tokens_details") // the continuation's cache hits are not the request's
	b, err := json.Marshal(u)
	if err != nil {
		return raw
	}
	return b
}
