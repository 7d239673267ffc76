package body

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/sluicegw/sluice/internal/jsonscan"
)

// Merging the answers of the single-sample requests an n > 1 request was split into (SGLang PD cannot
// run n > 1: see SGLangRooms), so that the client sees what one engine answers for n samples:
// OpenAI's chat.completion / text_completion with choices 0..n-1 and one usage (the prompt counted
// once), or SGLang's /generate list of n results (python/sglang/srt/managers/tokenizer_manager.py,
// _handle_batch_request: a list when not streaming, frames tagged with "index" when streaming).

// MergeSampleResponses merges non-streaming answers, sample k's in bodies[k]. Chat and completions:
// the first answer, its choices replaced by every answer's choices with index k, its usage by the
// merged usage (prompt_tokens of the first, completion_tokens summed, total their sum). /generate: a
// JSON array of the answers in order.
func MergeSampleResponses(route Route, bodies [][]byte) ([]byte, error) {
	if len(bodies) == 0 {
		return nil, errors.New("backend: MergeSampleResponses: no answers")
	}
	if route == RouteGenerate {
		out := make([]byte, 0, totalLen(bodies)+len(bodies)+2)
		out = append(out, '[')
		for k, b := range bodies {
			s, e, err := jsonscan.TopValue(b)
			if err != nil {
				return nil, fmt.Errorf("backend: sample %d: %w", k, err)
			}
			if k > 0 {
				out = append(out, ',')
			}
			out = append(out, b[s:e]...)
		}
		return append(out, ']'), nil
	}
	choices := make([]byte, 0, totalLen(bodies))
	choices = append(choices, '[')
	var u usageSum
	for k, b := range bodies {
		if _, err := jsonscan.CheckTopObject(b); err != nil {
			return nil, fmt.Errorf("backend: sample %d: %w", k, err)
		}
		m, ok := jsonscan.FindMember(b, 0, "choices")
		if !ok || b[m.ValStart] != '[' {
			return nil, fmt.Errorf("backend: sample %d has no choices", k)
		}
		var err error
		if choices, err = appendReindexed(choices, m.Value(b), k); err != nil {
			return nil, fmt.Errorf("backend: sample %d: %w", k, err)
		}
		if um, ok := jsonscan.FindMember(b, 0, "usage"); ok && !jsonscan.IsNull(um.Value(b)) {
			if err := u.add(um.Value(b)); err != nil {
				return nil, fmt.Errorf("backend: sample %d: %w", k, err)
			}
		}
	}
	choices = append(choices, ']')
	edits := []field{{"choices", choices}}
	if u.seen {
		merged, err := u.merged()
		if err != nil {
			return nil, err
		}
		edits = append(edits, field{"usage", merged})
	}
	return rewriteObject(bodies[0], edits)
}

func totalLen(bs [][]byte) int {
	n := 0
	for _, b := range bs {
		n += len(b)
	}
	return n
}

// appendReindexed appends the elements of the choices array arr to dst (after a comma when dst holds
// some), each object's "index" set to k.
func appendReindexed(dst, arr []byte, k int) ([]byte, error) {
	idx := strconv.AppendInt(nil, int64(k), 10)
	it := jsonscan.NewArrIter(arr, 0)
	for {
		s, e, ok := it.Next()
		if !ok {
			break
		}
		if arr[s] != '{' {
			return nil, errors.New("a choice is not an object")
		}
		c, err := rewriteObject(arr[s:e], []field{{"index", idx}})
		if err != nil {
			return nil, err
		}
		if len(dst) > 1 {
			dst = append(dst, ',')
		}
		dst = append(dst, c...)
	}
	if it.Err != nil {
		return nil, it.Err
	}
	return dst, nil
}

// usageSum adds up the usage of the samples: the prompt is the same for all, so it counts once.
type usageSum struct {
	seen       bool
	first      []byte // the first usage object, kept for the fields not summed
	prompt     int64
	completion int64
}

func (u *usageSum) add(raw []byte) error {
	var v struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("usage: %w", err)
	}
	if !u.seen {
		u.seen = true
		u.first = append([]byte(nil), raw...)
		u.prompt = v.PromptTokens
	}
	u.completion += v.CompletionTokens
	return nil
}

func (u *usageSum) merged() ([]byte, error) {
	return rewriteObject(u.first, []field{
		{"prompt_tokens", strconv.AppendInt(nil, u.prompt, 10)},
		{"completion_tokens", strconv.AppendInt(nil, u.completion, 10)},
		{"total_tokens", strconv.AppendInt(nil, u.prompt+u.completion, 10)},
	})
}

// SampleStreamMerger rewrites the stream frames of the samples of a split n > 1 request into the one
// stream an engine would have sent: chat and completion chunks get choice index k and the id of the
// first chunk seen; the samples' usage-only chunks are held back and summed into one (UsageFrame);
// /generate frames get "index": k. [DONE] frames are held back: the caller ends the merged stream.
// A SampleStreamMerger is used by one goroutine.
type SampleStreamMerger struct {
	route    Route
	id       []byte // the merged stream's "id" value (raw JSON)
	usage    usageSum
	template []byte // the first usage-only chunk, reused for the merged one
}

// NewSampleStreamMerger returns a merger for a request on route.
func NewSampleStreamMerger(route Route) *SampleStreamMerger { return &SampleStreamMerger{route: route} }

// Frame rewrites frame payload of sample k. It returns nil for a frame to hold back. Error frames and
// frames that are not JSON objects pass unchanged.
func (m *SampleStreamMerger) Frame(k int, payload []byte) ([]byte, error) {
	if IsDone(payload) {
		return nil, nil
	}
	if len(payload) == 0 || payload[0] != '{' || IsErrorFrame(payload) {
		return payload, nil
	}
	idx := strconv.AppendInt(nil, int64(k), 10)
	if m.route == RouteGenerate {
		return rewriteObject(payload, []field{{"index", idx}})
	}
	var edits []field
	if im, ok := jsonscan.FindMember(payload, 0, "id"); ok {
		if m.id == nil {
			m.id = append([]byte(nil), im.Value(payload)...)
		} else {
			edits = append(edits, field{"id", m.id})
		}
	}
	cm, ok := jsonscan.FindMember(payload, 0, "choices")
	if !ok || payload[cm.ValStart] != '[' {
		return rewriteOrSame(payload, edits)
	}
	if isEmptyArray(cm.Value(payload)) {
		if um, ok := jsonscan.FindMember(payload, 0, "usage"); ok && !jsonscan.IsNull(um.Value(payload)) {
			if err := m.usage.add(um.Value(payload)); err != nil {
				return nil, err
			}
			if m.template == nil {
				m.template = append([]byte(nil), payload...)
			}
			return nil, nil
		}
		return rewriteOrSame(payload, edits)
	}
	choices, err := appendReindexed(append(make([]byte, 0, len(cm.Value(payload))+8), '['), cm.Value(payload), k)
	if err != nil {
		return nil, err
	}
	edits = append(edits, field{"choices", append(choices, ']')})
	return rewriteObject(payload, edits)
}

// UsageFrame returns the merged usage chunk, or nil when no sample sent usage.
func (m *SampleStreamMerger) UsageFrame() ([]byte, error) {
	if !m.usage.seen {
		return nil, nil
	}
	merged, err := m.usage.merged()
	if err != nil {
		return nil, err
	}
	edits := []field{{"usage", merged}}
	if m.id != nil {
		edits = append(edits, field{"id", m.id})
	}
	return rewriteObject(m.template, edits)
}

func rewriteOrSame(payload []byte, edits []field) ([]byte, error) {
	if len(edits) == 0 {
		return payload, nil
	}
	return rewriteObject(payload, edits)
}

func isEmptyArray(raw []byte) bool {
	return len(raw) >= 2 && raw[0] == '[' && jsonscan.SkipWS(raw, 1) == len(raw)-1
}
