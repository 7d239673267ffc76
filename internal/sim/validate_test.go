package sim

import (
	"strings"
	"testing"
)

// TestContextLength: a prompt over the context (with max_tokens) is refused with each engine's 400.
func TestContextLength(t *testing.T) {
	t.Parallel()
	sg := startEngine(t, Config{Mode: ModeInstant, ContextLength: 64})
	vl := startEngine(t, Config{Mode: ModeInstant, ContextLength: 64, Protocol: ProtocolVLLM})
	c := testClient(t)
	prompt := func(n int) string { return jsonString(words(n, "")) } // n tokens
	tests := []struct {
		name     string
		e        *Engine
		path     string
		body     string
		want     int
		wantMsg  string // exact message
		wantPara string // vLLM param
	}{
		{name: "sglang fits", e: sg, path: "/v1/completions", body: `{"prompt":` + prompt(63) + `}`, want: 200},
		{name: "sglang input reaches the context", e: sg, path: "/v1/completions", body: `{"prompt":` + prompt(64) + `}`, want: 400,
			wantMsg: "The input (64 tokens) is longer than the model's context length (64 tokens)."},
		{name: "sglang input plus max_tokens", e: sg, path: "/v1/completions", body: `{"prompt":` + prompt(60) + `,"max_tokens":5}`, want: 400,
			wantMsg: "Requested token count exceeds the model's maximum context length of 64 tokens. You requested a total of 65 tokens: " +
				"60 tokens from the input messages and 5 tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit."},
		{name: "sglang input plus max_tokens exactly fits", e: sg, path: "/v1/completions", body: `{"prompt":` + prompt(60) + `,"max_tokens":4}`, want: 200},
		{name: "sglang generate", e: sg, path: "/generate", body: `{"text":` + prompt(70) + `}`, want: 400,
			wantMsg: "The input (70 tokens) is longer than the model's context length (64 tokens)."},
		{name: "vllm fits with max_tokens", e: vl, path: "/v1/completions", body: `{"prompt":` + prompt(60) + `,"max_tokens":4}`, want: 200},
		{name: "vllm over with max_tokens", e: vl, path: "/v1/completions", body: `{"prompt":` + prompt(60) + `,"max_tokens":5}`, want: 400, wantPara: "input_tokens",
			wantMsg: "You passed 60 input tokens and requested 5 output tokens. However, the model's context length is only 64 tokens, " +
				"resulting in a maximum input length of 59 tokens. Please reduce the length of the input prompt. (parameter=input_tokens, value=60)"},
		{name: "vllm input over the context", e: vl, path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":` + prompt(80) + `}]}`, want: 400, wantPara: "input_tokens"},
		{name: "vllm max_tokens over the context", e: vl, path: "/v1/completions", body: `{"prompt":"hi","max_tokens":65}`, want: 400, wantPara: "max_tokens"},
		{name: "vllm no room left for output", e: vl, path: "/v1/completions", body: `{"prompt":` + prompt(64) + `}`, want: 400, wantPara: "max_tokens",
			wantMsg: "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := post(t, c, tt.e.URL()+tt.path, tt.body)
			if status != tt.want {
				t.Fatalf("status %d, want %d: %s", status, tt.want, body)
			}
			if tt.want == 200 {
				return
			}
			var msg string
			switch {
			case tt.e.cfg.Protocol == ProtocolVLLM:
				eb := decodeJSON[vllmErr](t, body)
				msg = eb.Error.Message
				if eb.Error.Type != "BadRequestError" || eb.Error.Code != 400 || eb.Error.Param == nil || *eb.Error.Param != tt.wantPara {
					t.Errorf("vLLM error %s: want BadRequestError, code 400, param %q", body, tt.wantPara)
				}
			case tt.path == "/generate":
				msg = decodeJSON[struct {
					Error struct {
						Message string `json:"message"`
					} `json:"error"`
				}](t, body).Error.Message
			default:
				eb := decodeJSON[sglangErr](t, body)
				msg = eb.Message
				if eb.Object != "error" || eb.Type != "BadRequestError" || eb.Code != 400 {
					t.Errorf("SGLang error %s: want object error, BadRequestError, 400", body)
				}
			}
			if msg == "" || (tt.wantMsg != "" && msg != tt.wantMsg) {
				t.Errorf("message %q, want %q", msg, tt.wantMsg)
			}
		})
	}
}

// TestSamplingValidation: invalid sampling parameters get each engine's status, shape and message.
func TestSamplingValidation(t *testing.T) {
	t.Parallel()
	sg := startEngine(t, Config{Mode: ModeInstant})
	vl := startEngine(t, Config{Mode: ModeInstant, Protocol: ProtocolVLLM})
	c := testClient(t)
	tests := []struct {
		name      string
		e         *Engine
		body      string
		want      int
		wantMsg   string
		wantParam string // vLLM
	}{
		{name: "sglang max_tokens negative", e: sg, body: `{"prompt":"hi","max_tokens":-5}`, want: 400, wantMsg: "max_new_tokens must be at least 0, got -5."},
		{name: "sglang max_tokens 0 is allowed", e: sg, body: `{"prompt":"hi","max_tokens":0}`, want: 200},
		{name: "sglang temperature negative", e: sg, body: `{"prompt":"hi","temperature":-1}`, want: 400, wantMsg: "temperature must be a non-negative finite number, got -1.0."},
		{name: "sglang temperature 3 is allowed", e: sg, body: `{"prompt":"hi","temperature":3}`, want: 200},
		{name: "sglang top_p over 1", e: sg, body: `{"prompt":"hi","top_p":1.5}`, want: 400, wantMsg: "top_p must be in (0, 1], got 1.5."},
		{name: "sglang top_p 0", e: sg, body: `{"prompt":"hi","top_p":0}`, want: 400, wantMsg: "top_p must be in (0, 1], got 0.0."},
		{name: "vllm max_tokens negative", e: vl, body: `{"prompt":"hi","max_tokens":-5}`, want: 400, wantParam: "max_tokens",
			wantMsg: "max_tokens must be at least 1, got -5. (parameter=max_tokens, value=-5)"},
		{name: "vllm max_tokens 0", e: vl, body: `{"prompt":"hi","max_tokens":0}`, want: 400, wantParam: "max_tokens"},
		{name: "vllm temperature negative", e: vl, body: `{"prompt":"hi","temperature":-1}`, want: 400, wantParam: "temperature",
			wantMsg: "temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)"},
		{name: "vllm temperature over 2", e: vl, body: `{"prompt":"hi","temperature":3}`, want: 400, wantParam: "temperature"},
		{name: "vllm top_p over 1", e: vl, body: `{"prompt":"hi","top_p":1.5}`, want: 400, wantParam: "top_p",
			wantMsg: "top_p must be in (0, 1], got 1.5. (parameter=top_p, value=1.5)"},
		{name: "vllm n negative", e: vl, body: `{"prompt":"hi","n":-1}`, want: 400, wantMsg: "n must be at least 1, got -1."},
		{name: "vllm greedy n=2", e: vl, body: `{"prompt":"hi","n":2,"temperature":0}`, want: 400, wantMsg: "n must be 1 when using greedy sampling, got 2."},
		{name: "vllm valid", e: vl, body: `{"prompt":"hi","n":2,"temperature":0.7,"top_p":0.9,"max_tokens":3}`, want: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, stream := range []bool{false, true} {
				body := tt.body
				if stream {
					body = strings.TrimSuffix(body, "}") + `,"stream":true}`
				}
				// Both engines refuse before streaming: a plain JSON error, never an SSE head.
				status, resp := post(t, c, tt.e.URL()+"/v1/completions", body)
				if status != tt.want {
					t.Fatalf("stream=%v: status %d, want %d: %s", stream, status, tt.want, resp)
				}
				if tt.want == 200 {
					continue
				}
				if tt.e.cfg.Protocol == ProtocolVLLM {
					eb := decodeJSON[vllmErr](t, resp)
					if eb.Error.Type != "BadRequestError" || eb.Error.Code != 400 || (tt.wantMsg != "" && eb.Error.Message != tt.wantMsg) ||
						(eb.Error.Param == nil) != (tt.wantParam == "") || (eb.Error.Param != nil && *eb.Error.Param != tt.wantParam) {
						t.Errorf("stream=%v: %s, want message %q param %q", stream, resp, tt.wantMsg, tt.wantParam)
					}
					continue
				}
				eb := decodeJSON[sglangErr](t, resp)
				if eb.Object != "error" || eb.Type != "BadRequestError" || eb.Code != 400 || eb.Message != tt.wantMsg {
					t.Errorf("stream=%v: %s, want message %q", stream, resp, tt.wantMsg)
				}
			}
		})
	}

	// SGLang's /generate answers a streaming request before validating it: the error is a frame.
	status, resp := post(t, c, sg.URL()+"/generate", `{"text":"hi","sampling_params":{"temperature":-1},"stream":true}`)
	if ev := sseEvents(t, resp); status != 200 || len(ev) != 2 || ev[0] != `{"error":{"message":"temperature must be a non-negative finite number, got -1.0."}}` || ev[1] != "[DONE]" {
		t.Errorf("/generate stream: %d %q", status, ev)
	}
}

func TestPyFloat(t *testing.T) {
	t.Parallel()
	for v, want := range map[float64]string{-1: "-1.0", 0.5: "0.5", 0: "0.0", 1e-7: "1e-07", 2.5e16: "2.5e+16", 1.5: "1.5"} {
		if got := pyFloat(v); got != want {
			t.Errorf("pyFloat(%g) = %q, want %q", v, got, want)
		}
	}
}
