package sim

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestMain(m *testing.M) { verifyNoLeaks(m) }

// newModelEngine builds an unstarted engine for driving the model directly (inside a synctest bubble).
func newModelEngine(t *testing.T, mod func(*Config)) *Engine {
	t.Helper()
	cfg := Config{}
	if mod != nil {
		mod(&cfg)
	}
	e, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// words returns a prompt of n distinct word tokens (each 4 letters or fewer, so one token each).
func words(n int, salt string) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteString(" w")
		b.WriteString(salt)
		b.WriteByte(byte('a' + i%26))
		b.WriteByte(byte('a' + (i/26)%26))
		if len(salt) > 0 && i%5 == 0 {
			b.WriteString(" ")
		}
	}
	return b.String()
}

func tokenPrompt(n int, seed uint32) *prompt {
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = seed*1_000_003 + uint32(i)
	}
	return newPrompt(ids)
}

// timing runs one sample and records when each token was emitted, relative to the start.
type timing struct {
	tokens []time.Duration
	res    sampleResult
	err    error
}

func runTimed(ctx context.Context, e *Engine, sp sampleSpec) *timing {
	tm := &timing{}
	start := time.Now()
	rf := requestFaults{slowness: 1}
	tm.res, tm.err = e.runSample(ctx, &rf, &sp, func(int, string) error {
		tm.tokens = append(tm.tokens, time.Since(start))
		return nil
	})
	return tm
}

func TestTokenizer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		text string
		want int
	}{
		{name: "empty", text: "", want: 0},
		{name: "words", text: "the cat sat", want: 3},
		{name: "long word splits every 4 bytes", text: "internationalization", want: 5},
		{name: "punctuation", text: "hi, there!", want: 5},
		{name: "whitespace only", text: " \n\t ", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := len(appendTokens(nil, tt.text)); got != tt.want {
				t.Errorf("appendTokens(%q): got %d tokens, want %d", tt.text, got, tt.want)
			}
			if got := countTokens(tt.text); got != tt.want {
				t.Errorf("countTokens(%q) = %d, want %d", tt.text, got, tt.want)
			}
		})
	}
	for _, w := range vocabText {
		if n := countTokens(w); n != 1 {
			t.Errorf("vocabulary word %q is %d tokens, want 1", w, n)
		}
	}
}

func TestPrefillTimeScalesWithUncachedTokens(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		tokens int
		want   time.Duration // 8000 tokens/s
	}{
		{name: "800 tokens", tokens: 800, want: 100 * time.Millisecond},
		{name: "4000 tokens", tokens: 4000, want: 500 * time.Millisecond},
		{name: "8000 tokens", tokens: 8000, want: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newModelEngine(t, nil)
				tm := runTimed(t.Context(), e, sampleSpec{prompt: tokenPrompt(tt.tokens, 1), maxTokens: 1})
				if tm.err != nil {
					t.Fatal(tm.err)
				}
				if got := tm.tokens[0]; got != tt.want {
					t.Errorf("TTFT = %v, want %v", got, tt.want)
				}
			})
		})
	}
}

func TestRepeatedPrefixIsCached(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newModelEngine(t, nil)
		shared := tokenPrompt(1600, 7).ids
		first := runTimed(t.Context(), e, sampleSpec{prompt: newPrompt(shared), maxTokens: 1})
		// Same 1600-token prefix plus 160 new tokens: only the new tokens are computed.
		longer := append(append([]uint32(nil), shared...), tokenPrompt(160, 8).ids...)
		second := runTimed(t.Context(), e, sampleSpec{prompt: newPrompt(longer), maxTokens: 1})
		if first.err != nil || second.err != nil {
			t.Fatal(first.err, second.err)
		}
		if got, want := first.tokens[0], 200*time.Millisecond; got != want {
			t.Errorf("cold TTFT = %v, want %v", got, want)
		}
		if got, want := second.res.cachedTokens, 1600; got != want {
			t.Errorf("cached tokens = %d, want %d", got, want)
		}
		if got, want := second.tokens[0], 20*time.Millisecond; got != want {
			t.Errorf("warm TTFT = %v, want %v (160 uncached tokens)", got, want)
		}
		if st := e.Stats(); st.PrefixCacheHitTokens != 1600 || st.PromptTokens != 3360 {
			t.Errorf("stats: cache hits %d / prompt %d, want 1600 / 3360", st.PrefixCacheHitTokens, st.PromptTokens)
		}
		// After a flush the prefix is cold again.
		e.ranks[0].cache.flush()
		third := runTimed(t.Context(), e, sampleSpec{prompt: newPrompt(shared), maxTokens: 1})
		if got, want := third.tokens[0], 200*time.Millisecond; got != want {
			t.Errorf("TTFT after flush = %v, want %v", got, want)
		}
	})
}

func TestBatchingRaisesInterTokenLatency(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		batch int
		want  time.Duration // 6ms + 0.35ms x batch
	}{
		{name: "alone", batch: 1, want: 6350 * time.Microsecond},
		{name: "batch of 10", batch: 10, want: 9500 * time.Microsecond},
		{name: "batch of 40", batch: 40, want: 20 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newModelEngine(t, nil)
				timings := make([]*timing, tt.batch)
				var wg sync.WaitGroup
				for i := range timings {
					wg.Go(func() {
						timings[i] = runTimed(t.Context(), e, sampleSpec{prompt: tokenPrompt(8, uint32(i)), maxTokens: 30})
					})
				}
				wg.Wait()
				// Tokens 10..11 of the first sequence: by then every sequence is decoding.
				tk := timings[0].tokens
				if got := tk[11] - tk[10]; got != tt.want {
					t.Errorf("inter-token latency = %v, want %v", got, tt.want)
				}
			})
		})
	}
}

func TestWaitingQueueGrowsPastMaxRunning(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newModelEngine(t, func(c *Config) { c.MaxRunningRequests = 2 })
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		for i := 0; i < 5; i++ {
			wg.Go(func() { runTimed(ctx, e, sampleSpec{prompt: tokenPrompt(16, uint32(i)), maxTokens: 1000}) })
		}
		synctest.Wait()
		st := e.Stats()
		if st.Running != 2 || st.Queued != 3 || st.MaxQueueDepth != 3 {
			t.Errorf("running %d queued %d max queue %d, want 2, 3, 3", st.Running, st.Queued, st.MaxQueueDepth)
		}
		cancel()
		wg.Wait()
		if st := e.Stats(); st.Running != 0 || st.Queued != 0 || st.KVUsedTokens != 0 || st.Decoding != 0 {
			t.Errorf("after cancel: running %d queued %d kv %d decoding %d, want all 0", st.Running, st.Queued, st.KVUsedTokens, st.Decoding)
		}
	})
}

func TestKVBudgetLimitsRunning(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newModelEngine(t, func(c *Config) { c.KVCapacityTokens = 1000 })
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var wg sync.WaitGroup
		done := make([]time.Duration, 3)
		start := time.Now()
		for i := 0; i < 3; i++ {
			// Each needs 300 prompt + 100 output = 400 tokens of KV: two fit in 1000, the third waits.
			wg.Go(func() {
				runTimed(ctx, e, sampleSpec{prompt: tokenPrompt(300, uint32(i)), maxTokens: 100})
				done[i] = time.Since(start)
			})
			synctest.Wait() // FIFO order 0, 1, 2
		}
		st := e.Stats()
		if st.Running != 2 || st.Queued != 1 || st.KVUsedTokens != 800 {
			t.Errorf("running %d queued %d kv %d, want 2, 1, 800", st.Running, st.Queued, st.KVUsedTokens)
		}
		wg.Wait()
		if done[2] <= done[0] || done[2] <= done[1] {
			t.Errorf("the waiting request finished at %v, before the running ones (%v, %v)", done[2], done[0], done[1])
		}
		// A request that can never fit is rejected, not queued forever.
		tm := runTimed(ctx, e, sampleSpec{prompt: tokenPrompt(900, 9), maxTokens: 200})
		if tm.err == nil {
			t.Error("a request larger than the KV capacity was accepted")
		}
	})
}

func TestPrefillExecutorIsSerial(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newModelEngine(t, nil)
		var wg sync.WaitGroup
		ttft := make([]time.Duration, 3)
		for i := 0; i < 3; i++ {
			wg.Go(func() {
				ttft[i] = runTimed(t.Context(), e, sampleSpec{prompt: tokenPrompt(800, uint32(i+1)), maxTokens: 1}).tokens[0]
			})
			synctest.Wait()
		}
		wg.Wait()
		want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond}
		for i := range want {
			if ttft[i] != want[i] {
				t.Errorf("TTFT[%d] = %v, want %v (prefills run one at a time)", i, ttft[i], want[i])
			}
		}
	})
}

func TestInstantModeTakesNoTime(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newModelEngine(t, func(c *Config) { c.Mode = ModeInstant })
		tm := runTimed(t.Context(), e, sampleSpec{prompt: tokenPrompt(100000, 1), maxTokens: 100})
		if tm.err != nil {
			t.Fatal(tm.err)
		}
		if len(tm.tokens) != 8 || tm.tokens[7] != 0 {
			t.Errorf("instant: %d tokens, last at %v; want 8 at 0s", len(tm.tokens), tm.tokens[len(tm.tokens)-1])
		}
	})
}

func TestOutputDeterministicAndStops(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newModelEngine(t, func(c *Config) { c.Mode = ModeInstant; c.InstantOutputTokens = 64 })
		p := newPrompt(appendTokens(nil, "hello there"))
		a := runTimed(t.Context(), e, sampleSpec{prompt: p, maxTokens: 20})
		b := runTimed(t.Context(), e, sampleSpec{prompt: p, maxTokens: 20})
		c := runTimed(t.Context(), e, sampleSpec{prompt: p, maxTokens: 20, choice: 1})
		if a.res.text != b.res.text || a.res.text == c.res.text {
			t.Errorf("same prompt gave %q and %q; choice 1 gave %q (want equal, equal, different)", a.res.text, b.res.text, c.res.text)
		}
		if a.res.finish != "length" || a.res.completionTokens != 20 || countTokens(a.res.text) != 20 {
			t.Errorf("finish %q, %d tokens, text of %d tokens; want length, 20, 20", a.res.finish, a.res.completionTokens, countTokens(a.res.text))
		}
		// Stop at the fifth word: the text ends before it.
		fifth := strings.Fields(a.res.text)[4]
		s := runTimed(t.Context(), e, sampleSpec{prompt: p, maxTokens: 20, stop: []string{" " + fifth}})
		if s.res.finish != "stop" || strings.Contains(s.res.text, " "+fifth) || !strings.HasPrefix(a.res.text, s.res.text) {
			t.Errorf("stop %q: finish %q text %q (full %q)", fifth, s.res.finish, s.res.text, a.res.text)
		}
		natural := runTimed(t.Context(), e, sampleSpec{prompt: p, maxTokens: 16, naturalStop: true})
		if natural.res.finish != "stop" {
			t.Errorf("without max_tokens: finish %q, want stop", natural.res.finish)
		}
	})
}

func TestSlownessFactorScalesModel(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newModelEngine(t, nil)
		rf := requestFaults{slowness: 3}
		start := time.Now()
		sp := sampleSpec{prompt: tokenPrompt(800, 3), maxTokens: 1}
		if _, err := e.runSample(t.Context(), &rf, &sp, func(int, string) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if got, want := time.Since(start), 300*time.Millisecond; got != want {
			t.Errorf("prefill with slowness 3 took %v, want %v", got, want)
		}
	})
}

func TestPrefillPeakConcurrent(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newModelEngine(t, nil)
		h := e.routes()
		// 800-token prompts: 100 ms of prefill each, one at a time, so all three are prefilling at once.
		body := `{"prompt":` + jsonString(words(800, "")) + `,"max_tokens":3}`
		var wg sync.WaitGroup
		for i := 0; i < 3; i++ {
			wg.Go(func() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/completions", strings.NewReader(body)))
				if rec.Code != 200 {
					t.Errorf("status %d %s", rec.Code, rec.Body)
				}
			})
		}
		synctest.Wait()
		if st := e.Stats(); st.PrefillInFlight != 3 || st.PrefillPeak != 3 {
			t.Errorf("in flight %d, peak %d; want 3, 3", st.PrefillInFlight, st.PrefillPeak)
		}
		wg.Wait()
		if st := e.Stats(); st.PrefillInFlight != 0 || st.PrefillPeak != 3 {
			t.Errorf("after: in flight %d, peak %d; want 0, 3", st.PrefillInFlight, st.PrefillPeak)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/sim/stats/reset", nil))
		if st := decodeJSON[Stats](t, rec.Body.Bytes()); rec.Code != 200 || st.PrefillPeak != 0 {
			t.Errorf("reset: %d %s", rec.Code, rec.Body)
		}
	})
}

// headClock is a ResponseWriter that records when the response head was written.
type headClock struct {
	mu     sync.Mutex
	h      http.Header
	start  time.Time
	headAt time.Duration
	wrote  bool
	body   strings.Builder
}

func (w *headClock) Header() http.Header { return w.h }
func (w *headClock) WriteHeader(int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.wrote {
		w.wrote, w.headAt = true, time.Since(w.start)
	}
}
func (w *headClock) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.body.Write(b)
}
func (w *headClock) Flush() {}

// TestStreamingHeadTiming: SGLang's OpenAI routes answer a stream with its first chunk (after the
// prefill), vLLM and SGLang's /generate at once.
func TestStreamingHeadTiming(t *testing.T) {
	t.Parallel()
	prompt := jsonString(words(800, "")) // 100 ms of prefill
	tests := []struct {
		name  string
		proto Protocol
		path  string
		body  string
		want  time.Duration
	}{
		{name: "sglang completions", proto: ProtocolSGLang, path: "/v1/completions",
			body: `{"prompt":` + prompt + `,"max_tokens":2,"stream":true}`, want: 100 * time.Millisecond},
		{name: "sglang generate", proto: ProtocolSGLang, path: "/generate",
			body: `{"text":` + prompt + `,"sampling_params":{"max_new_tokens":2},"stream":true}`, want: 0},
		{name: "vllm completions", proto: ProtocolVLLM, path: "/v1/completions",
			body: `{"prompt":` + prompt + `,"max_tokens":2,"stream":true}`, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newModelEngine(t, func(c *Config) { c.Protocol = tt.proto })
				w := &headClock{h: http.Header{}, start: time.Now()}
				e.routes().ServeHTTP(w, httptest.NewRequestWithContext(t.Context(), http.MethodPost, tt.path, strings.NewReader(tt.body)))
				if !w.wrote || w.headAt != tt.want || !strings.HasSuffix(w.body.String(), "data: [DONE]\n\n") {
					t.Errorf("head at %v (written %v), want %v; body %q", w.headAt, w.wrote, tt.want, w.body.String())
				}
			})
		})
	}
}
