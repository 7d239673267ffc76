package bench

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
)

// Workload kinds.
const (
	WorkloadFixed  = "fixed"
	WorkloadDist   = "dist"
	WorkloadPrefix = "prefix"
	// WorkloadClasses mixes request classes (prompt length, output length, headers) by share.
	WorkloadClasses = "classes"
)

// Length distributions of the dist workload.
const (
	DistUniform   = "uniform"
	DistLognormal = "lognormal"
)

// WorkloadConfig selects and sizes the prompts (see the package doc, # Workloads).
type WorkloadConfig struct {
	Kind         string `json:"kind"`
	PromptTokens int    `json:"prompt_tokens"`
	MaxTokens    int    `json:"max_tokens"`

	Dist            string `json:"dist,omitempty"`
	PromptTokensMin int    `json:"prompt_tokens_min,omitempty"`
	PromptTokensMax int    `json:"prompt_tokens_max,omitempty"`
	MaxTokensMin    int    `json:"max_tokens_min,omitempty"`
	MaxTokensMax    int    `json:"max_tokens_max,omitempty"`

	Prefixes      int `json:"prefixes,omitempty"`
	PrefixTokens  int `json:"prefix_tokens,omitempty"`
	Turns         int `json:"turns,omitempty"`
	Conversations int `json:"conversations,omitempty"`

	Classes []ClassConfig `json:"classes,omitempty"`
}

// ClassConfig is one class of the classes workload: a request is of this class with probability Share
// (shares are normalised), has a user message of PromptTokens, asks for MaxTokens, and carries Header.
// With PromptTokensMax set the user message's length is drawn per request instead, lognormal between
// PromptTokensMin and PromptTokensMax as the dist workload draws it (real prompts are not all one length).
type ClassConfig struct {
	Name            string            `json:"name"`
	Share           float64           `json:"share"`
	PromptTokens    int               `json:"prompt_tokens"`
	PromptTokensMin int               `json:"prompt_tokens_min,omitempty"`
	PromptTokensMax int               `json:"prompt_tokens_max,omitempty"`
	MaxTokens       int               `json:"max_tokens"`
	Header          map[string]string `json:"header,omitempty"`
}

// MeanPromptTokens is the class's expected prompt length.
func (c ClassConfig) MeanPromptTokens() float64 {
	if c.PromptTokensMax == 0 {
		return float64(c.PromptTokens)
	}
	return lognormalMean(c.PromptTokensMin, c.PromptTokensMax)
}

// ErrInvalidConfig is wrapped by every configuration error of a run.
var ErrInvalidConfig = errors.New("bench: invalid config")

func (w *WorkloadConfig) validate() error {
	var errs []error
	bad := func(f string, a ...any) { errs = append(errs, fmt.Errorf(f, a...)) }
	if w.Kind != WorkloadClasses && (w.PromptTokens < 1 || w.MaxTokens < 1) {
		bad("prompt and max tokens must be >= 1")
	}
	switch w.Kind {
	case WorkloadClasses:
		total := 0.0
		for _, c := range w.Classes {
			prompt := c.PromptTokens >= 1
			if c.PromptTokensMin != 0 || c.PromptTokensMax != 0 {
				prompt = c.PromptTokensMin >= 1 && c.PromptTokensMax >= c.PromptTokensMin
			}
			if c.Name == "" || !(c.Share > 0) || !prompt || c.MaxTokens < 1 {
				bad("class %q: needs a name, a positive share, prompt tokens >= 1 (or bounds 1 <= min <= max) and max tokens >= 1", c.Name)
			}
			total += c.Share
		}
		if len(w.Classes) == 0 || !(total > 0) {
			bad("classes workload needs at least one class")
		}
	case WorkloadFixed:
	case WorkloadDist:
		if w.Dist != DistUniform && w.Dist != DistLognormal {
			bad("dist %q: want uniform or lognormal", w.Dist)
		}
		if w.PromptTokensMin < 1 || w.PromptTokensMax < w.PromptTokensMin {
			bad("prompt tokens bounds [%d, %d] invalid", w.PromptTokensMin, w.PromptTokensMax)
		}
		if w.MaxTokensMin < 1 || w.MaxTokensMax < w.MaxTokensMin {
			bad("max tokens bounds [%d, %d] invalid", w.MaxTokensMin, w.MaxTokensMax)
		}
	case WorkloadPrefix:
		if w.Prefixes < 1 || w.PrefixTokens < 1 || w.Turns < 1 || w.Conversations < 1 {
			bad("prefix workload needs prefixes, prefix tokens, turns and conversations >= 1")
		}
	default:
		bad("workload %q: want fixed, dist, prefix or classes", w.Kind)
	}
	return errors.Join(errs...)
}

// Message is one chat message of a generated prompt.
type Message struct {
	Role    string
	Content string
}

// Prompt is one generated request.
type Prompt struct {
	Messages  []Message
	MaxTokens int
	// Class is the request's class (classes workload), recorded with its result.
	Class string
	// Header is sent with the request (classes workload).
	Header map[string]string
}

// Generator turns a request index into its prompt; Prompt is a pure function of (seed, index), so it
// is safe for concurrent use and runs are reproducible whatever the completion order.
type Generator struct {
	cfg      WorkloadConfig
	seed     uint64
	prefixes []string
}

// NewGenerator validates cfg and precomputes the shared system prompts.
func NewGenerator(cfg WorkloadConfig, seed int64) (*Generator, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	g := &Generator{cfg: cfg, seed: uint64(seed)}
	if cfg.Kind == WorkloadPrefix {
		g.prefixes = make([]string, cfg.Prefixes)
		for p := range g.prefixes {
			g.prefixes[p] = Text(mixSeed(g.seed, 0x5157, uint64(p)), cfg.PrefixTokens)
		}
	}
	return g, nil
}

// ConversationOf returns, for the prefix workload, request i's conversation id, turn and system prompt
// index. Requests come in rounds of C (one turn of each of the C side-by-side conversations); within a
// round the conversations come in a pseudo-random order (an affine permutation drawn per round), so that
// a conversation's turns do not land on the same worker by arithmetic accident under round robin.
func (g *Generator) ConversationOf(i int64) (conv int64, turn, prefix int) {
	c, t := int64(g.cfg.Conversations), int64(g.cfg.Turns)
	pos, round := i%c, i/c
	slot := pos
	if c > 1 {
		h := mixSeed(g.seed, 0xc0, uint64(round))
		a := int64(h%uint64(c-1)) + 1
		for gcd(a, c) != 1 {
			a = a%(c-1) + 1
		}
		b := int64((h >> 32) % uint64(c))
		slot = (a*pos + b) % c
	}
	turn = int(round % t)
	conv = (round/t)*c + slot
	return conv, turn, int(mixSeed(g.seed, 0x9f, uint64(conv)) % uint64(g.cfg.Prefixes))
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Prompt returns request i's prompt.
func (g *Generator) Prompt(i int64) Prompt {
	switch g.cfg.Kind {
	case WorkloadDist:
		r := rand.New(rand.NewPCG(g.seed, uint64(i)^0xd157))
		pt := drawLength(r, g.cfg.Dist, g.cfg.PromptTokensMin, g.cfg.PromptTokensMax)
		mt := drawLength(r, g.cfg.Dist, g.cfg.MaxTokensMin, g.cfg.MaxTokensMax)
		return Prompt{Messages: []Message{{"user", Text(mixSeed(g.seed, 1, uint64(i)), pt)}}, MaxTokens: mt}
	case WorkloadClasses:
		c := g.ClassOf(i)
		pt := c.PromptTokens
		if c.PromptTokensMax > 0 {
			pt = drawLength(rand.New(rand.NewPCG(g.seed, uint64(i)^0xc1a55)), DistLognormal, c.PromptTokensMin, c.PromptTokensMax)
		}
		return Prompt{Messages: []Message{{"user", Text(mixSeed(g.seed, 1, uint64(i)), pt)}}, MaxTokens: c.MaxTokens,
			Class: c.Name, Header: c.Header}
	case WorkloadPrefix:
		conv, turn, prefix := g.ConversationOf(i)
		msgs := make([]Message, 0, 2+2*turn)
		msgs = append(msgs, Message{"system", g.prefixes[prefix]})
		for t := 0; t < turn; t++ {
			msgs = append(msgs,
				Message{"user", Text(mixSeed(g.seed, 2, uint64(conv), uint64(t)), g.cfg.PromptTokens)},
				Message{"assistant", Text(mixSeed(g.seed, 3, uint64(conv), uint64(t)), g.cfg.MaxTokens)})
		}
		msgs = append(msgs, Message{"user", Text(mixSeed(g.seed, 2, uint64(conv), uint64(turn)), g.cfg.PromptTokens)})
		return Prompt{Messages: msgs, MaxTokens: g.cfg.MaxTokens}
	default:
		return Prompt{Messages: []Message{{"user", Text(mixSeed(g.seed, 1, uint64(i)), g.cfg.PromptTokens)}}, MaxTokens: g.cfg.MaxTokens}
	}
}

// ClassOf returns request i's class (classes workload): drawn by share from (seed, i).
func (g *Generator) ClassOf(i int64) ClassConfig {
	total := 0.0
	for _, c := range g.cfg.Classes {
		total += c.Share
	}
	u := float64(mixSeed(g.seed, 0xc1a55, uint64(i))>>11) / (1 << 53) * total
	for _, c := range g.cfg.Classes {
		if u < c.Share {
			return c
		}
		u -= c.Share
	}
	return g.cfg.Classes[len(g.cfg.Classes)-1]
}

// drawLength draws a length in [lo, hi] (see the package doc for the lognormal parameters).
func drawLength(r *rand.Rand, dist string, lo, hi int) int {
	if lo == hi {
		return lo
	}
	if dist == DistUniform {
		return lo + r.IntN(hi-lo+1)
	}
	llo, lhi := math.Log(float64(lo)), math.Log(float64(hi))
	mu, sigma := (llo+lhi)/2, (lhi-llo)/4
	v := int(math.Round(math.Exp(mu + sigma*r.NormFloat64())))
	return min(max(v, lo), hi)
}

// lognormalMean is the mean of drawLength's lognormal on [lo, hi] (rounding aside): the bounds at
// ±2 sigma take the clamped tails, and the part between them is e^(mu+sigma^2/2)·(Φ(2-sigma)-Φ(-2-sigma)).
func lognormalMean(lo, hi int) float64 {
	if lo == hi {
		return float64(lo)
	}
	llo, lhi := math.Log(float64(lo)), math.Log(float64(hi))
	mu, sigma := (llo+lhi)/2, (lhi-llo)/4
	phi := func(x float64) float64 { return (1 + math.Erf(x/math.Sqrt2)) / 2 }
	tail := phi(-2)
	return tail*float64(lo) + tail*float64(hi) + math.Exp(mu+sigma*sigma/2)*(phi(2-sigma)-phi(-2-sigma))
}

// mixSeed derives a seed from a base seed and a path of integers (splitmix64 finaliser per step).
func mixSeed(base uint64, path ...uint64) uint64 {
	h := base ^ 0x9e3779b97f4a7c15
	for _, p := range path {
		h = splitmix(h ^ p)
	}
	return h
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Text returns tokens words of deterministic pseudo-text: three lowercase letters each, separated by
// single spaces (4 characters per token).
func Text(seed uint64, tokens int) string {
	return string(AppendText(nil, seed, tokens))
}

// AppendText appends Text(seed, tokens) to dst.
func AppendText(dst []byte, seed uint64, tokens int) []byte {
	if tokens <= 0 {
		return dst
	}
	dst = append(dst, make([]byte, 4*tokens-1)...)
	out := dst[len(dst)-(4*tokens-1):]
	s := seed
	var bits uint64
	left := 0
	for k := 0; k < tokens; k++ {
		if k > 0 {
			out[4*k-1] = ' '
		}
		for j := 0; j < 3; j++ {
			if left == 0 {
				s += 0x9e3779b97f4a7c15
				bits = splitmix(s)
				left = 12 // 12 five-bit draws per 64-bit word
			}
			out[4*k+j] = 'a' + byte((bits&31)%26)
			bits >>= 5
			left--
		}
	}
	return dst
}

// Body encoding. Generated text needs no escaping, but user-supplied model names might.

// AppendBody appends the JSON request body of p for the endpoint to dst.
func AppendBody(dst []byte, endpoint, model string, p Prompt, stream, ignoreEOS bool) []byte {
	dst = append(dst, '{')
	if model != "" {
		dst = append(dst, `"model":`...)
		dst = appendJSONString(dst, model)
		dst = append(dst, ',')
	}
	if endpoint == EndpointCompletions {
		dst = append(dst, `"prompt":"`...)
		for k, m := range p.Messages {
			if k > 0 {
				dst = append(dst, `\n`...)
			}
			dst = appendJSONStringBody(dst, m.Content)
		}
		dst = append(dst, '"')
	} else {
		dst = append(dst, `"messages":[`...)
		for k, m := range p.Messages {
			if k > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"role":"`...)
			dst = append(dst, m.Role...)
			dst = append(dst, `","content":"`...)
			dst = appendJSONStringBody(dst, m.Content)
			dst = append(dst, `"}`...)
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"max_tokens":`...)
	dst = strconv.AppendInt(dst, int64(p.MaxTokens), 10)
	if ignoreEOS {
		dst = append(dst, `,"ignore_eos":true`...)
	}
	if stream {
		dst = append(dst, `,"stream":true,"stream_options":{"include_usage":true}`...)
	} else {
		dst = append(dst, `,"stream":false`...)
	}
	return append(dst, '}')
}

func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = appendJSONStringBody(dst, s)
	return append(dst, '"')
}

func appendJSONStringBody(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		default:
			dst = append(dst, c)
		}
	}
	return dst
}
