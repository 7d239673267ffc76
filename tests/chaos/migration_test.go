package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/gen/sluice/admin/v1/adminv1connect"
	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/internal/worker"
)

// TestMigrationSoak is the rolling restart that never ends (#36, docs/migration.md): PD engines that
// speak their own gRPC, and their decode engines killed one after another (sim Crash: every connection
// dropped at once, every request lost, as SIGKILL does; the engine comes back empty on its port, as
// its supervisor restarts it), the next one only once the gateway routes to the last one again, as a
// rolling update waits for readiness. Meanwhile clients stream long answers at temperature 0, where
// the simulator is greedy over the whole token context, so a continued answer must be exactly the
// uninterrupted one. Invariants:
//
//   - no client request fails: every answer is 200, ends with [DONE] and no error frame;
//   - no stream is truncated or corrupted: its text, finish_reason and usage equal the uninterrupted
//     answer to the same request (taken before the first kill);
//   - kills hit streams (migrations happened), and every decode engine was killed;
//   - afterwards the gateway holds nothing (no slot, seat, waiter or worker load).
//
// It reports the extra cost: the tokens prefilled again by continuations against the prompts' tokens.
// The modes: SGLang and vLLM over their gRPC (OpenAI chat streams), and over HTTP the forms HTTP
// mode migrates: SGLang's /generate streamed with input_ids and with text prompts, and on vLLM
// completions with a token-id prompt and chats, half each. Each runs for a ninth of SLUICE_CHAOS_DURATION, at least 10 s.
func TestMigrationSoak(t *testing.T) {
	per := max(10*time.Second, soakDuration(t)/9)
	for _, m := range []soakMode{{"grpc-sglang", sim.ProtocolSGLang, false}, {"grpc-vllm", sim.ProtocolVLLM, false},
		{"http-sglang-generate", sim.ProtocolSGLang, true}, {"http-vllm", sim.ProtocolVLLM, true}} {
		t.Run(m.name, func(t *testing.T) { migrationSoak(t, m, per) })
	}
}

// soakMode is a migration soak's engines and requests.
type soakMode struct {
	name     string
	protocol sim.Protocol
	http     bool // HTTP engines: SGLang /generate with token ids and text, vLLM completions with token ids and chats; else the engines' gRPC and chat
}

// byteIDs says whether the engines tokenize text and show ids as the byte-level tokenizer the
// gateway holds does (sim.Config.ByteTokenIDs): in gRPC mode, where the gateway tokenizes, and for
// SGLang's /generate over HTTP, whose text prompts the gateway tokenizes to migrate them.
func (m soakMode) byteIDs() bool { return !m.http || m.protocol == sim.ProtocolSGLang }

// url is an engine's worker URL in the gateway.
func (m soakMode) url(e *sim.Engine) string {
	if m.http {
		return e.URL()
	}
	return grpcURL(e)
}

// request is the i-th of the soak's streamed requests: its path and body.
func (m soakMode) request(i int) (string, string) {
	switch {
	case m.http && m.protocol == sim.ProtocolVLLM && i%2 == 0: // the odd ones are chats, below
		return "/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":[%d,%d,%d,%d],"max_tokens":%d,"temperature":0,"stream":true,`+
			`"stream_options":{"include_usage":true}}`, model, 100+i, 200+i, 300+i, 400+i, 60+15*i)
	case m.http && m.protocol == sim.ProtocolSGLang && i%2 == 1: // a text prompt, tokenized by the gateway to migrate
		return "/generate", fmt.Sprintf(`{"text":"migration soak %d","sampling_params":{"max_new_tokens":%d,"temperature":0},"stream":true}`,
			i, 60+15*i)
	case m.http && m.protocol == sim.ProtocolSGLang:
		return "/generate", fmt.Sprintf(`{"input_ids":[%d,%d,%d,%d],"sampling_params":{"max_new_tokens":%d,"temperature":0},"stream":true}`,
			100+i, 200+i, 300+i, 400+i, 60+15*i)
	}
	return "/v1/chat/completions", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"migration soak %d"}],`+
		`"max_tokens":%d,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}`, model, i, 60+15*i)
}

// soakRequest is one of the streamed requests the clients repeat, and its uninterrupted answer.
type soakRequest struct {
	path, body string
	want       streamed
}

// streamed is what a client read of a streamed chat.
type streamed struct {
	status             int
	text, finish       string
	prompt, completion int    // usage
	ids                string // /generate: the last chunk's output_ids
	ended              bool   // [DONE] came
	errorFrame         string // an error event, if one came
	readErr            error
}

func migrationSoak(t *testing.T, m soakMode, length time.Duration) {
	logger := soakLogger()
	engine := sim.Config{Seed: 7, ITLBase: 3 * time.Millisecond, ByteTokenIDs: m.byteIDs()}
	if !m.http {
		engine.GRPC, engine.EngineGRPCOnly = true, true
	}
	cluster, err := sim.StartCluster(context.Background(), sim.ClusterConfig{Prefill: 2, Decode: 3, Protocol: m.protocol,
		Engine: engine, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	f := &soakFleet{}
	for _, e := range cluster.ByRole(sim.RolePrefill) {
		f.prefills = append(f.prefills, enginePort{m.url(e), e.BootstrapPort()})
	}
	decodes := cluster.ByRole(sim.RoleDecode)
	for _, e := range decodes {
		f.decodes = append(f.decodes, m.url(e))
	}
	// sim Crash: every connection dropped at once, every request lost, as SIGKILL does; the engine
	// comes back empty on its port after a moment, as its supervisor restarts it.
	f.kill = func(i int) { decodes[i].Crash(400 * time.Millisecond) }
	soakUnderKills(t, m, f, length, logger)
}

// soakLogger is the soak's logger: silent unless SLUICE_TEST_LOG is set.
func soakLogger() *slog.Logger {
	if os.Getenv("SLUICE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

// soakFleet is the engines of a migration soak, as the gateway names them, and how a decode dies.
type soakFleet struct {
	prefills []enginePort
	decodes  []string
	kill     func(i int) // kills decode i and has it restarted on its port
}

// enginePort is a prefill engine's worker URL and bootstrap port (0: none).
type enginePort struct {
	url       string
	bootstrap int
}

// soakUnderKills runs the soak's clients against a gateway in front of f while its decode engines
// are killed in turn for length, and checks the invariants.
func soakUnderKills(t *testing.T, m soakMode, f *soakFleet, length time.Duration, logger *slog.Logger) {
	gw, base := startMigrationGateway(t, f, logger)
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := gw.Shutdown(sctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: clientTimeout}

	reqs := make([]soakRequest, 8)
	for i := range reqs {
		reqs[i].path, reqs[i].body = m.request(i)
		reqs[i].want = streamOnce(context.Background(), client, base+reqs[i].path, reqs[i].body)
		if w := reqs[i].want; !w.complete() || w.text == "" {
			t.Fatalf("uninterrupted answer %d: %+v", i, w)
		}
	}

	stop := make(chan struct{})
	epochs := &killEpochs{running: map[int]int{}}
	var load sync.WaitGroup
	var mu sync.Mutex
	var total int
	var problems []string
	for id := range 8 {
		load.Go(func() {
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				r := reqs[(id+seq)%len(reqs)]
				done := epochs.start()
				got := streamOnce(context.Background(), client, base+r.path, r.body)
				done()
				mu.Lock()
				total++
				if bad := got.differs(r.want); bad != "" && len(problems) < 20 {
					problems = append(problems, bad)
				}
				mu.Unlock()
			}
		})
	}

	kills := rollingKills(t, gw, f, epochs, length)
	close(stop)
	load.Wait()

	migrated := metricSum(t, base, "sluice_migrations_total", `outcome="migrated"`)
	failed := metricSum(t, base, "sluice_migrations_total", `outcome="failed"`)
	exhausted := metricSum(t, base, "sluice_migrations_total", `outcome="exhausted"`)
	reprefill := metricSum(t, base, "sluice_migration_prefill_tokens_total", "")
	served := metricSum(t, base, "sluice_tokens_total", "")
	t.Logf("%s: %d streams, %d decode kills; migrations: %v migrated, %v failed, %v exhausted; "+
		"re-prefilled %v tokens (%.0f a migration; %.1f%% on top of the %v prompt and output tokens served)",
		m.name, total, kills, migrated, failed, exhausted, reprefill, reprefill/max(migrated, 1), 100*reprefill/max(served, 1), served)
	for _, pr := range problems {
		t.Error(pr)
	}
	if migrated == 0 {
		t.Error("no stream migrated: the kills hit no stream, the soak proved nothing")
	}
	checkIdle(t, adminv1connect.NewAdminServiceClient(http.DefaultClient, base), base)
}

// startMigrationGateway starts a PD gateway in front of f's engines.
func startMigrationGateway(t *testing.T, f *soakFleet, logger *slog.Logger) (*app.App, string) {
	t.Helper()
	tok := t.TempDir()
	if err := sim.WriteByteTokenizer(tok); err != nil {
		t.Fatal(err)
	}
	args := []string{"--host", "127.0.0.1", "--port", "0", "--pd-disaggregation", "--tokenizer-path", tok,
		"--request-timeout-secs", "20", "--health-check-interval-secs", "0.2", "--health-check-timeout-secs", "1",
		"--health-success-threshold", "1", "--health-failure-threshold", "1",
		"--retry-initial-backoff-ms", "20", "--retry-max-backoff-ms", "200", "--shutdown-grace-period-secs", "5"}
	for _, p := range f.prefills {
		args = append(args, "--prefill", p.url)
		if p.bootstrap > 0 {
			args = append(args, strconv.Itoa(p.bootstrap))
		}
	}
	for _, d := range f.decodes {
		args = append(args, "--decode", d)
	}
	cfg, err := config.Parse(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := app.New(context.Background(), cfg, app.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the gateway is ready", func() bool { return gw.Ready() == nil })
	return gw, "http://" + gw.Addr()
}

func grpcURL(e *sim.Engine) string { return strings.Replace(e.URL(), "http://", "grpc://", 1) }

// rollingKills kills the decode engines in turn until length has passed; the next kill waits until
// the gateway routes to the restarted engine again. It returns the kill count.
func rollingKills(t *testing.T, gw *app.App, f *soakFleet, epochs *killEpochs, length time.Duration) int {
	kills := 0
	for end := time.Now().Add(length); time.Now().Before(end); {
		i := kills % len(f.decodes)
		time.Sleep(700 * time.Millisecond) // the schedule: streams are running on every engine by now
		// No stream lives through more kills than the default --max-migrations (2): a loaded machine
		// stretches streams, and a stream that outlives the bound ends with its error event by design.
		waitUntil(t, "the streams older than the last kill ended", func() bool { return epochs.oldest() >= kills-1 })
		f.kill(i)
		epochs.kill()
		kills++
		waitUntil(t, "the killed decode is routed to again", func() bool {
			w, ok := gw.Registry.Snapshot().ByURL(f.decodes[i])
			return ok && w.Health() == worker.HealthReady
		})
	}
	if kills < len(f.decodes) {
		t.Errorf("%d kills: not every decode engine was killed", kills)
	}
	return kills
}

// killEpochs counts the kills and, for each running stream, how many kills came before it started.
type killEpochs struct {
	mu      sync.Mutex
	kills   int
	next    int
	running map[int]int // stream -> kills before its start
}

// start registers a stream starting now; done unregisters it.
func (k *killEpochs) start() (done func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	id := k.next
	k.next++
	k.running[id] = k.kills
	return func() {
		k.mu.Lock()
		delete(k.running, id)
		k.mu.Unlock()
	}
}

func (k *killEpochs) kill() {
	k.mu.Lock()
	k.kills++
	k.mu.Unlock()
}

// oldest is the fewest kills before any running stream's start (the kill count when none runs).
func (k *killEpochs) oldest() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	o := k.kills
	for _, n := range k.running {
		o = min(o, n)
	}
	return o
}

// waitUntil polls cond for at most 20 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) { // polling interval
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// streamOnce sends one streamed request (a chat, or a /generate) and reads its SSE answer.
func streamOnce(ctx context.Context, c *http.Client, url, body string) streamed {
	var s streamed
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		s.readErr = err
		return s
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		s.readErr = err
		return s
	}
	defer resp.Body.Close()
	s.status = resp.StatusCode
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		payload, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if payload == "[DONE]" {
			s.ended = true
			continue
		}
		if strings.HasSuffix(url, "/generate") {
			s.generateChunk(payload)
			continue
		}
		s.chunk(payload, &text)
	}
	if strings.HasSuffix(url, "/generate") {
		text.WriteString(s.text) // the last chunk's: cumulative
	}
	s.text, s.readErr = text.String(), sc.Err()
	return s
}

// chunk takes one SSE payload of a chat or a completion: content or text, finish_reason, usage, or an
// error event.
func (s *streamed) chunk(payload string, text *strings.Builder) {
	var ch struct {
		Error   json.RawMessage `json:"error"`
		Choices []struct {
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
			Text         string          `json:"text"`
			TokenIDs     json.RawMessage `json:"token_ids"`
			FinishReason *string         `json:"finish_reason"`
		} `json:"choices"`
		Usage *struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(payload), &ch); err != nil {
		s.errorFrame = "not JSON: " + payload
		return
	}
	if len(ch.Error) > 0 && string(ch.Error) != "null" {
		s.errorFrame = string(ch.Error)
	}
	for _, c := range ch.Choices {
		if c.TokenIDs != nil {
			s.errorFrame = "token ids the client did not ask for: " + payload
		}
		text.WriteString(c.Delta.Content)
		text.WriteString(c.Text)
		if c.FinishReason != nil && *c.FinishReason != "" {
			s.finish = *c.FinishReason
		}
	}
	if ch.Usage != nil {
		s.prompt, s.completion = ch.Usage.Prompt, ch.Usage.Completion
	}
}

// generateChunk takes one /generate SSE payload: cumulative text and output_ids, meta_info's counts
// and finish_reason, or an error.
func (s *streamed) generateChunk(payload string) {
	var ch struct {
		Text      string          `json:"text"`
		OutputIDs json.RawMessage `json:"output_ids"`
		Error     json.RawMessage `json:"error"`
		Meta      struct {
			Prompt       int             `json:"prompt_tokens"`
			Completion   int             `json:"completion_tokens"`
			FinishReason json.RawMessage `json:"finish_reason"`
		} `json:"meta_info"`
	}
	if err := json.Unmarshal([]byte(payload), &ch); err != nil || len(ch.Error) > 0 {
		s.errorFrame = payload
		return
	}
	s.text, s.ids, s.prompt, s.completion = ch.Text, string(ch.OutputIDs), ch.Meta.Prompt, ch.Meta.Completion
	if fr := ch.Meta.FinishReason; len(fr) > 0 && string(fr) != "null" {
		var v map[string]any // compared as values: a continued chunk may order its keys otherwise
		_ = json.Unmarshal(fr, &v)
		s.finish = fmt.Sprint(v)
	}
}

func (s streamed) complete() bool {
	return s.status == http.StatusOK && s.ended && s.errorFrame == "" && s.readErr == nil
}

// differs says how got is not the uninterrupted answer want ("" when it is the same).
func (s streamed) differs(want streamed) string {
	switch {
	case s.status != http.StatusOK:
		return fmt.Sprintf("failed request: status %d (%v)", s.status, s.readErr)
	case !s.complete():
		return fmt.Sprintf("truncated stream: [DONE] %v, error frame %q, read error %v, text %q", s.ended, s.errorFrame, s.readErr, s.text)
	case s.text != want.text || s.finish != want.finish || s.ids != want.ids:
		return fmt.Sprintf("corrupted stream: text %q finish %q, uninterrupted %q finish %q", s.text, s.finish, want.text, want.finish)
	case s.prompt != want.prompt || s.completion != want.completion:
		return fmt.Sprintf("usage %d+%d, uninterrupted %d+%d", s.prompt, s.completion, want.prompt, want.completion)
	}
	return ""
}

// metricSum adds up the samples of a metric on /metrics whose labels contain label ("" for all).
func metricSum(t *testing.T, base, name, label string) float64 {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if (strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ")) && strings.Contains(line, label) {
			f := strings.Fields(line)
			if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
				sum += v
			}
		}
	}
	return sum
}
