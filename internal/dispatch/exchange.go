package dispatch

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/worker"
)

// The parallel exchange of SGLang's bootstrap handoff and of the worker protocol: the same body goes
// to the prefill and the decode worker at once. The decode engine connects to the prefill engine's
// bootstrap server and waits for the KV cache of its room; the prefill engine waits for that
// handshake before it computes (scheduler.py pop_bootstrapped). So neither leg may go without the
// other, and when one fails the other is cancelled: a decode whose prefill never comes would wait
// for the engine's bootstrap timeout.

// holder is what a prefill leg holds of the admission slot: the slot itself, or one guard of it when
// several sub-requests share the slot.
type holder interface{ Release(admission.ReleaseReason) }

// logprobMerge says whether the prefill's input logprobs must be merged into the decode's answer:
// SGLang computes them on the prefill leg (mini_lb.py generate and generate_stream).
type logprobMerge uint8

const (
	mergeNone   logprobMerge = iota
	mergeUnary               // /generate, return_logprob, not streaming
	mergeStream              // /generate, return_logprob, streaming
)

// logprobMode is the merge a request needs.
func logprobMode(br *body.Request) logprobMerge {
	switch {
	case br.Route != body.RouteGenerate || !br.ReturnLogprob:
		return mergeNone
	case br.Stream:
		return mergeStream
	}
	return mergeUnary
}

// prefillOutcome is what the prefill leg left behind.
type prefillOutcome struct {
	err error
	// body is the whole prefill answer (mergeUnary).
	body []byte
	// frames holds the first prefill frame of each batch index (mergeStream).
	frames map[int][]byte
}

// prefillFailed is the cause the legs are cancelled with when the prefill leg failed on its own. It
// does not unwrap to the prefill's error on purpose: net/http puts the cause into the decode's
// transport error, and the decode's failure must not pass for the prefill's answer.
type prefillFailed struct{ err error }

func (p *prefillFailed) Error() string { return "prefill leg failed: " + p.err.Error() }

var (
	errDecodeFailed = errors.New("decode leg failed")
	errRequestEnded = errors.New("request ended")
)

// legBodies are what an exchange sends: the same body to both legs unless the workers need
// per-leg fields (data-parallel rank hints), and extra headers for the prefill leg.
type legBodies struct {
	prefill, decode             []byte
	prefillHeader, decodeHeader http.Header
	// typed, when set, is sent to both legs instead of the bodies (the worker-RPC adapter's call).
	typed legSender
}

func (l legBodies) prefillSender() legSender {
	if l.typed != nil {
		return l.typed
	}
	return jsonLeg(l.prefill)
}

func (l legBodies) decodeSender() legSender {
	if l.typed != nil {
		return l.typed
	}
	return jsonLeg(l.decode)
}

// sameBody sends body to both legs.
func sameBody(body []byte) legBodies { return legBodies{prefill: body, decode: body} }

// exchange runs both legs. The prefill leg runs in a goroutine that releases hold and its
// load guard as soon as the prefill is over. On success the decode answer is returned; closing it
// cancels whatever still runs, waits for the prefill goroutine and releases the decode load. On
// failure everything is released before exchange returns.
func (x *Dispatcher) exchange(ctx context.Context, r *Request, br *body.Request, pw, dw *worker.Worker,
	legs legBodies, hold holder, merge logprobMerge) (*Response, error) {
	legCtx, cancelLegs := context.WithCancelCause(ctx)
	ex := &pdExchange{x: x, ctx: ctx, cancelLegs: cancelLegs, prefillDone: make(chan struct{}),
		timing: pdTiming{handoff: pw.Handoff().String(), start: x.now()}}
	pload := pw.AcquireLoad()
	dload := dw.AcquireLoad()
	go ex.prefill(legCtx, r, br, pw, legs, merge, pload, hold)

	resp, err := x.callWith(legCtx, dw, "decode", br.Route.Path(), legs.decodeSender(), r, legs.decodeHeader)
	if err != nil {
		cancelLegs(errDecodeFailed)
		<-ex.prefillDone
		dload.Release()
		return nil, legError(ctx, legCtx, err, ex.pout.err)
	}
	out := x.response(resp, br, dw, pw)
	out.pd = &ex.timing
	out.legCtx = legCtx
	ex.releaseDecode = holdDecode(ctx, out.Stream, dload.Release) // or a migration first (migrate.go)
	switch merge {
	case mergeUnary:
		return mergeUnaryLogprobs(out, resp, ex.prefillDone, &ex.pout, ex.end)
	case mergeStream:
		resp.Body = newStreamLogprobs(resp.Body, legCtx, ex.prefillDone, &ex.pout)
	}
	out.Body = &legBody{ReadCloser: resp.Body, ctx: legCtx, end: ex}
	return out, nil
}

// pdExchange is one exchange's state, in one allocation: what the prefill goroutine leaves and when
// it is over, the legs' timing, and what ending the exchange releases.
type pdExchange struct {
	x             *Dispatcher
	ctx           context.Context // the request's
	cancelLegs    context.CancelCauseFunc
	prefillDone   chan struct{}  // closed when the prefill goroutine is over
	pout          prefillOutcome // the prefill goroutine's: read after prefillDone closes
	timing        pdTiming       // prefill is the prefill goroutine's: read after prefillDone closes
	releaseDecode func()         // the decode's load (or a migration's release of it first)
}

// prefill is the exchange's goroutine: the prefill leg, then the prefill's load and hold released at
// once; a prefill that failed on its own cancels the decode, which would wait for KV that never comes.
func (ex *pdExchange) prefill(legCtx context.Context, r *Request, br *body.Request, pw *worker.Worker, legs legBodies,
	merge logprobMerge, pload *worker.LoadGuard, hold holder) {
	defer close(ex.prefillDone)
	reason := admission.ReleaseCompleted
	defer func() {
		pload.Release()
		hold.Release(reason)
	}()
	x := ex.x
	ex.pout = x.prefillLeg(legCtx, r, br, pw, legs, merge)
	if ex.pout.err == nil {
		ex.timing.prefill = x.now().Sub(ex.timing.start)
		x.d.Metrics.ObservePrefill(ex.timing.handoff, ex.timing.prefill, trace.SpanContextFromContext(legCtx))
		return
	}
	reason = admission.ReleaseFailed
	if legCtx.Err() != nil {
		reason = admission.ReleaseCancelled
	}
	ex.cancelLegs(&prefillFailed{ex.pout.err})
}

// end ends the exchange once its answer is closed: the prefill gets its grace, the legs are
// cancelled, the prefill goroutine is waited for and the decode's guards are released.
func (ex *pdExchange) end() {
	ex.x.awaitPrefill(ex.ctx, ex.prefillDone)
	ex.cancelLegs(errRequestEnded)
	<-ex.prefillDone
	ex.releaseDecode()
}

// awaitPrefill gives a prefill leg that is still running when its decode has been relayed a moment to
// end by itself (at most Config.PrefillGrace, and not past the request's end). The prefill has done
// its part by then, the KV went to the decode, and its own answer is normally on its way (an instant
// engine often answers the decode first); cancelling it now would close its connection, and the next
// request would pay for a new one.
func (x *Dispatcher) awaitPrefill(ctx context.Context, prefillDone <-chan struct{}) {
	select {
	case <-prefillDone:
		return
	default:
	}
	if ctx.Err() != nil {
		return
	}
	t := time.NewTimer(x.cfg.PrefillGrace)
	defer t.Stop()
	select {
	case <-prefillDone:
	case <-t.C:
	case <-ctx.Done():
	}
}

// legError picks the error that explains a failed exchange: the prefill's when it says the request
// itself is wrong (the decode's failure is then its echo, or our cancellation); the decode's own
// answer when it gave one; the prefill's failure when that is what cut the decode short; else the
// decode's transport error.
func legError(ctx, legCtx context.Context, derr, perr error) error {
	if ctx.Err() != nil {
		return derr
	}
	if isClientError(perr) && !isClientError(derr) {
		return perr
	}
	var ue *UpstreamError
	if errors.As(derr, &ue) {
		return derr
	}
	var pf *prefillFailed
	if errors.As(context.Cause(legCtx), &pf) {
		return pf.err
	}
	return derr
}

// prefillLeg sends the prefill leg and reads its answer to the end, keeping what the merge needs.
func (x *Dispatcher) prefillLeg(ctx context.Context, r *Request, br *body.Request, pw *worker.Worker,
	legs legBodies, merge logprobMerge) prefillOutcome {
	path := br.Route.Path()
	if merge == mergeUnary {
		b, err := x.readLegWith(ctx, pw, "prefill", path, legs.prefillSender(), r, legs.prefillHeader)
		return prefillOutcome{err: err, body: b}
	}
	resp, err := x.callWith(ctx, pw, "prefill", path, legs.prefillSender(), r, legs.prefillHeader)
	if err != nil {
		return prefillOutcome{err: err}
	}
	defer resp.Body.Close()
	if merge == mergeNone {
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return prefillOutcome{err: &TransportError{Worker: pw.URL(), Err: err}}
		}
		return prefillOutcome{}
	}
	frames := map[int][]byte{}
	rd := body.NewSSEReader(resp.Body)
	for {
		data, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return prefillOutcome{frames: frames}
		}
		if err != nil {
			return prefillOutcome{err: &TransportError{Worker: pw.URL(), Err: err}}
		}
		if len(data) == 0 || data[0] != '{' {
			continue
		}
		// The first frame of each index that carries the input logprobs (SGLang sends them in every
		// frame; keep looking if one does not).
		if i := body.FrameIndex(data); frames[i] == nil || (!body.HasInputLogprobs(frames[i]) && body.HasInputLogprobs(data)) {
			frames[i] = bytes.Clone(data)
		}
	}
}

// mergeUnaryLogprobs reads the whole decode answer, waits for the prefill, and answers decode's JSON
// with the prefill's input logprobs prepended. Everything is released before it returns.
func mergeUnaryLogprobs(out *Response, resp *http.Response, prefillDone <-chan struct{}, pout *prefillOutcome,
	finish func()) (*Response, error) {
	dbody, err := io.ReadAll(io.LimitReader(resp.Body, maxMergedBody))
	resp.Body.Close()
	if err != nil {
		err = &TransportError{Worker: out.Worker, Err: err}
	}
	<-prefillDone
	finish()
	if err != nil {
		return nil, err
	}
	if pout.err != nil {
		return nil, pout.err
	}
	merged, merr := body.MergeInputLogprobs(pout.body, dbody)
	if merr != nil {
		merged = dbody // a shape mini_lb would not merge either: relay decode's answer as is
	}
	out.Body = io.NopCloser(bytes.NewReader(merged))
	out.Header.Del("Content-Length")
	out.length = int64(len(merged))
	return out, nil
}

// streamLogprobs rewrites a decode SSE stream, prepending to each frame the input logprobs of the
// prefill frame of the same batch index, as mini_lb's generate_stream does. Like mini_lb it reads
// the whole prefill stream before the first decode frame goes out.
type streamLogprobs struct {
	io.Closer
	src         *body.SSEReader
	ctx         context.Context
	prefillDone <-chan struct{}
	pout        *prefillOutcome
	ready       bool
	buf         []byte
	off         int
	err         error
}

func newStreamLogprobs(src io.ReadCloser, ctx context.Context, prefillDone <-chan struct{}, pout *prefillOutcome) *streamLogprobs {
	return &streamLogprobs{Closer: src, src: body.NewSSEReader(src), ctx: ctx, prefillDone: prefillDone, pout: pout}
}

func (s *streamLogprobs) Read(p []byte) (int, error) {
	for s.off == len(s.buf) {
		if s.err != nil {
			return 0, s.err
		}
		if !s.ready {
			select {
			case <-s.prefillDone:
			case <-s.ctx.Done():
				s.err = context.Cause(s.ctx)
				continue
			}
			s.ready = true
			if s.pout.err != nil {
				s.err = &prefillFailed{s.pout.err}
				continue
			}
		}
		data, err := s.src.Next()
		if err != nil {
			s.err = err
			continue
		}
		out := data
		if pf := s.pout.frames[body.FrameIndex(data)]; pf != nil && !body.IsDone(data) {
			if m, err := body.MergeStreamInputLogprobs(pf, data); err == nil {
				out = m
			}
		}
		s.buf = body.AppendSSE(s.buf[:0], out)
		s.off = 0
	}
	n := copy(p, s.buf[s.off:])
	s.off += n
	return n, nil
}
