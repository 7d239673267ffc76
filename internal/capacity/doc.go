// Package capacity recommends how many prefill and how many decode workers
// each model needs now, from what the gateway already measures, for an
// autoscaler (KEDA, HPA) to act on.
//
// # Inputs
//
// Per model, from every request that reached dispatch ([Recommender.Observe]):
// arrivals (answered or refused: a refused request is demand the fleet did
// not serve), rejections, prompt and output tokens, and the mean inter-token
// latency of the decode worker that answered. Per worker, from a periodic
// sample of the fleet ([Recommender.Tick]): how many requests it holds now
// (prefill slots, decode seats, or the worker's load counter where admission
// is off) and its configured limit. Every input is smoothed by an EWMA whose
// time constant is Config.Smoothing, so one burst does not move the answer.
//
// # Model
//
// Prefill is an M/M/N queue solved with Erlang C. The service time of a
// request is its prompt tokens over the fleet's measured prefill rate, in
// tokens per busy worker-second (prefill tokens served over the time during
// which a worker held at least one prefill, which is exact for an engine that
// prefills one batch at a time). The offered load a = λ·S (Little's law, in
// workers); the recommendation is the smallest N > a whose mean Erlang C wait
// plus S stays within --slo-ttft (within 2·S when no SLO is set). Erlang C
// rather than square-root staffing because prefill fleets are small (one to a
// few dozen workers), where the √a approximation is poor and Erlang C is
// cheap to compute exactly.
//
// Decode is a continuous batch whose inter-token latency grows with the
// batch: ITL(n) = b + k·n, fitted per model by weighted least squares over
// (mean batch during a request's decode, its measured ITL). A worker meets
// --slo-itl with at most K = (slo−b)/k sequences (capped by its seat limit);
// at that operating point a request holds its seat for its output tokens
// times the SLO, so the seats needed are L = λ·tokens·slo (Little's law) plus
// a square-root staffing margin of √L (Halfin–Whitt: decode does not queue,
// it runs everyone admitted, and its seat counts are large, where the
// approximation is good), and the workers needed are (L+√L)/K. Until batches
// of different sizes have been seen, one operating point (ITL at batch n)
// gives K = n·slo/ITL(n), ITL taken as proportional to the batch, which is
// never more than the true K: decode is over-asked, never under. A fitted
// line is kept when the load turns steady. Without --slo-itl, K is the seat
// limit; without either, decode is not sized (the recommendation stays at
// the current count and says why).
//
// # Hysteresis
//
// A higher target is recommended at once; a lower one only after it has held
// for Config.ScaleDownHold, and then the highest target seen during that
// hold. Both read the offered load with a ±10% deadband (up only when 0.9×
// the load needs more workers, down only when 1.1× needs fewer), so smoothed
// inputs wandering around the boundary between two counts do not flap it. The recommendation is never below what is busy now: the workers
// needed to hold the requests in flight at their per-worker capacity, and at
// least one while the model has workers.
//
// What the model does not know: cold start and model load time (a worker
// asked for now serves minutes later), KV cache hit rates changing the
// prefill work, prompts longer than the ones measured, and engines that
// batch prefill (their rate per busy second grows with load, so the model
// over-asks at low load). docs/kubernetes.md says the same to operators.
// Where the model errs it errs high, as measured against the smallest
// simulated fleet that met the SLOs (scenario capacity, docs/benchmarks.md):
// the mean ITL alone meets --slo-itl at L/K decode workers, so the √L margin
// asks for up to one more while √L < K; and Erlang C's exponential service
// waits about twice as long as equal-length prompts do, which adds a prefill
// worker only when --slo-ttft is within a few service times.
//
// # Concurrency Model
//
// A [Recommender] is safe for concurrent use. One mutex guards the per-model
// accumulators and the published recommendations: Observe (called on the
// request path) only adds to counters under it; Tick (one sampler goroutine,
// see [Recommender.Run]) folds the counters into the EWMAs, recomputes, and
// reports to [Metrics] under it, so gauges change in order. Snapshot copies.
// The recommender owns no goroutine; Run blocks in its caller's until the
// context ends. Time comes from the caller (Tick's now) or Config.Now.
package capacity
