package openai

import (
	"errors"
	"io"
	"net/http"

	"google.golang.org/protobuf/types/known/structpb"

	openaiv1 "github.com/sluicegw/sluice/gen/sluice/openai/v1"
	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/backend/workerrpc"
	"github.com/sluicegw/sluice/internal/dispatch"
)

// The answer direction of the typed path: a whole answer a worker-protocol worker gave as messages
// (dispatch.Response.Answer), or each chunk of a streamed one (dispatch.Response.Chunks), becomes the
// client's message directly, field for field what reading the engine JSON or SSE workerrpc renders
// for it would give (TestAnswerMatchesJSON).

func answerUsage(a *workerrpc.Answer) *openaiv1.Usage {
	return newUsage(a.PromptTokens, a.CompletionTokens, a.CachedTokens)
}

func newUsage(prompt, completion, cached uint64) *openaiv1.Usage {
	return &openaiv1.Usage{PromptTokens: int32(prompt), CompletionTokens: int32(completion),
		TotalTokens: int32(prompt + completion),
		PromptTokensDetails: &structpb.Struct{Fields: map[string]*structpb.Value{
			"cached_tokens": structpb.NewNumberValue(float64(cached))}}}
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

// relayChunks sends a typed stream's chunks; a worker's failure mid-stream ends it with the error the
// SSE path gives for its error event.
func relayChunks[T any](ch *dispatch.Chunks, send func(T) error, fromChunk func(*workerrpc.Stream, *workerrpc.Chunk) T) error {
	for {
		c, err := ch.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return wire(err)
		}
		if c.ErrorBody != nil {
			return apierror.FromUpstream(http.StatusBadGateway, c.ErrorBody, "engine failed mid-stream", nil).Connect()
		}
		if err := send(fromChunk(ch.Stream(), c)); err != nil {
			return err
		}
	}
}

func chatChunk(s *workerrpc.Stream, c *workerrpc.Chunk) *openaiv1.ChatCompletionChunk {
	out := &openaiv1.ChatCompletionChunk{Id: s.ID, Object: "chat.completion.chunk", Created: int32(s.Created), Model: s.Model}
	if c.Usage {
		out.Usage = newUsage(c.PromptTokens, c.CompletionTokens, c.CachedTokens)
		return out
	}
	d := &openaiv1.ChatDelta{}
	if c.First {
		d.Role = "assistant"
	}
	if c.HasText {
		d.Content = &c.Text
	}
	ch := &openaiv1.ChatChunkChoice{Index: int32(c.Index), Delta: d, Logprobs: structpb.NewNullValue()}
	if c.FinishReason != "" {
		ch.FinishReason = &c.FinishReason
	}
	out.Choices = []*openaiv1.ChatChunkChoice{ch}
	return out
}

func completionChunk(s *workerrpc.Stream, c *workerrpc.Chunk) *openaiv1.Completion {
	out := &openaiv1.Completion{Id: s.ID, Object: "text_completion", Created: int32(s.Created), Model: s.Model}
	if c.Usage {
		out.Usage = newUsage(c.PromptTokens, c.CompletionTokens, c.CachedTokens)
		return out
	}
	out.Choices = []*openaiv1.CompletionChoice{{Index: int32(c.Index), Text: c.Text, FinishReason: c.FinishReason,
		Logprobs: structpb.NewNullValue()}}
	return out
}
