package body

import (
	"strconv"

	"github.com/sluicegw/sluice/internal/jsonscan"
)

// MaxOutputTokens is a request's output bound per sample, for admission's decode KV reservation:
// chat's max_completion_tokens, else max_tokens (OpenAI; vLLM reads them in that order), else
// /generate's sampling_params.max_new_tokens. It is 0 when the chosen one is absent or negative, and
// when any of them (or sampling_params itself) is present but not an int64 or an object, or the body
// is not a JSON object; null counts as absent. Keys match exactly, as the engines read them.
//
// It walks the top-level object with the scanner (skipping the prompt without decoding it) instead of
// a second json.Unmarshal of the body: that decode was most of what decode seats added to a PD
// request's CPU when a decode engine's KV capacity is known (sluice-bench scenario overhead).
func MaxOutputTokens(body []byte) int64 {
	var completion, tokens, newTokens []byte // raw values; nil when absent or null
	it := jsonscan.NewObjIter(body, 0)
	for {
		m, ok := it.Next()
		if !ok {
			break
		}
		v := m.Value(body)
		switch {
		case m.KeyIs(body, "max_completion_tokens"):
			completion = nonNull(v)
		case m.KeyIs(body, "max_tokens"):
			tokens = nonNull(v)
		case m.KeyIs(body, "sampling_params"):
			newTokens = nil
			if nonNull(v) == nil {
				continue
			}
			if v[0] != '{' {
				return 0
			}
			if sm, ok := jsonscan.FindMember(body, m.ValStart, "max_new_tokens"); ok {
				newTokens = nonNull(sm.Value(body))
			}
		}
	}
	if it.Err != nil {
		return 0
	}
	var vals [3]int64
	for i, raw := range [3][]byte{completion, tokens, newTokens} {
		if raw == nil {
			continue
		}
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			return 0
		}
		vals[i] = n
	}
	var n int64
	switch {
	case completion != nil:
		n = vals[0]
	case tokens != nil:
		n = vals[1]
	case newTokens != nil:
		n = vals[2]
	}
	return max(n, 0)
}

// nonNull is raw, or nil for JSON null.
func nonNull(raw []byte) []byte {
	if jsonscan.IsNull(raw) {
		return nil
	}
	return raw
}
