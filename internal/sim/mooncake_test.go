package sim

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// mooncakeLegs builds the two bodies the reference proxy sends (mooncake_connector_proxy.py): the
// prefill's with max_tokens 1, stream false, no stream_options; the decode's the original body. Both get
// the transfer id; the decode also the bootstrap address and the engine id.
func mooncakeLegs(body, transferID, bootstrapAddr, engineID string) (prefill, decode string) {
	prefill = withFields(body, "max_tokens", "1", "stream", "false", "kv_transfer_params",
		`{"do_remote_decode":true,"do_remote_prefill":false,"transfer_id":`+jsonString(transferID)+`}`)
	decode = withFields(body, "kv_transfer_params", `{"do_remote_decode":false,"do_remote_prefill":true,"remote_bootstrap_addr":`+
		jsonString(bootstrapAddr)+`,"remote_engine_id":`+jsonString(engineID)+`,"transfer_id":`+jsonString(transferID)+`}`)
	return prefill, decode
}

func TestMooncakeQuery(t *testing.T) {
	t.Parallel()
	p := startEngine(t, Config{Mode: ModeInstant, Protocol: ProtocolVLLM, KVConnector: ConnectorMooncake, Role: RolePrefill, DPSize: 2, EngineID: "pf"})
	one := startEngine(t, Config{Mode: ModeInstant, Protocol: ProtocolVLLM, KVConnector: ConnectorMooncake, Role: RolePrefill, EngineID: "solo"})
	c := testClient(t)
	type entry struct {
		EngineID   string                       `json:"engine_id"`
		WorkerAddr map[string]map[string]string `json:"worker_addr"`
	}
	for _, tt := range []struct {
		e    *Engine
		want []string
	}{{p, []string{"pf_dp0", "pf_dp1"}}, {one, []string{"solo"}}} {
		status, body := get(t, c, "http://127.0.0.1:"+strconv.Itoa(tt.e.BootstrapPort())+"/query")
		q := decodeJSON[map[string]entry](t, body)
		if status != 200 || len(q) != len(tt.want) {
			t.Fatalf("/query %d %s", status, body)
		}
		for rank, id := range tt.want {
			ent := q[strconv.Itoa(rank)]
			if ent.EngineID != id || ent.WorkerAddr["0"]["0"] != "tcp://127.0.0.1:"+strconv.Itoa(tt.e.BootstrapPort()) {
				t.Errorf("rank %d: %s", rank, body)
			}
		}
		if got := tt.e.RankEngineIDs(); strings.Join(got, ",") != strings.Join(tt.want, ",") {
			t.Errorf("RankEngineIDs %v, want %v", got, tt.want)
		}
	}
	if status, body := get(t, c, "http://127.0.0.1:"+strconv.Itoa(p.BootstrapPort())+"/route"); status != 404 || string(body) != `{"detail":"Not Found"}` {
		t.Errorf("unknown route: %d %s", status, body)
	}
}

func TestMooncakePD(t *testing.T) {
	t.Parallel()
	base := Config{Mode: ModeInstant, Protocol: ProtocolVLLM, KVConnector: ConnectorMooncake, Seed: 4, BootstrapTimeout: 300 * time.Millisecond}
	pcfg, dcfg := base, base
	pcfg.Role, pcfg.DPSize, pcfg.EngineID = RolePrefill, 2, "pf"
	dcfg.Role = RoleDecode
	p, d := startEngine(t, pcfg), startEngine(t, dcfg)
	reg := startEngine(t, Config{Mode: ModeInstant, Protocol: ProtocolVLLM, Seed: 4})
	c := testClient(t)
	boot := "http://127.0.0.1:" + strconv.Itoa(p.BootstrapPort())
	const chat = `{"model":"sim-model","messages":[{"role":"user","content":"mooncake moves my kv"}],"max_tokens":5}`
	url := func(e *Engine) string { return e.URL() + "/v1/chat/completions" }
	rank := func(r int) http.Header { return http.Header{"X-Data-Parallel-Rank": {strconv.Itoa(r)}} }
	reset := func() { p.ResetStats(); d.ResetStats() }
	_, want := post(t, c, url(reg), chat)
	wantMsg := decodeJSON[map[string]any](t, want)["choices"].([]any)[0].(map[string]any)["message"]

	// send runs the legs in parallel (the prefill with headers ph) and returns both answers.
	send := func(pb string, ph http.Header, db string) (pr, dr legResult) {
		var wg sync.WaitGroup
		wg.Go(func() { pr.status, pr.body = postWith(t, c, url(p), pb, ph) })
		wg.Go(func() { dr.status, dr.body = post(t, c, url(d), db) })
		wg.Wait()
		return pr, dr
	}
	internalErr := func(r legResult) bool {
		eb := decodeJSON[vllmErr](t, r.body)
		return r.status == 500 && eb.Error.Message == "Internal server error" && eb.Error.Type == "InternalServerError" && eb.Error.Code == 500
	}

	t.Run("parallel legs", func(t *testing.T) {
		reset()
		pb, db := mooncakeLegs(chat, "xfer-1", boot, "pf_dp1")
		pr, dr := send(pb, rank(1), db)
		if pr.status != 200 || dr.status != 200 {
			t.Fatalf("prefill %d %s, decode %d %s", pr.status, pr.body, dr.status, dr.body)
		}
		if !strings.Contains(string(pr.body), `"kv_transfer_params":null`) {
			t.Errorf("prefill response %s, want kv_transfer_params null", pr.body)
		}
		got := decodeJSON[map[string]any](t, dr.body)["choices"].([]any)[0].(map[string]any)["message"]
		if got == nil || strings.TrimSpace(got.(map[string]any)["content"].(string)) == "" || got.(map[string]any)["content"] != wantMsg.(map[string]any)["content"] {
			t.Errorf("decode message %v, want the regular engine's %v", got, wantMsg)
		}
		if !onlyRank(rankRequests(p), 1) {
			t.Errorf("prefill ranks %v, want rank 1 (X-data-parallel-rank)", rankRequests(p))
		}
		if st := p.Stats(); st.MooncakeKept != 1 || st.MooncakeSent != 1 || st.PublishedRooms != 0 {
			t.Errorf("prefill stats kept %d sent %d published %d", st.MooncakeKept, st.MooncakeSent, st.PublishedRooms)
		}
		if st := d.Stats(); st.MooncakePulls != 1 || st.MooncakeTransfers != 1 || st.RecomputedPrompts != 0 || st.Completed != 1 {
			t.Errorf("decode stats %+v", st)
		}
	})

	t.Run("decode arrives first and waits", func(t *testing.T) {
		reset()
		pb, db := mooncakeLegs(chat, "xfer-2", boot, "pf_dp0")
		decodeDone := make(chan legResult, 1)
		go func() {
			var r legResult
			r.status, r.body = post(t, c, url(d), db)
			decodeDone <- r
		}()
		waitFor(t, "the decode to wait for the prefill", func() bool { return d.Stats().MooncakePulling == 1 })
		if st, body := postWith(t, c, url(p), pb, rank(0)); st != 200 {
			t.Fatalf("prefill %d %s", st, body)
		}
		if r := <-decodeDone; r.status != 200 {
			t.Fatalf("decode %d %s", r.status, r.body)
		}
		if st := p.Stats(); st.MooncakeWaits != 1 || st.MooncakeSent != 1 {
			t.Errorf("prefill waits %d sent %d, want 1 and 1", st.MooncakeWaits, st.MooncakeSent)
		}
	})

	t.Run("prefill finishes first", func(t *testing.T) {
		reset()
		pb, db := mooncakeLegs(chat, "xfer-3", boot, "pf_dp0")
		if st, body := postWith(t, c, url(p), pb, rank(0)); st != 200 {
			t.Fatalf("prefill %d %s", st, body)
		}
		if p.Stats().PublishedRooms != 1 {
			t.Errorf("published %d, want the KV kept", p.Stats().PublishedRooms)
		}
		if st, body := post(t, c, url(d), db); st != 200 {
			t.Fatalf("decode %d %s", st, body)
		}
		if st := p.Stats(); st.MooncakeWaits != 0 || st.PublishedRooms != 0 {
			t.Errorf("prefill waits %d published %d, want 0 and 0", st.MooncakeWaits, st.PublishedRooms)
		}
	})

	t.Run("engine id of another rank", func(t *testing.T) {
		reset()
		// The KV is on rank 1; the decode pulls from rank 0, which never gets it: timeout.
		pb, db := mooncakeLegs(chat, "xfer-4", boot, "pf_dp0")
		pr, dr := send(pb, rank(1), db)
		if pr.status != 200 || !internalErr(dr) {
			t.Errorf("prefill %d %s, decode %d %s", pr.status, pr.body, dr.status, dr.body)
		}
		if st := d.Stats(); st.MooncakeTimeouts != 1 || st.MooncakeFailures != 0 {
			t.Errorf("decode timeouts %d failures %d", st.MooncakeTimeouts, st.MooncakeFailures)
		}
		if st := p.Stats(); st.MooncakePullTimeouts != 1 || st.PublishedRooms != 1 {
			t.Errorf("prefill pull timeouts %d, published %d (rank 1 keeps its KV until it expires)", st.MooncakePullTimeouts, st.PublishedRooms)
		}
	})

	t.Run("unknown engine id", func(t *testing.T) {
		reset()
		_, db := mooncakeLegs(chat, "xfer-5", boot, "nobody")
		r := legResult{}
		r.status, r.body = post(t, c, url(d), db)
		if !internalErr(r) {
			t.Errorf("decode %d %s", r.status, r.body)
		}
		if st := d.Stats(); st.MooncakeFailures != 1 || st.MooncakeTimeouts != 0 {
			t.Errorf("decode failures %d timeouts %d", st.MooncakeFailures, st.MooncakeTimeouts)
		}
	})

	t.Run("unknown transfer id", func(t *testing.T) {
		reset()
		_, db := mooncakeLegs(chat, "never-prefilled", boot, "pf_dp0")
		r := legResult{}
		r.status, r.body = post(t, c, url(d), db)
		if !internalErr(r) || d.Stats().MooncakeTimeouts != 1 {
			t.Errorf("decode %d %s, timeouts %d", r.status, r.body, d.Stats().MooncakeTimeouts)
		}
	})

	t.Run("prefill not ended by the length cap keeps nothing", func(t *testing.T) {
		reset()
		_, body := post(t, c, url(reg), withFields(chat, "max_tokens", "1"))
		first := strings.Fields(decodeJSON[map[string]any](t, body)["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string))[0]
		pb, db := mooncakeLegs(withFields(chat, "stop", "["+jsonString(first)+"]"), "xfer-6", boot, "pf_dp0")
		pr, dr := send(pb, rank(0), db)
		if pr.status != 200 || !strings.Contains(string(pr.body), `"finish_reason":"stop"`) || !internalErr(dr) {
			t.Errorf("prefill %d %s, decode %d %s", pr.status, pr.body, dr.status, dr.body)
		}
		if st := p.Stats(); st.MooncakeNotKept != 1 || st.MooncakeKept != 0 {
			t.Errorf("prefill kept %d not kept %d", st.MooncakeKept, st.MooncakeNotKept)
		}
	})

	t.Run("omit fault keeps nothing", func(t *testing.T) {
		reset()
		setFaults(t, c, p, `{"omit_kv_transfer_params":true}`)
		defer setFaults(t, c, p, `{"omit_kv_transfer_params":false}`)
		pb, db := mooncakeLegs(chat, "xfer-7", boot, "pf_dp0")
		pr, dr := send(pb, rank(0), db)
		if pr.status != 200 || !internalErr(dr) || p.Stats().MooncakeNotKept != 1 {
			t.Errorf("prefill %d %s, decode %d %s", pr.status, pr.body, dr.status, dr.body)
		}
	})

	t.Run("streaming decode", func(t *testing.T) {
		reset()
		pb, db := mooncakeLegs(withFields(chat, "stream", "true"), "xfer-8", boot, "pf_dp1")
		pr, dr := send(pb, rank(1), db)
		if pr.status != 200 || strings.HasPrefix(string(pr.body), "data:") || dr.status != 200 {
			t.Fatalf("prefill %d %s, decode %d %s", pr.status, pr.body, dr.status, dr.body)
		}
		events := sseEvents(t, dr.body)
		if len(events) < 3 || events[len(events)-1] != "[DONE]" {
			t.Errorf("decode stream %q", events)
		}
		// A failed pull is an in-stream error after the head.
		_, db = mooncakeLegs(withFields(chat, "stream", "true"), "xfer-never", boot, "pf_dp1")
		status, body := post(t, c, url(d), db)
		events = sseEvents(t, body)
		if status != 200 || len(events) != 2 || !strings.Contains(events[0], `"message":"Internal server error"`) || events[1] != "[DONE]" {
			t.Errorf("failed streaming decode %d %q", status, events)
		}
	})

	t.Run("decode without params recomputes", func(t *testing.T) {
		reset()
		if status, body := post(t, c, url(d), chat); status != 200 {
			t.Fatalf("%d %s", status, body)
		}
		if st := d.Stats(); st.RecomputedPrompts != 1 || st.MooncakePulls != 0 {
			t.Errorf("recomputed %d pulls %d", st.RecomputedPrompts, st.MooncakePulls)
		}
	})

	t.Run("incomplete params", func(t *testing.T) {
		status, body := post(t, c, url(d), withFields(chat, "kv_transfer_params", `{"do_remote_prefill":true,"transfer_id":"x"}`))
		if eb := decodeJSON[vllmErr](t, body); status != 400 || eb.Error.Param == nil || *eb.Error.Param != "kv_transfer_params" {
			t.Errorf("%d %s", status, body)
		}
	})

	t.Run("X-data-parallel-rank", func(t *testing.T) {
		status, body := postWith(t, c, url(p), chat, rank(2))
		if eb := decodeJSON[vllmErr](t, body); status != 400 || eb.Error.Message != "data_parallel_rank 2 is out of range [0, 2)." || eb.Error.Type != "BadRequestError" {
			t.Errorf("rank 2 of 2: %d %s", status, body)
		}
		p.ResetStats()
		// A value that is not an integer is ignored: the least loaded rank (0 when idle) runs it.
		if status, body := postWith(t, c, url(p), chat, http.Header{"X-Data-Parallel-Rank": {"one"}}); status != 200 || !onlyRank(rankRequests(p), 0) {
			t.Errorf("rank 'one': %d %s, ranks %v", status, body, rankRequests(p))
		}
	})
}

// TestVLLMLeastLoaded: without X-data-parallel-rank vLLM sends a request to the engine core with the
// lowest waiting*4 + running.
func TestVLLMLeastLoaded(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Protocol: ProtocolVLLM, DPSize: 3, ITLBase: 20 * time.Millisecond, PrefillTokensPerSec: 1e7})
	c := testClient(t)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	t.Cleanup(cancel)
	busy := func(r int) {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.URL()+"/v1/completions",
				strings.NewReader(`{"prompt":"busy","max_tokens":10000}`))
			req.Header.Set("X-data-parallel-rank", strconv.Itoa(r))
			if resp, err := c.Do(req); err == nil {
				resp.Body.Close()
			}
		})
		waitFor(t, "the busy request to run", func() bool { return e.Stats().Ranks[r].Running == 1 })
	}
	busy(0)
	busy(2)
	e.ResetStats()
	if status, body := post(t, c, e.URL()+"/v1/completions", `{"prompt":"where","max_tokens":1}`); status != 200 || !onlyRank(rankRequests(e), 1) {
		t.Errorf("%d %s: ranks %v, want rank 1 (the idle one)", status, body, rankRequests(e))
	}
	// vLLM's gauges carry the engine core index.
	fams := scrape(t, c, e)
	if n := len(fams["vllm:num_requests_running"].GetMetric()); n != 3 {
		t.Errorf("%d vllm:num_requests_running series, want 3", n)
	}
	for _, m := range fams["vllm:num_requests_running"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "engine" && (l.GetValue() == "1") != (m.GetGauge().GetValue() == 0) {
				t.Errorf("engine %s running %v", l.GetValue(), m.GetGauge().GetValue())
			}
		}
	}
}

// TestNIXLWithDPRanks: a NIXL prefill's kv_transfer_params name the rank's engine id, and the pull must
// name the rank that holds the blocks.
func TestNIXLWithDPRanks(t *testing.T) {
	t.Parallel()
	base := Config{Mode: ModeInstant, Protocol: ProtocolVLLM}
	pcfg, dcfg := base, base
	pcfg.Role, pcfg.DPSize, pcfg.EngineID = RolePrefill, 2, "nx"
	dcfg.Role = RoleDecode
	p, d := startEngine(t, pcfg), startEngine(t, dcfg)
	c := testClient(t)
	const prefill = `{"prompt":"nixl ranks","max_tokens":1,"kv_transfer_params":{"do_remote_decode":true}}`
	status, body := postWith(t, c, p.URL()+"/v1/completions", prefill, http.Header{"X-Data-Parallel-Rank": {"1"}})
	kv := decodeJSON[map[string]any](t, body)["kv_transfer_params"].(map[string]any)
	if status != 200 || kv["remote_engine_id"] != "nx_dp1" {
		t.Fatalf("prefill %d %s", status, body)
	}
	kv["remote_engine_id"] = "nx_dp0" // the blocks are rank 1's
	wrong, _ := json.Marshal(kv)
	if status, body := post(t, c, d.URL()+"/v1/completions", `{"prompt":"nixl ranks","kv_transfer_params":`+string(wrong)+`}`); status != 500 {
		t.Errorf("pull naming rank 0: %d %s", status, body)
	}
	kv["remote_engine_id"] = "nx_dp1"
	right, _ := json.Marshal(kv)
	if status, body := post(t, c, d.URL()+"/v1/completions", `{"prompt":"nixl ranks","kv_transfer_params":`+string(right)+`}`); status != 200 {
		t.Errorf("pull naming rank 1: %d %s", status, body)
	}
}

// TestTransferStore checks the Mooncake store's waits, discards and expiry in simulated time.
func TestTransferStore(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newTransferStore(time.Minute, 2)
		rec := kvRecord{PromptTokens: 3}
		// A pull before publication waits; publication wakes it.
		done := make(chan kvRecord, 1)
		go func() {
			r, waited, err := s.pull(t.Context(), "a")
			if err != nil || !waited {
				t.Errorf("pull: waited %v err %v", waited, err)
			}
			done <- r
		}()
		synctest.Wait()
		s.publish("a", rec)
		if got := <-done; got != rec {
			t.Errorf("pulled %+v", got)
		}
		// Taken once only.
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		if _, _, err := s.pull(ctx, "a"); err == nil {
			t.Error("a second pull of a taken transfer succeeded")
		}
		cancel()
		// A discarded transfer leaves its waiter waiting until it gives up.
		ctx, cancel = context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		go func() {
			if _, _, err := s.pull(ctx, "b"); err == nil {
				t.Error("pull of a discarded transfer succeeded")
			}
			done <- kvRecord{}
		}()
		synctest.Wait()
		s.discard("b")
		s.publish("c", rec) // another id
		<-done
		if len(s.entries) != 1 {
			t.Errorf("%d entries left, want only c", len(s.entries))
		}
		// Published records expire after the TTL and are bounded.
		time.Sleep(time.Minute) // fake time inside the synctest bubble: past the records' TTL
		s.publish("d", rec)
		s.publish("e", rec)
		s.publish("f", rec)
		if s.size() != 2 || s.expired != 2 {
			t.Errorf("size %d expired %d, want 2 and 2 (c by age, d by bound)", s.size(), s.expired)
		}
	})
}
