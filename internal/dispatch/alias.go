package dispatch

import (
	"bytes"
	"errors"
	"io"

	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/jsonscan"
	"github.com/sluicegw/sluice/internal/jsonx"
)

// Model aliases (Config.Aliases, internal/alias): a request for an alias is served as a request for
// the target the table picks, from placement to the legs' bodies, so both legs of a PD pair serve the
// same target; the client gets back the name it asked for unless Config.ExposeAliasTarget.

// resolveAlias rewrites q to its alias's target, before anything reads the model. The session is the
// request's routing key (the routing-key headers, then --session-header), so a conversation stays on
// one target.
func (x *Dispatcher) resolveAlias(q *prepared) error {
	if x.cfg.Aliases == nil {
		return nil
	}
	target, ok := x.cfg.Aliases.Resolve(q.br.Model, firstHeader(q.Header, x.cfg.RoutingKeyHeaders))
	if !ok {
		return nil
	}
	q.asked = q.br.Model
	br := *q.br
	br.Model = target
	if br.Body != nil {
		b, err := withModel(br.Body, target)
		if err != nil {
			return apierror.InvalidRequest("model", err.Error())
		}
		br.Body = b
	}
	q.br = &br
	if q.typed != nil {
		// The typed call names the alias: legs take the JSON, rendered with the target's name.
		render := q.typed.fn
		q.typed.fn = func() ([]byte, error) {
			b, err := render()
			if err != nil {
				return nil, err
			}
			return withModel(b, target)
		}
		t := *q.Typed
		t.Call = nil
		q.Typed = &t
	}
	return nil
}

// withModel returns the JSON object b with its top-level "model" set to model. An aliased request
// named its model, so a body without one is refused rather than guessed at.
func withModel(b []byte, model string) ([]byte, error) {
	m, ok := jsonscan.FindMember(b, 0, "model")
	if !ok {
		return nil, errors.New("the request body names no model")
	}
	val := jsonx.AppendString(nil, model)
	out := make([]byte, 0, len(b)-(m.ValEnd-m.ValStart)+len(val))
	out = append(out, b[:m.ValStart]...)
	out = append(out, val...)
	return append(out, b[m.ValEnd:]...), nil
}

// exposedModel renames the top-level model of one answer object (an SSE event's JSON or a whole
// answer) to the name the client asked for; anything else (no model, not an object) passes unchanged.
func exposedModel(data []byte, asked string) []byte {
	if i := jsonscan.SkipWS(data, 0); i >= len(data) || data[i] != '{' {
		return data
	}
	out, err := withModel(data, asked)
	if err != nil {
		return data
	}
	return out
}

// renamedBody is a non-streamed answer with its model renamed: read whole on the first Read (answers
// are JSON objects of bounded size), then served from memory.
type renamedBody struct {
	io.ReadCloser
	asked string
	rd    *bytes.Reader
}

func (r *renamedBody) Read(p []byte) (int, error) {
	if r.rd == nil {
		b, err := io.ReadAll(r.ReadCloser)
		if err != nil {
			return 0, err
		}
		r.rd = bytes.NewReader(exposedModel(b, r.asked))
	}
	return r.rd.Read(p)
}
