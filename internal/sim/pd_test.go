package sim

import (
	"encoding/json"
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

func TestSGLangRendezvous(t *testing.T) {
	base := Config{Mode: ModeInstant, Seed: 5, BootstrapTimeout: 300 * time.Millisecond}
	pcfg, dcfg, rcfg := base, base, base
	pcfg.Role, dcfg.Role = RolePrefill, RoleDecode
	p, d, reg := startEngine(t, pcfg), startEngine(t, dcfg), startEngine(t, rcfg)
	c := testClient(t)
	const chat = `{"model":"sim-model","messages":[{"role":"user","content":"tell me a story"}],"max_tokens":5}`
	bp := p.BootstrapPort()

	t.Run("matched room", func(t *testing.T) {
		body := withBootstrap(chat, "127.0.0.1", bp, uint64(1)<<62+7)
		pr, dr := sendBoth(t, c, p.URL()+"/v1/chat/completions", body, d.URL()+"/v1/chat/completions", body)
		if pr.status != 200 || dr.status != 200 {
			t.Fatalf("prefill %d %s, decode %d %s", pr.status, pr.body, dr.status, dr.body)
		}
		// The decode's output is the regular engine's output: same seed, same prompt.
		_, want := post(t, c, reg.URL()+"/v1/chat/completions", chat)
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
	})

	t.Run("missing prefill times out", func(t *testing.T) {
		d.ResetStats()
		body := withBootstrap(chat, "127.0.0.1", bp, 12345)
		status, resp := post(t, c, d.URL()+"/v1/chat/completions", body)
		if eb := decodeJSON[errorBody](t, resp); status != 500 || eb.Error.Code != "bootstrap_timeout" {
			t.Errorf("status %d body %s, want 500 bootstrap_timeout", status, resp)
		}
		// Streaming: the head is out already, so the abort is an error frame, then [DONE].
		sbody := withBootstrap(`{"messages":[{"role":"user","content":"x"}],"stream":true}`, "127.0.0.1", bp, 12346)
		status, resp = post(t, c, d.URL()+"/v1/chat/completions", sbody)
		ev := sseEvents(t, resp)
		if status != 200 || len(ev) != 2 || !strings.Contains(ev[0], `"code":"bootstrap_timeout"`) || ev[1] != "[DONE]" {
			t.Errorf("streaming timeout: %d %q", status, ev)
		}
		if st := d.Stats(); st.BootstrapTimeouts != 2 || st.Failed != 2 {
			t.Errorf("decode stats %+v, want 2 timeouts and 2 failures", st)
		}
	})

	t.Run("mismatched prompt", func(t *testing.T) {
		d.ResetStats()
		room := 777
		other := `{"model":"sim-model","messages":[{"role":"user","content":"a different prompt"}],"max_tokens":5}`
		pr, dr := sendBoth(t, c, p.URL()+"/v1/chat/completions", withBootstrap(other, "127.0.0.1", bp, room),
			d.URL()+"/v1/chat/completions", withBootstrap(chat, "127.0.0.1", bp, room))
		if pr.status != 200 || dr.status != 500 || decodeJSON[errorBody](t, dr.body).Error.Code != "bootstrap_mismatch" {
			t.Errorf("prefill %d, decode %d %s; want 200, 500 bootstrap_mismatch", pr.status, dr.status, dr.body)
		}
		if st := d.Stats(); st.BootstrapMismatches != 1 {
			t.Errorf("mismatches %d, want 1", st.BootstrapMismatches)
		}
	})

	t.Run("rooms per sample n=2", func(t *testing.T) {
		body := withBootstrap(`{"prompt":"list rooms","max_tokens":3,"n":2}`,
			[]string{"127.0.0.1", "127.0.0.1"}, []int{bp, bp}, []uint64{901, 902})
		pr, dr := sendBoth(t, c, p.URL()+"/v1/completions", body, d.URL()+"/v1/completions", body)
		if pr.status != 200 || dr.status != 200 {
			t.Fatalf("prefill %d %s, decode %d %s", pr.status, pr.body, dr.status, dr.body)
		}
		if n := len(decodeJSON[map[string]any](t, dr.body)["choices"].([]any)); n != 2 {
			t.Errorf("decode choices %d, want 2", n)
		}
		// A scalar room for two samples is rejected.
		status, resp := post(t, c, d.URL()+"/v1/completions", withBootstrap(`{"prompt":"x","n":2}`, "127.0.0.1", bp, 5))
		if status != 400 {
			t.Errorf("scalar room with n=2: %d %s, want 400", status, resp)
		}
	})

	t.Run("generate batch", func(t *testing.T) {
		body := withBootstrap(`{"text":["one","two three"],"sampling_params":{"max_new_tokens":2}}`,
			[]string{"127.0.0.1", "127.0.0.1"}, []int{bp, bp}, []uint64{1001, 1002})
		pr, dr := sendBoth(t, c, p.URL()+"/generate", body, d.URL()+"/generate", body)
		if pr.status != 200 || dr.status != 200 || len(decodeJSON[[]any](t, dr.body)) != 2 {
			t.Errorf("prefill %d %s, decode %d %s", pr.status, pr.body, dr.status, dr.body)
		}
	})

	t.Run("decode needs bootstrap fields", func(t *testing.T) {
		status, resp := post(t, c, d.URL()+"/generate", `{"text":"hi"}`)
		if status != 400 {
			t.Errorf("decode without bootstrap: %d %s, want 400", status, resp)
		}
		status, resp = post(t, c, d.URL()+"/generate", withBootstrap(`{"text":"hi"}`, "127.0.0.1", nil, 5))
		if status != 400 {
			t.Errorf("decode with null bootstrap_port: %d %s, want 400", status, resp)
		}
	})
}

func TestRoomStoreExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newRoomStore(time.Minute, 3)
		s.publish(1, kvRecord{PromptTokens: 1})
		time.Sleep(2 * time.Minute) // simulated time: the room outlives its TTL
		s.publish(2, kvRecord{PromptTokens: 2})
		if _, ok := s.take(1); ok {
			t.Error("room 1 outlived its TTL")
		}
		for k := uint64(3); k <= 6; k++ {
			s.publish(k, kvRecord{})
		}
		if got := s.size(); got != 3 {
			t.Errorf("size %d, want the cap 3", got)
		}
		// A waiter gets a room published after it started waiting.
		done := make(chan kvRecord)
		go func() {
			rec, _ := s.claim(t.Context(), 42)
			done <- rec
		}()
		synctest.Wait()
		s.publish(42, kvRecord{PromptTokens: 42})
		if rec := <-done; rec.PromptTokens != 42 {
			t.Errorf("claimed %+v", rec)
		}
	})
}

func TestVLLMKVTransfer(t *testing.T) {
	base := Config{Mode: ModeInstant, Protocol: ProtocolVLLM, Seed: 9}
	pcfg, dcfg := base, base
	pcfg.Role, dcfg.Role = RolePrefill, RoleDecode
	p, d := startEngine(t, pcfg), startEngine(t, dcfg)
	c := testClient(t)

	prefillBody := `{"model":"sim-model","prompt":"vllm style prompt","max_tokens":1,"stream":false,
		"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}}`
	status, body := post(t, c, p.URL()+"/v1/completions", prefillBody)
	if status != 200 {
		t.Fatalf("prefill %d %s", status, body)
	}
	pr := decodeJSON[struct {
		KV map[string]any `json:"kv_transfer_params"`
	}](t, body)
	if pr.KV["do_remote_prefill"] != true || pr.KV["do_remote_decode"] != false || pr.KV["remote_port"] != float64(p.Port()) ||
		pr.KV["remote_host"] != "127.0.0.1" || pr.KV["remote_engine_id"] != p.ID() || len(pr.KV["remote_block_ids"].([]any)) == 0 {
		t.Fatalf("prefill kv_transfer_params %v", pr.KV)
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
	if status, body = post(t, c, d.URL()+"/v1/completions", decodeBody); status != 500 || decodeJSON[errorBody](t, body).Error.Code != "kv_transfer_failed" {
		t.Errorf("second pull: %d %s, want 500 kv_transfer_failed", status, body)
	}
	// A different prompt with the params is a mismatch.
	_, body = post(t, c, p.URL()+"/v1/completions", prefillBody)
	kv, _ = json.Marshal(decodeJSON[struct {
		KV map[string]any `json:"kv_transfer_params"`
	}](t, body).KV)
	status, body = post(t, c, d.URL()+"/v1/completions", `{"prompt":"another prompt","kv_transfer_params":`+string(kv)+`}`)
	if status != 500 || decodeJSON[errorBody](t, body).Error.Code != "bootstrap_mismatch" || d.Stats().BootstrapMismatches != 1 {
		t.Errorf("mismatch: %d %s", status, body)
	}
	// Without params the decode recomputes the prompt.
	if status, body = post(t, c, d.URL()+"/v1/completions", `{"prompt":"no params here","max_tokens":2}`); status != 200 {
		t.Errorf("decode without params: %d %s", status, body)
	}
	if st := d.Stats(); st.RecomputedPrompts != 1 {
		t.Errorf("recomputed prompts %d, want 1", st.RecomputedPrompts)
	}
}

func TestWorkerRPC(t *testing.T) {
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
		if connect.CodeOf(err) != connect.CodeInternal || !strings.Contains(err.Error(), "did not arrive") {
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
