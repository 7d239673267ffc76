package workerrpc

import (
	"bytes"
	"io"
	"net/http"
	"sync"
)

// The typed answer. A caller that reads a whole (unary) decode answer as messages — services/openai's
// typed clients — asks for it with Call.WithTypedAnswer: the response's body then holds the merged
// samples (Answer) and renders the engine JSON only if someone reads it, so that such an answer goes
// from the worker's messages to the client's with no JSON in between. Streamed answers are rendered
// as SSE, as before.

// Answer is a whole decode answer as the worker protocol gave it: one choice per sub-request (the
// OpenAI choice index), and the call's usage.
type Answer struct {
	// ID, Created and Model are what the rendered JSON's id, created and model say.
	ID      string
	Created int64
	Model   string
	Choices []Choice
	// Usage sums the sub-requests as OpenAI reports n > 1: prompt tokens once per prompt, completion
	// tokens over every sample.
	PromptTokens, CompletionTokens, CachedTokens uint64
}

// Choice is one generated sample.
type Choice struct {
	Text string
	// FinishReason is the worker's, "stop" when it gave none (as the rendered JSON says).
	FinishReason string
}

// WithTypedAnswer returns a copy of c whose whole (unary) decode answer is kept as an Answer
// (AnswerOf of the response's body) and rendered as JSON only when its body is read.
func (c *Call) WithTypedAnswer() *Call {
	cc := *c.c
	cc.typedAnswer = true
	return &Call{route: c.route, c: &cc}
}

// AnswerOf returns the typed answer a response body (Send's) carries, nil when it is the engine's
// JSON or SSE.
func AnswerOf(body io.Reader) *Answer {
	if b, ok := body.(*answerBody); ok {
		return b.answer
	}
	return nil
}

func newAnswer(c *grpcCall, m *responseMeta, samples []sample) *Answer {
	a := &Answer{ID: m.id, Created: m.created, Model: m.model, Choices: make([]Choice, len(samples))}
	for i := range samples {
		a.Choices[i] = Choice{Text: string(samples[i].text), FinishReason: samples[i].finishReason()}
	}
	a.PromptTokens, a.CompletionTokens, a.CachedTokens = usage(c, samples)
	return a
}

// answerBody is a unary answer's body: the Answer, rendered as renderFinal's JSON at the first Read.
type answerBody struct {
	answer *Answer
	render func() []byte
	once   sync.Once
	r      *bytes.Reader
}

func (b *answerBody) Read(p []byte) (int, error) {
	b.once.Do(func() { b.r = bytes.NewReader(b.render()) })
	return b.r.Read(p)
}

func (b *answerBody) Close() error { return nil }

// answerResponse is jsonResponse for a typed answer (its length unknown until rendered).
func answerResponse(req *http.Request, c *grpcCall, m *responseMeta, samples []sample) *http.Response {
	resp := jsonResponse(req, http.StatusOK, nil)
	resp.Body = &answerBody{answer: newAnswer(c, m, samples), render: func() []byte { return renderFinal(c, m, samples) }}
	resp.ContentLength = -1
	return resp
}

var _ io.ReadCloser = (*answerBody)(nil)
