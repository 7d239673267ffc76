package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	workerv1 "github.com/sluicegw/sluice/gen/sluice/worker/v1"
	"github.com/sluicegw/sluice/gen/sluice/worker/v1/workerv1connect"
)

type legResult struct {
	status int
	body   []byte
}

// sendBoth posts bodies to the prefill and decode engines at the same time, as an SGLang-style gateway does.
func sendBoth(t *testing.T, c *http.Client, prefillURL, prefillBody, decodeURL, decodeBody string) (p, d legResult) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Go(func() { p.status, p.body = post(t, c, prefillURL, prefillBody) })
	wg.Go(func() { d.status, d.body = post(t, c, decodeURL, decodeBody) })
	wg.Wait()
	return p, d
}

func withBootstrap(body string, host any, port any, room any) string {
	extra, _ := json.Marshal(map[string]any{"bootstrap_host": host, "bootstrap_port": port, "bootstrap_room": room})
	return strings.TrimSuffix(body, "}") + "," + strings.TrimPrefix(string(extra), "{")
}

// sglangErr is SGLang's legacy ErrorResponse (OpenAI routes).
type sglangErr struct {
	Object  string  `json:"object"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

func TestSGLangRendezvous(t *testing.T) {
	t.Parallel()
	base := Config{Mode: ModeInstant, Seed: 5, BootstrapTimeout: 300 * time.Millisecond}
	pcfg, rcfg := base, base
	pcfg.Role = RolePrefill
	p, reg := startEngine(t, pcfg), startEngine(t, rcfg)
	bp := p.BootstrapPort()
	dcfg := base
	dcfg.Role, dcfg.BootstrapPort = RoleDecode, bp // the fallback for a null bootstrap_port
	d := startEngine(t, dcfg)
	c := testClient(t)
	const chat = `{"model":"sim-model","messages":[{"role":"user","content":"tell me a story"}],"max_tokens":5}`
	chatURL := func(e *Engine) string { return e.URL() + "/v1/chat/completions" }

	t.Run("matched room", func(t *testing.T) {
		const seeded = `{"model":"sim-model","messages":[{"role":"user","content":"tell me a story"}],"max_tokens":5,"seed":3}`
		body := withBootstrap(seeded, "127.0.0.1", bp, uint64(1)<<62+7)
		pr, dr := sendBoth(t, c, chatURL(p), body, chatURL(d), body)
		if pr.status != 200 || dr.status != 200 {
			t.Fatalf("prefill %d %s, decode %d %s", pr.status, pr.body, dr.status, dr.body)
		}
		// The decode's output is the regular engine's output: same seed, same prompt.
		_, want := post(t, c, chatURL(reg), seeded)
		got := decodeJSON[map[string]any](t, dr.body)["choices"].([]any)[0].(map[string]any)["message"]
		exp := decodeJSON[map[string]any](t, want)["choices"].([]any)[0].(map[string]any)["message"]
		if fmt.Sprint(got) != fmt.Sprint(exp) {
			t.Errorf("decode output %v, want %v", got, exp)
		}
		if n := countTokens(decodeJSON[map[string]any](t, pr.body)["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)); n != 1 {
			t.Errorf("prefill produced %d tokens, want 1", n)
		}
		if st := d.Stats(); st.BootstrapWaits != 1 || st.BootstrapTimeouts != 0 || st.Completed != 1 {
			t.Errorf("decode stats %+v", st)
		}
		if st := p.Stats(); st.HandshakeWaits != 1 || st.HandshakeTimeouts != 0 || st.RoomCollisions != 0 {
			t.Errorf("prefill stats %+v", st)
		}
	})

	t.Run("unseeded single samples on their own rooms differ", func(t *testing.T) {
		// SGLang PD splits n > 1 into single-sample requests, each choice 0 on its engine with its own
		// room: their outputs must differ as the engines' random sampling would; seeded ones must not.
		content := func(room uint64, body string) string {
			t.Helper()
			b := withBootstrap(body, "127.0.0.1", bp, room)
			pr, dr := sendBoth(t, c, chatURL(p), b, chatURL(d), b)
			if pr.status != 200 || dr.status != 200 {
				t.Fatalf("room %d: prefill %d %s, decode %d %s", room, pr.status, pr.body, dr.status, dr.body)
			}
			return decodeJSON[map[string]any](t, dr.body)["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
		}
		a, b := content(101, chat), content(102, chat)
		if a == b {
			t.Errorf("unseeded samples on rooms 101 and 102 both said %q", a)
		}
		const seeded = `{"model":"sim-model","messages":[{"role":"user","content":"tell me a story"}],"max_tokens":5,"seed":9}`
		if a, b := content(103, seeded), content(104, seeded); a != b {
			t.Errorf("seeded samples differ across rooms: %q, %q", a, b)
		}
		const greedy = `{"model":"sim-model","messages":[{"role":"user","content":"tell me a story"}],"max_tokens":5,"temperature":0}`
		if a, b := content(105, greedy), content(106, greedy); a != b {
			t.Errorf("greedy samples differ across rooms: %q, %q", a, b)
		}
	})

	t.Run("null or absent bootstrap_port is the engine's own", func(t *testing.T) {
		for i, body := range []string{
			withBootstrap(chat, "127.0.0.1", nil, 31),
			`{"messages":[{"role":"user","content":"no port at all"}],"max_tokens":3,"bootstrap_host":"127.0.0.1","bootstrap_room":32}`,
		} {
			pr, dr := sendBoth(t, c, chatURL(p), body, chatURL(d), body)
			if pr.status != 200 || dr.status != 200 {
				t.Errorf("body %d: prefill %d %s, decode %d %s", i, pr.status, pr.body, dr.status, dr.body)
			}
		}
		// A decode whose own port is SGLang's default 8998 looks there: nothing listens in this test.
		dflt := startEngine(t, Config{Mode: ModeInstant, Role: RoleDecode, BootstrapTimeout: 300 * time.Millisecond})
		if got := dflt.Config().BootstrapPort; got != DefaultBootstrapPort {
			t.Errorf("decode default bootstrap port %d, want %d", got, DefaultBootstrapPort)
		}
	})

	t.Run("prefill waits for its decode", func(t *testing.T) {
		p.ResetStats()
		d.ResetStats()
		body := withBootstrap(chat, "127.0.0.1", bp, 41)
		prefillDone := make(chan legResult, 1)
		go func() {
			var r legResult
			r.status, r.body = post(t, c, chatURL(p), body)
			prefillDone <- r
		}()
		waitFor(t, "the prefill to wait for its handshake", func() bool { return p.Stats().HandshakeWaiting == 1 })
		select {
		case r := <-prefillDone:
			t.Fatalf("prefill answered before its decode connected: %d %s", r.status, r.body)
		default:
		}
		if st := p.Stats(); st.PrefixCacheHitTokens != 0 || st.PromptTokens != 0 || st.PrefillInFlight != 1 || st.PrefillPeak != 1 {
			t.Errorf("prefill computed before the handshake, or is not counted as prefilling: %+v", st)
		}
		status, resp := post(t, c, chatURL(d), body)
		pr := <-prefillDone
		if status != 200 || pr.status != 200 {
			t.Errorf("decode %d %s, prefill %d %s", status, resp, pr.status, pr.body)
		}
		if ps, ds := p.Stats(), d.Stats(); ps.PrefillInFlight != 0 || ps.PrefillPeak != 1 || ds.PrefillPeak != 0 {
			t.Errorf("prefill in flight %d peak %d, decode peak %d; want 0, 1, 0 (a decode leg computes no prompt)", ps.PrefillInFlight, ps.PrefillPeak, ds.PrefillPeak)
		}
	})

	t.Run("prefill alone times out", func(t *testing.T) {
		p.ResetStats()
		status, resp := post(t, c, chatURL(p), withBootstrap(chat, "127.0.0.1", bp, 42))
		eb := decodeJSON[sglangErr](t, resp)
		if status != 500 || eb.Object != "error" || eb.Code != 500 || eb.Type != "500" ||
			!strings.HasPrefix(eb.Message, "Prefill bootstrap failed for request") || !strings.Contains(eb.Message, "timed out after 0.3s in KVPoll.Bootstrapping") {
			t.Errorf("lonely prefill: %d %s", status, resp)
		}
		if st := p.Stats(); st.HandshakeTimeouts != 1 || st.Failed != 1 || st.PromptTokens != 0 {
			t.Errorf("prefill stats %+v", st)
		}
	})

	t.Run("decode alone times out", func(t *testing.T) {
		d.ResetStats()
		status, resp := post(t, c, chatURL(d), withBootstrap(chat, "127.0.0.1", bp, 12345))
		if eb := decodeJSON[sglangErr](t, resp); status != 500 || eb.Code != 500 || !strings.HasPrefix(eb.Message, "Decode transfer failed for request") ||
			!strings.Contains(eb.Message, "bootstrap_room=12345") {
			t.Errorf("status %d body %s, want 500 Decode transfer failed", status, resp)
		}
		// Streaming: SGLang's OpenAI routes send the head with the first chunk, here the abort.
		sbody := withBootstrap(`{"messages":[{"role":"user","content":"x"}],"stream":true}`, "127.0.0.1", bp, 12346)
		status, resp = post(t, c, chatURL(d), sbody)
		ev := sseEvents(t, resp)
		if status != 200 || len(ev) != 2 || ev[1] != "[DONE]" {
			t.Fatalf("streaming timeout: %d %q", status, ev)
		}
		frame := decodeJSON[struct {
			Error sglangErr `json:"error"`
		}](t, []byte(ev[0]))
		if frame.Error.Type != "INTERNAL_SERVER_ERROR" || frame.Error.Code != 500 || !strings.Contains(frame.Error.Message, "KVPoll.WaitingForInput") {
			t.Errorf("stream error frame %s", ev[0])
		}
		if st := d.Stats(); st.BootstrapTimeouts != 2 || st.Failed != 2 {
			t.Errorf("decode stats %+v, want 2 timeouts and 2 failures", st)
		}
	})

	t.Run("mismatched prompt", func(t *testing.T) {
		d.ResetStats()
		room := 777
		other := `{"model":"sim-model","messages":[{"role":"user","content":"a different prompt"}],"max_tokens":5}`
		pr, dr := sendBoth(t, c, chatURL(p), withBootstrap(other, "127.0.0.1", bp, room),
			chatURL(d), withBootstrap(chat, "127.0.0.1", bp, room))
		if pr.status != 200 || dr.status != 500 || !strings.Contains(decodeJSON[sglangErr](t, dr.body).Message, "KV transfer mismatch") {
			t.Errorf("prefill %d, decode %d %s; want 200, 500 mismatch", pr.status, dr.status, dr.body)
		}
		if st := d.Stats(); st.BootstrapMismatches != 1 {
			t.Errorf("mismatches %d, want 1", st.BootstrapMismatches)
		}
	})

	t.Run("n=2 shares one room and hangs until the timeout", func(t *testing.T) {
		p.ResetStats()
		d.ResetStats()
		// Whatever room list a gateway sends, SGLang gives both samples of the prompt one room.
		for i, body := range []string{
			withBootstrap(`{"prompt":"two samples","max_tokens":3,"n":2}`, "127.0.0.1", bp, 901),
			withBootstrap(`{"prompt":"two samples","max_tokens":3,"n":2}`, []string{"127.0.0.1", "127.0.0.1"}, []int{bp, bp}, []uint64{903, 904}),
		} {
			pr, dr := sendBoth(t, c, p.URL()+"/v1/completions", body, d.URL()+"/v1/completions", body)
			if pr.status != 500 || dr.status != 500 {
				t.Errorf("body %d: prefill %d %s, decode %d %s; want both to time out", i, pr.status, pr.body, dr.status, dr.body)
			}
			if !strings.Contains(decodeJSON[sglangErr](t, dr.body).Message, "timed out after 0.3s") {
				t.Errorf("decode: %s", dr.body)
			}
		}
		if ps, ds := p.Stats(), d.Stats(); ps.RoomCollisions != 2 || ds.RoomCollisions != 2 {
			t.Errorf("room collisions: prefill %d, decode %d; want 2 each", ps.RoomCollisions, ds.RoomCollisions)
		}
		// The same two samples as two single-sample requests with their own rooms work.
		var texts []string
		for _, room := range []uint64{905, 906} {
			body := withBootstrap(`{"prompt":"two samples","max_tokens":3,"seed":`+fmt.Sprint(room)+`}`, "127.0.0.1", bp, room)
			pr, dr := sendBoth(t, c, p.URL()+"/v1/completions", body, d.URL()+"/v1/completions", body)
			if pr.status != 200 || dr.status != 200 {
				t.Fatalf("split sample: prefill %d %s, decode %d %s", pr.status, pr.body, dr.status, dr.body)
			}
			texts = append(texts, decodeJSON[map[string]any](t, dr.body)["choices"].([]any)[0].(map[string]any)["text"].(string))
		}
		if len(texts) != 2 || texts[0] == texts[1] {
			t.Errorf("split samples %q, want two different texts", texts)
		}
	})

	t.Run("room list per prompt", func(t *testing.T) {
		body := withBootstrap(`{"text":["one","two three"],"sampling_params":{"max_new_tokens":2}}`,
			[]string{"127.0.0.1", "127.0.0.1"}, []int{bp, bp}, []uint64{1001, 1002})
		pr, dr := sendBoth(t, c, p.URL()+"/generate", body, d.URL()+"/generate", body)
		if pr.status != 200 || dr.status != 200 || len(decodeJSON[[]any](t, dr.body)) != 2 {
			t.Errorf("prefill %d %s, decode %d %s", pr.status, pr.body, dr.status, dr.body)
		}
		// A scalar room serves a batch too: prompt i gets room+i.
		body = withBootstrap(`{"prompt":["alpha","beta gamma"],"max_tokens":2}`, "127.0.0.1", bp, 1010)
		pr, dr = sendBoth(t, c, p.URL()+"/v1/completions", body, d.URL()+"/v1/completions", body)
		if pr.status != 200 || dr.status != 200 {
			t.Errorf("scalar room for a batch: prefill %d %s, decode %d %s", pr.status, pr.body, dr.status, dr.body)
		}
		// A list shorter than the batch is SGLang's IndexError.
		short := withBootstrap(`{"prompt":["alpha","beta"],"max_tokens":2}`, "127.0.0.1", bp, []uint64{1020})
		status, resp := post(t, c, d.URL()+"/v1/completions", short)
		if eb := decodeJSON[sglangErr](t, resp); status != 500 || eb.Type != "InternalServerError" || eb.Message != "Internal server error: list index out of range" {
			t.Errorf("short room list: %d %s", status, resp)
		}
		status, resp = post(t, c, d.URL()+"/generate", withBootstrap(`{"text":["a","b"]}`, "127.0.0.1", bp, []uint64{1021}))
		if status != 500 || string(resp) != "Internal Server Error" {
			t.Errorf("short room list on /generate: %d %s", status, resp)
		}
	})

	t.Run("PD engines need a room", func(t *testing.T) {
		for _, e := range []*Engine{p, d} {
			status, resp := post(t, c, chatURL(e), chat)
			if eb := decodeJSON[sglangErr](t, resp); status != 400 || eb.Type != "BadRequestError" || eb.Message != errMissingRoomMsg {
				t.Errorf("%s without a room: %d %s", e.Role(), status, resp)
			}
			status, resp = post(t, c, e.URL()+"/generate", `{"text":"hi"}`)
			if status != 400 || string(resp) != `{"error":{"message":"`+errMissingRoomMsg+`"}}` {
				t.Errorf("%s /generate without a room: %d %s", e.Role(), status, resp)
			}
		}
	})
}

func TestRecordStoreExpiry(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newRecordStore(time.Minute, 3)
		s.publish(1, kvRecord{PromptTokens: 1})
		time.Sleep(2 * time.Minute) // simulated time: the record outlives its TTL
		s.publish(2, kvRecord{PromptTokens: 2})
		if _, ok := s.takeIf(1, func(kvRecord) bool { return true }); ok {
			t.Error("record 1 outlived its TTL")
		}
		for k := uint64(3); k <= 6; k++ {
			s.publish(k, kvRecord{})
		}
		if got := s.size(); got != 3 {
			t.Errorf("size %d, want the cap 3", got)
		}
		if rec, ok := s.takeIf(6, func(kvRecord) bool { return true }); !ok || rec != (kvRecord{}) {
			t.Errorf("take(6) = %+v, %v", rec, ok)
		}
		if _, ok := s.takeIf(6, func(kvRecord) bool { return true }); ok {
			t.Error("a record was taken twice")
		}
	})
}

func TestRendezvous(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		z := newRendezvous(time.Minute, 4)
		// The prefill waits for its decode to connect; the decode then waits for the record.
		connected := make(chan error, 1)
		go func() { connected <- z.awaitConnect(t.Context(), 7) }()
		synctest.Wait()
		select {
		case err := <-connected:
			t.Fatalf("prefill went ahead before any decode connected: %v", err)
		default:
		}
		got := make(chan kvRecord, 1)
		go func() {
			rec, err := z.connect(t.Context(), 7)
			if err != nil {
				t.Error(err)
			}
			got <- rec
		}()
		if err := <-connected; err != nil {
			t.Fatal(err)
		}
		// A second decode on the same room collides.
		if _, err := z.connect(t.Context(), 7); !errors.Is(err, errRoomCollision) {
			t.Errorf("second connect: %v, want a collision", err)
		}
		z.publish(7, kvRecord{PromptTokens: 7})
		if rec := <-got; rec.PromptTokens != 7 {
			t.Errorf("decode got %+v", rec)
		}
		// A prefill whose decode never comes gives up when its context ends, and leaves nothing behind.
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if err := z.awaitConnect(ctx, 8); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("lonely prefill: %v", err)
		}
		// A record nobody claims expires.
		z.publish(9, kvRecord{})
		time.Sleep(2 * time.Minute) // fake time inside the synctest bubble: past the record's TTL
		z.publish(10, kvRecord{})
		z.mu.Lock()
		_, kept9 := z.rooms[9]
		_, kept8 := z.rooms[8]
		n := len(z.rooms)
		z.mu.Unlock()
		if kept9 || kept8 || n != 1 || z.size() != 1 {
			t.Errorf("rooms left: %d (room 9 kept %v, room 8 kept %v), published %d; want only room 10", n, kept9, kept8, z.size())
		}
	})
}

// vllmErr is vLLM's ErrorResponse.
type vllmErr struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    int     `json:"code"`
	} `json:"error"`
}

func TestVLLMKVTransfer(t *testing.T) {
	t.Parallel()
	base := Config{Mode: ModeInstant, Protocol: ProtocolVLLM, Seed: 9}
	pcfg, dcfg := base, base
	pcfg.Role, dcfg.Role = RolePrefill, RoleDecode
	p, d := startEngine(t, pcfg), startEngine(t, dcfg)
	c := testClient(t)

	// The reference proxy's prefill body (toy_proxy_server.py): max_tokens=1 and a do_remote_decode stub.
	prefillBody := func(prompt, extra string) string {
		return `{"model":"sim-model","prompt":` + jsonString(prompt) + `,"max_tokens":1,"stream":false` + extra + `,
		"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}}`
	}
	type kvResp struct {
		KV      map[string]any `json:"kv_transfer_params"`
		Choices []struct {
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	status, body := post(t, c, p.URL()+"/v1/completions", prefillBody("vllm style prompt", ""))
	if status != 200 {
		t.Fatalf("prefill %d %s", status, body)
	}
	pr := decodeJSON[kvResp](t, body)
	if pr.KV["do_remote_prefill"] != true || pr.KV["do_remote_decode"] != false || pr.KV["remote_port"] != float64(p.Port()) ||
		pr.KV["remote_host"] != "127.0.0.1" || pr.KV["remote_engine_id"] != p.ID() || len(pr.KV["remote_block_ids"].([]any)) == 0 ||
		pr.KV["tp_size"] != float64(1) || pr.Choices[0].FinishReason != "length" {
		t.Fatalf("prefill response %s", body)
	}
	kv, _ := json.Marshal(pr.KV)
	decodeBody := `{"model":"sim-model","prompt":"vllm style prompt","max_tokens":6,"kv_transfer_params":` + string(kv) + `}`
	status, body = post(t, c, d.URL()+"/v1/completions", decodeBody)
	if status != 200 {
		t.Fatalf("decode %d %s", status, body)
	}
	if st := d.Stats(); st.RecomputedPrompts != 0 || st.Completed != 1 {
		t.Errorf("decode stats %+v", st)
	}
	// The KV was pulled once: a second pull fails.
	if status, body = post(t, c, d.URL()+"/v1/completions", decodeBody); status != 500 ||
		decodeJSON[vllmErr](t, body).Error.Type != "InternalServerError" || !strings.Contains(string(body), "KV transfer from the prefill engine failed") {
		t.Errorf("second pull: %d %s, want 500", status, body)
	}
	// A different prompt with the params is a mismatch.
	_, body = post(t, c, p.URL()+"/v1/completions", prefillBody("vllm style prompt", ""))
	kv, _ = json.Marshal(decodeJSON[kvResp](t, body).KV)
	status, body = post(t, c, d.URL()+"/v1/completions", `{"prompt":"another prompt","kv_transfer_params":`+string(kv)+`}`)
	if status != 500 || !strings.Contains(decodeJSON[vllmErr](t, body).Error.Message, "KV transfer mismatch") || d.Stats().BootstrapMismatches != 1 {
		t.Errorf("mismatch: %d %s", status, body)
	}

	t.Run("params only when the length cap ended the prefill", func(t *testing.T) {
		p.ResetStats()
		// The one token is a stop string here (the EOS case is the same: finish_reason "stop").
		first := strings.Fields(pr.Choices[0].Text)[0]
		status, body := post(t, c, p.URL()+"/v1/completions", prefillBody("vllm style prompt", `,"stop":[`+jsonString(first)+`]`))
		got := decodeJSON[kvResp](t, body)
		if status != 200 || got.KV != nil || got.Choices[0].FinishReason != "stop" || !strings.Contains(string(body), `"kv_transfer_params":null`) {
			t.Errorf("stopped prefill: %d %s, want finish stop and kv_transfer_params null", status, body)
		}
		// Without max_tokens a prefill runs to its EOS: no params either.
		status, body = post(t, c, p.URL()+"/v1/completions", `{"prompt":"no cap","kv_transfer_params":{"do_remote_decode":true}}`)
		if got := decodeJSON[kvResp](t, body); status != 200 || got.KV != nil || got.Choices[0].FinishReason != "stop" {
			t.Errorf("uncapped prefill: %d %s", status, body)
		}
		if st := p.Stats(); st.KVParamsOmitted != 2 || st.PublishedRooms != 0 {
			t.Errorf("prefill stats %+v, want 2 omitted and no KV kept", st)
		}
	})

	t.Run("omit fault", func(t *testing.T) {
		p.ResetStats()
		setFaults(t, c, p, `{"omit_kv_transfer_params":true}`)
		status, body := post(t, c, p.URL()+"/v1/completions", prefillBody("vllm style prompt", ""))
		if got := decodeJSON[kvResp](t, body); status != 200 || got.KV != nil || got.Choices[0].FinishReason != "length" {
			t.Errorf("prefill with the omit fault: %d %s", status, body)
		}
		setFaults(t, c, p, `{"omit_kv_transfer_params":false}`)
		status, body = post(t, c, p.URL()+"/v1/completions", prefillBody("vllm style prompt", ""))
		if got := decodeJSON[kvResp](t, body); status != 200 || got.KV == nil {
			t.Errorf("prefill after clearing the fault: %d %s", status, body)
		}
		if st := p.Stats(); st.KVParamsOmitted != 1 {
			t.Errorf("omitted %d, want 1", st.KVParamsOmitted)
		}
		// Set at start, too.
		cfg := pcfg
		cfg.Faults.OmitKVTransferParams = true
		p2 := startEngine(t, cfg)
		_, body = post(t, c, p2.URL()+"/v1/completions", prefillBody("vllm style prompt", ""))
		if decodeJSON[kvResp](t, body).KV != nil {
			t.Errorf("prefill started with the omit fault returned params: %s", body)
		}
	})

	t.Run("decode without params recomputes", func(t *testing.T) {
		d.ResetStats()
		if status, body := post(t, c, d.URL()+"/v1/completions", `{"prompt":"no params here","max_tokens":2}`); status != 200 {
			t.Errorf("decode without params: %d %s", status, body)
		}
		if st := d.Stats(); st.RecomputedPrompts != 1 {
			t.Errorf("recomputed prompts %d, want 1", st.RecomputedPrompts)
		}
	})
}

func TestWorkerRPC(t *testing.T) {
	t.Parallel()
	base := Config{Mode: ModeInstant, GRPC: true, Seed: 2}
	pcfg, dcfg := base, base
	pcfg.Role, dcfg.Role = RolePrefill, RoleDecode
	p, d := startEngine(t, pcfg), startEngine(t, dcfg)

	conn, err := grpc.NewClient(strings.TrimPrefix(p.URL(), "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	prefill := workerv1.NewPrefillServiceClient(conn)
	decode := workerv1connect.NewDecodeServiceClient(testClient(t), d.URL())
	prompt := &workerv1.Prompt{Input: &workerv1.Prompt_Text{Text: "rpc prompt text"}}
	sampling := &workerv1.SamplingParams{MaxTokens: 4}

	readDecode := func(req *workerv1.DecodeRequest) (tokens int, last *workerv1.DecodeResponse, err error) {
		stream, err := decode.Decode(t.Context(), req)
		if err != nil {
			return 0, nil, err
		}
		defer stream.Close()
		for stream.Receive() {
			last = stream.Msg()
			if last.GetFinishReason() == "" {
				tokens++
			}
		}
		return tokens, last, stream.Err()
	}

	t.Run("bootstrap", func(t *testing.T) {
		bs := &workerv1.Bootstrap{Host: "127.0.0.1", Port: uint32(p.BootstrapPort()), Room: 4242}
		var wg sync.WaitGroup
		var presp *workerv1.PrefillResponse
		var perr error
		wg.Go(func() {
			presp, perr = prefill.Prefill(t.Context(), &workerv1.PrefillRequest{Prompt: prompt, Sampling: sampling,
				Handshake: &workerv1.PrefillRequest_Bootstrap{Bootstrap: bs}})
		})
		tokens, last, err := readDecode(&workerv1.DecodeRequest{Prompt: prompt, Sampling: sampling, Handshake: &workerv1.DecodeRequest_Bootstrap{Bootstrap: bs}})
		wg.Wait()
		if perr != nil || err != nil {
			t.Fatalf("prefill %v, decode %v", perr, err)
		}
		if presp.GetPromptTokens() != 4 || tokens != 4 || last.GetFinishReason() != "length" || last.GetCompletionTokens() != 4 {
			t.Errorf("prefill %v; decode %d tokens, last %v", presp, tokens, last)
		}
	})

	t.Run("decode timeout", func(t *testing.T) {
		dcfg2 := dcfg
		dcfg2.BootstrapTimeout = 100 * time.Millisecond
		d2 := startEngine(t, dcfg2)
		client := workerv1connect.NewDecodeServiceClient(testClient(t), d2.URL(), connect.WithGRPC())
		stream, err := client.Decode(t.Context(), &workerv1.DecodeRequest{Prompt: prompt,
			Handshake: &workerv1.DecodeRequest_Bootstrap{Bootstrap: &workerv1.Bootstrap{Host: "127.0.0.1", Port: uint32(p.BootstrapPort()), Room: 1}}})
		if err == nil {
			for stream.Receive() {
			}
			err = stream.Err()
			stream.Close()
		}
		if connect.CodeOf(err) != connect.CodeInternal || !strings.Contains(err.Error(), "timed out after 0.1s in KVPoll.WaitingForInput") {
			t.Errorf("err %v, want internal bootstrap timeout", err)
		}
	})

	t.Run("kv transfer", func(t *testing.T) {
		vcfg := base
		vcfg.Role, vcfg.Protocol = RolePrefill, ProtocolVLLM
		vp := startEngine(t, vcfg)
		vprefill := workerv1connect.NewPrefillServiceClient(testClient(t), vp.URL())
		presp, err := vprefill.Prefill(t.Context(), &workerv1.PrefillRequest{Prompt: prompt, Sampling: sampling,
			Handshake: &workerv1.PrefillRequest_KvTransfer{KvTransfer: &workerv1.KVTransferParams{DoRemoteDecode: true}}})
		if err != nil {
			t.Fatal(err)
		}
		kv := presp.GetKvTransfer()
		if !kv.GetDoRemotePrefill() || kv.GetRemotePort() != uint32(vp.Port()) || len(kv.GetRemoteBlockIds()) == 0 {
			t.Fatalf("kv params %v", kv)
		}
		tokens, last, err := readDecode(&workerv1.DecodeRequest{Prompt: prompt, Sampling: sampling, Handshake: &workerv1.DecodeRequest_KvTransfer{KvTransfer: kv}})
		if err != nil || tokens != 4 || last.GetFinishReason() != "length" {
			t.Errorf("decode: %d tokens, last %v, err %v", tokens, last, err)
		}
		if d.Stats().RecomputedPrompts != 0 {
			t.Errorf("recomputed %d, want 0", d.Stats().RecomputedPrompts)
		}
	})

	t.Run("load", func(t *testing.T) {
		load, err := workerv1.NewLoadServiceClient(conn).GetLoad(t.Context(), &workerv1.GetLoadRequest{})
		if err != nil || load.GetKvCapacityTokens() != uint64(p.Config().KVCapacityTokens) {
			t.Errorf("load %v, err %v", load, err)
		}
	})
}
