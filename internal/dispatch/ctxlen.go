package dispatch

import (
	"net/http"
	"strings"

	"github.com/sluicegw/sluice/internal/apierror"
	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/backend/enginerpc"
	"github.com/sluicegw/sluice/internal/tokenizer"
	"github.com/sluicegw/sluice/internal/worker"
)

// A prompt longer than the model's context is refused before admission. Workers that speak an
// engine's own gRPC (fleet_engine.go) take token ids, so the gateway tokenizes their prompts anyway:
// prepare does it once, before the request waits for a slot, refuses a prompt of at least the
// smallest context length among the model's engine workers with the engine transport's 400
// context_length_exceeded, and hands the ids to the transport (enginerpc.WithPrompt), which then
// does not tokenize again. Over HTTP the engine itself answers that 400 and nothing is tokenized here.
// What cannot be tokenized exactly here (promptTokens) is left to the transport's own check.

// codeContextLengthExceeded is OpenAI's code for a prompt that leaves no room in the model's context.
const codeContextLengthExceeded = "context_length_exceeded"

// engineContext reports, for a model served by engine-gRPC workers of the roles this dispatcher
// runs, the smallest context length among them (0 when none said) and the tokenizer their transport
// uses; tk is nil when no such worker serves the model, or when they do not share one tokenizer.
func (x *Dispatcher) engineContext(model string) (limit int, tk *tokenizer.Tokenizer) {
	et := backend.EngineRPC(x.d.HTTP)
	if et == nil {
		return 0, nil
	}
	roles := []worker.Role{worker.RoleRegular}
	if x.cfg.PD {
		roles = []worker.Role{worker.RolePrefill, worker.RoleDecode}
	}
	snap := x.d.Registry.Snapshot()
	for _, role := range roles {
		for _, w := range snap.Candidates(role, model) {
			if !strings.HasPrefix(w.URL(), "grpc") {
				continue
			}
			n, t, ok := et.EngineOf(w.URL())
			if !ok {
				continue
			}
			if tk != nil && t != tk {
				// Workers of one model with different tokenizers (or a request naming no model):
				// no one count of the prompt's tokens; the transport checks it per engine.
				return 0, nil
			}
			tk = t
			if n > 0 && (limit == 0 || n < limit) {
				limit = n
			}
		}
	}
	return limit, tk
}

// checkContext tokenizes the prompt of a request for engine-gRPC workers with their tokenizer,
// reusing ids already drawn with it (kv_aware's), refuses it when it does not fit the context, and
// keeps the ids for the transport.
func (x *Dispatcher) checkContext(q *prepared, limit int, tk *tokenizer.Tokenizer, ids []uint32, text string) error {
	switch q.br.Route {
	case body.RouteChat, body.RouteCompletions, body.RouteGenerate:
	default:
		return nil // embeddings: the transport checks every input
	}
	if ids == nil {
		ids, text = promptTokens(q.br, tk)
	}
	if ids == nil {
		return nil
	}
	if limit > 0 && len(ids) >= limit {
		param, msg := enginerpc.ContextExceeded(q.br.Route, text != "", len(ids), limit)
		e := apierror.New(http.StatusBadRequest, codeContextLengthExceeded, msg, nil)
		e.Param = param
		return e
	}
	if text != "" {
		q.prompt = &enginerpc.Prompt{Tokenizer: tk, Route: q.br.Route, Text: text, IDs: ids}
	}
	return nil
}
