package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// Structured output over the engines' gRPC (issue #35): OpenAI's response_format and the engines'
// own regex and ebnf extras, sent through the official OpenAI SDK, must reach each engine's own
// constraint field (SGLang's SamplingParams regex/json_schema/ebnf_grammar; vLLM's json_schema/regex/
// grammar/json_object; TensorRT-LLM's guided_decoding), on the leg that generates. The simulator records the constraint it received
// (Stats.LastConstraint) and answers a JSON constraint with one JSON object ended by its EOS, so a
// dropped constraint shows as unparsable text and a misrouted one as the wrong field.

// wantedConstraint is the field and value each protocol's engine must receive for a request.
type wantedConstraint struct{ sglang, vllm, trtllm sim.Constraint }

func (w wantedConstraint) of(p sim.Protocol) sim.Constraint {
	switch p {
	case sim.ProtocolVLLM:
		return w.vllm
	case sim.ProtocolTRTLLM:
		return w.trtllm
	}
	return w.sglang
}

// structuredSchema is the json_schema case's schema: an object whose one string property the
// simulator's JSON object has.
var structuredSchema = map[string]any{
	"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}, "required": []any{"text"},
}

// TestEngineGRPCStructuredOutput: regular and PD, SGLang and vLLM (and TensorRT-LLM, regular only),
// json_object and json_schema (whole and streamed; the answer must parse as a JSON object and end with
// "stop"), the regex and ebnf extras, /generate's sampling_params.json_schema, and conflicting
// constraints refused with a 400 that no engine sees.
func TestEngineGRPCStructuredOutput(t *testing.T) {
	t.Parallel()
	tok := byteTokenizerDir(t)
	for _, tp := range engineGRPCTopologies() {
		t.Run(tp.name, func(t *testing.T) {
			c := startCluster(t, tp.cluster)
			args := engineGRPCArgs(c, tok)
			if tp.args != nil {
				args = append(args, tp.args(c)...)
			}
			gw := startGateway(t, app.Options{}, args...)
			waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
			client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
			s := structuredRow{t: t, client: &client, c: c, protocol: tp.cluster.Protocol, gw: gw.URL}
			s.jsonCases()
			s.extraCases()
			s.conflict()
			if tp.cluster.Protocol == sim.ProtocolSGLang {
				s.generateCases()
			}
		})
	}
}

type structuredRow struct {
	t        *testing.T
	client   *openai.Client
	c        *sim.Cluster
	protocol sim.Protocol
	gw       string
}

// generating are the engines that must get the constraint: the decode of a PD pair (the prefill of
// SGLang too: it samples the first output token, which the decode continues from), else the regular
// engine. vLLM's prefill leg runs max_tokens=1 for its KV only, so it is not required there.
func (s structuredRow) generating() []*sim.Engine {
	if len(s.c.ByRole(sim.RolePrefill)) == 0 {
		return s.c.ByRole(sim.RoleRegular)
	}
	if s.protocol == sim.ProtocolSGLang {
		return s.c.Engines
	}
	return s.c.ByRole(sim.RoleDecode)
}

// wantConstraint checks that every generating engine's last constraint is want (a JSON schema
// compared as JSON: the SDK's encoding of the schema is not the test's).
func (s structuredRow) wantConstraint(what string, w wantedConstraint) {
	s.t.Helper()
	want := w.of(s.protocol)
	for _, e := range s.generating() {
		got := e.Stats().LastConstraint
		if got == nil || got.Field != want.Field || !sameJSONOrText(got.Value, want.Value) {
			s.t.Errorf("%s: %s engine %s got constraint %+v, want %+v", what, e.Role(), e.URL(), got, want)
		}
	}
}

func sameJSONOrText(a, b string) bool {
	if a == b {
		return true
	}
	var x, y any
	return json.Unmarshal([]byte(a), &x) == nil && json.Unmarshal([]byte(b), &y) == nil && reflect.DeepEqual(x, y)
}

// wantObject checks that an answer is one JSON object with the simulator's string property, ended
// by the EOS the grammar allows once the object is closed.
func (s structuredRow) wantObject(what, content, finish string) {
	s.t.Helper()
	var obj map[string]any
	if err := json.Unmarshal([]byte(content), &obj); err != nil || finish != "stop" {
		s.t.Errorf("%s: content %q (finish %q) is not one JSON object ended by stop: %v", what, content, finish, err)
		return
	}
	if _, ok := obj["text"].(string); !ok {
		s.t.Errorf("%s: object %q lacks the string property", what, content)
	}
}

func (s structuredRow) jsonCases() {
	t := s.t
	ctx := context.Background()
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Answer in JSON")}
	chat, err := s.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: simModel, Messages: msgs, MaxTokens: openai.Int(16),
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}})
	if err != nil {
		t.Fatalf("chat json_object: %v", err)
	}
	s.wantObject("chat json_object", chat.Choices[0].Message.Content, chat.Choices[0].FinishReason)
	s.wantConstraint("chat json_object", wantedConstraint{
		sglang: sim.Constraint{Field: "json_schema", Value: `{"type":"object"}`}, // SGLang has no json_object
		vllm:   sim.Constraint{Field: "json_object", Value: "true"},
		trtllm: sim.Constraint{Field: "guided_decoding.json_schema", Value: `{"type":"object"}`}})

	schema, _ := json.Marshal(structuredSchema)
	stream := s.client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: simModel, Messages: msgs, MaxTokens: openai.Int(16),
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "answer", Schema: structuredSchema}}}})
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil || len(acc.Choices) != 1 {
		t.Fatalf("chat json_schema stream: %v, %d choices", err, len(acc.Choices))
	}
	s.wantObject("streamed chat json_schema", acc.Choices[0].Message.Content, acc.Choices[0].FinishReason)
	s.wantConstraint("streamed chat json_schema", wantedConstraint{
		sglang: sim.Constraint{Field: "json_schema", Value: string(schema)},
		vllm:   sim.Constraint{Field: "json_schema", Value: string(schema)},
		trtllm: sim.Constraint{Field: "guided_decoding.json_schema", Value: string(schema)}})
}

// extraCases: the regex and ebnf extras of the engines' OpenAI servers, set on the SDK's request as
// extra JSON fields.
func (s structuredRow) extraCases() {
	t := s.t
	ctx := context.Background()
	const regex, grammar = `(yes|no)( [a-z]+)*`, `root ::= "yes" | "no"`
	comp, err := s.client.Completions.New(ctx, openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(simModel),
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Yes or no?")}, MaxTokens: openai.Int(4)},
		option.WithJSONSet("regex", regex))
	if err != nil || len(comp.Choices) != 1 {
		t.Fatalf("completion with regex: %v, %+v", err, comp)
	}
	s.wantConstraint("completion regex", wantedConstraint{
		sglang: sim.Constraint{Field: "regex", Value: regex}, vllm: sim.Constraint{Field: "regex", Value: regex},
		trtllm: sim.Constraint{Field: "guided_decoding.regex", Value: regex}})

	_, err = s.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: simModel, MaxTokens: openai.Int(4),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Yes or no?")}}, option.WithJSONSet("ebnf", grammar))
	if err != nil {
		t.Fatalf("chat with ebnf: %v", err)
	}
	s.wantConstraint("chat ebnf", wantedConstraint{
		sglang: sim.Constraint{Field: "ebnf_grammar", Value: grammar}, vllm: sim.Constraint{Field: "grammar", Value: grammar},
		trtllm: sim.Constraint{Field: "guided_decoding.ebnf_grammar", Value: grammar}})
}

// conflict: two constraints in one request are the gateway's 400 naming response_format, a constraint
// field the gateway does not map a 400 naming it, and no engine sees either request.
func (s structuredRow) conflict() {
	t := s.t
	before := make([]int64, len(s.c.Engines))
	for i, e := range s.c.Engines {
		before[i] = e.Stats().RequestsSeen + e.Stats().Constrained
	}
	_, err := s.client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: simModel, MaxTokens: openai.Int(4),
		Messages:       []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Both")},
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}},
		option.WithJSONSet("regex", "[0-9]+"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "response_format" ||
		apiErr.Type != "invalid_request_error" || !strings.Contains(apiErr.Message, "only one of") {
		t.Errorf("json_object with regex: %v; want a 400 invalid_request_error naming response_format", err)
	}
	// vLLM's structured_outputs is refused by name rather than dropped: the answer would be unconstrained.
	_, err = s.client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: simModel, MaxTokens: openai.Int(4),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Digits")}},
		option.WithJSONSet("structured_outputs", map[string]any{"regex": "[0-9]+"}))
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "structured_outputs" {
		t.Errorf("structured_outputs: %v; want a 400 naming structured_outputs", err)
	}
	for i, e := range s.c.Engines {
		if st := e.Stats(); st.RequestsSeen+st.Constrained != before[i] {
			t.Errorf("%s engine saw a refused request", e.Role())
		}
	}
}

// generateCases: SGLang's /generate with sampling_params.json_schema (the answer's text is the JSON
// object), and a schema that is not JSON: the engine's 400, on a PD pair without the decode leg hanging.
func (s structuredRow) generateCases() {
	t := s.t
	const schema = `{"type":"object"}`
	resp, b := postJSON(t, s.gw+"/generate", `{"text":"json please","sampling_params":{"max_new_tokens":16,"json_schema":"{\"type\":\"object\"}"}}`)
	var gen struct {
		Text string `json:"text"`
		Meta struct {
			Finish struct {
				Type string `json:"type"`
			} `json:"finish_reason"`
		} `json:"meta_info"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &gen) != nil {
		t.Fatalf("generate json_schema: %d %s", resp.StatusCode, b)
	}
	s.wantObject("generate json_schema", gen.Text, gen.Meta.Finish.Type)
	s.wantConstraint("generate json_schema", wantedConstraint{sglang: sim.Constraint{Field: "json_schema", Value: schema}})

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := post(ctx, s.gw+"/generate", `{"text":"bad","sampling_params":{"json_schema":"{not json"}}`)
	if err != nil {
		t.Fatalf("generate with a bad schema: %v (a hang ends at the deadline)", err)
	}
	defer resp.Body.Close()
	b, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "Invalid grammar request") {
		t.Errorf("generate with a schema that is not JSON: %d %s; want the engine's 400", resp.StatusCode, b)
	}
}

// generateLP is what the logprob test reads of a /generate answer or frame. Entries are SGLang's
// [logprob, token id, text] triples (text null: return_text_in_logprobs is off).
type generateLP struct {
	Text      string   `json:"text"`
	OutputIDs []uint32 `json:"output_ids"`
	Meta      struct {
		Finish       any                `json:"finish_reason"`
		PromptTokens int                `json:"prompt_tokens"`
		Input        *[][3]any          `json:"input_token_logprobs"`
		Output       *[][3]any          `json:"output_token_logprobs"`
		OutputTop    *[]json.RawMessage `json:"output_top_logprobs"`
	} `json:"meta_info"`
}

// TestEngineGRPCGenerateLogprobsPD: SGLang's /generate with return_logprob through a PD pair over the
// engines' gRPC, whole and streamed: output_token_logprobs one entry per output id (the ids the
// answer's output_ids has), output_top_logprobs top_logprobs_num alternatives per position led by the
// token itself, the prompt's input_token_logprobs from the prefill leg (merged as mini_lb does) from
// logprob_start_len on, the first without a value; a logprob_start_len past the prompt is a 400.
func TestEngineGRPCGenerateLogprobsPD(t *testing.T) {
	t.Parallel()
	m := pdModes()[1]
	if m.name != "grpc-sglang" {
		t.Fatalf("pdModes()[1] is %s", m.name)
	}
	c := m.startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Engine: engineGRPCConfig()})
	gw := m.startGateway(t, c)
	const prompt = "one two three"
	body := func(extra string) string {
		return `{"text":"` + prompt + `","return_logprob":true,"sampling_params":{"max_new_tokens":3}` + extra + `}`
	}

	resp, b := postJSON(t, gw.URL+"/generate", body(`,"top_logprobs_num":2`))
	var g generateLP
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &g) != nil {
		t.Fatalf("generate: %d %s", resp.StatusCode, b)
	}
	checkOutputLP(t, "unary", &g, 2)
	checkInputLP(t, "unary", &g, prompt, 0)

	resp, b = postJSON(t, gw.URL+"/generate", body(`,"logprob_start_len":4`))
	g = generateLP{}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &g) != nil {
		t.Fatalf("generate from logprob_start_len 4: %d %s", resp.StatusCode, b)
	}
	checkOutputLP(t, "logprob_start_len 4", &g, 0)
	checkInputLP(t, "logprob_start_len 4", &g, prompt, 4)

	if resp, b = postJSON(t, gw.URL+"/generate", body(`,"logprob_start_len":13`)); resp.StatusCode != http.StatusBadRequest ||
		!strings.Contains(string(b), "logprob_start_len") {
		t.Errorf("logprob_start_len past the prompt: %d %s; want the engine's 400", resp.StatusCode, b)
	}
	if _, b = postJSON(t, gw.URL+"/generate", `{"text":"`+prompt+`","sampling_params":{"max_new_tokens":2}}`); strings.Contains(string(b), "token_logprobs") {
		t.Errorf("generate without return_logprob answered logprobs: %s", b)
	}

	resp, b = postJSON(t, gw.URL+"/generate", body(`,"top_logprobs_num":1,"stream":true`))
	frames := strings.Split(strings.TrimSpace(string(b)), "\n\n")
	if resp.StatusCode != http.StatusOK || len(frames) < 3 || frames[len(frames)-1] != "data: [DONE]" {
		t.Fatalf("generate stream: %d %s", resp.StatusCode, b)
	}
	// Every frame is cumulative, as SGLang's HTTP stream is: its logprobs cover its output_ids so far,
	// and carry the prompt's.
	for i, f := range frames[:len(frames)-1] {
		g = generateLP{}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(f, "data: ")), &g); err != nil {
			t.Fatalf("frame %d %q: %v", i, f, err)
		}
		checkOutputLP(t, "stream frame "+itoa(i), &g, 1)
		checkInputLP(t, "stream frame "+itoa(i), &g, prompt, 0)
	}
	if g.Meta.Finish == nil || len(g.OutputIDs) == 0 {
		t.Errorf("last stream frame: finish %v, %d output ids", g.Meta.Finish, len(g.OutputIDs))
	}
}

// checkOutputLP: one output entry per output id, with a logprob and that id; k alternatives each,
// led by the token itself (top 0: no output_top_logprobs).
func checkOutputLP(t *testing.T, what string, g *generateLP, k int) {
	t.Helper()
	if g.Meta.Output == nil || len(*g.Meta.Output) != len(g.OutputIDs) || len(g.OutputIDs) == 0 {
		t.Fatalf("%s: output_token_logprobs %v for output_ids %v", what, g.Meta.Output, g.OutputIDs)
	}
	var text []byte
	for i, e := range *g.Meta.Output {
		lp, ok := e[0].(float64)
		if id, _ := e[1].(float64); !ok || lp >= 0 || uint32(id) != g.OutputIDs[i] || e[2] != nil {
			t.Errorf("%s: output entry %d = %v, output id %d", what, i, e, g.OutputIDs[i])
		}
		text = append(text, byte(g.OutputIDs[i]))
	}
	if string(text) != g.Text {
		t.Errorf("%s: output ids spell %q, text %q", what, text, g.Text)
	}
	if k == 0 {
		if g.Meta.OutputTop != nil {
			t.Errorf("%s: output_top_logprobs without top_logprobs_num", what)
		}
		return
	}
	if g.Meta.OutputTop == nil || len(*g.Meta.OutputTop) != len(g.OutputIDs) {
		t.Fatalf("%s: output_top_logprobs %v", what, g.Meta.OutputTop)
	}
	for i, raw := range *g.Meta.OutputTop {
		var alts [][3]any
		if err := json.Unmarshal(raw, &alts); err != nil || len(alts) != k || !reflect.DeepEqual(alts[0], (*g.Meta.Output)[i]) {
			t.Errorf("%s: output_top_logprobs[%d] = %s; want %d alternatives led by %v", what, i, raw, k, (*g.Meta.Output)[i])
		}
	}
}

// checkInputLP: the prompt's entries from start (the byte tokenizer's ids are its bytes), the first
// without a logprob.
func checkInputLP(t *testing.T, what string, g *generateLP, prompt string, start int) {
	t.Helper()
	if g.Meta.PromptTokens != len(prompt) || g.Meta.Input == nil || len(*g.Meta.Input) != len(prompt)-start {
		t.Fatalf("%s: %d prompt tokens, input_token_logprobs %v; want %d entries from %d", what, g.Meta.PromptTokens, g.Meta.Input, len(prompt)-start, start)
	}
	for i, e := range *g.Meta.Input {
		id, _ := e[1].(float64)
		lp, has := e[0].(float64)
		if byte(id) != prompt[start+i] || (i == 0) == has || (has && lp >= 0) || e[2] != nil {
			t.Errorf("%s: input entry %d = %v; want prompt byte %q", what, i, e, prompt[start+i])
		}
	}
}
