package openai

import (
	"google.golang.org/protobuf/types/known/structpb"

	openaiv1 "github.com/sluicegw/sluice/gen/sluice/openai/v1"
	"github.com/sluicegw/sluice/internal/backend/workerrpc"
)

// The answer direction of the typed path: a whole answer a worker-protocol worker gave as messages
// (dispatch.Response.Answer) becomes the client's message directly, field for field what reading
// the engine JSON workerrpc renders for it would give (TestAnswerMatchesJSON).

func answerUsage(a *workerrpc.Answer) *openaiv1.Usage {
	return &openaiv1.Usage{PromptTokens: int32(a.PromptTokens), CompletionTokens: int32(a.CompletionTokens),
		TotalTokens: int32(a.PromptTokens + a.CompletionTokens),
		PromptTokensDetails: &structpb.Struct{Fields: map[string]*structpb.Value{
			"cached_tokens": structpb.NewNumberValue(float64(a.CachedTokens))}}}
}

func chatFromAnswer(a *workerrpc.Answer) *openaiv1.ChatCompletion {
	out := &openaiv1.ChatCompletion{Id: a.ID, Object: "chat.completion", Created: int32(a.Created), Model: a.Model,
		Choices: make([]*openaiv1.ChatChoice, len(a.Choices)), Usage: answerUsage(a)}
	for i, c := range a.Choices {
		out.Choices[i] = &openaiv1.ChatChoice{Index: int32(i), FinishReason: c.FinishReason, Logprobs: structpb.NewNullValue(),
			Message: &openaiv1.ChatMessage{Role: "assistant", Content: structpb.NewStringValue(c.Text)}}
	}
	return out
}

func completionFromAnswer(a *workerrpc.Answer) *openaiv1.Completion {
	out := &openaiv1.Completion{Id: a.ID, Object: "text_completion", Created: int32(a.Created), Model: a.Model,
		Choices: make([]*openaiv1.CompletionChoice, len(a.Choices)), Usage: answerUsage(a)}
	for i, c := range a.Choices {
		out.Choices[i] = &openaiv1.CompletionChoice{Index: int32(i), Text: c.Text, FinishReason: c.FinishReason,
			Logprobs: structpb.NewNullValue()}
	}
	return out
}
