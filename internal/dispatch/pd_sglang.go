package dispatch

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/worker"
)

// How an SGLang PD request runs (SGLang's python/sglang/srt/disaggregation/mini_lb.py and the Rust
// gateway's pd_router.rs): a decode worker with the same handoff is picked, the client body gets
// bootstrap_host/port/room — one room per prompt, lists for a prompt batch — and goes to both workers
// at once (exchange.go); the client gets the decode's answer, with the prefill's input logprobs merged
// in for /generate with return_logprob. With data-parallel engines, placement picked a rank of each
// worker: the prefill leg carries routed_dp_rank, the decode leg disagg_prefill_dp_rank (where the KV
// is) and its own routed_dp_rank, and the rooms are aligned to the prefill rank.
//
// n > 1 cannot run as one SGLang PD request: the engine gives all n samples of a prompt its one room,
// and they collide in the KV rendezvous (tokenizer_manager.py; unfixed upstream). So the request is
// split into n single-sample requests, each with its own room, all under the client's ONE admission
// slot (one guard each) and on the same pair, and their answers are merged into what an engine
// answers for n (samples.go). A prompt batch with n > 1 is refused with a 400.
type sglangPD struct{ x *Dispatcher }

func (s sglangPD) run(ctx context.Context, a *pdAttempt) (*Response, error) {
	x := s.x
	if a.br.N > 1 && a.br.BatchSize > 0 {
		a.slot.Release(admission.ReleaseFailed)
		return nil, errBatchWithN
	}
	dw, err := x.decodeOf(a, worker.HandoffBootstrap)
	if err != nil {
		a.slot.Release(admission.ReleaseFailed)
		return nil, err
	}
	merge := logprobMode(a.br)
	if a.br.N <= 1 {
		count, asList := body.SGLangRooms(a.br)
		legs, err := s.legs(a.br, a.br.Body, a.pw, dw, count, asList)
		if err != nil {
			a.slot.Release(admission.ReleaseFailed)
			return nil, err
		}
		return x.exchange(ctx, a.r, a.br, a.pw, dw, legs, a.slot, merge)
	}

	one, err := body.SingleSampleBody(a.br.Route, a.br.Body)
	if err != nil {
		a.slot.Release(admission.ReleaseFailed)
		return nil, apierror.InvalidRequest("sampling_params", "cannot split the request into single samples: "+err.Error())
	}
	samples := make([]legBodies, a.br.N)
	for k := range samples {
		if samples[k], err = s.legs(a.br, one, a.pw, dw, 1, false); err != nil {
			a.slot.Release(admission.ReleaseFailed)
			return nil, err
		}
	}
	return x.runSamples(ctx, a, dw, samples, merge)
}

// legs builds the two legs' bodies from raw (br's body, or one made from it): bootstrap fields with
// fresh rooms (aligned to the prefill rank, so an engine that ignores the hints still finds it by
// room % dp_size), then the rank hints.
func (s sglangPD) legs(br *body.Request, raw []byte, pw, dw *worker.Worker, count int, asList bool) (legBodies, error) {
	rooms := body.NewRooms(s.x.uint64, count)
	if rank := pw.Rank(); rank >= 0 {
		dp := len(pw.Engine().Ranks())
		for i := range rooms {
			rooms[i] = body.AlignRoom(rooms[i], dp, rank)
		}
	}
	base, err := br.InjectBootstrap(raw, body.BootstrapHost(pw.URL()), pw.BootstrapPort(), rooms, asList)
	if err != nil {
		return legBodies{}, apierror.InvalidRequest("", "cannot add bootstrap fields to the request body: "+err.Error())
	}
	pbody, dbody, err := body.SGLangRankHints(base, pw.Rank(), dw.Rank())
	if err != nil {
		return legBodies{}, apierror.InvalidRequest("", "cannot add data-parallel rank hints: "+err.Error())
	}
	return legBodies{prefill: pbody, decode: dbody}, nil
}

var errBatchWithN = apierror.InvalidRequest("n",
	"n > 1 together with a batch of prompts is not supported with SGLang prefill/decode workers: send one prompt per request, or n = 1")

// runSamples runs one exchange per sample body at once, each holding a guard of the slot, and merges
// their answers. A failure of any sample fails the request: the others are cancelled and closed.
func (x *Dispatcher) runSamples(ctx context.Context, a *pdAttempt, dw *worker.Worker, samples []legBodies, merge logprobMerge) (*Response, error) {
	n := len(samples)
	guards := make([]*admission.Guard, n)
	for k := range guards {
		guards[k] = a.slot.Guard()
	}
	a.slot.Release(admission.ReleaseCompleted) // the guards hold the slot now
	x.d.Metrics.IncSplit(a.pw.Handoff().String(), n)

	sctx, cancel := context.WithCancel(ctx)
	resps := make([]*Response, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for k := range n {
		rk := *a.r
		rk.RequestID = a.r.RequestID + "-" + strconv.Itoa(k)
		wg.Go(func() {
			// One span per sample, its legs under it, so a trace shows the split.
			kctx, span := x.d.Tracer.Start(sctx, "sluice.sample", trace.WithAttributes(
				attribute.Int("sluice.sample.index", k), attribute.String("sluice.request_id", rk.RequestID)))
			resps[k], errs[k] = x.exchange(kctx, &rk, a.br, a.pw, dw, samples[k], guards[k], merge)
			if errs[k] != nil {
				span.SetStatus(codes.Error, "sample failed")
				span.End()
				cancel() // one sample failed: the request has failed, stop the others
				return
			}
			resps[k].Body = &onClose{ReadCloser: resps[k].Body, span: span}
		})
	}
	wg.Wait()
	if err := firstSampleError(errs); err != nil {
		cancel()
		for _, r := range resps {
			if r != nil {
				r.Body.Close()
			}
		}
		return nil, err
	}
	if a.br.Stream {
		return newSampleStream(a.br, resps, cancel), nil
	}
	return mergeUnarySamples(a.br, resps, cancel)
}

// firstSampleError is the error that explains a failed split request: a sample's own failure rather
// than the cancellations it caused in its siblings.
func firstSampleError(errs []error) error {
	var first error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if first == nil || (isCancellation(first) && !isCancellation(err)) {
			first = err
		}
	}
	return first
}

func isCancellation(err error) bool {
	return errors.Is(err, context.Canceled)
}
