package enginerpc

import (
	"context"
	"fmt"
	"net/url"

	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/tokenizer"
)

// Prompt is a prompt the caller (dispatch) tokenized before admission, to refuse one longer than the
// model's context before it takes a slot; handed over with WithPrompt, it spares the transport a
// second tokenization. The transport uses it only for a request of the same route to an engine with
// the same tokenizer, and for a text prompt only when the body's text is the same.
type Prompt struct {
	Tokenizer *tokenizer.Tokenizer // the tokenizer that produced IDs
	Route     body.Route
	Text      string // the rendered chat, the text prompt, or "" for a prompt given as token ids
	IDs       []uint32
}

type promptKey struct{}

// WithPrompt returns ctx carrying p for the transport.
func WithPrompt(ctx context.Context, p *Prompt) context.Context {
	return context.WithValue(ctx, promptKey{}, p)
}

// givenPrompt is the prompt handed over for a request of route to engine e, or nil.
func givenPrompt(ctx context.Context, route body.Route, e *Engine) *Prompt {
	p, _ := ctx.Value(promptKey{}).(*Prompt)
	if p == nil || p.Route != route || p.Tokenizer != e.Tokenizer || len(p.IDs) == 0 {
		return nil
	}
	return p
}

// EngineOf reports the context length (0 when the engine did not say) and tokenizer of the engine
// registered at workerURL; ok is false when none is.
func (t *Transport) EngineOf(workerURL string) (contextLength int, tok *tokenizer.Tokenizer, ok bool) {
	u, err := url.Parse(workerURL)
	if err != nil {
		return 0, nil, false
	}
	e := t.engine(u)
	if e == nil {
		return 0, nil, false
	}
	return e.ContextLength, e.Tokenizer, true
}

// ContextExceeded is vLLM's 400 for a prompt of n tokens that leaves no room in a context of limit
// tokens: the field it names (generateText: a /generate prompt given as text) and its message. Its
// code is OpenAI's context_length_exceeded.
func ContextExceeded(route body.Route, generateText bool, n, limit int) (param, message string) {
	param = "prompt"
	switch {
	case route == body.RouteChat:
		param = "messages"
	case route == body.RouteEmbeddings:
		param = "input"
	case route == body.RouteGenerate && !generateText:
		param = "input_ids"
	case route == body.RouteGenerate:
		param = "text"
	}
	message = fmt.Sprintf("This model's maximum context length is %d tokens. However, your request has %d input tokens. "+
		"Please reduce the length of the input.", limit, n)
	return param, message
}
