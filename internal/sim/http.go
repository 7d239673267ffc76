package sim

import (
	"bytes"
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

// routes builds the engine's HTTP API.
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
	gen("POST /generate", apiGenerate)
	gen("POST /v1/chat/completions", apiChat)
	gen("POST /v1/completions", apiCompletion)
	handle("GET /v1/models", e.handleModels)
	handle("GET /health", e.handleHealth)
	handle("GET /health_generate", e.handleHealthGenerate)
	handle("GET /get_server_info", e.handleServerInfo)
	handle("GET /server_info", e.handleServerInfo)
	handle("GET /get_model_info", e.handleModelInfo)
	handle("GET /model_info", e.handleModelInfo)
	handle("GET /v1/loads", e.handleLoads)
	handle("POST /flush_cache", e.handleFlush)
	handle("GET /metrics", promhttp.HandlerFor(prometheus.Gatherers{e.metrics.reg}, promhttp.HandlerOpts{}).ServeHTTP)
	mux.HandleFunc("GET /sim/faults", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, e.Faults()) })
	mux.HandleFunc("POST /sim/faults", e.handleSetFaults)
	mux.HandleFunc("GET /sim/stats", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, e.Stats()) })
	mux.HandleFunc("POST /sim/stats/reset", func(w http.ResponseWriter, _ *http.Request) {
		e.ResetStats()
		writeJSON(w, http.StatusOK, e.Stats())
	})
	mux.HandleFunc("POST /sim/kv/pull", e.handleKVPull)
	if e.cfg.GRPC {
		e.mountRPC(mux)
	}
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
		writeError(w, http.StatusBadRequest, "invalid_request_error", "reading body: "+err.Error(), "invalid_request")
		return
	}
	rf := e.faults.Load().forRequest(e.cfg.Role, path, true, e.randFloat)
	if err := e.applyRequestFaults(ctx, &rf); err != nil {
		e.countFailure()
		if status := rf.errorStatus; status != 0 {
			writeError(w, status, errorType(status), "injected fault: status "+http.StatusText(status), "injected_fault")
			return
		}
		// Hang or latency ended by the client or by Close: drop the connection, never answer.
		panic(http.ErrAbortHandler)
	}
	job, err := e.parseJob(api, body)
	if err != nil {
		e.countFailure()
		e.writeJobError(w, err)
		return
	}
	job.created = time.Now().Unix()
	switch {
	case api == apiChat:
		job.id = e.newID("chatcmpl-")
	case api == apiCompletion:
		job.id = e.newID("cmpl-")
	case job.id == "":
		job.id = e.newID("")
	}
	if job.stream {
		e.streamJob(ctx, w, job, &rf)
		return
	}
	e.unaryJob(ctx, w, job, &rf)
}

// applyRequestFaults injects the error, hang and latency faults; a non-nil error ends the request.
func (e *Engine) applyRequestFaults(ctx context.Context, rf *requestFaults) error {
	if rf.errorStatus != 0 {
		return errInjected
	}
	if rf.hang {
		<-ctx.Done()
		return ctx.Err()
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

func errorType(status int) string {
	if status >= 500 {
		return "server_error"
	}
	return "invalid_request_error"
}

// classify maps a generation error to its HTTP status and code.
func classify(err error) (status int, typ, code string) {
	switch {
	case errors.Is(err, errBadRequest):
		return http.StatusBadRequest, "invalid_request_error", "invalid_request"
	case errors.Is(err, errModelNotFound):
		return http.StatusNotFound, "invalid_request_error", "model_not_found"
	case errors.Is(err, errBootstrapTimeout):
		return http.StatusInternalServerError, "server_error", "bootstrap_timeout"
	case errors.Is(err, errBootstrapMismatch):
		return http.StatusInternalServerError, "server_error", "bootstrap_mismatch"
	case errors.Is(err, errKVTransfer):
		return http.StatusInternalServerError, "server_error", "kv_transfer_failed"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, "server_error", "aborted"
	default:
		return http.StatusInternalServerError, "server_error", "internal_error"
	}
}

func (e *Engine) writeJobError(w http.ResponseWriter, err error) {
	status, typ, code := classify(err)
	writeError(w, status, typ, err.Error(), code)
}

// runJob runs all samples of a job (concurrently when there are several) and returns their results.
func (e *Engine) runJob(ctx context.Context, job *genJob, rf *requestFaults, emit emitFunc) ([]sampleResult, error) {
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
		e.writeJobError(w, err)
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
		b = append(b, '}')
	}
	b = append(b, `],"usage":`...)
	b = appendUsage(b, job, results)
	if kv := results[0].kvOut; kv != nil {
		b = append(b, `,"kv_transfer_params":`...)
		kb, _ := json.Marshal(kv)
		b = append(b, kb...)
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
	if finished && job.inputLogprobs {
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

// sseStream writes one streaming response; samples running concurrently share it under mu.
type sseStream struct {
	mu       sync.Mutex
	w        http.ResponseWriter
	rc       *http.ResponseController
	job      *genJob
	buf      []byte
	tokens   int
	dieAfter int
	started  []bool            // chat: role chunk sent, per sample
	texts    []strings.Builder // generate: cumulative text, per sample
	counts   []int
	failed   bool // a write failed: the client is gone
}

func (s *sseStream) frameStart() {
	s.buf = append(s.buf[:0], "data: "...)
}

func (s *sseStream) flushFrame() error {
	s.buf = append(s.buf, "\n\n"...)
	if _, err := s.w.Write(s.buf); err != nil {
		s.failed = true
		return err
	}
	if err := s.rc.Flush(); err != nil {
		s.failed = true
		return err
	}
	return nil
}

func (s *sseStream) chunkHead(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = jsonx.AppendString(b, s.job.id)
	if s.job.api == apiChat {
		b = append(b, `,"object":"chat.completion.chunk","created":`...)
	} else {
		b = append(b, `,"object":"text_completion","created":`...)
	}
	b = appendInt(b, s.job.created)
	b = append(b, `,"model":`...)
	b = jsonx.AppendString(b, s.job.model)
	return append(b, `,"choices":[`...)
}

func (s *sseStream) chunkTail(b []byte) []byte {
	b = append(b, ']')
	if s.job.includeUsage {
		b = append(b, `,"usage":null`...)
	}
	return append(b, '}')
}

// token writes one output token of sample i.
func (s *sseStream) token(i int, delta string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts[i]++
	if s.failed {
		return errors.New("client gone")
	}
	if delta == "" {
		return nil
	}
	switch s.job.api {
	case apiChat:
		if !s.started[i] {
			s.started[i] = true
			s.frameStart()
			s.buf = s.chunkHead(s.buf)
			s.buf = append(s.buf, `{"index":`...)
			s.buf = appendInt(s.buf, int64(i))
			s.buf = append(s.buf, `,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}`...)
			s.buf = s.chunkTail(s.buf)
			if err := s.flushFrame(); err != nil {
				return err
			}
		}
		s.frameStart()
		s.buf = s.chunkHead(s.buf)
		s.buf = append(s.buf, `{"index":`...)
		s.buf = appendInt(s.buf, int64(i))
		s.buf = append(s.buf, `,"delta":{"content":`...)
		s.buf = jsonx.AppendString(s.buf, delta)
		s.buf = append(s.buf, `},"logprobs":null,"finish_reason":null}`...)
		s.buf = s.chunkTail(s.buf)
	case apiCompletion:
		s.frameStart()
		s.buf = s.chunkHead(s.buf)
		s.buf = append(s.buf, `{"index":`...)
		s.buf = appendInt(s.buf, int64(i))
		s.buf = append(s.buf, `,"text":`...)
		s.buf = jsonx.AppendString(s.buf, delta)
		s.buf = append(s.buf, `,"logprobs":null,"finish_reason":null}`...)
		s.buf = s.chunkTail(s.buf)
	default:
		s.texts[i].WriteString(delta)
		s.frameStart()
		res := sampleResult{promptTokens: len(s.job.samples[i].prompt.ids), completionTokens: s.counts[i]}
		s.buf = appendGenerateObject(s.buf, s.job, i, &res, s.texts[i].String(), false)
	}
	if err := s.flushFrame(); err != nil {
		return err
	}
	s.tokens++
	if s.dieAfter > 0 && s.tokens >= s.dieAfter {
		return errDie
	}
	return nil
}

// finish writes the final chunk of sample i.
func (s *sseStream) finish(i int, res *sampleResult) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed {
		return errors.New("client gone")
	}
	s.frameStart()
	switch s.job.api {
	case apiChat:
		s.buf = s.chunkHead(s.buf)
		s.buf = append(s.buf, `{"index":`...)
		s.buf = appendInt(s.buf, int64(i))
		if !s.started[i] {
			s.started[i] = true
			s.buf = append(s.buf, `,"delta":{"role":"assistant","content":""}`...)
		} else {
			s.buf = append(s.buf, `,"delta":{}`...)
		}
		s.buf = append(s.buf, `,"logprobs":null,"finish_reason":`...)
		s.buf = jsonx.AppendString(s.buf, res.finish)
		s.buf = append(s.buf, '}')
		s.buf = s.chunkTail(s.buf)
	case apiCompletion:
		s.buf = s.chunkHead(s.buf)
		s.buf = append(s.buf, `{"index":`...)
		s.buf = appendInt(s.buf, int64(i))
		s.buf = append(s.buf, `,"text":"","logprobs":null,"finish_reason":`...)
		s.buf = jsonx.AppendString(s.buf, res.finish)
		s.buf = append(s.buf, '}')
		s.buf = s.chunkTail(s.buf)
	default:
		s.buf = appendGenerateObject(s.buf, s.job, i, res, s.texts[i].String(), true)
	}
	return s.flushFrame()
}

func (s *sseStream) usage(results []sampleResult) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frameStart()
	s.buf = s.chunkHead(s.buf)
	s.buf = append(s.buf, `],"usage":`...)
	s.buf = appendUsage(s.buf, s.job, results)
	s.buf = append(s.buf, '}')
	return s.flushFrame()
}

func (s *sseStream) errorFrame(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed {
		return
	}
	status, typ, code := classify(err)
	s.frameStart()
	s.buf = appendErrorBody(s.buf, status, typ, err.Error(), code)
	if s.flushFrame() == nil {
		s.done()
	}
}

func (s *sseStream) done() {
	s.buf = append(s.buf[:0], "data: [DONE]"...)
	_ = s.flushFrame()
}

// streamJob answers a streaming request with SSE. The response head goes out at once, as on SGLang and
// vLLM (their streaming responses start before the first token), so later errors are in-stream frames.
func (e *Engine) streamJob(ctx context.Context, w http.ResponseWriter, job *genJob, rf *requestFaults) {
	h := w.Header()
	h["Content-Type"] = sseContentType
	h["Cache-Control"] = noCache
	w.WriteHeader(http.StatusOK)
	bp := getBuf()
	defer putBuf(bp)
	s := &sseStream{
		w: w, rc: http.NewResponseController(w), job: job, buf: (*bp)[:0], dieAfter: rf.dieAfter,
		counts: make([]int, len(job.samples)),
	}
	defer func() { *bp = s.buf[:0] }()
	switch job.api {
	case apiChat:
		s.started = make([]bool, len(job.samples))
	case apiGenerate:
		s.texts = make([]strings.Builder, len(job.samples))
	}
	if err := s.rc.Flush(); err != nil {
		return
	}
	var finishErr error
	var finishMu sync.Mutex
	emit := s.token
	results, err := e.runJobStreaming(ctx, job, rf, emit, func(i int, res *sampleResult) {
		if ferr := s.finish(i, res); ferr != nil {
			finishMu.Lock()
			finishErr = ferr
			finishMu.Unlock()
		}
	})
	if err != nil {
		e.countFailure()
		if errors.Is(err, errDie) {
			panic(http.ErrAbortHandler)
		}
		if ctx.Err() != nil {
			return
		}
		s.errorFrame(err)
		return
	}
	if finishErr != nil {
		e.countFailure()
		return
	}
	e.stats.completed.Add(1)
	if job.includeUsage && job.api != apiGenerate {
		if s.usage(results) != nil {
			return
		}
	}
	s.mu.Lock()
	s.done()
	s.mu.Unlock()
}

// runJobStreaming is runJob that reports each sample's end as it happens.
func (e *Engine) runJobStreaming(ctx context.Context, job *genJob, rf *requestFaults, emit emitFunc, finished func(int, *sampleResult)) ([]sampleResult, error) {
	results := make([]sampleResult, len(job.samples))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	run := func(i int) error {
		res, err := e.runSample(ctx, rf, &job.samples[i], emit)
		results[i] = res
		if err == nil {
			finished(i, &results[i])
		}
		return err
	}
	if len(job.samples) == 1 {
		return results, run(0)
	}
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	for i := range job.samples {
		wg.Go(func() {
			if err := run(i); err != nil {
				errOnce.Do(func() { firstErr = err; cancel() })
			}
		})
	}
	wg.Wait()
	return results, firstErr
}

func (e *Engine) handleModels(w http.ResponseWriter, _ *http.Request) {
	type model struct {
		ID          string `json:"id"`
		Object      string `json:"object"`
		Created     int64  `json:"created"`
		OwnedBy     string `json:"owned_by"`
		Root        string `json:"root"`
		MaxModelLen int64  `json:"max_model_len"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list"}
	now := time.Now().Unix()
	for _, m := range e.cfg.Models {
		out.Data = append(out.Data, model{ID: m, Object: "model", Created: now, OwnedBy: "sluice-sim", Root: m, MaxModelLen: e.cfg.KVCapacityTokens})
	}
	writeJSON(w, http.StatusOK, out)
}

func (e *Engine) healthFailing() bool {
	f := e.faults.Load()
	return f.FailHealth && f.appliesTo(e.cfg.Role)
}

func (e *Engine) handleHealth(w http.ResponseWriter, _ *http.Request) {
	if e.healthFailing() {
		writeError(w, http.StatusServiceUnavailable, "server_error", "injected fault: unhealthy", "unhealthy")
		return
	}
	w.WriteHeader(http.StatusOK)
}

// handleHealthGenerate runs a one-token generation through the model (so an overloaded engine answers
// slowly, as a real one does).
func (e *Engine) handleHealthGenerate(w http.ResponseWriter, r *http.Request) {
	if e.healthFailing() {
		writeError(w, http.StatusServiceUnavailable, "server_error", "injected fault: unhealthy", "unhealthy")
		return
	}
	sp := sampleSpec{prompt: newPrompt(appendTokens(nil, "health check")), maxTokens: 1}
	rf := requestFaults{slowness: e.faults.Load().SlownessFactor}
	if _, err := e.runSample(r.Context(), &rf, &sp, func(int, string) error { return nil }); err != nil {
		e.writeJobError(w, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (e *Engine) disaggregationMode() string {
	if e.cfg.Role == RoleRegular {
		return "null"
	}
	return string(e.cfg.Role)
}

func (e *Engine) handleServerInfo(w http.ResponseWriter, _ *http.Request) {
	info := map[string]any{
		"simulator":                     true,
		"engine_id":                     e.id,
		"role":                          e.cfg.Role,
		"protocol":                      e.cfg.Protocol,
		"mode":                          e.cfg.Mode,
		"models":                        e.cfg.Models,
		"model_path":                    e.cfg.Models[0],
		"served_model_name":             e.cfg.Models[0],
		"disaggregation_mode":           e.disaggregationMode(),
		"disaggregation_bootstrap_port": nil,
		"bootstrap_port":                nil,
		"grpc":                          e.cfg.GRPC,
		"max_running_requests":          e.cfg.MaxRunningRequests,
		"max_total_num_tokens":          e.cfg.KVCapacityTokens,
		"page_size":                     e.cfg.BlockSize,
		"prefill_tokens_per_sec":        e.cfg.PrefillTokensPerSec,
		"itl_base_ms":                   float64(e.cfg.ITLBase) / float64(time.Millisecond),
		"itl_per_seq_ms":                float64(e.cfg.ITLPerSeq) / float64(time.Millisecond),
		"bootstrap_timeout_secs":        e.cfg.BootstrapTimeout.Seconds(),
		"version":                       "sluice-sim",
	}
	if bp := e.BootstrapPort(); bp != 0 {
		info["disaggregation_bootstrap_port"] = bp
		info["bootstrap_port"] = bp
	}
	writeJSON(w, http.StatusOK, info)
}

func (e *Engine) handleModelInfo(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"model_path":         e.cfg.Models[0],
		"tokenizer_path":     e.cfg.Models[0],
		"served_model_name":  e.cfg.Models[0],
		"is_generation":      true,
		"max_context_length": e.cfg.KVCapacityTokens,
	})
}

func (e *Engine) handleLoads(w http.ResponseWriter, _ *http.Request) {
	s := e.sched.snapshot()
	usage := float64(s.kvUsed) / float64(max(s.kvCap, 1))
	load := map[string]any{
		"dp_rank":              0,
		"num_running_reqs":     s.running,
		"num_waiting_reqs":     s.waiting,
		"num_used_tokens":      s.kvUsed,
		"max_total_num_tokens": s.kvCap,
		"token_usage":          usage,
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"timestamp":        time.Now().UTC().Format(time.RFC3339Nano),
		"dp_rank_count":    1,
		"loads":            []any{load},
		"num_running_reqs": s.running,
		"num_waiting_reqs": s.waiting,
		"token_usage":      usage,
	})
}

func (e *Engine) handleFlush(w http.ResponseWriter, _ *http.Request) {
	e.cache.flush()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n")
}

// faultsPatch is a POST /sim/faults body: Faults fields plus refuse_for_ms.
type faultsPatch struct {
	Faults
	// RefuseForMS refuses connections for that long, then listens again by itself (a process whose
	// listener is closed cannot be told over HTTP to reopen it).
	RefuseForMS float64 `json:"refuse_for_ms"`
}

func (e *Engine) handleSetFaults(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error(), "invalid_request")
		return
	}
	p := faultsPatch{Faults: e.Faults()}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&p); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "malformed JSON: "+err.Error(), "invalid_json")
		return
	}
	if p.RefuseForMS > 0 {
		p.RefuseConnections = true
	}
	if err := p.validate(); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error(), "invalid_faults")
		return
	}
	f := p.Faults
	f.normalize()
	e.faults.Store(&f)
	refuse := f.RefuseConnections && f.appliesTo(e.cfg.Role)
	// Answer first: closing the listener also drops this connection's keep-alive.
	writeJSON(w, http.StatusOK, f)
	if err := e.applyRefuse(refuse, time.Duration(p.RefuseForMS*float64(time.Millisecond))); err != nil {
		e.logger.Error("sim: apply refuse_connections", "err", err)
	}
}
