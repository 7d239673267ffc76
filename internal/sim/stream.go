package sim

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"

	"github.com/sluicegw/sluice/internal/jsonx"
)

// sseStream writes one streaming response; samples running concurrently share it under mu.
type sseStream struct {
	mu       sync.Mutex
	e        *Engine
	bp       *[]byte // pooled buffer behind buf, given back by release
	headOut  bool    // the 200 head is written
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

// writeHead writes the 200 SSE head if it is not out yet.
func (s *sseStream) writeHead() error {
	if s.headOut {
		return nil
	}
	s.headOut = true
	h := s.w.Header()
	h["Content-Type"] = sseContentType
	h["Cache-Control"] = noCache
	s.w.WriteHeader(http.StatusOK)
	if err := s.rc.Flush(); err != nil {
		s.failed = true
		return err
	}
	return nil
}

func (s *sseStream) flushFrame() error {
	if err := s.writeHead(); err != nil {
		return err
	}
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
			s.buf = s.chatPromptIDs(s.chunkTail(s.buf), i)
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
		s.buf = append(s.buf, `},"logprobs":null,"finish_reason":null`...)
		s.buf = s.chatTokenIDs(s.buf, delta)
		s.buf = append(s.buf, '}')
		s.buf = s.chunkTail(s.buf)
	case apiCompletion:
		s.frameStart()
		s.buf = s.chunkHead(s.buf)
		s.buf = append(s.buf, `{"index":`...)
		s.buf = appendInt(s.buf, int64(i))
		s.buf = append(s.buf, `,"text":`...)
		s.buf = jsonx.AppendString(s.buf, delta)
		s.buf = append(s.buf, `,"logprobs":null,"finish_reason":null`...)
		s.buf = s.appendTokenIDs(s.buf, i, delta)
		s.buf = append(s.buf, '}')
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
		first := !s.started[i]
		if first {
			s.started[i] = true
			s.buf = append(s.buf, `,"delta":{"role":"assistant","content":""}`...)
		} else {
			s.buf = append(s.buf, `,"delta":{}`...)
		}
		s.buf = append(s.buf, `,"logprobs":null,"finish_reason":`...)
		s.buf = jsonx.AppendString(s.buf, res.finish)
		s.buf = s.chatTokenIDs(s.buf, "")
		s.buf = append(s.buf, '}')
		s.buf = s.chunkTail(s.buf)
		if first {
			s.buf = s.chatPromptIDs(s.buf, i)
		}
	case apiCompletion:
		s.buf = s.chunkHead(s.buf)
		s.buf = append(s.buf, `{"index":`...)
		s.buf = appendInt(s.buf, int64(i))
		s.buf = append(s.buf, `,"text":"","logprobs":null,"finish_reason":`...)
		s.buf = jsonx.AppendString(s.buf, res.finish)
		s.buf = s.appendTokenIDs(s.buf, i, "")
		s.buf = append(s.buf, '}')
		s.buf = s.chunkTail(s.buf)
	default:
		s.buf = appendGenerateObject(s.buf, s.job, i, res, s.texts[i].String(), true)
	}
	return s.flushFrame()
}

// appendTokenIDs appends a completions chunk's ids when the request asked for them: the prompt's in
// sample i's first chunk, and the ids of the chunk's text (the simulator's word tokens, the ids its
// greedy model folds, so prompt + token_ids continues the generation exactly).
func (s *sseStream) appendTokenIDs(b []byte, i int, delta string) []byte {
	if !s.job.returnTokenIDs {
		return b
	}
	if !s.started[i] {
		s.started[i] = true
		b = appendIDs(append(b, `,"prompt_token_ids":`...), s.job.samples[i].prompt.ids)
	}
	return appendIDs(append(b, `,"token_ids":`...), s.job.tokens(nil, delta))
}

// chatTokenIDs appends a vLLM chat choice's new ids when the request asked for them (serving_chat.py
// sends token_ids on every choice chunk, the finish's included).
func (s *sseStream) chatTokenIDs(b []byte, delta string) []byte {
	if !s.job.returnTokenIDs {
		return b
	}
	return appendIDs(append(b, `,"token_ids":`...), s.job.tokens(nil, delta))
}

// chatPromptIDs adds the prompt's ids to a vLLM chat stream's first chunk b (a whole object) when the
// request asked for them: serving_chat.py sends them beside choices, once.
func (s *sseStream) chatPromptIDs(b []byte, i int) []byte {
	if !s.job.returnTokenIDs {
		return b
	}
	b = appendIDs(append(b[:len(b)-1], `,"prompt_token_ids":`...), s.job.samples[i].prompt.ids)
	return append(b, '}')
}

// appendIDs appends a JSON array of token ids.
func appendIDs(b []byte, ids []uint32) []byte {
	b = append(b, '[')
	for k, id := range ids {
		if k > 0 {
			b = append(b, ',')
		}
		b = appendInt(b, int64(id))
	}
	return append(b, ']')
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

// errorFrame ends the stream with the engine's error frame and [DONE]. An engine exception has no
// frame: the connection breaks after the head, as an unhandled exception in a Starlette stream does.
func (s *sseStream) errorFrame(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed {
		return
	}
	s.frameStart()
	var ok bool
	s.buf, ok = s.e.appendStreamError(s.buf, s.job, err)
	if !ok {
		if s.writeHead() == nil {
			panic(http.ErrAbortHandler)
		}
		return
	}
	if s.flushFrame() == nil {
		s.done()
	}
}

func (s *sseStream) done() {
	s.buf = append(s.buf[:0], "data: [DONE]"...)
	_ = s.flushFrame()
}

// newSSEStream prepares a streaming response. Call release when done with it.
func (e *Engine) newSSEStream(w http.ResponseWriter, job *genJob, dieAfter int) *sseStream {
	bp := getBuf()
	s := &sseStream{
		e: e, bp: bp, w: w, rc: http.NewResponseController(w), job: job, buf: (*bp)[:0], dieAfter: dieAfter,
		counts: make([]int, len(job.samples)),
	}
	switch {
	case job.api == apiChat || job.returnTokenIDs:
		s.started = make([]bool, len(job.samples))
	case job.api == apiGenerate:
		s.texts = make([]strings.Builder, len(job.samples))
	}
	return s
}

// release gives the stream's buffer back to the pool.
func (s *sseStream) release() {
	*s.bp = s.buf[:0]
	putBuf(s.bp)
}

// streamJob answers a streaming request with SSE; later errors are in-stream frames. vLLM and
// SGLang's /generate send the head at once (a StreamingResponse starts before the first chunk);
// SGLang's OpenAI routes pull the first chunk before answering (serving_completions.py
// _handle_streaming_request "kick-start"), so their head goes out with the first token or error.
func (e *Engine) streamJob(ctx context.Context, w http.ResponseWriter, job *genJob, rf *requestFaults) {
	s := e.newSSEStream(w, job, rf.dieAfter)
	defer s.release()
	if e.cfg.Protocol == ProtocolVLLM || job.api == apiGenerate {
		if s.writeHead() != nil {
			return
		}
	}
	if rf.dieBeforeFirst {
		e.countFailure()
		panic(http.ErrAbortHandler) // the head (if any) is out; the connection breaks before a token
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
	emit, leave := e.trackPrefill(job.samples, emit)
	defer leave()
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
