package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"google.golang.org/protobuf/types/known/structpb"

	openaiv1 "github.com/sluicegw/sluice/gen/sluice/openai/v1"
	"github.com/sluicegw/sluice/gen/sluice/openai/v1/openaiv1connect"
	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

const simModel = "sim-model"

// topology is one way of deploying engines behind the gateway.
type topology struct {
	name    string
	cluster sim.ClusterConfig
	args    func(c *sim.Cluster) []string
	// checkKV asserts the simulator saw every decode get the KV of its matching prefill.
	checkKV func(t *testing.T, c *sim.Cluster)
}

func instantEngine() sim.Config { return sim.Config{Mode: sim.ModeInstant} }

func noMismatches(t *testing.T, c *sim.Cluster) {
	t.Helper()
	var waits int64
	for _, e := range c.ByRole(sim.RoleDecode) {
		st := e.Stats()
		if st.BootstrapMismatches != 0 || st.BootstrapTimeouts != 0 {
			t.Errorf("decode %s: %d mismatched rooms, %d bootstrap timeouts", e.URL(), st.BootstrapMismatches, st.BootstrapTimeouts)
		}
		waits += st.BootstrapWaits
	}
	if waits == 0 {
		t.Errorf("no decode engine waited for a bootstrap room: the PD handshake did not run")
	}
}

func topologies() []topology {
	return []topology{
		{
			name:    "regular",
			cluster: sim.ClusterConfig{Regular: 2, Engine: instantEngine()},
			args: func(c *sim.Cluster) []string {
				var urls []string
				for _, e := range c.ByRole(sim.RoleRegular) {
					urls = append(urls, e.URL())
				}
				return []string{"--worker-urls", strings.Join(urls, ","), "--policy", "round_robin"}
			},
			checkKV: func(*testing.T, *sim.Cluster) {},
		},
		{
			name:    "pd-sglang",
			cluster: sim.ClusterConfig{Prefill: 2, Decode: 2, Protocol: sim.ProtocolSGLang, Engine: instantEngine()},
			args: func(c *sim.Cluster) []string {
				return append([]string{"--pd-disaggregation", "--prefill-max-inflight-requests-per-worker", "4"}, pdArgs(c)...)
			},
			checkKV: noMismatches,
		},
		{
			name:    "pd-vllm",
			cluster: sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolVLLM, Engine: instantEngine()},
			args: func(c *sim.Cluster) []string {
				return append([]string{"--pd-disaggregation", "--prefill-max-inflight-requests-per-worker", "4"}, pdArgs(c)...)
			},
			checkKV: func(t *testing.T, c *sim.Cluster) {
				for _, e := range c.ByRole(sim.RoleDecode) {
					if st := e.Stats(); st.BootstrapMismatches != 0 {
						t.Errorf("decode %s pulled a mismatched KV %d times", e.URL(), st.BootstrapMismatches)
					}
				}
			},
		},
		{
			name: "pd-worker-grpc",
			cluster: sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang,
				Engine: sim.Config{Mode: sim.ModeInstant, GRPC: true}},
			args: func(c *sim.Cluster) []string {
				p, d := c.ByRole(sim.RolePrefill)[0], c.ByRole(sim.RoleDecode)[0]
				return []string{"--pd-disaggregation", "--model-id", simModel,
					"--prefill", strings.Replace(p.URL(), "http://", "grpc://", 1), itoa(p.BootstrapPort()),
					"--decode", strings.Replace(d.URL(), "http://", "grpc://", 1)}
			},
			checkKV: noMismatches,
		},
	}
}

// TestOpenAISDKThroughGateway runs the official OpenAI Go SDK against the gateway in every topology:
// chat and completions, streaming and not, n > 1.
func TestOpenAISDKThroughGateway(t *testing.T) {
	t.Parallel()
	for _, tp := range topologies() {
		t.Run(tp.name, func(t *testing.T) {
			c := startCluster(t, tp.cluster)
			gw := startGateway(t, app.Options{}, tp.args(c)...)
			waitFor(t, "gateway ready", 10e9, func() bool { return gw.Ready() == nil })
			client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
			ctx := context.Background()
			msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are terse."), openai.UserMessage("Say hello to " + tp.name)}

			// Seeded, so that the stream below must say the same: unseeded PD samples differ per request
			// (each on its own bootstrap room), as on the engines.
			chat, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: simModel, Messages: msgs, MaxTokens: openai.Int(8), Seed: openai.Int(11)})
			if err != nil {
				t.Fatalf("chat: %v", err)
			}
			if len(chat.Choices) != 1 || chat.Choices[0].Message.Content == "" || chat.Choices[0].FinishReason == "" || chat.Usage.CompletionTokens == 0 {
				t.Fatalf("chat = %+v", chat)
			}

			stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: simModel, Messages: msgs, MaxTokens: openai.Int(8), Seed: openai.Int(11)})
			var acc openai.ChatCompletionAccumulator
			chunks := 0
			for stream.Next() {
				acc.AddChunk(stream.Current())
				chunks++
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("chat stream: %v", err)
			}
			if chunks < 2 || len(acc.Choices) != 1 || acc.Choices[0].Message.Content != chat.Choices[0].Message.Content {
				t.Fatalf("streamed %d chunks, content %q; want the unary content %q", chunks, acc.Choices[0].Message.Content, chat.Choices[0].Message.Content)
			}
			if acc.Choices[0].FinishReason == "" {
				t.Errorf("stream ended without finish_reason")
			}

			multi, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: simModel, Messages: msgs, MaxTokens: openai.Int(4), N: openai.Int(2)})
			if err != nil {
				t.Fatalf("chat n=2: %v", err)
			}
			if len(multi.Choices) != 2 || multi.Choices[0].Index != 0 || multi.Choices[1].Index != 1 {
				t.Fatalf("n=2 gave %d choices: %+v", len(multi.Choices), multi.Choices)
			}

			comp, err := client.Completions.New(ctx, openai.CompletionNewParams{
				Model: openai.CompletionNewParamsModel(simModel), Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}, MaxTokens: openai.Int(6), Seed: openai.Int(11)})
			if err != nil {
				t.Fatalf("completion: %v", err)
			}
			if len(comp.Choices) != 1 || comp.Choices[0].Text == "" {
				t.Fatalf("completion = %+v", comp)
			}
			cs := client.Completions.NewStreaming(ctx, openai.CompletionNewParams{
				Model: openai.CompletionNewParamsModel(simModel), Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}, MaxTokens: openai.Int(6), Seed: openai.Int(11)})
			var text strings.Builder
			for cs.Next() {
				for _, ch := range cs.Current().Choices {
					text.WriteString(ch.Text)
				}
			}
			if err := cs.Err(); err != nil {
				t.Fatalf("completion stream: %v", err)
			}
			if text.String() != comp.Choices[0].Text {
				t.Fatalf("streamed completion %q, unary %q", text.String(), comp.Choices[0].Text)
			}

			models, err := client.Models.List(ctx)
			if err != nil {
				t.Fatalf("models: %v", err)
			}
			if len(models.Data) != 1 || models.Data[0].ID != simModel {
				t.Fatalf("models = %+v, want [%s]", models.Data, simModel)
			}
			tp.checkKV(t, c)
		})
	}
}

// TestTypedRPCMatchesREST checks that the Connect and grpc-go clients of sluice.openai.v1 get the same
// completion as the REST surface (the simulator's output is deterministic in the prompt).
func TestTypedRPCMatchesREST(t *testing.T) {
	t.Parallel()
	tp := topologies()[1] // PD, SGLang style: the richest path
	c := startCluster(t, tp.cluster)
	gw := startGateway(t, app.Options{}, tp.args(c)...)
	waitFor(t, "gateway ready", 10e9, func() bool { return gw.Ready() == nil })
	ctx := context.Background()

	rest := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("unused"))
	// Seeded: unseeded PD samples differ per request (each on its own bootstrap room), as on the engines.
	want, err := rest.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: simModel, Seed: openai.Int(7),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("typed please")}, MaxTokens: openai.Int(8)})
	if err != nil {
		t.Fatal(err)
	}
	req := &openaiv1.CreateChatCompletionRequest{Model: simModel, MaxTokens: ptr[int32](8), Seed: ptr[int32](7),
		Messages: []*openaiv1.ChatMessage{{Role: "user", Content: structpb.NewStringValue("typed please")}}}

	clients := map[string]openaiv1connect.OpenAIServiceClient{
		"connect":  openaiv1connect.NewOpenAIServiceClient(http.DefaultClient, gw.URL),
		"grpc-web": openaiv1connect.NewOpenAIServiceClient(http.DefaultClient, gw.URL, connect.WithGRPCWeb()),
	}
	for name, cl := range clients {
		got, err := cl.CreateChatCompletion(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.GetChoices()[0].GetMessage().GetContent().GetStringValue() != want.Choices[0].Message.Content {
			t.Errorf("%s content %q, REST %q", name, got.GetChoices()[0].GetMessage().GetContent().GetStringValue(), want.Choices[0].Message.Content)
		}
		st, err := cl.StreamChatCompletion(ctx, req)
		if err != nil {
			t.Fatalf("%s stream: %v", name, err)
		}
		var text strings.Builder
		for st.Receive() {
			for _, ch := range st.Msg().GetChoices() {
				text.WriteString(ch.GetDelta().GetContent())
			}
		}
		if err := st.Err(); err != nil {
			t.Fatalf("%s stream: %v", name, err)
		}
		st.Close()
		if text.String() != want.Choices[0].Message.Content {
			t.Errorf("%s streamed %q, REST %q", name, text.String(), want.Choices[0].Message.Content)
		}
	}

	cctx, call := connect.NewClientContext(ctx)
	if _, err := clients["connect"].CreateChatCompletion(cctx, req); err != nil {
		t.Fatal(err)
	}
	if call.ResponseHeader().Get("X-Sluice-Worker") == "" || call.ResponseHeader().Get("X-Sluice-Prefill-Worker") == "" {
		t.Errorf("typed response metadata does not name the workers: %v", call.ResponseHeader())
	}

	grpcClient := openaiv1.NewOpenAIServiceClient(grpcConn(t, gw.Addr()))
	got, err := grpcClient.CreateChatCompletion(ctx, req)
	if err != nil {
		t.Fatalf("grpc-go: %v", err)
	}
	if got.GetChoices()[0].GetMessage().GetContent().GetStringValue() != want.Choices[0].Message.Content {
		t.Errorf("grpc-go content %q, REST %q", got.GetChoices()[0].GetMessage().GetContent().GetStringValue(), want.Choices[0].Message.Content)
	}
	noMismatches(t, c)
}

func ptr[T any](v T) *T { return &v }

func itoa(n int) string { return strconv.Itoa(n) }

// TestGenerateThroughPD: SGLang's native /generate goes through PD (plain, batched, streaming), and with
// return_logprob the prefill leg's input logprobs are merged into decode's response.
func TestGenerateThroughPD(t *testing.T) {
	t.Parallel()
	tp := topologies()[1]
	c := startCluster(t, tp.cluster)
	gw := startGateway(t, app.Options{}, tp.args(c)...)
	waitFor(t, "gateway ready", 10e9, func() bool { return gw.Ready() == nil })
	ctx := context.Background()

	type meta struct {
		PromptTokens  int     `json:"prompt_tokens"`
		InputLogprobs [][]any `json:"input_token_logprobs"`
	}
	type gen struct {
		Text string `json:"text"`
		Meta meta   `json:"meta_info"`
	}
	resp, err := post(ctx, gw.URL+"/generate", `{"text":"The quick brown fox","sampling_params":{"max_new_tokens":4},"return_logprob":true}`)
	if err != nil {
		t.Fatal(err)
	}
	var one gen
	decodeJSON(t, resp, &one)
	if one.Text == "" || one.Meta.PromptTokens == 0 || len(one.Meta.InputLogprobs) != one.Meta.PromptTokens {
		t.Fatalf("generate with return_logprob: %+v; want %d input logprobs (from the prefill leg)", one, one.Meta.PromptTokens)
	}

	resp, err = post(ctx, gw.URL+"/generate", `{"text":["first prompt","second prompt"],"sampling_params":{"max_new_tokens":3}}`)
	if err != nil {
		t.Fatal(err)
	}
	var batch []gen
	decodeJSON(t, resp, &batch)
	if len(batch) != 2 || batch[0].Text == "" || batch[1].Text == "" {
		t.Fatalf("batched generate: %+v", batch)
	}

	resp, err = post(ctx, gw.URL+"/generate", `{"text":"stream me","sampling_params":{"max_new_tokens":3},"stream":true}`)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "data: ") || !strings.HasSuffix(strings.TrimSpace(string(b)), "data: [DONE]") {
		t.Fatalf("streamed generate: %d %q", resp.StatusCode, b)
	}
	noMismatches(t, c)
}

func decodeJSON(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
}
