package sim

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"
)

// The routes engines serve besides generation, as each engine shapes them. Sources: SGLang
// python/sglang/srt/entrypoints/http_server.py (routes) and entrypoints/openai/protocol.py
// (EmbeddingResponse, RerankResponse, ScoringResponse, ClassifyResponse, TokenizeResponse,
// DetokenizeResponse), serving_rerank.py (rerank answers a bare list sorted by score, highest
// first); vLLM entrypoints/pooling/embed/protocol.py (EmbeddingResponse), pooling/scoring/
// api_router.py and protocol.py (/score, /v1/score, /rerank, /v1/rerank, /v2/rerank; RerankResponse,
// ScoreResponse), pooling/classify/api_router.py and protocol.py (/classify), serve/tokenize/
// api_router.py and protocol.py (/tokenize, /detokenize; TokenizeResponse, DetokenizeResponse).
//
// Simplifications: every simulated model serves every pooling API (real engines need an embedding,
// cross-encoder or classification model); pooling takes no modelled time and bypasses the scheduler;
// embeddings are unit vectors drawn from the input's tokens (EmbeddingDim values, the same input
// gives the same vector); a rerank or score is the share of the query's tokens found in the document;
// classification has two labels; detokenize joins tokens with spaces (the tokenizer drops
// whitespace).

// EmbeddingDim is the length of the simulator's embeddings (before "dimensions" shortens them).
const EmbeddingDim = 32

func (e *Engine) poolingRoutes(handle func(string, http.HandlerFunc)) {
	handle("POST /v1/embeddings", e.handleEmbeddings)
	if e.cfg.Protocol == ProtocolVLLM {
		handle("POST /rerank", e.handleRerank)
		handle("POST /v1/rerank", e.handleRerank)
		handle("POST /v2/rerank", e.handleRerank)
		handle("POST /score", e.handleScore)
		handle("POST /v1/score", e.handleScore)
		handle("POST /classify", e.handleClassify)
		handle("POST /tokenize", e.handleTokenize)
		handle("POST /detokenize", e.handleDetokenize)
		return
	}
	handle("POST /v1/rerank", e.handleRerank)
	handle("POST /v1/score", e.handleScore)
	handle("POST /v1/classify", e.handleClassify)
	handle("POST /v1/tokenize", e.handleTokenize)
	handle("POST /tokenize", e.handleTokenize)
	handle("POST /v1/detokenize", e.handleDetokenize)
	handle("POST /detokenize", e.handleDetokenize)
}

// poolingRequest reads a pooling or tokenization request: the body (into v), injected faults, and
// the model, which must be one the engine serves (SGLang and vLLM default an absent model).
func (e *Engine) poolingRequest(w http.ResponseWriter, r *http.Request, v any, model *string) bool {
	e.stats.seen.Add(1)
	bp := getBuf()
	defer putBuf(bp)
	body, err := readBody(r.Body, *bp)
	*bp = body[:0]
	if err != nil {
		e.writeEngineError(w, apiChat, schemaError("reading body: %v", err))
		return false
	}
	rf := e.faults.Load().forRequest(e.cfg.Role, r.URL.Path, true, e.randFloat)
	if err := e.applyRequestFaults(r.Context(), &rf); err != nil {
		e.countFailure()
		if status := rf.errorStatus; status != 0 {
			e.writeEngineError(w, apiChat, abortError(errInjected, status, "injected fault: status %d %s", status, http.StatusText(status)))
			return false
		}
		panic(http.ErrAbortHandler)
	}
	if err := json.Unmarshal(body, v); err != nil {
		e.countFailure()
		e.writeEngineError(w, apiChat, schemaError("malformed JSON body: %v", err))
		return false
	}
	if *model == "" {
		*model = e.cfg.Models[0]
	} else if !slices.Contains(e.cfg.Models, *model) {
		e.countFailure()
		e.writeEngineError(w, apiChat, &engineError{kind: errModelNotFound, status: http.StatusNotFound, param: "model",
			msg: fmt.Sprintf("The model `%s` does not exist.", *model)})
		return false
	}
	return true
}

func (e *Engine) poolingDone(w http.ResponseWriter, v any) {
	e.stats.completed.Add(1)
	writeJSON(w, http.StatusOK, v)
}

func (e *Engine) refuse(w http.ResponseWriter, param, format string, args ...any) {
	e.countFailure()
	e.writeEngineError(w, apiChat, requestError(param, format, args...))
}

// inputs turns an embeddings or classification input into token lists: a string, a list of strings,
// a list of token ids (one input) or a list of token id lists.
func inputs(raw json.RawMessage) ([][]uint32, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return [][]uint32{appendTokens(nil, s)}, nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil && len(ss) > 0 {
		out := make([][]uint32, len(ss))
		for i, x := range ss {
			out[i] = appendTokens(nil, x)
		}
		return out, nil
	}
	var ids []uint32
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		return [][]uint32{ids}, nil
	}
	var lists [][]uint32
	if json.Unmarshal(raw, &lists) == nil && len(lists) > 0 {
		return lists, nil
	}
	return nil, fmt.Errorf("input must be a string, a list of strings, a list of token ids or a list of token id lists")
}

// usage is both engines' UsageInfo for a request that generates nothing.
func usage(prompt int) map[string]any {
	return map[string]any{"prompt_tokens": prompt, "total_tokens": prompt, "completion_tokens": 0, "prompt_tokens_details": nil}
}

// embedding is the unit vector of a token list.
func embedding(ids []uint32, dims int) []float64 {
	r := rng{s: hashTokens(ids)}
	v := make([]float64, dims)
	var norm float64
	for i := range v {
		v[i] = float64(int64(r.next()>>11))/float64(1<<52) - 1
		norm += v[i] * v[i]
	}
	norm = math.Sqrt(norm)
	for i := range v {
		v[i] /= norm
	}
	return v
}

// base64Floats is the base64 of little-endian float32s, as both engines encode "base64" embeddings.
func base64Floats(v []float64) string {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(f)))
	}
	return base64.StdEncoding.EncodeToString(b)
}

func (e *Engine) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model          string          `json:"model"`
		Input          json.RawMessage `json:"input"`
		EncodingFormat string          `json:"encoding_format"`
		Dimensions     *int            `json:"dimensions"`
	}
	if !e.poolingRequest(w, r, &req, &req.Model) {
		return
	}
	if len(req.Input) == 0 || string(req.Input) == "null" {
		e.refuse(w, "input", "Field required: input")
		return
	}
	ins, err := inputs(req.Input)
	if err != nil {
		e.refuse(w, "input", "%v", err)
		return
	}
	dims := EmbeddingDim
	if d := req.Dimensions; d != nil {
		if *d < 1 || *d > EmbeddingDim {
			e.refuse(w, "dimensions", "dimensions must be between 1 and %d, got %d", EmbeddingDim, *d)
			return
		}
		dims = *d
	}
	if req.EncodingFormat != "" && req.EncodingFormat != "float" && req.EncodingFormat != "base64" {
		e.refuse(w, "encoding_format", "encoding_format must be float or base64, got %q", req.EncodingFormat)
		return
	}
	data := make([]map[string]any, len(ins))
	tokens := 0
	for i, ids := range ins {
		if len(ids) >= e.cfg.ContextLength {
			e.refuse(w, "input", "This model's maximum context length is %d tokens. However, you requested %d tokens in the input.", e.cfg.ContextLength, len(ids))
			return
		}
		tokens += len(ids)
		v := embedding(ids, dims)
		var emb any = v
		if req.EncodingFormat == "base64" {
			emb = base64Floats(v)
		}
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": emb}
	}
	resp := map[string]any{"object": "list", "model": req.Model, "data": data, "usage": usage(tokens)}
	if e.cfg.Protocol == ProtocolVLLM {
		resp["id"] = e.newID("embd-")
		resp["created"] = time.Now().Unix()
	}
	e.poolingDone(w, resp)
}

// relevance is the share of the query's distinct tokens found in the document, 0..1.
func relevance(query, doc string) float64 {
	q := appendTokens(nil, query)
	if len(q) == 0 {
		return 0
	}
	d := appendTokens(nil, doc)
	seen := map[uint32]bool{}
	for _, id := range d {
		seen[id] = true
	}
	distinct, hit := map[uint32]bool{}, 0
	for _, id := range q {
		if distinct[id] {
			continue
		}
		distinct[id] = true
		if seen[id] {
			hit++
		}
	}
	return float64(hit) / float64(len(distinct))
}

func (e *Engine) handleRerank(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model           string   `json:"model"`
		Query           *string  `json:"query"`
		Documents       []string `json:"documents"`
		TopN            *int     `json:"top_n"`
		ReturnDocuments *bool    `json:"return_documents"`
	}
	if !e.poolingRequest(w, r, &req, &req.Model) {
		return
	}
	switch {
	case req.Query == nil || strings.TrimSpace(*req.Query) == "":
		e.refuse(w, "query", "Query cannot be empty")
		return
	case len(req.Documents) == 0:
		e.refuse(w, "documents", "Documents cannot be empty")
		return
	}
	type scored struct {
		index int
		score float64
	}
	results := make([]scored, len(req.Documents))
	tokens := 0
	for i, d := range req.Documents {
		results[i] = scored{i, relevance(*req.Query, d)}
		tokens += countTokens(*req.Query) + countTokens(d)
	}
	sort.SliceStable(results, func(a, b int) bool { return results[a].score > results[b].score })
	n := len(results)
	if req.TopN != nil && *req.TopN > 0 && *req.TopN < n {
		n = *req.TopN
	}
	if e.cfg.Protocol == ProtocolVLLM {
		out := make([]map[string]any, n)
		for i, s := range results[:n] {
			out[i] = map[string]any{"index": s.index, "document": map[string]any{"text": req.Documents[s.index]}, "relevance_score": s.score}
		}
		e.poolingDone(w, map[string]any{"id": e.newID("rerank-"), "model": req.Model,
			"usage": map[string]int{"prompt_tokens": tokens, "total_tokens": tokens}, "results": out})
		return
	}
	// SGLang: a bare list of RerankResponse, highest score first.
	withDocs := req.ReturnDocuments == nil || *req.ReturnDocuments
	out := make([]map[string]any, n)
	for i, s := range results[:n] {
		item := map[string]any{"score": s.score, "index": s.index, "meta_info": map[string]any{"id": e.newID("rerank-"), "prompt_tokens": tokens}}
		if withDocs {
			item["document"] = req.Documents[s.index]
		}
		out[i] = item
	}
	e.poolingDone(w, out)
}

func (e *Engine) handleScore(w http.ResponseWriter, r *http.Request) {
	if e.cfg.Protocol == ProtocolVLLM {
		e.handleScoreVLLM(w, r)
		return
	}
	// SGLang's decoder-only scoring: for each item, the probability of each label token after
	// query+item (ScoringRequest).
	var req struct {
		Model         string          `json:"model"`
		Query         *string         `json:"query"`
		Items         json.RawMessage `json:"items"`
		LabelTokenIDs []uint32        `json:"label_token_ids"`
		ApplySoftmax  bool            `json:"apply_softmax"`
	}
	if !e.poolingRequest(w, r, &req, &req.Model) {
		return
	}
	items, err := stringOrList(req.Items, "items")
	switch {
	case err != nil || len(items) == 0:
		e.refuse(w, "items", "items must be a string or a non-empty list of strings")
		return
	case req.Query == nil:
		e.refuse(w, "query", "query is required")
		return
	case len(req.LabelTokenIDs) == 0:
		e.refuse(w, "label_token_ids", "label_token_ids must be a non-empty list of token ids")
		return
	}
	scores := make([][]float64, len(items))
	tokens := 0
	for i, it := range items {
		ids := appendTokens(appendTokens(nil, *req.Query), it)
		tokens += len(ids)
		row := make([]float64, len(req.LabelTokenIDs))
		var sum float64
		for j, label := range req.LabelTokenIDs {
			row[j] = 0.05 + 0.9*float64(hashTokens(append(slices.Clone(ids), label))>>11)/float64(1<<53)
			sum += row[j]
		}
		if req.ApplySoftmax {
			for j := range row {
				row[j] /= sum
			}
		}
		scores[i] = row
	}
	e.poolingDone(w, map[string]any{"scores": scores, "pooled_hidden_states": nil, "model": req.Model, "usage": usage(tokens), "object": "scoring"})
}

// handleScoreVLLM scores text pairs (ScoreRequest: text_1/text_2, queries/documents, queries/items
// or data_1/data_2; one side may be a single text scored against every text of the other).
func (e *Engine) handleScoreVLLM(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model     string          `json:"model"`
		Text1     json.RawMessage `json:"text_1"`
		Text2     json.RawMessage `json:"text_2"`
		Queries   json.RawMessage `json:"queries"`
		Documents json.RawMessage `json:"documents"`
		Items     json.RawMessage `json:"items"`
		Data1     json.RawMessage `json:"data_1"`
		Data2     json.RawMessage `json:"data_2"`
	}
	if !e.poolingRequest(w, r, &req, &req.Model) {
		return
	}
	first := func(raws ...json.RawMessage) json.RawMessage {
		for _, r := range raws {
			if len(r) > 0 && string(r) != "null" {
				return r
			}
		}
		return nil
	}
	a, errA := stringOrList(first(req.Text1, req.Queries, req.Data1), "text_1")
	b, errB := stringOrList(first(req.Text2, req.Documents, req.Items, req.Data2), "text_2")
	if errA != nil || errB != nil || len(a) == 0 || len(b) == 0 {
		e.refuse(w, "text_1", "score needs two non-empty inputs (text_1 and text_2, or queries and documents)")
		return
	}
	if len(a) == 1 {
		a = slices.Repeat(a, len(b))
	}
	if len(a) != len(b) {
		e.refuse(w, "text_2", "Input lengths must be either 1:1, 1:N or N:N")
		return
	}
	data := make([]map[string]any, len(b))
	tokens := 0
	for i := range b {
		data[i] = map[string]any{"index": i, "object": "score", "score": relevance(a[i], b[i])}
		tokens += countTokens(a[i]) + countTokens(b[i])
	}
	e.poolingDone(w, map[string]any{"id": e.newID("score-"), "object": "list", "created": time.Now().Unix(),
		"model": req.Model, "data": data, "usage": usage(tokens)})
}

func (e *Engine) handleClassify(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model string          `json:"model"`
		Input json.RawMessage `json:"input"`
	}
	if !e.poolingRequest(w, r, &req, &req.Model) {
		return
	}
	ins, err := inputs(req.Input)
	if err != nil {
		e.refuse(w, "input", "%v", err)
		return
	}
	data := make([]map[string]any, len(ins))
	tokens := 0
	for i, ids := range ins {
		tokens += len(ids)
		p := 0.05 + 0.9*float64(hashTokens(ids)>>11)/float64(1<<53)
		probs := []float64{1 - p, p}
		label := "LABEL_0"
		if p > 0.5 {
			label = "LABEL_1"
		}
		data[i] = map[string]any{"index": i, "label": label, "probs": probs, "num_classes": 2}
	}
	e.poolingDone(w, map[string]any{"id": e.newID("classify-"), "object": "list", "created": time.Now().Unix(),
		"model": req.Model, "data": data, "usage": usage(tokens)})
}

func (e *Engine) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model    string          `json:"model"`
		Prompt   json.RawMessage `json:"prompt"`
		Messages json.RawMessage `json:"messages"`
	}
	if !e.poolingRequest(w, r, &req, &req.Model) {
		return
	}
	hasPrompt, hasMessages := len(req.Prompt) > 0 && string(req.Prompt) != "null", len(req.Messages) > 0 && string(req.Messages) != "null"
	if hasPrompt == hasMessages {
		e.refuse(w, "prompt", "Exactly one of 'prompt' or 'messages' must be provided.")
		return
	}
	var lists [][]uint32
	batch := false
	if hasMessages {
		// The chat prompt the chat route would build from these messages (parsePrompts).
		var msgs []chatMessage
		if err := json.Unmarshal(req.Messages, &msgs); err != nil {
			e.refuse(w, "messages", "messages must be a list of messages")
			return
		}
		ps, _, err := e.parsePrompts(apiChat, &apiRequest{Messages: msgs})
		if err != nil {
			e.refuse(w, "messages", "%v", err)
			return
		}
		lists = [][]uint32{ps[0].ids}
	} else {
		var s string
		var texts []string
		if err := json.Unmarshal(req.Prompt, &s); err == nil {
			texts = []string{s}
		} else if e.cfg.Protocol == ProtocolSGLang && json.Unmarshal(req.Prompt, &texts) == nil {
			batch = true // SGLang tokenizes a list of prompts; vLLM takes one
		} else {
			e.refuse(w, "prompt", "prompt must be a string")
			return
		}
		for _, t := range texts {
			lists = append(lists, appendTokens([]uint32{}, t))
		}
	}
	counts := make([]int, len(lists))
	for i, l := range lists {
		counts[i] = len(l)
	}
	if e.cfg.Protocol == ProtocolVLLM {
		e.poolingDone(w, map[string]any{"count": counts[0], "max_model_len": e.cfg.ContextLength, "tokens": lists[0], "token_strs": nil})
		return
	}
	if batch {
		e.poolingDone(w, map[string]any{"tokens": lists, "count": counts, "max_model_len": e.cfg.ContextLength})
		return
	}
	e.poolingDone(w, map[string]any{"tokens": lists[0], "count": counts[0], "max_model_len": e.cfg.ContextLength})
}

// tokenText is the text of one token id (its bytes, packed little-endian by the tokenizer).
func tokenText(id uint32) string {
	var b []byte
	for ; id != 0; id >>= 8 {
		b = append(b, byte(id))
	}
	return string(b)
}

func (e *Engine) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model  string          `json:"model"`
		Tokens json.RawMessage `json:"tokens"`
	}
	if !e.poolingRequest(w, r, &req, &req.Model) {
		return
	}
	join := func(ids []uint32) string {
		parts := make([]string, len(ids))
		for i, id := range ids {
			parts[i] = tokenText(id)
		}
		return strings.Join(parts, " ")
	}
	var ids []uint32
	if err := json.Unmarshal(req.Tokens, &ids); err == nil && len(req.Tokens) > 0 {
		if e.cfg.Protocol == ProtocolVLLM {
			e.poolingDone(w, map[string]any{"prompt": join(ids)})
		} else {
			e.poolingDone(w, map[string]any{"text": join(ids)})
		}
		return
	}
	var lists [][]uint32
	if e.cfg.Protocol == ProtocolSGLang && json.Unmarshal(req.Tokens, &lists) == nil && len(lists) > 0 {
		texts := make([]string, len(lists))
		for i, l := range lists {
			texts[i] = join(l)
		}
		e.poolingDone(w, map[string]any{"text": texts})
		return
	}
	e.refuse(w, "tokens", "tokens must be a list of token ids")
}
