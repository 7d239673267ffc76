package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// kvLoad is the kv-events scenario's load: kvConvs closed loops, each running a conversation of
// kvTurns turns and then a new one; turn t of the conversation numbered c goes to replica
// (c+t) mod len(gws), so consecutive turns of one conversation reach different replicas.
type kvLoad struct {
	hc   *http.Client
	gws  []*gateway
	ids  bool // send the prompt as the simulator's token ids instead of text
	seed int64

	next atomic.Int64 // conversation numbers
	sent atomic.Int64

	mu   sync.Mutex
	from time.Time // requests started from here on are recorded; zero: none yet
	recs []Record
}

// run runs the loops until every one has passed until (a turn started before it finishes).
func (l *kvLoad) run(ctx context.Context, until time.Time) {
	var wg sync.WaitGroup
	for range kvConvs {
		wg.Go(func() { l.loop(ctx, until) })
	}
	wg.Wait()
}

// measure starts recording requests that start from t on.
func (l *kvLoad) measure(t time.Time) {
	l.mu.Lock()
	l.from = t
	l.mu.Unlock()
}

// records returns the recorded requests, numbered in order of their start.
func (l *kvLoad) records() []Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]Record{}, l.recs...)
	slices.SortStableFunc(out, func(a, b Record) int { return cmp.Compare(a.StartMS, b.StartMS) })
	for i := range out {
		out[i].Index = int64(i)
	}
	return out
}

func (l *kvLoad) loop(ctx context.Context, until time.Time) {
	reqs := make([]*requester, len(l.gws))
	for i, g := range l.gws {
		reqs[i] = newRequester(l.hc, g.url, EndpointCompletions, "", true)
	}
	for {
		c := l.next.Add(1) - 1
		conv := newKVConversation(l.seed, c)
		for t := range kvTurns {
			if ctx.Err() != nil || !time.Now().Before(until) {
				return
			}
			var rec Record
			start := time.Now()
			reqs[(int(c)+t)%len(reqs)].do(ctx, conv.body(t, l.ids), nil, &rec)
			l.sent.Add(1)
			l.add(start, rec)
		}
	}
}

func (l *kvLoad) add(start time.Time, rec Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.from.IsZero() || start.Before(l.from) {
		return
	}
	rec.StartMS = ms(start.Sub(l.from))
	l.recs = append(l.recs, rec)
}

// kvConversation is one conversation's words: 4 lowercase letters each, which the simulator's
// tokenizer (sim/tokenizer.go: a chunk of up to 4 bytes that are neither space nor punctuation is one
// id, its bytes little-endian) makes one token of; turn t's prompt is its first
// kvFirstTokens + t*kvTurnTokens words.
type kvConversation struct{ words [][4]byte }

func newKVConversation(seed, n int64) *kvConversation {
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(n)))
	c := &kvConversation{words: make([][4]byte, kvFirstTokens+(kvTurns-1)*kvTurnTokens)}
	for i := range c.words {
		for j := range c.words[i] {
			c.words[i][j] = byte('a' + rng.IntN(26))
		}
	}
	return c
}

// promptLen is the number of words (tokens) in turn t's prompt.
func promptLen(t int) int { return kvFirstTokens + t*kvTurnTokens }

// text is turn t's prompt as text.
func (c *kvConversation) text(t int) string {
	var b strings.Builder
	for i, w := range c.words[:promptLen(t)] {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.Write(w[:])
	}
	return b.String()
}

// tokenIDs is turn t's prompt as the simulator tokenizes its text.
func (c *kvConversation) tokenIDs(t int) []uint32 {
	out := make([]uint32, promptLen(t))
	for i, w := range c.words[:len(out)] {
		out[i] = uint32(w[0]) | uint32(w[1])<<8 | uint32(w[2])<<16 | uint32(w[3])<<24
	}
	return out
}

// body is turn t's streaming completions request.
func (c *kvConversation) body(t int, ids bool) []byte {
	var prompt any = c.text(t)
	if ids {
		prompt = c.tokenIDs(t)
	}
	b, _ := json.Marshal(map[string]any{"model": kvModel, "prompt": prompt, "max_tokens": kvMaxTokens,
		"stream": true, "stream_options": map[string]any{"include_usage": true}})
	return b
}
