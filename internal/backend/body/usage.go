package body

import (
	"bytes"

	"github.com/sluicegw/sluice/internal/jsonscan"
)

// Reading the token usage engines report, for the gateway's token metrics. A streamed chat or
// completions answer carries its usage only in a trailing usage-only chunk (choices empty), and only
// when the request set stream_options.include_usage: the gateway asks for it (WithStreamUsage) when
// the client did not, and drops that chunk again (ScanFrameUsage says which one) so the client gets
// the bytes it would have got. vLLM (model_dump_json(exclude_unset=True), serving_chat.py) and SGLang
// (msgspec omit_defaults, entrypoints/openai/sse_utils.py) leave "usage" out of every other chunk;
// OpenAI, the simulator and the worker-protocol renderer (grpcjson.go) put "usage":null on each
// chunk when include_usage is set, which ScanFrameUsage finds too.

// Usage is a request's token counts as an engine reported them.
type Usage struct {
	Prompt, Completion int64
}

// FrameUsage is what one streamed payload says about usage.
type FrameUsage struct {
	// Has: the payload carries a top-level usage object (Usage holds its counts).
	Has   bool
	Usage Usage
	// UsageOnly: that payload is the trailing usage chunk (its choices are empty).
	UsageOnly bool
	// NullStart and NullEnd bound a top-level `,"usage":null` member (NullEnd 0 when there is none).
	NullStart, NullEnd int
}

const usageName = `"usage"`

var usageKey = []byte(usageName + ":")

// ScanFrameUsage looks for a top-level "usage" member of one streamed chat or completions payload.
// Engines put it last, after "choices": only a last member is recognised, so a "usage" member of a
// choice (or the same bytes inside a string) is never taken for it. It runs for every relayed frame,
// so it starts from the end: a payload whose last member is an array (a content chunk ends with
// "choices") is answered from its last two bytes.
func ScanFrameUsage(p []byte) (fu FrameUsage) {
	if n := len(p); n >= 2 && p[n-1] == '}' && p[n-2] == ']' {
		return fu // the common case, compact JSON
	}
	e := lastNonWS(p, len(p))
	if e < 1 || p[e] != '}' {
		return fu
	}
	k := lastNonWS(p, e)
	if k < 0 {
		return fu
	}
	switch p[k] {
	case 'l': // ... "usage": null }
		if k < 3 || string(p[k-3:k+1]) != "null" {
			return fu
		}
		c := lastNonWS(p, k-3)
		if c < 0 || p[c] != ':' {
			return fu
		}
		q := lastNonWS(p, c)
		if q < len(usageName)-1 || string(p[q-len(usageName)+1:q+1]) != usageName {
			return fu
		}
		if comma := lastNonWS(p, q-len(usageName)+1); comma >= 0 && p[comma] == ',' {
			fu.NullStart, fu.NullEnd = comma, k+1
		}
	case '}': // ... "usage": {...} }: a usage chunk, or usage on every chunk (continuous stats)
		i := bytes.LastIndex(p, usageKey)
		if i < 0 {
			return fu
		}
		v := jsonscan.SkipWS(p, i+len(usageKey))
		if v >= len(p) || p[v] != '{' {
			return fu
		}
		end, err := jsonscan.SkipValue(p, v)
		if err != nil || jsonscan.SkipWS(p, end) != e {
			return fu // not the object's last member
		}
		if fu.Usage, fu.Has = readUsage(p[v:end]); fu.Has {
			c, ok := jsonscan.FindMember(p, 0, "choices")
			fu.UsageOnly = ok && isEmptyArray(c.Value(p))
		}
	}
	return fu
}

// lastNonWS returns the index of the last non-whitespace byte before index i, or -1.
func lastNonWS(p []byte, i int) int {
	for k := i - 1; k >= 0; k-- {
		if !jsonscan.IsWS(p[k]) {
			return k
		}
	}
	return -1
}

// CutUsageNull removes the `,"usage":null` member fu found, in place, and returns the shortened
// payload.
func CutUsageNull(p []byte, fu FrameUsage) []byte {
	if fu.NullEnd == 0 {
		return p
	}
	return append(p[:fu.NullStart], p[fu.NullEnd:]...)
}

// readUsage reads prompt_tokens and completion_tokens of a usage object.
func readUsage(obj []byte) (Usage, bool) {
	var u Usage
	seen := false
	it := jsonscan.NewObjIter(obj, 0)
	for {
		m, ok := it.Next()
		if !ok {
			break
		}
		switch {
		case m.KeyIs(obj, "prompt_tokens"), m.KeyIs(obj, "input_tokens"):
			u.Prompt, ok = jsonscan.ParseInt(m.Value(obj))
		case m.KeyIs(obj, "completion_tokens"), m.KeyIs(obj, "output_tokens"):
			u.Completion, ok = jsonscan.ParseInt(m.Value(obj))
		default:
			continue
		}
		seen = seen || ok
	}
	return u, seen && it.Err == nil
}

// UnaryUsage reads the usage of a whole answer: the top-level "usage" object of chat and completions,
// or the meta_info prompt_tokens and completion_tokens of /generate (summed over a list of answers:
// a batch, or n samples, each reports its own).
func UnaryUsage(route Route, body []byte) (Usage, bool) {
	if route != RouteGenerate {
		if obj, ok := tailUsage(body); ok {
			return readUsage(obj)
		}
		m, ok := jsonscan.FindMember(body, 0, "usage")
		if !ok || body[m.ValStart] != '{' {
			return Usage{}, false
		}
		return readUsage(m.Value(body))
	}
	i := jsonscan.SkipWS(body, 0)
	if i >= len(body) {
		return Usage{}, false
	}
	if body[i] == '{' {
		return generateMetaUsage(body, i)
	}
	var sum Usage
	seen := false
	arr := jsonscan.NewArrIter(body, i)
	for {
		s, _, ok := arr.Next()
		if !ok {
			break
		}
		if u, ok := generateMetaUsage(body, s); ok {
			sum.Prompt += u.Prompt
			sum.Completion += u.Completion
			seen = true
		}
	}
	return sum, seen
}

// tailUsage finds the top-level "usage" object of an answer from its end, where the engines put it
// (OpenAI's order; vLLM and SGLang add a few short members after it), without scanning the choices
// before it. The last `"usage"` in the body is the object's member when its opening quote is not
// escaped, a colon and an object follow it, and what follows that object is the rest of the answer:
// members, then the closing brace and the end. Otherwise (a nested "usage", an escaped key, a body
// that is not an answer object) it is not found, and the caller scans from the start.
func tailUsage(body []byte) ([]byte, bool) {
	i := len(body)
	for { // bytes.LastIndex hashes every byte on its way; the quotes are few
		if i = bytes.LastIndexByte(body[:i], '"'); i <= 0 {
			return nil, false
		}
		if bytes.HasPrefix(body[i:], []byte(`"usage"`)) {
			break
		}
	}
	slashes := 0
	for j := i - 1; j >= 0 && body[j] == '\\'; j-- {
		slashes++
	}
	if slashes%2 == 1 {
		return nil, false
	}
	c := jsonscan.SkipWS(body, i+len(`"usage"`))
	if c >= len(body) || body[c] != ':' {
		return nil, false
	}
	v := jsonscan.SkipWS(body, c+1)
	if v >= len(body) || body[v] != '{' {
		return nil, false
	}
	end, err := jsonscan.SkipValue(body, v)
	if err != nil || !objectTail(body, end) {
		return nil, false
	}
	return body[v:end], true
}

// objectTail says whether body[i:] is the rest of an object after one of its members: more members,
// the closing brace, and nothing but whitespace after it.
func objectTail(body []byte, i int) bool {
	for {
		i = jsonscan.SkipWS(body, i)
		if i >= len(body) {
			return false
		}
		switch body[i] {
		case '}':
			return jsonscan.SkipWS(body, i+1) == len(body)
		case ',':
		default:
			return false
		}
		k := jsonscan.SkipWS(body, i+1)
		if k >= len(body) || body[k] != '"' {
			return false
		}
		end, _, err := jsonscan.ScanString(body, k)
		if err != nil {
			return false
		}
		c := jsonscan.SkipWS(body, end)
		if c >= len(body) || body[c] != ':' {
			return false
		}
		if i, err = jsonscan.SkipValue(body, jsonscan.SkipWS(body, c+1)); err != nil {
			return false
		}
	}
}

// generateMetaUsage reads meta_info's counts of the /generate answer object at body[i].
func generateMetaUsage(body []byte, i int) (Usage, bool) {
	if body[i] != '{' {
		return Usage{}, false
	}
	m, ok := jsonscan.FindMember(body, i, "meta_info")
	if !ok || body[m.ValStart] != '{' {
		return Usage{}, false
	}
	return readUsage(m.Value(body))
}

// GenerateFrameUsage reads one streamed /generate payload: the counts so far in its meta_info (SGLang
// reports them cumulatively in every frame) and its "index" (0 when absent: one answer).
func GenerateFrameUsage(p []byte) (index int, u Usage, ok bool) {
	if len(p) == 0 || p[0] != '{' {
		return 0, Usage{}, false
	}
	it := jsonscan.NewObjIter(p, 0)
	for {
		m, more := it.Next()
		if !more {
			break
		}
		switch {
		case m.KeyIs(p, "meta_info") && p[m.ValStart] == '{':
			u, ok = readUsage(m.Value(p))
		case m.KeyIs(p, "index"):
			if v, isInt := jsonscan.ParseInt(m.Value(p)); isInt && v >= 0 && v < MaxN*1024 {
				index = int(v)
			}
		}
	}
	return index, u, ok && it.Err == nil
}

// WithStreamUsage returns body with stream_options.include_usage set to true, keeping the other
// stream_options fields; ok is false (body unchanged) when the client asked for usage itself, or asked
// for continuous usage stats (with include_usage vLLM would then add usage to every chunk), or when
// stream_options or the body is not a JSON object.
func WithStreamUsage(body []byte) (out []byte, ok bool) {
	m, found := jsonscan.FindMember(body, 0, "stream_options")
	opts := []byte(`{"include_usage":true}`)
	if found && !jsonscan.IsNull(m.Value(body)) {
		so := m.Value(body)
		if so[0] != '{' {
			return body, false
		}
		if um, ok := jsonscan.FindMember(so, 0, "include_usage"); ok {
			if v, _ := jsonscan.ParseBool(um.Value(so)); v {
				return body, false
			}
		}
		if cm, ok := jsonscan.FindMember(so, 0, "continuous_usage_stats"); ok {
			if v, _ := jsonscan.ParseBool(cm.Value(so)); v {
				return body, false
			}
		}
		var err error
		if opts, err = rewriteObject(so, []field{{"include_usage", []byte("true")}}); err != nil {
			return body, false
		}
	}
	out, err := rewriteObject(body, []field{{"stream_options", opts}})
	if err != nil {
		return body, false
	}
	return out, true
}
