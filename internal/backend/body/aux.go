package body

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"

	"github.com/sluicegw/sluice/internal/jsonscan"
	"github.com/sluicegw/sluice/internal/reqcheck"
)

// The routes engines serve besides generation, forwarded to one worker as sent: embeddings and the
// other pooling APIs, tokenization, OpenAI's Responses and Anthropic's Messages. Which engine path
// serves each differs between SGLang and vLLM (EnginePath); their answers differ too and are relayed
// as they are.
const (
	RouteEmbeddings Route = iota + 16 // POST /v1/embeddings
	RouteRerank                       // POST /v1/rerank (and SMG's /rerank)
	RouteScore                        // POST /v1/score
	RouteClassify                     // POST /v1/classify
	RouteTokenize                     // POST /v1/tokenize
	RouteDetokenize                   // POST /v1/detokenize
	RouteResponses                    // POST /v1/responses (stateless passthrough)
	RouteMessages                     // POST /v1/messages (Anthropic)
)

// AuxRoutes lists the routes of this file.
func AuxRoutes() []Route {
	return []Route{RouteEmbeddings, RouteRerank, RouteScore, RouteClassify, RouteTokenize, RouteDetokenize, RouteResponses, RouteMessages}
}

var auxNames = map[Route][2]string{
	RouteEmbeddings: {"/v1/embeddings", "embeddings"},
	RouteRerank:     {"/v1/rerank", "rerank"},
	RouteScore:      {"/v1/score", "score"},
	RouteClassify:   {"/v1/classify", "classify"},
	RouteTokenize:   {"/v1/tokenize", "tokenize"},
	RouteDetokenize: {"/v1/detokenize", "detokenize"},
	RouteResponses:  {"/v1/responses", "responses"},
	RouteMessages:   {"/v1/messages", "messages"},
}

// IsAux reports a route of this file (served by one worker, never disaggregated).
func (r Route) IsAux() bool { _, ok := auxNames[r]; return ok }

// EnginePath is the path that serves the route on an engine of protocol ("sglang", "vllm"). The
// generation routes have the same path everywhere. vLLM serves tokenization, classification, score
// and rerank without the /v1 prefix (vllm/entrypoints/serve/tokenize/api_router.py,
// pooling/classify/api_router.py, pooling/scoring/api_router.py; its /v1/score and /v1/rerank are
// deprecated aliases), SGLang under /v1 (python/sglang/srt/entrypoints/http_server.py).
func (r Route) EnginePath(protocol string) string {
	if protocol == "vllm" {
		switch r {
		case RouteTokenize:
			return "/tokenize"
		case RouteDetokenize:
			return "/detokenize"
		case RouteClassify:
			return "/classify"
		case RouteScore:
			return "/score"
		case RouteRerank:
			return "/rerank"
		}
	}
	return r.Path()
}

func auxPath(r Route) string   { return auxNames[r][0] }
func auxString(r Route) string { return auxNames[r][1] }

func auxFromPath(path string) (Route, bool) {
	if path == "/rerank" {
		return RouteRerank, true
	}
	for r, n := range auxNames {
		if n[0] == path {
			return r, true
		}
	}
	return 0, false
}

// auxRequired names, per route, the fields both engines require (one of each inner list).
var auxRequired = map[Route][][]string{
	RouteEmbeddings: {{"input", "messages"}},
	RouteRerank:     {{"query"}, {"documents"}},
	RouteClassify:   {{"input", "messages"}},
	RouteTokenize:   {{"prompt", "messages"}},
	RouteDetokenize: {{"tokens"}},
	RouteResponses:  {{"input"}},
	RouteMessages:   {{"messages"}},
}

// routingTextFields are the fields whose text feeds cache-aware routing and the implicit
// consistent-hashing key, first present wins.
var routingTextFields = []string{"input", "query", "prompt", "text_1", "queries", "messages"}

// parseAux validates an aux request and extracts its routing fields: model (optional: engines
// default it), stream (Responses and Messages only), the prompt text for routing, and the fields the
// engines require.
func parseAux(route Route, body []byte) (*Request, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, &RequestError{Message: "request body must be a JSON object"}
		}
		return nil, &RequestError{Message: "malformed JSON: " + err.Error(), Malformed: true}
	}
	if fields == nil {
		return nil, &RequestError{Message: "request body must be a JSON object"}
	}
	req := &Request{Route: route, Body: body, N: 1}
	if raw, ok := fields["model"]; ok && !jsonscan.IsNull(raw) {
		var m string
		if json.Unmarshal(raw, &m) != nil {
			return nil, invalid("model", "model must be a string")
		}
		req.Model = m
	}
	if api := auxCheckAPI(route); api != 0 {
		if err := checkFields(api, fields); err != nil {
			return nil, err
		}
	}
	if raw, ok := fields["stream"]; ok && !jsonscan.IsNull(raw) {
		if route != RouteResponses && route != RouteMessages {
			return nil, invalid("stream", "%s does not stream", route.Path())
		}
		v, ok := jsonscan.ParseBool(raw)
		if !ok {
			return nil, invalid("stream", "stream must be a boolean")
		}
		req.Stream = v
		// Responses and Messages streams carry their usage in their own events (response.completed;
		// message_start and message_delta): the gateway must not add stream_options to them.
		req.IncludeUsage = v
	}
	if route == RouteEmbeddings && req.Model == "" {
		// OpenAI's API requires it, and chat and completions answer its absence so.
		return nil, invalid("model", "model is required")
	}
	for _, alts := range auxRequired[route] {
		found := false
		for _, f := range alts {
			if raw, ok := fields[f]; ok && !jsonscan.IsNull(raw) {
				found = true
				break
			}
		}
		if !found {
			return nil, invalid(alts[0], "%s is required", strings.Join(alts, " or "))
		}
	}
	for _, f := range routingTextFields {
		if t := textOf(fields[f]); t != "" {
			req.Text = t
			break
		}
	}
	return req, nil
}

// auxCheckAPI is the reqcheck schema of an aux route; 0 for the routes reqcheck has no rules for.
func auxCheckAPI(route Route) reqcheck.API {
	switch route {
	case RouteEmbeddings:
		return reqcheck.Embeddings
	case RouteResponses:
		return reqcheck.Responses
	}
	return 0
}

// checkFields runs reqcheck over decoded members in key order, so that a body with several bad fields
// always names the same one.
func checkFields(api reqcheck.API, fields map[string]json.RawMessage) *RequestError {
	keys := slices.Sorted(maps.Keys(fields))
	chk := reqcheck.New(api)
	for _, k := range keys {
		if err := checked(chk.Member([]byte(k), bytes.TrimSpace(fields[k]))); err != nil {
			return err
		}
	}
	return checked(chk.Done())
}

// textOf returns the text of a routing field: a string, the first string of a list, or the text of
// chat-style messages (string contents and text parts, joined by spaces).
func textOf(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil || len(list) == 0 {
		return ""
	}
	if json.Unmarshal(list[0], &s) == nil {
		return s
	}
	var parts []string
	for _, item := range list {
		var msg struct {
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(item, &msg) != nil {
			continue
		}
		if json.Unmarshal(msg.Content, &s) == nil {
			parts = append(parts, s)
			continue
		}
		var blocks []struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(msg.Content, &blocks) == nil {
			for _, b := range blocks {
				if b.Text != "" {
					parts = append(parts, b.Text)
				}
			}
		}
	}
	return strings.Join(parts, " ")
}
