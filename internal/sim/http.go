package sim

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicegw/sluice/internal/jsonx"
)

const maxBodyBytes = 32 << 20

// routes builds the engine's HTTP API: the routes of the engine it simulates, then the simulator's
// own /sim/* control routes. Anything else is FastAPI's 404 {"detail":"Not Found"} (both engines are
// FastAPI applications).
func (e *Engine) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, h http.HandlerFunc) {
		path := pattern[strings.IndexByte(pattern, ' ')+1:]
		counter := e.metrics.requests.WithLabelValues(path)
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			counter.Inc()
			e.notePath(path, r.Header.Get("Traceparent"))
			h(w, r)
		})
	}
	gen := func(pattern string, api apiKind) {
		path := pattern[strings.IndexByte(pattern, ' ')+1:]
		handle(pattern, func(w http.ResponseWriter, r *http.Request) { e.serveGeneration(w, r, api, path) })
	}
	gen("POST /v1/chat/completions", apiChat)
	gen("POST /v1/completions", apiCompletion)
	handle("GET /v1/models", e.handleModels)
	handle("GET /health", e.handleHealth)
	handle("GET /metrics", promhttp.HandlerFor(prometheus.Gatherers{e.metrics.reg}, promhttp.HandlerOpts{}).ServeHTTP)
	e.poolingRoutes(handle)      // pooling.go: embeddings, rerank, score, classify, tokenize
	e.conversationRoutes(handle) // conversation.go: OpenAI Responses, Anthropic Messages
	switch e.cfg.Protocol {
	case ProtocolVLLM:
		// vllm/entrypoints/openai/api_server.py: /version; no native /generate, server-info, load or
		// cache route (load is only in /metrics).
		handle("GET /version", e.handleVersion)
	default:
		// python/sglang/srt/entrypoints/http_server.py and v1_loads.py.
		gen("POST /generate", apiGenerate)
		handle("GET /health_generate", e.handleHealthGenerate)
		handle("GET /get_server_info", e.handleServerInfo)
		handle("GET /server_info", e.handleServerInfo)
		handle("GET /get_model_info", e.handleModelInfo)
		handle("GET /model_info", e.handleModelInfo)
		handle("GET /v1/loads", e.handleLoads)
		handle("GET /get_load", e.handleGetLoad)
		handle("GET /flush_cache", e.handleFlush)
		handle("POST /flush_cache", e.handleFlush)
	}
	mux.HandleFunc("GET /sim/faults", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, e.Faults()) })
	mux.HandleFunc("POST /sim/faults", e.handleSetFaults)
	mux.HandleFunc("GET /sim/stats", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, e.Stats()) })
	mux.HandleFunc("POST /sim/stats/reset", func(w http.ResponseWriter, _ *http.Request) {
		e.ResetStats()
		writeJSON(w, http.StatusOK, e.Stats())
	})
	mux.HandleFunc("POST /sim/kv/pull", e.handleKVPull)
	if e.cfg.GRPC {
		if !e.cfg.EngineGRPCOnly {
			e.mountRPC(mux)
		}
		e.mountEngineGRPC(mux)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Content-Type"] = jsonContentType
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"detail":"Not Found"}`)
	})
	return mux
}

// notePath counts a request by route and remembers its traceparent.
func (e *Engine) notePath(path, traceparent string) {
	e.stats.mu.Lock()
	e.stats.perPath[path]++
	if traceparent != "" {
		e.stats.lastTraceparent = traceparent
	}
	e.stats.mu.Unlock()
}

// serveGeneration is the common path of /generate, /v1/chat/completions and /v1/completions.
func (e *Engine) serveGeneration(w http.ResponseWriter, r *http.Request, api apiKind, path string) {
	e.stats.seen.Add(1)
	e.stats.inFlight.Add(1)
	defer e.stats.inFlight.Add(-1)
	ctx := r.Context()
	// The body is read before faults apply: only then does net/http notice a client that goes away.
	bp := getBuf()
	defer putBuf(bp)
	body, err := readBody(r.Body, *bp)
	*bp = body[:0]
	if err != nil {
		e.countFailure()
		e.writeEngineError(w, api, schemaError("reading body: %v", err))
		return
	}
	rf := e.faults.Load().forRequest(e.cfg.Role, path, true, e.randFloat)
	if err := e.applyRequestFaults(ctx, &rf); err != nil {
		e.countFailure()
		if status := rf.errorStatus; status != 0 {
			e.writeEngineError(w, api, abortError(errInjected, status, "injected fault: status %d %s", status, http.StatusText(status)))
			return
		}
		// Hang or latency ended by the client or by Close: drop the connection, never answer.
		panic(http.ErrAbortHandler)
	}
	job, err := e.parseJob(api, body, r.Header)
	if err != nil {
		e.countFailure()
		e.failBeforeRun(w, job, api, err)
		return
	}
	job.created = time.Now().Unix()
	release := e.claimRooms(job.samples)
	defer release()
	if job.stream {
		e.streamJob(ctx, w, job, &rf)
		return
	}
	e.unaryJob(ctx, w, job, &rf)
}

// failBeforeRun answers a request refused before it ran. Engines refuse most such requests before any
// response byte (SGLang's OpenAI routes pull the first chunk before answering, vLLM validates before
// streaming). A streaming request to SGLang's /generate already has its response head, and an
// engine-side abort of a streaming request is its first chunk: both get an in-stream error.
func (e *Engine) failBeforeRun(w http.ResponseWriter, job *genJob, api apiKind, err error) {
	if job == nil || !job.stream || errors.Is(err, errModelNotFound) || asEngineError(err).schema {
		e.writeEngineError(w, api, err)
		return
	}
	abort := !errors.Is(err, errBadRequest) && !errors.Is(err, errEngineCrash)
	if !abort && (e.cfg.Protocol == ProtocolVLLM || api != apiGenerate) {
		e.writeEngineError(w, api, err)
		return
	}
	s := e.newSSEStream(w, job, 0)
	defer s.release()
	s.errorFrame(err)
}

// claimRooms holds the SGLang bootstrap rooms of a job's samples, in order, before they start: the
// first sample on a room of a rank owns it (each DP rank has its own KV manager) and every later one
// (another sample of the same prompt, or another request) collides. The returned function releases them.
func (e *Engine) claimRooms(samples []sampleSpec) (release func()) {
	type held struct {
		rank int
		room uint64
	}
	var all []held
	for i := range samples {
		if sp := &samples[i]; sp.hs.bootstrap {
			sp.collides = !e.ranks[sp.rank].claims.claim(sp.hs.room)
			all = append(all, held{sp.rank, sp.hs.room})
		}
	}
	return func() {
		for _, h := range all {
			e.ranks[h.rank].claims.release(h.room)
		}
	}
}

// applyRequestFaults injects the error, hang, hold and latency faults, and takes the stall the
// request's stream will wait on; a non-nil error ends the request.
func (e *Engine) applyRequestFaults(ctx context.Context, rf *requestFaults) error {
	if rf.errorStatus != 0 {
		return errInjected
	}
	if rf.stallAfter > 0 {
		rf.stalled = e.stalling()
	}
	if rf.hang {
		<-ctx.Done()
		return ctx.Err()
	}
	if rf.hold {
		if held := e.held(); held != nil {
			select {
			case <-held:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	if rf.latency > 0 {
		return sleepCtx(ctx, rf.latency)
	}
	return nil
}

func (e *Engine) countFailure() {
	e.stats.failed.Add(1)
	e.metrics.failed.Inc()
}

func readBody(r io.Reader, buf []byte) ([]byte, error) {
	lr := io.LimitedReader{R: r, N: maxBodyBytes + 1}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return buf, err
		}
	}
	if len(buf) > maxBodyBytes {
		return buf, errors.New("body too large")
	}
	return buf, nil
}

// runJob runs all samples of a job (concurrently when there are several) and returns their results.
func (e *Engine) runJob(ctx context.Context, job *genJob, rf *requestFaults, emit emitFunc) ([]sampleResult, error) {
	emit, leave := e.trackPrefill(job.samples, emit)
	defer leave()
	results := make([]sampleResult, len(job.samples))
	if len(job.samples) == 1 {
		var err error
		results[0], err = e.runSample(ctx, rf, &job.samples[0], emit)
		return results, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	for i := range job.samples {
		wg.Go(func() {
			res, err := e.runSample(ctx, rf, &job.samples[i], emit)
			results[i] = res
			if err != nil {
				errOnce.Do(func() { firstErr = err; cancel() })
			}
		})
	}
	wg.Wait()
	return results, firstErr
}

// unaryJob answers a non-streaming request with one JSON body.
func (e *Engine) unaryJob(ctx context.Context, w http.ResponseWriter, job *genJob, rf *requestFaults) {
	var emitted atomic.Int64
	emit := func(int, string) error {
		if rf.dieAfter > 0 && emitted.Add(1) >= int64(rf.dieAfter) {
			return errDie
		}
		return nil
	}
	results, err := e.runJob(ctx, job, rf, emit)
	if err != nil {
		e.countFailure()
		if errors.Is(err, errDie) {
			panic(http.ErrAbortHandler) // close the connection without a response
		}
		if ctx.Err() != nil && e.baseCtx.Err() == nil {
			return // client went away
		}
		e.writeEngineError(w, job.api, err)
		return
	}
	e.stats.completed.Add(1)
	bp := getBuf()
	defer putBuf(bp)
	b := (*bp)[:0]
	switch job.api {
	case apiChat, apiCompletion:
		b = e.appendOpenAIResponse(b, job, results)
	default:
		b = e.appendGenerateResponse(b, job, results)
	}
	*bp = b
	h := w.Header()
	h["Content-Type"] = jsonContentType
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

var (
	jsonContentType = []string{"application/json"}
	sseContentType  = []string{"text/event-stream"}
	noCache         = []string{"no-cache"}
)

func (e *Engine) appendOpenAIResponse(b []byte, job *genJob, results []sampleResult) []byte {
	b = append(b, `{"id":`...)
	b = jsonx.AppendString(b, job.id)
	if job.api == apiChat {
		b = append(b, `,"object":"chat.completion","created":`...)
	} else {
		b = append(b, `,"object":"text_completion","created":`...)
	}
	b = appendInt(b, job.created)
	b = append(b, `,"model":`...)
	b = jsonx.AppendString(b, job.model)
	b = append(b, `,"choices":[`...)
	for i := range results {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = appendInt(b, int64(i))
		if job.api == apiChat {
			b = append(b, `,"message":{"role":"assistant","content":`...)
			b = jsonx.AppendString(b, results[i].text)
			b = append(b, `}`...)
		} else {
			b = append(b, `,"text":`...)
			b = jsonx.AppendString(b, results[i].text)
		}
		b = append(b, `,"logprobs":null,"finish_reason":`...)
		b = jsonx.AppendString(b, results[i].finish)
		if job.returnTokenIDs {
			if job.api != apiChat { // a chat's prompt ids are the response's (below)
				b = appendIDs(append(b, `,"prompt_token_ids":`...), job.samples[i].prompt.ids)
			}
			b = appendIDs(append(b, `,"token_ids":`...), job.tokens(nil, results[i].text))
		}
		b = append(b, '}')
	}
	b = append(b, `],"usage":`...)
	b = appendUsage(b, job, results)
	if job.returnTokenIDs && job.api == apiChat {
		b = appendIDs(append(b, `,"prompt_token_ids":`...), job.samples[0].prompt.ids)
	}
	if e.cfg.Protocol == ProtocolVLLM {
		// vLLM's responses always carry the field (CompletionResponse / ChatCompletionResponse
		// kv_transfer_params, default None): the connector's params or null.
		b = append(b, `,"kv_transfer_params":`...)
		if kv := results[0].kvOut; kv != nil {
			kb, _ := json.Marshal(kv)
			b = append(b, kb...)
		} else {
			b = append(b, "null"...)
		}
	}
	return append(b, '}')
}

func appendUsage(b []byte, job *genJob, results []sampleResult) []byte {
	var prompt, completion, cached int64
	for i := range results {
		if i%job.n == 0 { // each prompt counts once, whatever n
			prompt += int64(results[i].promptTokens)
			cached += int64(results[i].cachedTokens)
		}
		completion += int64(results[i].completionTokens)
	}
	b = append(b, `{"prompt_tokens":`...)
	b = appendInt(b, prompt)
	b = append(b, `,"completion_tokens":`...)
	b = appendInt(b, completion)
	b = append(b, `,"total_tokens":`...)
	b = appendInt(b, prompt+completion)
	if cached > 0 {
		b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
		b = appendInt(b, cached)
		b = append(b, '}')
	}
	return append(b, '}')
}

func (e *Engine) appendGenerateResponse(b []byte, job *genJob, results []sampleResult) []byte {
	array := job.batch || len(results) > 1
	if array {
		b = append(b, '[')
	}
	for i := range results {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendGenerateObject(b, job, i, &results[i], results[i].text, true)
	}
	if array {
		b = append(b, ']')
	}
	return b
}

// appendInputLogprobs appends meta_info.input_token_logprobs: one [logprob, token position, null] entry per
// prompt token, deterministic, on engines that computed the prompt; a decode engine in PD computed none.
func appendInputLogprobs(b []byte, job *genJob, res *sampleResult) []byte {
	b = append(b, `,"input_token_logprobs":[`...)
	if !job.decodeRole {
		for k := 0; k < res.promptTokens; k++ {
			if k > 0 {
				b = append(b, ',')
			}
			b = append(b, `[-0.`...)
			b = appendInt(b, int64(k%9+1))
			b = append(b, ',')
			b = appendInt(b, int64(k))
			b = append(b, `,null]`...)
		}
	}
	return append(b, ']')
}

// appendGenerateObject appends one SGLang /generate result object; finished=false gives a streaming
// chunk whose finish_reason is null.
func appendGenerateObject(b []byte, job *genJob, i int, res *sampleResult, text string, finished bool) []byte {
	b = append(b, `{"text":`...)
	b = jsonx.AppendString(b, text)
	// The generated ids, cumulative as the text is (SGLang's default, without
	// --incremental-streaming-output): the simulator's word tokens of the text (or its bytes, with
	// ByteTokenIDs), which are the ids its greedy model folds, so input_ids = prompt + output_ids
	// continues the generation exactly.
	b = appendIDs(append(b, `,"output_ids":`...), job.tokens(nil, text))
	b = append(b, `,"meta_info":{"id":`...)
	id := job.id
	if len(job.samples) > 1 {
		b = jsonx.AppendString(b, id+"-"+itoa(i))
	} else {
		b = jsonx.AppendString(b, id)
	}
	b = append(b, `,"finish_reason":`...)
	if !finished {
		b = append(b, "null"...)
	} else if res.finish == "length" {
		b = append(b, `{"type":"length","length":`...)
		b = appendInt(b, int64(res.completionTokens))
		b = append(b, '}')
	} else if res.matched != "" {
		b = append(b, `{"type":"stop","matched":`...)
		b = jsonx.AppendString(b, res.matched)
		b = append(b, '}')
	} else {
		b = append(b, `{"type":"stop","matched":2}`...) // the EOS token id
	}
	b = append(b, `,"prompt_tokens":`...)
	b = appendInt(b, int64(res.promptTokens))
	b = append(b, `,"completion_tokens":`...)
	b = appendInt(b, int64(res.completionTokens))
	b = append(b, `,"cached_tokens":`...)
	b = appendInt(b, int64(res.cachedTokens))
	// SGLang puts the (whole) input logprobs into every streamed chunk's meta_info, not only the last
	// (tokenizer_manager.py convert_logprob_style runs for each output of a return_logprob request);
	// mini_lb.py relies on it, reading them from the prefill's first chunk.
	if (finished || job.stream) && job.inputLogprobs {
		b = appendInputLogprobs(b, job, res)
	}
	b = append(b, '}')
	if finished && res.kvOut != nil {
		b = append(b, `,"kv_transfer_params":`...)
		kb, _ := json.Marshal(res.kvOut)
		b = append(b, kb...)
	}
	if job.stream || len(job.samples) > 1 {
		b = append(b, `,"index":`...)
		b = appendInt(b, int64(i))
	}
	return append(b, '}')
}

func itoa(i int) string { return string(appendInt(nil, int64(i))) }
