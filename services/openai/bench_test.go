package openai

import (
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	openaiv1 "github.com/sluicegw/sluice/gen/sluice/openai/v1"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/backend/workerrpc"
	"github.com/sluicegw/sluice/internal/benchcpu"
)

// The gateway's own conversion work per typed chat request, the part of BenchmarkTypedRPC
// (tests/overhead) that #23's typed path removes, without the engines' and the RPC stack's CPU:
//
//	go test -run '^$' -bench TypedConversion -count 10 ./services/openai/ | benchstat -
//
// request/json is what main did (protojson + JSON merge, ParseRequest, then BuildCall from the JSON);
// request/typed is typed.go. answer/json reads the engine JSON of a whole answer with protojson
// (main; the rendering before it is left out); answer/typed builds the message from the Answer.
func BenchmarkTypedConversion(b *testing.B) {
	m := &openaiv1.CreateChatCompletionRequest{Model: "sim-model", MaxTokens: ptr[int32](16), Temperature: ptr(0.7),
		Messages: []*openaiv1.ChatMessage{
			{Role: "system", Content: structpb.NewStringValue("You are a helpful assistant.")},
			{Role: "user", Content: structpb.NewStringValue("Write one short sentence about rivers.")},
		}}
	b.Run("request/json", func(b *testing.B) {
		b.ReportAllocs()
		defer benchcpu.Start(b)()
		for b.Loop() {
			raw, err := requestBody(m, false)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := body.ParseRequest(body.RouteChat, raw); err != nil {
				b.Fatal(err)
			}
			if _, err := workerrpc.BuildCall(body.RouteChat, raw, "req-1"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("request/typed", func(b *testing.B) {
		b.ReportAllocs()
		defer benchcpu.Start(b)()
		for b.Loop() {
			br, call := typedRequest(m, false)
			if br == nil {
				b.Fatal("left to JSON")
			}
			call.WithRequestID("req-1").WithTypedAnswer()
		}
	})
	a := &workerrpc.Answer{ID: "chatcmpl-req-1", Created: 1700000000, Model: "sim-model", PromptTokens: 24, CompletionTokens: 16,
		Choices: []workerrpc.Choice{{Text: "Rivers carve patient paths through stone, carrying the mountains to the sea.", FinishReason: "length"}}}
	raw := []byte(`{"id":"chatcmpl-req-1","object":"chat.completion","created":1700000000,"model":"sim-model","choices":[{"index":0,` +
		`"message":{"role":"assistant","content":"Rivers carve patient paths through stone, carrying the mountains to the sea."},` +
		`"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":24,"completion_tokens":16,"total_tokens":40,` +
		`"prompt_tokens_details":{"cached_tokens":0}}}`)
	b.Run("answer/json", func(b *testing.B) {
		b.ReportAllocs()
		defer benchcpu.Start(b)()
		for b.Loop() {
			if err := unmarshal.Unmarshal(raw, &openaiv1.ChatCompletion{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("answer/typed", func(b *testing.B) {
		b.ReportAllocs()
		defer benchcpu.Start(b)()
		for b.Loop() {
			chatFromAnswer(a)
		}
	})
}
