package body

import (
	"bytes"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/sluicegw/sluice/internal/jsonscan"
	"github.com/sluicegw/sluice/internal/reqcheck"
)

// MaxN is the largest accepted n (samples per prompt), as in OpenAI's API.
const MaxN = 128

// ErrInvalidRequest classifies every request validation error; errors.Is(err, ErrInvalidRequest)
// holds for each *RequestError.
var ErrInvalidRequest = errors.New("invalid request")

// RequestError is a client error in a request body: HTTP 400, with Param naming the offending field
// (empty for errors about the body as a whole, such as malformed JSON).
type RequestError struct {
	Param   string
	Message string
	// Malformed is true when the body is not valid JSON (OpenAI-style surfaces use a distinct code).
	Malformed bool
}

func (e *RequestError) Error() string { return e.Message }

// Is makes errors.Is(err, ErrInvalidRequest) true.
func (e *RequestError) Is(target error) bool { return target == ErrInvalidRequest }

func invalid(param, format string, args ...any) *RequestError {
	return &RequestError{Param: param, Message: fmt.Sprintf(format, args...)}
}

// checked turns a reqcheck refusal into the request's error.
func checked(e *reqcheck.Error) *RequestError {
	if e == nil {
		return nil
	}
	return &RequestError{Param: e.Param, Message: e.Message}
}

// checkAPI is the reqcheck schema of a generation route.
func checkAPI(route Route) reqcheck.API {
	switch route {
	case RouteChat:
		return reqcheck.Chat
	case RouteCompletions:
		return reqcheck.Completions
	case RouteGenerate:
		return reqcheck.Generate
	}
	return 0
}

// Request is one client generation request: the raw body, kept byte-for-byte (engines take many
// parameters the gateway never looks at), plus the few fields routing needs.
type Request struct {
	Route Route
	// Body is the client's JSON, untouched.
	Body []byte
	// Model is the requested model; empty only for /generate without a model.
	Model string
	// Stream is true for an SSE response.
	Stream bool
	// N is the number of samples per prompt (OpenAI n; for /generate sampling_params.n), default 1.
	N int
	// BatchSize is the number of prompts of a batched request (a completions prompt array of strings or
	// of token arrays, a /generate text array or input_ids array of arrays); 0 when not batched.
	BatchSize int
	// Text is the prompt text for cache-aware routing: chat = the message contents (string contents
	// and text parts) joined by a space; completions = the prompt (its first element for arrays);
	// generate = text (its first element for arrays). Empty for token-id prompts.
	Text string
	// IncludeUsage is stream_options.include_usage.
	IncludeUsage bool
	// ReturnLogprob is /generate's return_logprob (true when any element of a list is true). SGLang PD
	// then needs the prefill response too: its input_token_logprobs are merged into decode's.
	ReturnLogprob bool
	// PromptChars is the length in bytes of all the prompt text of the request, every prompt of a batch
	// included: chat message contents, completions prompt strings, /generate text. Admission turns it
	// into estimated tokens.
	PromptChars int
	// PromptTokenIDs is the number of token ids given as prompts (completions token arrays, /generate
	// input_ids), every prompt of a batch included: an exact token count.
	PromptTokenIDs int
	// Priority is the body's "priority" (SGLang's request scheduling priority; higher first), when
	// HasPriority. The body keeps it: engines that schedule by priority see it too.
	Priority    int
	HasPriority bool

	// scanned is the body the parse read, and end the index just past its last member's value (0:
	// none): where members are appended without a second scan (Request.InjectBootstrap), unless
	// bootstrapKeys says the body has bootstrap_* members of its own, to be replaced.
	scanned       []byte
	end           int
	bootstrapKeys bool
}

// Prompts returns the number of prompts (max(BatchSize, 1)).
func (r *Request) Prompts() int { return max(r.BatchSize, 1) }

// ParseRequest validates a generation request body and extracts the routing fields in one pass over
// the JSON. Validation errors are *RequestError (errors.Is ErrInvalidRequest) naming the field.
// Besides what routing and the wire contract need, every member goes through internal/reqcheck, so a
// request no engine would accept is refused before it takes an admission slot; engines judge the rest.
func ParseRequest(route Route, body []byte) (*Request, error) {
	if route.Path() == "" {
		return nil, fmt.Errorf("backend: ParseRequest: invalid route %d", route)
	}
	if route.IsAux() {
		return parseAux(route, body)
	}
	req := &Request{Route: route, Body: body, N: 1}
	chk := reqcheck.New(checkAPI(route))
	it := jsonscan.NewObjIter(body, 0)
	var (
		haveModel, haveMessages, havePrompt, haveText, haveInputIDs bool
	)
	for {
		m, ok := it.NextKey()
		if !ok {
			break
		}
		if route == RouteChat && m.KeyIs(body, "messages") {
			// The largest value by far: parsed in place rather than skipped and then re-read.
			haveMessages = true
			end, err, serr := parseMessages(req, body, m.ValStart)
			if serr != nil {
				it.Fail(serr)
				break
			}
			if err != nil {
				return nil, err
			}
			it.ValueDone(end)
			continue
		}
		end, serr := jsonscan.SkipValueDepth(body, m.ValStart, 1)
		if serr != nil {
			it.Fail(serr)
			break
		}
		m.ValEnd = end
		it.ValueDone(end)
		raw := m.Value(body)
		// Keys are compared on raw bytes; escaped keys (legal but unheard of) take the slow path.
		key := body[m.KeyStart+1 : m.KeyEnd-1]
		if m.KeyEsc {
			key = []byte(m.Key(body))
		}
		err := checked(chk.Member(key, raw))
		if err != nil {
			return nil, err
		}
		req.bootstrapKeys = req.bootstrapKeys || bytes.HasPrefix(key, []byte("bootstrap_"))
		switch string(key) {
		case "model":
			haveModel = !jsonscan.IsNull(raw)
			if haveModel {
				s, ok := jsonscan.Unquote(raw)
				if !ok {
					return nil, invalid("model", "model must be a string")
				}
				if !utf8.ValidString(s) {
					// An engine decodes invalid UTF-8 to U+FFFD: it would serve another model than the
					// one sluice routed by (found by FuzzParseRequest).
					return nil, invalid("model", "model must be valid UTF-8")
				}
				req.Model = s
			} else {
				req.Model = ""
			}
		case "stream":
			err = parseStream(req, raw)
		case "stream_options":
			req.IncludeUsage = includeUsage(body, m)
		case "n":
			if route != RouteGenerate {
				err = parseN(req, raw, "n")
			}
		case "prompt":
			if route == RouteCompletions {
				havePrompt = !jsonscan.IsNull(raw)
				err = parsePrompt(req, body, m, "prompt")
			}
		case "text":
			if route == RouteGenerate {
				haveText = !jsonscan.IsNull(raw)
				err = parseGenerateText(req, body, m)
			}
		case "input_ids":
			if route == RouteGenerate {
				haveInputIDs = !jsonscan.IsNull(raw)
				err = parseInputIDs(req, body, m)
			}
		case "sampling_params":
			if route == RouteGenerate && !jsonscan.IsNull(raw) {
				if sp, ok := jsonscan.FindMember(body, m.ValStart, "n"); ok {
					err = parseN(req, sp.Value(body), "sampling_params.n")
				} else if raw[0] != '{' && raw[0] != '[' {
					err = invalid("sampling_params", "sampling_params must be an object")
				} else if raw[0] == '[' {
					err = parseSamplingList(req, body, m)
				}
			}
		case "return_logprob":
			if route == RouteGenerate {
				req.ReturnLogprob = anyTrue(body, m)
			}
		case "priority":
			err = parsePriority(req, raw)
		}
		if err != nil {
			return nil, err
		}
	}
	if it.Err != nil {
		if errors.Is(it.Err, jsonscan.ErrNotObject) {
			return nil, &RequestError{Message: "request body must be a JSON object"}
		}
		return nil, &RequestError{Message: "malformed JSON: " + it.Err.Error(), Malformed: true}
	}
	if jsonscan.SkipWS(body, it.Close+1) != len(body) {
		return nil, &RequestError{Message: "malformed JSON: trailing data after the object", Malformed: true}
	}
	req.scanned, req.end = body, lastValueEnd(body, it.Close)
	if err := checked(chk.Done()); err != nil {
		return nil, err
	}
	switch route {
	case RouteChat:
		if !haveModel || req.Model == "" {
			return nil, invalid("model", "model is required")
		}
		if !haveMessages {
			return nil, invalid("messages", "messages is required")
		}
	case RouteCompletions:
		if !haveModel || req.Model == "" {
			return nil, invalid("model", "model is required")
		}
		if !havePrompt {
			return nil, invalid("prompt", "prompt is required")
		}
	case RouteGenerate:
		if !haveText && !haveInputIDs {
			return nil, invalid("text", "one of text or input_ids is required")
		}
	}
	return req, nil
}

// lastValueEnd is the index just past the last member's value of the object closing at body[close],
// 0 when it has no member: what precedes the closing brace, whitespace aside.
func lastValueEnd(body []byte, close int) int {
	i := close
	for i > 0 && jsonscan.IsWS(body[i-1]) {
		i--
	}
	if body[i-1] == '{' {
		return 0
	}
	return i
}

func parsePriority(req *Request, raw []byte) *RequestError {
	if jsonscan.IsNull(raw) {
		req.Priority, req.HasPriority = 0, false
		return nil
	}
	v, ok := jsonscan.ParseInt(raw)
	if !ok || v < -1<<31 || v > 1<<31-1 {
		return invalid("priority", "priority must be a 32-bit integer")
	}
	req.Priority, req.HasPriority = int(v), true
	return nil
}

func parseStream(req *Request, raw []byte) *RequestError {
	if jsonscan.IsNull(raw) {
		req.Stream = false
		return nil
	}
	v, ok := jsonscan.ParseBool(raw)
	if !ok {
		return invalid("stream", "stream must be a boolean")
	}
	req.Stream = v
	return nil
}

func parseN(req *Request, raw []byte, param string) *RequestError {
	if jsonscan.IsNull(raw) {
		req.N = 1
		return nil
	}
	v, ok := jsonscan.ParseInt(raw)
	if !ok {
		return invalid(param, "%s must be an integer", param)
	}
	if v < 1 || v > MaxN {
		return invalid(param, "%s must be between 1 and %d, got %d", param, MaxN, v)
	}
	req.N = int(v)
	return nil
}

// parseSamplingList handles /generate's per-prompt sampling_params list: SGLang requires the same n in
// every element, so the first one decides.
func parseSamplingList(req *Request, body []byte, m jsonscan.Member) *RequestError {
	arr := jsonscan.NewArrIter(body, m.ValStart)
	s, _, ok := arr.Next()
	if !ok || body[s] != '{' {
		return nil
	}
	if sp, ok := jsonscan.FindMember(body, s, "n"); ok {
		return parseN(req, sp.Value(body), "sampling_params.n")
	}
	return nil
}

func includeUsage(body []byte, m jsonscan.Member) bool {
	if body[m.ValStart] != '{' {
		return false
	}
	u, ok := jsonscan.FindMember(body, m.ValStart, "include_usage")
	if !ok {
		return false
	}
	v, _ := jsonscan.ParseBool(u.Value(body))
	return v
}

// anyTrue reports whether a bool or a list of bools holds a true.
func anyTrue(body []byte, m jsonscan.Member) bool {
	raw := m.Value(body)
	if v, ok := jsonscan.ParseBool(raw); ok {
		return v
	}
	if raw[0] != '[' {
		return false
	}
	arr := jsonscan.NewArrIter(body, m.ValStart)
	for {
		s, e, ok := arr.Next()
		if !ok {
			return false
		}
		if v, _ := jsonscan.ParseBool(body[s:e]); v {
			return true
		}
	}
}
