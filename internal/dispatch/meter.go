package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/backend/workerrpc"
	"github.com/sluicegw/sluice/internal/placement"
)

// What the gateway measures of one answered request, for metrics and the request span: its time to
// first token and mean inter-token latency when streamed, its token usage, and for PD the legs'
// timing. The surfaces read a streamed answer through Response.Frames, which observes each event as
// it passes (one counter, one end-of-payload check per frame: see BenchmarkFrames) and drops the
// usage chunk the gateway asked the engine for when the client did not (Do adds
// stream_options.include_usage); a non-streamed answer is kept (up to maxUsageBody) to read its
// usage. Everything is recorded once, when the response is closed.

// RequestStats is what one finished client request showed. Metrics.ObserveRequest gets it once per
// request that reached dispatch, answered or not.
type RequestStats struct {
	// Route is the route's path (the REST path for typed RPCs too); Model the request's model as the
	// client named it (the metrics adapter bounds the label values).
	Route, Model string
	// Status is the HTTP status the client got (499 when it went away before an answer).
	Status   int
	Duration time.Duration
	// Trace is the request span's context: exemplars link latencies to the trace.
	Trace trace.SpanContext
	// Worker is the worker that generated the answer (decode or regular); "" when none answered.
	Worker string
	// Streamed answers: TTFT is the time from arrival to the first event (0 when none came); ITL
	// the mean time between output tokens after the first (0 when fewer than two were counted).
	Stream    bool
	TTFT, ITL time.Duration
	// HasUsage: the engines reported token usage.
	HasUsage bool
	Usage    body.Usage
	// PD: Handoff names the pair's KV handoff when the request had a prefill leg ("" otherwise).
	// PrefillDuration is that leg's duration; DecodeTTFT (streamed only) is the time from the first
	// leg sent to the decode's first event.
	Handoff         string
	PrefillDuration time.Duration
	DecodeTTFT      time.Duration
	// Prediction is what the predicted_latency policy predicted for the request's pick and what was
	// measured from it (Prediction.Predicted false: no prediction, or no first token).
	Prediction placement.Outcome
	// Tenant is the request's tenant when tenancy is on (Config.Tenants), "" otherwise; Rejection the
	// error code when its budget or admission refused it (rate_limit_exceeded, tenant_queue_full,
	// pd_prefill_queue_full, ...), "" otherwise.
	Tenant, Rejection string
}

// KVWait is the decode's wait for the KV cache: its time to first token minus the prefill's duration
// (KV transfer plus the decode's first step); 0 when unknown.
func (s *RequestStats) KVWait() time.Duration {
	if s.DecodeTTFT <= 0 || s.Handoff == "" {
		return 0
	}
	return max(s.DecodeTTFT-s.PrefillDuration, 0)
}

// maxUsageBody bounds the copy of a non-streamed answer kept to read its usage.
const maxUsageBody = 1 << 20

// pdTiming is the timing of a PD attempt's legs. start is set before the legs go out; prefill is
// written by the goroutine that ran the prefill leg before it signals its end (exchange.go), and read
// only after the response was closed, which waits for that signal.
type pdTiming struct {
	handoff string
	start   time.Time
	prefill time.Duration
}

// meter observes one answered request; it is used by the relay's goroutine only, and finish runs
// once, after the response body was closed.
type meter struct {
	x      *Dispatcher
	settle func(used int64) // the tenant budget's reservation (budget.go); nil-safe Settle
	tenant string           // RequestStats.Tenant
	ctx    context.Context
	start  time.Time
	status int
	route  body.Route
	model  string
	asked  string // the alias the client asked for: events name it, not the served model (alias.go)
	stream bool
	strip  bool // Do asked the engine for usage: the usage chunk is the gateway's, not the client's
	// streams is the number of generated sequences (prompts x n): ITL is per sequence.
	streams int
	worker  string
	pd      *pdTiming
	picks   *placement.Picks // predicted_latency's picks: told of the first token and of the end

	first, end time.Time
	predicted  placement.Outcome // the picks' outcome at the first token
	frames     int64
	usage      body.Usage
	hasUsage   bool
	genUsage   []body.Usage // /generate streams: the latest counts per index
	streamErr  error
	// streamCut: the stream failed while the request's own context was done (the client left, the
	// request timed out): not the worker's failure.
	streamCut bool
	body      []byte            // non-streamed: the answer, up to maxUsageBody
	answer    *workerrpc.Answer // non-streamed: the answer as messages, when it came so

	cancel context.CancelFunc // ends the request's context when its answer is closed (answered)
	ended  sync.Once          // the answer's first Close ends the request, and only it
}

// close ends the request, once: its context, then its record.
func (m *meter) close() {
	m.ended.Do(func() {
		if m.cancel != nil {
			m.cancel()
		}
		m.finish()
	})
}

// Frames is the events of a streamed answer, for the surfaces to relay one by one.
type Frames struct {
	rd *body.SSEReader
	m  *meter
}

// Frames returns a reader of the events of a streamed answer (Stream is true). Relay what Next
// returns, in order: it is the engine's events, less the usage chunk the client did not ask for.
func (r *Response) Frames() *Frames {
	return &Frames{rd: body.NewSSEReader(r.Body), m: r.meter}
}

// Next returns the next event's payload, valid until the following call of Next or NextBuffered;
// io.EOF at the end.
func (f *Frames) Next() ([]byte, error) {
	for {
		data, err := f.rd.Next()
		if err != nil {
			if f.m != nil {
				f.m.streamEnded(err)
			}
			return nil, err
		}
		if out, keep := f.observe(data); keep {
			return out, nil
		}
	}
}

// NextBuffered returns the next event's payload, as Next would, when it is complete in what was
// already read from the engine; ok is false otherwise (Next would wait for the engine). It never
// blocks: a relay writes frames while it says yes and flushes when it says no, so frames that arrived
// together go out together and none waits for a later one.
func (f *Frames) NextBuffered() ([]byte, bool) {
	for {
		data, ok := f.rd.NextBuffered()
		if !ok {
			return nil, false
		}
		if out, keep := f.observe(data); keep {
			return out, true
		}
	}
}

// observe meters one event and returns what the client gets of it; keep is false for the usage
// chunk the client did not ask for.
func (f *Frames) observe(data []byte) (out []byte, keep bool) {
	m := f.m
	if m == nil {
		return data, true
	}
	m.firstEvent()
	if body.IsDone(data) {
		m.end = m.now()
		return data, true
	}
	if m.route == body.RouteGenerate {
		m.generateFrame(data)
		m.frames++
		return data, true
	}
	fu := body.ScanFrameUsage(data)
	switch {
	case fu.Has:
		m.usage, m.hasUsage = fu.Usage, true
		if fu.UsageOnly && m.strip {
			return nil, false // the gateway's own usage chunk: the client did not ask for it
		}
	case fu.NullEnd > 0 && m.strip:
		// OpenAI-style engines mark every chunk "usage":null once usage is asked for; vLLM and
		// SGLang do not. The client did not ask: it gets the chunk as it would have been.
		data = body.CutUsageNull(data, fu)
	}
	m.frames++
	if m.asked != "" {
		data = exposedModel(data, m.asked)
	}
	return data, true
}

// Chunks is the events of a streamed answer a worker-protocol worker gave as messages, for a typed
// surface to relay: metered as Frames meters the same events' SSE.
type Chunks struct {
	s      *workerrpc.Stream
	m      *meter
	legCtx context.Context
}

// Chunks returns the typed events of a streamed answer when the request's typed call asked for them
// (workerrpc.Call.WithTypedAnswer) and a worker-protocol worker answered; nil otherwise (read Frames).
func (r *Response) Chunks() *Chunks {
	if r.chunks == nil {
		return nil
	}
	return &Chunks{s: r.chunks, m: r.meter, legCtx: r.legCtx}
}

// Stream is the answer's id, created and model.
func (c *Chunks) Stream() *workerrpc.Stream { return c.s }

// Next returns the next chunk to relay; io.EOF at the end. The usage chunk the client did not ask for
// is dropped, as Frames drops it.
func (c *Chunks) Next() (*workerrpc.Chunk, error) {
	for {
		ch, err := c.s.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) && c.legCtx != nil && c.legCtx.Err() != nil {
				err = fmt.Errorf("request aborted: %w", context.Cause(c.legCtx)) // as legBody says it
			}
			if c.m != nil {
				c.m.streamEnded(err)
			}
			return nil, err
		}
		m := c.m
		if m == nil {
			return ch, nil
		}
		m.firstEvent()
		if ch.Usage {
			m.usage, m.hasUsage = body.Usage{Prompt: int64(ch.PromptTokens), Completion: int64(ch.CompletionTokens)}, true
			if m.strip {
				continue
			}
		}
		m.frames++
		return ch, nil
	}
}

// firstEvent notes the answer's first event: its time, and the measured TTFT of the request's
// predicted_latency picks (their models learn from it now, not when the stream ends).
func (m *meter) firstEvent() {
	if !m.first.IsZero() {
		return
	}
	m.first = m.now()
	m.predicted, _ = m.picks.FirstToken()
}

// generateFrame keeps the counts of a streamed /generate frame (cumulative, per index).
func (m *meter) generateFrame(data []byte) {
	i, u, ok := body.GenerateFrameUsage(data)
	if !ok {
		return
	}
	if i >= len(m.genUsage) {
		m.genUsage = append(m.genUsage, make([]body.Usage, i+1-len(m.genUsage))...)
	}
	m.genUsage[i] = u
}

// streamEnded notes the end of the stream: io.EOF, or a failure.
func (m *meter) streamEnded(err error) {
	if m.end.IsZero() {
		m.end = m.now()
	}
	if !errors.Is(err, io.EOF) && m.streamErr == nil {
		m.streamErr, m.streamCut = err, m.ctx.Err() != nil
	}
}

// meteredBody is an answer's body whose Close ends the request (meter.close).
type meteredBody struct {
	io.ReadCloser
	m *meter
}

func (b *meteredBody) Close() error {
	err := b.ReadCloser.Close()
	b.m.close()
	return err
}

// unaryBody is a non-streamed answer's meteredBody: it also keeps a copy of the answer as it is read.
type unaryBody struct{ meteredBody }

func (u *unaryBody) Read(p []byte) (int, error) {
	n, err := u.ReadCloser.Read(p)
	if m := u.m; n > 0 && len(m.body)+n <= maxUsageBody {
		m.body = append(m.body, p[:n]...)
	}
	return n, err
}

// newMeter starts observing resp; it wraps a non-streamed body to read its usage.
func (x *Dispatcher) newMeter(ctx context.Context, start time.Time, br *body.Request, strip bool, resp *Response) *meter {
	m := &meter{x: x, ctx: ctx, start: start, status: resp.Status, route: br.Route, model: br.Model, stream: resp.Stream, strip: strip,
		streams: br.Prompts() * max(br.N, 1), worker: resp.Worker, pd: resp.pd, answer: resp.answer}
	resp.meter = m
	if !resp.Stream {
		if resp.length > 0 && resp.length <= maxUsageBody {
			m.body = make([]byte, 0, resp.length) // one allocation for the copy, not a growing series
		}
		resp.Body = &unaryBody{meteredBody{ReadCloser: resp.Body, m: m}}
	}
	return m
}

// now reads the dispatcher's clock (Deps.Now); a meter made without one reads time.Now.
func (m *meter) now() time.Time {
	if m.x == nil {
		return time.Now()
	}
	return m.x.now()
}

// finish records the request; it runs once, after the response body (and so every leg) was closed.
func (m *meter) finish() {
	now := m.now()
	m.picks.Done()
	s := RequestStats{Route: m.route.Path(), Model: m.model, Status: m.status, Duration: now.Sub(m.start),
		Trace: trace.SpanContextFromContext(m.ctx), Worker: m.worker, Stream: m.stream, Tenant: m.tenant,
		Prediction: m.predicted}
	switch {
	case m.stream && m.route == body.RouteGenerate:
		for _, u := range m.genUsage {
			s.Usage.Prompt += u.Prompt
			s.Usage.Completion += u.Completion
		}
		s.HasUsage = len(m.genUsage) > 0
	case m.stream:
		s.Usage, s.HasUsage = m.usage, m.hasUsage
	case len(m.body) > 0:
		s.Usage, s.HasUsage = body.UnaryUsage(m.route, m.body)
	case m.answer != nil: // read as messages, not as JSON
		s.Usage = body.Usage{Prompt: int64(m.answer.PromptTokens), Completion: int64(m.answer.CompletionTokens)}
		s.HasUsage = true
	}
	if m.stream && !m.first.IsZero() {
		s.TTFT = m.first.Sub(m.start)
		s.ITL = m.interTokenLatency()
	}
	m.picks.Finished(m.worker, s.ITL)
	if m.pd != nil {
		s.Handoff, s.PrefillDuration = m.pd.handoff, m.pd.prefill
		if m.stream && !m.first.IsZero() {
			s.DecodeTTFT = m.first.Sub(m.pd.start)
		}
	}
	if m.streamErr != nil && !m.streamCut && m.worker != "" {
		m.x.d.Metrics.IncWorkerError(m.worker, ClassStream)
	}
	if m.settle != nil {
		used := int64(-1)
		if s.HasUsage {
			used = s.Usage.Prompt + s.Usage.Completion
		}
		m.settle(used)
	}
	m.x.d.Metrics.ObserveRequest(&s)
	if span := trace.SpanFromContext(m.ctx); span.IsRecording() {
		attrs := []attribute.KeyValue{attribute.Int("http.response.status_code", s.Status)}
		if s.HasUsage {
			attrs = append(attrs, attribute.Int64("gen_ai.usage.input_tokens", s.Usage.Prompt),
				attribute.Int64("gen_ai.usage.output_tokens", s.Usage.Completion))
		}
		if s.TTFT > 0 {
			attrs = append(attrs, attribute.Float64("sluice.time_to_first_token", s.TTFT.Seconds()))
		}
		span.SetAttributes(attrs...)
	}
}

// interTokenLatency is the mean time between output tokens of one sequence, after its first: from
// the first event to the end of the stream, over the tokens per sequence less one. Tokens come from
// the usage when the engine reported it, else one per event (an engine may put several in one).
func (m *meter) interTokenLatency() time.Duration {
	if m.end.IsZero() || !m.end.After(m.first) {
		return 0
	}
	tokens := m.frames
	if m.hasUsage {
		tokens = m.usage.Completion
	} else if len(m.genUsage) > 0 {
		tokens = 0
		for _, u := range m.genUsage {
			tokens += u.Completion
		}
	}
	perSeq := tokens / int64(max(m.streams, 1))
	if perSeq < 2 {
		return 0
	}
	return m.end.Sub(m.first) / time.Duration(perSeq-1)
}
