// Package reqcheck refuses, before admission and placement, the OpenAI-style request fields that no
// engine would accept: a value of the wrong JSON type, or a number outside the range both vLLM and
// SGLang enforce. A request that can never succeed must not take an admission slot, reach an engine or
// be told to retry after a 429.
//
// The rules are never stricter than both engines: where one engine accepts a value, so does reqcheck
// (the rule's comment cites the upstream file it matches). Types follow OpenAI's API (a number is a JSON
// number, not a numeric string, although the engines' pydantic models coerce one). null passes for every
// field, as both engines treat it as "use the default". Unknown fields pass untouched: engines take many
// extras. What only an engine can judge (the context length, a token id against its vocabulary) is left
// to it.
//
// The caller walks the body once (internal/jsonscan, which validates the JSON) and hands each top-level
// member to a Checker; reqcheck reads scalar values in place and walks the few compound ones (stop,
// logit_bias, tools, ...) with the same scanner. It imports nothing but the standard library and
// internal/jsonscan.
package reqcheck
