package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/internal/telemetry"
)

// Mid-stream migration (#36, docs/migration.md): a decode engine whose Generate stream breaks off in
// the middle of a streamed answer (the simulator's die_after_tokens fault resets the RPC, as a
// crashing engine does) is replaced by another pair, and the client reads one stream. At temperature 0
// the simulator generates greedily from the whole token context, so the continued answer must be
// exactly the uninterrupted one.

// migrationModes are the PD modes where migration applies: the engines' own gRPC.
func migrationModes() []pdMode {
	var out []pdMode
	for _, m := range pdModes() {
		if m.engineGRPC {
			out = append(out, m)
		}
	}
	return out
}

// streamedAnswer is what the client read of a streamed chat.
type streamedAnswer struct {
	text, finish, id string
	created          int64
	roles            int // chunks naming the assistant role
	usage            openai.CompletionUsage
	err              error
}

func streamChat(t *testing.T, gwURL string, maxTokens int64) streamedAnswer {
	t.Helper()
	return streamPrompt(t, gwURL, "tell me about gateways that never drop a stream", maxTokens)
}

// streamPrompt streams one chat at temperature 0 through the OpenAI SDK and checks that every chunk
// carries the stream's id and created.
func streamPrompt(t *testing.T, gwURL, prompt string, maxTokens int64) streamedAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdk(gwURL)
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: simModel,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		MaxTokens: openai.Int(maxTokens), Temperature: openai.Float(0),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
	var a streamedAnswer
	var text strings.Builder
	for stream.Next() {
		ch := stream.Current()
		if a.id == "" {
			a.id, a.created = ch.ID, ch.Created
		} else if ch.ID != a.id || ch.Created != a.created {
			t.Errorf("chunk id/created %s/%d, the stream's first said %s/%d", ch.ID, ch.Created, a.id, a.created)
		}
		for _, c := range ch.Choices {
			text.WriteString(c.Delta.Content)
			if c.Delta.Role != "" {
				a.roles++
			}
			if c.FinishReason != "" {
				a.finish = c.FinishReason
			}
		}
		if ch.Usage.TotalTokens > 0 {
			a.usage = ch.Usage
		}
	}
	a.text, a.err = text.String(), stream.Err()
	return a
}

// released waits until admission holds nothing: no slot, no seat, no waiter.
func released(t *testing.T, gw *gateway) {
	t.Helper()
	waitFor(t, "admission released everything", 10*time.Second, func() bool {
		st := gw.Admission.Status()
		if st.QueuedTotal != 0 {
			return false
		}
		for _, m := range []map[string]int{st.Inflight, st.Seats} {
			for _, n := range m {
				if n != 0 {
					return false
				}
			}
		}
		return true
	})
}

func migrationCount(t *testing.T, gw *gateway, outcome string) float64 {
	t.Helper()
	total := 0.0
	for k, v := range scrape(t, gw.URL, "sluice_migrations_total") {
		if strings.Contains(k, "outcome="+outcome) {
			total += v
		}
	}
	return total
}

// TestMigrationContinuesABrokenStream: the first decode dies after a few tokens; the client's text,
// finish_reason and usage equal an uninterrupted run's, with one role frame and no error, one
// migration is counted, and every slot and seat is given back. With one decode seat per worker the
// continuation must find its seat on the other decode (the broken one's is held until the end).
func TestMigrationContinuesABrokenStream(t *testing.T) {
	t.Parallel()
	for _, m := range migrationModes() {
		for _, seats := range []bool{false, true} {
			name := m.name
			var flags []string
			if seats {
				name += "-seats"
				flags = []string{"--prefill-max-inflight-requests-per-worker", "4", "--decode-max-inflight-requests-per-worker", "1"}
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				migrated(t, m, flags)
			})
		}
	}
}

func migrated(t *testing.T, m pdMode, flags []string) {
	c := m.startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 2, Engine: sim.Config{Seed: 5}})
	gw := m.startGateway(t, c, flags...)
	const maxTokens = 8
	want := streamChat(t, gw.URL, maxTokens)
	if want.err != nil || want.text == "" || want.finish != "length" {
		t.Fatalf("uninterrupted run: %+v", want)
	}
	// Every decode dies after 5 tokens of a call: the first stream breaks, its continuation
	// (3 tokens on the other decode) ends before its own engine's fault.
	for _, d := range c.ByRole(sim.RoleDecode) {
		if err := d.SetFaults(sim.Faults{DieAfterTokens: 5}); err != nil {
			t.Fatal(err)
		}
	}
	got := streamChat(t, gw.URL, maxTokens)
	if got.err != nil {
		t.Fatalf("migrated stream failed: %v (text so far %q)", got.err, got.text)
	}
	if got.text != want.text {
		t.Errorf("migrated text %q, uninterrupted %q", got.text, want.text)
	}
	if got.finish != want.finish || got.roles != 1 {
		t.Errorf("finish_reason %q (want %q), %d role frames (want 1)", got.finish, want.finish, got.roles)
	}
	if got.usage.PromptTokens != want.usage.PromptTokens || got.usage.CompletionTokens != want.usage.CompletionTokens {
		t.Errorf("usage %+v, uninterrupted %+v", got.usage, want.usage)
	}
	if n := migrationCount(t, gw, "migrated"); n != 1 {
		t.Errorf("sluice_migrations_total{outcome=migrated} = %v, want 1", n)
	}
	// The re-prefill is the prompt and what was generated before the break.
	if v := metricValue(t, gw, "sluice_migration_prefill_tokens_total"); v <= float64(want.usage.PromptTokens) {
		t.Errorf("sluice_migration_prefill_tokens_total = %v, want more than the prompt's %d", v, want.usage.PromptTokens)
	}
	released(t, gw)
}

// TestMigrationOffEndsWithTheErrorFrame: with --max-migrations 0 a broken stream ends as before, with
// the error event, and nothing is migrated.
func TestMigrationOffEndsWithTheErrorFrame(t *testing.T) {
	t.Parallel()
	for _, m := range migrationModes() {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			c := m.startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 2, Engine: sim.Config{Seed: 5}})
			gw := m.startGateway(t, c, "--max-migrations", "0")
			for _, d := range c.ByRole(sim.RoleDecode) {
				if err := d.SetFaults(sim.Faults{DieAfterTokens: 5}); err != nil {
					t.Fatal(err)
				}
			}
			got := streamChat(t, gw.URL, 12)
			if got.err == nil {
				t.Fatalf("a broken stream without migration ended cleanly: %+v", got)
			}
			if n := migrationCount(t, gw, ""); n != 0 {
				t.Errorf("sluice_migrations_total = %v with migration off", n)
			}
			released(t, gw)
		})
	}
}

// TestMigrationBeyondTheBound: every continuation breaks too; after --max-migrations the stream ends
// with the error event, and everything the attempts held is given back.
func TestMigrationBeyondTheBound(t *testing.T) {
	t.Parallel()
	for _, m := range migrationModes() {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			c := m.startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 2, Engine: sim.Config{Seed: 5}})
			gw := m.startGateway(t, c, "--max-migrations", "1")
			for _, d := range c.ByRole(sim.RoleDecode) {
				if err := d.SetFaults(sim.Faults{DieAfterTokens: 2}); err != nil {
					t.Fatal(err)
				}
			}
			got := streamChat(t, gw.URL, 12)
			if got.err == nil {
				t.Fatalf("a stream broken beyond the bound ended cleanly: %+v", got)
			}
			if n := migrationCount(t, gw, "migrated"); n != 1 {
				t.Errorf("sluice_migrations_total{outcome=migrated} = %v, want 1", n)
			}
			if n := migrationCount(t, gw, "exhausted"); n != 1 {
				t.Errorf("sluice_migrations_total{outcome=exhausted} = %v, want 1", n)
			}
			released(t, gw)
		})
	}
}

// TestMigrationCancelledByTheClient: the client goes away while its continuation waits for its
// prefill (held in the engine): the migration ends there, the stream is not continued, and every slot,
// seat and waiter of both attempts is given back.
func TestMigrationCancelledByTheClient(t *testing.T) {
	t.Parallel()
	for _, m := range migrationModes() {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			c := m.startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 2, Engine: sim.Config{Seed: 5}})
			gw := m.startGateway(t, c, "--prefill-max-inflight-requests-per-worker", "4", "--decode-max-inflight-requests-per-worker", "1")
			prefill := c.ByRole(sim.RolePrefill)[0]
			// The first request's prefill runs; the continuation's is held until the client gives up.
			if err := prefill.SetFaults(sim.Faults{Hold: true, HoldSkip: 1}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = prefill.SetFaults(sim.Faults{}) })
			for _, d := range c.ByRole(sim.RoleDecode) {
				if err := d.SetFaults(sim.Faults{DieAfterTokens: 3}); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			client := sdk(gw.URL)
			go func() {
				stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: simModel,
					Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("tell me about gateways")},
					MaxTokens: openai.Int(12), Temperature: openai.Float(0)})
				for stream.Next() {
				}
				done <- stream.Err()
			}()
			waitFor(t, "the continuation's prefill held", 10*time.Second, func() bool { return prefill.Stats().RequestsSeen >= 2 })
			cancel()
			if err := <-done; err == nil {
				t.Fatal("a cancelled stream ended cleanly")
			}
			released(t, gw)
			if n, f := migrationCount(t, gw, "migrated"), migrationCount(t, gw, "failed"); n != 0 || f != 1 {
				t.Errorf("sluice_migrations_total: %v migrated, %v failed after the client went away; want 0, 1", n, f)
			}
		})
	}
}

// TestMigrationSpanEvent: a migration is a sluice.migration event (reason, outcome) on the request's
// span, in the request's trace.
func TestMigrationSpanEvent(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	m := migrationModes()[0]
	c := m.startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 2, Engine: sim.Config{Seed: 5}})
	gw := startGateway(t, app.Options{TracerProvider: &telemetry.TracerProvider{TracerProvider: tp, Shutdown: tp.Shutdown}},
		engineGRPCArgs(c, byteTokenizerDir(t))...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	for _, d := range c.ByRole(sim.RoleDecode) {
		if err := d.SetFaults(sim.Faults{DieAfterTokens: 5}); err != nil {
			t.Fatal(err)
		}
	}
	if a := streamChat(t, gw.URL, 8); a.err != nil {
		t.Fatalf("migrated stream: %v", a.err)
	}
	released(t, gw)
	var found bool
	waitFor(t, "the migration event", 5*time.Second, func() bool {
		for _, s := range exp.GetSpans() {
			for _, ev := range s.Events {
				if ev.Name != "sluice.migration" {
					continue
				}
				attrs := map[string]string{}
				for _, kv := range ev.Attributes {
					attrs[string(kv.Key)] = kv.Value.String()
				}
				// On the request's span, not on a leg's.
				if attrs["sluice.migration.outcome"] == "migrated" && attrs["sluice.migration.reason"] != "" && !strings.HasPrefix(s.Name, "sluice.leg.") {
					found = true
				}
			}
		}
		return found
	})
}

// TestMigrationGivesBackTheFailedDecode: when a decode engine is killed mid-stream (Crash: every
// connection dropped, as SIGKILL does), the stream goes on on the other decode and the failed
// decode's seat and load are given back as the stream leaves it, while the client's stream is still
// open, not when it ends. The client reads one chunk, then stops reading until the check is done.
func TestMigrationGivesBackTheFailedDecode(t *testing.T) {
	t.Parallel()
	for _, m := range migrationModes() {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			c := m.startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 2, Engine: sim.Config{Seed: 5}})
			gw := m.startGateway(t, c, "--prefill-max-inflight-requests-per-worker", "4", "--decode-max-inflight-requests-per-worker", "1")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			client := sdk(gw.URL)
			stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: simModel,
				Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("a long answer, please")},
				MaxTokens: openai.Int(4000), Temperature: openai.Float(0)})
			defer stream.Close()
			if !stream.Next() {
				t.Fatalf("no first chunk: %v", stream.Err())
			}
			failed, other := seatedDecode(t, m, c, gw)
			failed.Crash(time.Second)
			waitFor(t, "the stream migrated and the failed decode's seat and load given back", 10*time.Second, func() bool {
				st := gw.Admission.Status()
				return migrationCount(t, gw, "migrated") == 1 && st.Seats[m.url(failed)] == 0 && st.Seats[m.url(other)] == 1 &&
					workerLoad(gw, m.url(failed)) == 0 && workerLoad(gw, m.url(other)) == 1
			})
			cancel()
			for stream.Next() {
			}
			released(t, gw)
		})
	}
}

// seatedDecode is the decode engine holding the one seat in use, and the other one.
func seatedDecode(t *testing.T, m pdMode, c *sim.Cluster, gw *gateway) (seated, other *sim.Engine) {
	t.Helper()
	ds := c.ByRole(sim.RoleDecode)
	st := gw.Admission.Status()
	switch {
	case st.Seats[m.url(ds[0])] == 1 && st.Seats[m.url(ds[1])] == 0:
		return ds[0], ds[1]
	case st.Seats[m.url(ds[1])] == 1 && st.Seats[m.url(ds[0])] == 0:
		return ds[1], ds[0]
	}
	t.Fatalf("seats %v: want one decode seated", st.Seats)
	return nil, nil
}

// workerLoad is the gateway's in-flight count of the worker at url (-1 when it is unknown).
func workerLoad(gw *gateway, url string) int64 {
	for _, w := range gw.Registry.Snapshot().All() {
		if w.URL() == url {
			return w.Load()
		}
	}
	return -1
}

// TestMigrationRegularWorkers: regular (not disaggregated) engine-gRPC workers migrate too: the first
// engine's stream breaks off after a few tokens, the other engine continues from the whole prefix in
// one Generate, and the client's text, finish_reason and usage equal an uninterrupted run's.
func TestMigrationRegularWorkers(t *testing.T) {
	t.Parallel()
	for _, p := range []sim.Protocol{sim.ProtocolSGLang, sim.ProtocolVLLM} {
		t.Run(string(p), func(t *testing.T) {
			t.Parallel()
			c := startCluster(t, sim.ClusterConfig{Regular: 2, Protocol: p,
				Engine: sim.Config{GRPC: true, EngineGRPCOnly: true, ByteTokenIDs: true, Seed: 5}})
			gw := startGateway(t, app.Options{}, engineGRPCArgs(c, byteTokenizerDir(t))...)
			waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
			const maxTokens = 8
			want := streamChat(t, gw.URL, maxTokens)
			if want.err != nil || want.text == "" || want.finish != "length" {
				t.Fatalf("uninterrupted run: %+v", want)
			}
			for _, e := range c.Engines {
				if err := e.SetFaults(sim.Faults{DieAfterTokens: 5}); err != nil {
					t.Fatal(err)
				}
			}
			got := streamChat(t, gw.URL, maxTokens)
			if got.err != nil || got.text != want.text || got.finish != want.finish || got.roles != 1 {
				t.Fatalf("migrated stream: err %v, text %q finish %q roles %d; uninterrupted %q %q",
					got.err, got.text, got.finish, got.roles, want.text, want.finish)
			}
			if got.usage.PromptTokens != want.usage.PromptTokens || got.usage.CompletionTokens != want.usage.CompletionTokens {
				t.Errorf("usage %+v, uninterrupted %+v", got.usage, want.usage)
			}
			if n := migrationCount(t, gw, "migrated"); n != 1 {
				t.Errorf("sluice_migrations_total{outcome=migrated} = %v, want 1", n)
			}
			waitFor(t, "no worker load left", 10*time.Second, func() bool {
				for _, e := range c.Engines {
					if workerLoad(gw, grpcURL(e)) != 0 {
						return false
					}
				}
				return true
			})
		})
	}
}

// generateStream is what a client read of a streamed /generate: the last chunk's text, output_ids and
// counts, whether [DONE] came, and any error chunk.
type generateStream struct {
	text              string
	ids               []uint32
	prompt, completed int
	finish            string
	done              bool
	errorChunk        string
}

func streamGenerate(t *testing.T, gwURL, reqBody string) generateStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gwURL+"/generate", strings.NewReader(reqBody))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	var g generateStream
	if err != nil {
		g.errorChunk = "read: " + err.Error()
	}
	for frame := range strings.SplitSeq(string(raw), "\n\n") {
		payload, ok := strings.CutPrefix(strings.TrimSpace(frame), "data: ")
		switch {
		case !ok:
		case payload == "[DONE]":
			g.done = true
		default:
			var c struct {
				Text      string          `json:"text"`
				OutputIDs []uint32        `json:"output_ids"`
				Error     json.RawMessage `json:"error"`
				Meta      struct {
					Prompt       int             `json:"prompt_tokens"`
					Completion   int             `json:"completion_tokens"`
					FinishReason json.RawMessage `json:"finish_reason"`
				} `json:"meta_info"`
			}
			if err := json.Unmarshal([]byte(payload), &c); err != nil || len(c.Error) > 0 {
				g.errorChunk = payload
				continue
			}
			g.text, g.ids, g.prompt, g.completed = c.Text, c.OutputIDs, c.Meta.Prompt, c.Meta.Completion
			if string(c.Meta.FinishReason) != "null" {
				var fr any // compared as JSON values: a rewritten object may order its keys otherwise
				_ = json.Unmarshal(c.Meta.FinishReason, &fr)
				b, _ := json.Marshal(fr)
				g.finish = string(b)
			}
		}
	}
	return g
}

// TestMigrationHTTPGenerate: in HTTP mode an SGLang /generate stream with a token-id prompt migrates
// (SGLang's output_ids give the generated ids): the decode's connection dies after a few tokens, and
// the client's last chunk (text, output_ids, counts, finish_reason) equals an uninterrupted run's,
// with no error chunk and one migration counted; with --max-migrations 0 the stream breaks as before.
func TestMigrationHTTPGenerate(t *testing.T) {
	t.Parallel()
	for _, seats := range []bool{false, true} {
		name := "no-seats"
		var flags []string
		if seats {
			name, flags = "seats", []string{"--prefill-max-inflight-requests-per-worker", "4", "--decode-max-inflight-requests-per-worker", "1"}
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m := pdModes()[0] // http-sglang
			c := m.startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 2, Engine: sim.Config{Seed: 5}})
			gw := m.startGateway(t, c, flags...)
			generateMigrates(t, gw, c.ByRole(sim.RoleDecode), `{"input_ids":[11,12,13,14,15,16],"sampling_params":{"max_new_tokens":9,"temperature":0},"stream":true}`)
			released(t, gw)
		})
	}
	// A text prompt migrates when the gateway has the model's tokenizer: here the simulator's byte-level
	// one, which its engines tokenize text with under ByteTokenIDs (and give output_ids in).
	t.Run("text", func(t *testing.T) {
		t.Parallel()
		m := pdModes()[0]
		c := m.startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 2, Engine: sim.Config{Seed: 5, ByteTokenIDs: true}})
		gw := m.startGateway(t, c, "--tokenizer-path", byteTokenizerDir(t))
		generateMigrates(t, gw, c.ByRole(sim.RoleDecode), `{"text":"a text prompt to carry on","sampling_params":{"max_new_tokens":9,"temperature":0},"stream":true}`)
		released(t, gw)
	})
	// Without the tokenizer, or with one that tokenizes the text otherwise than the engine (its count of
	// the prompt differs), a text prompt's stream breaks as before: nothing is continued on ids that
	// are not the engine's.
	for name, flags := range map[string][]string{"text-no-tokenizer": nil, "text-other-tokenizer": {"--tokenizer-path", byteTokenizerDir(t)}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m := pdModes()[0]
			c := m.startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 2, Engine: sim.Config{Seed: 5}}) // word tokens
			gw := m.startGateway(t, c, flags...)
			req := `{"text":"a text prompt to carry on","sampling_params":{"max_new_tokens":9,"temperature":0},"stream":true}`
			if whole := streamGenerate(t, gw.URL, req); !whole.done || whole.errorChunk != "" {
				t.Fatalf("uninterrupted run: %+v", whole)
			}
			for _, d := range c.ByRole(sim.RoleDecode) {
				if err := d.SetFaults(sim.Faults{DieAfterTokens: 4}); err != nil {
					t.Fatal(err)
				}
			}
			if got := streamGenerate(t, gw.URL, req); got.done && got.errorChunk == "" {
				t.Fatalf("a broken text-prompt stream ended cleanly: %+v", got)
			}
			if n := migrationCount(t, gw, "migrated"); n != 0 {
				t.Errorf("%v migrations", n)
			}
			released(t, gw)
		})
	}
	t.Run("off", func(t *testing.T) {
		t.Parallel()
		m := pdModes()[0]
		c := m.startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 2, Engine: sim.Config{Seed: 5}})
		gw := m.startGateway(t, c, "--max-migrations", "0")
		for _, d := range c.ByRole(sim.RoleDecode) {
			if err := d.SetFaults(sim.Faults{DieAfterTokens: 4}); err != nil {
				t.Fatal(err)
			}
		}
		got := streamGenerate(t, gw.URL, `{"input_ids":[11,12,13],"sampling_params":{"max_new_tokens":9,"temperature":0},"stream":true}`)
		if got.done && got.errorChunk == "" {
			t.Fatalf("a broken stream without migration ended cleanly: %+v", got)
		}
		released(t, gw)
	})
}

// TestMigrationHTTPGenerateRegular: regular SGLang workers over HTTP migrate a /generate stream with
// input_ids the same way: the continuation is one /generate of the whole prefix on the other worker.
func TestMigrationHTTPGenerateRegular(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.ClusterConfig{Regular: 2, Protocol: sim.ProtocolSGLang, Engine: sim.Config{Seed: 5}})
	var args []string
	for _, e := range c.Engines {
		args = append(args, "--worker-urls", e.URL())
	}
	gw := startGateway(t, app.Options{}, args...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	generateMigrates(t, gw, c.Engines, `{"input_ids":[21,22,23,24],"sampling_params":{"max_new_tokens":9,"temperature":0},"stream":true}`)
	waitFor(t, "no worker load left", 10*time.Second, func() bool {
		for _, e := range c.Engines {
			if workerLoad(gw, e.URL()) != 0 {
				return false
			}
		}
		return true
	})
}

// generateMigrates streams req (9 tokens) once uninterrupted, then with every engine of dying dying
// after 5 tokens: the migrated stream's last chunk must equal the uninterrupted one's, with no error
// chunk, and one migration counted.
func generateMigrates(t *testing.T, gw *gateway, dying []*sim.Engine, req string) {
	t.Helper()
	want := streamGenerate(t, gw.URL, req)
	if !want.done || want.errorChunk != "" || want.completed != 9 || len(want.ids) < 9 || want.text == "" {
		t.Fatalf("uninterrupted run: %+v", want)
	}
	for _, e := range dying {
		if err := e.SetFaults(sim.Faults{DieAfterTokens: 5}); err != nil {
			t.Fatal(err)
		}
	}
	got := streamGenerate(t, gw.URL, req)
	if !got.done || got.errorChunk != "" || got.text != want.text || !slices.Equal(got.ids, want.ids) ||
		got.prompt != want.prompt || got.completed != want.completed || got.finish != want.finish {
		t.Fatalf("migrated stream %+v\nuninterrupted    %+v", got, want)
	}
	if n := migrationCount(t, gw, "migrated"); n != 1 {
		t.Errorf("sluice_migrations_total{outcome=migrated} = %v, want 1", n)
	}
}
