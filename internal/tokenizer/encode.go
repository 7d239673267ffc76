package tokenizer

import (
	"strings"

	"golang.org/x/text/unicode/norm"
)

// addedTokens finds the added tokens (the special tokens templates write, and the rest of
// tokenizer.json's added_tokens) in raw text, leftmost-longest, as tokenizers' AddedVocabulary does with
// its Aho-Corasick automaton (tokenizers/src/tokenizer/added_vocabulary.rs). A byte trie: at a position
// where a token may start, one walk finds the longest token there, however many tokens the model adds
// (DeepSeek V3 adds 818, all starting with '<': trying each in turn cost more than tokenizing the text).
type addedTokens struct {
	first [256]bool
	nodes []addedNode // nodes[0] is the root
	// When every added token starts with the same byte (Qwen's, Llama's and DeepSeek's all start with
	// '<'), the text between them is skipped with strings.IndexByte rather than a byte at a time.
	lead    byte
	oneLead bool
}

type addedNode struct {
	edges string  // a byte per child, in kids' order
	kids  []int32 // indexes into nodes
	id    int32   // the token that ends here, or -1
}

func newAddedTokens(list []addedToken) addedTokens {
	a := addedTokens{nodes: []addedNode{{id: -1}}}
	for _, t := range list {
		a.first[t.Content[0]] = true
		node := int32(0)
		for k := 0; k < len(t.Content); k++ {
			nd := &a.nodes[node]
			e := strings.IndexByte(nd.edges, t.Content[k])
			if e < 0 {
				nd.edges += t.Content[k : k+1]
				nd.kids = append(nd.kids, int32(len(a.nodes)))
				e = len(nd.kids) - 1
				a.nodes = append(a.nodes, addedNode{id: -1})
			}
			node = a.nodes[node].kids[e]
		}
		if a.nodes[node].id < 0 { // the first of two tokens spelled alike wins, as before
			a.nodes[node].id = int32(t.ID)
		}
	}
	leads := 0
	for c, ok := range a.first {
		if ok {
			a.lead = byte(c)
			leads++
		}
	}
	a.oneLead = leads == 1
	return a
}

// find returns the first added token at or after i: its start, its length and its id; start is -1 when
// none is left.
func (a *addedTokens) find(s string, i int) (start, n, id int) {
	for i < len(s) {
		if i = a.nextLead(s, i); i < 0 {
			break
		}
		if n, id := a.longest(s, i); n > 0 {
			return i, n, id
		}
		i++
	}
	return -1, 0, 0
}

// nextLead returns the first position at or after i where an added token may start, or -1.
func (a *addedTokens) nextLead(s string, i int) int {
	if a.oneLead {
		if k := strings.IndexByte(s[i:], a.lead); k >= 0 {
			return i + k
		}
		return -1
	}
	first := &a.first
	for ; i < len(s); i++ {
		if first[s[i]] {
			return i
		}
	}
	return -1
}

// longest returns the length and id of the longest added token at s[i:], or a length of 0.
func (a *addedTokens) longest(s string, i int) (n, id int) {
	node := int32(0)
	for j := i; j < len(s); j++ {
		nd := &a.nodes[node]
		e := strings.IndexByte(nd.edges, s[j])
		if e < 0 {
			break
		}
		node = nd.kids[e]
		if tid := a.nodes[node].id; tid >= 0 {
			n, id = j+1-i, int(tid)
		}
	}
	return n, id
}

// Encode returns the token ids of text: added tokens found in it become their ids (transformers'
// split_special_tokens=False, the default vLLM runs with); the text between them is normalized, split
// and merged. No BOS or EOS is added (add_special_tokens=False): see [Tokenizer.EncodeSpecial].
func (t *Tokenizer) Encode(text string) []int {
	return t.AppendEncode(make([]int, 0, len(text)/3+4), text)
}

// AppendEncode appends the token ids of text to dst (see [Tokenizer.Encode]).
func (t *Tokenizer) AppendEncode(dst []int, text string) []int {
	for i := 0; i < len(text); {
		start, n, id := t.added.find(text, i)
		if start < 0 {
			return t.appendPlain(dst, text[i:], i == 0)
		}
		dst = t.appendPlain(dst, text[i:start], i == 0)
		dst = append(dst, id)
		i = start + n
	}
	return dst
}

// appendPlain appends the ids of s, text between added tokens; first says it starts the input.
func (t *Tokenizer) appendPlain(dst []int, s string, first bool) []int {
	if s == "" {
		return dst
	}
	if t.sp != nil {
		return t.sp.appendText(dst, s, first)
	}
	if t.nfc {
		s = norm.NFC.String(s)
	}
	// The pieces are gathered and looked up a batch at a time (bpe.lookup).
	m := t.model
	b := m.batch()
	switch {
	case t.split != nil:
		t.split.each(s, func(w string) { dst = m.add(dst, b, w) })
	case t.deepseek:
		splitDeepSeek(s, func(w string) { dst = m.add(dst, b, w) })
	case t.o200k != nil:
		for i := 0; i < len(s); {
			e := t.o200k.nextPiece(s, i)
			dst = m.add(dst, b, s[i:e])
			i = e
		}
	default:
		for i := 0; i < len(s); {
			e := nextPiece(s, i, t.digits)
			dst = m.add(dst, b, s[i:e])
			i = e
		}
	}
	dst = m.lookup(dst, b)
	m.release(b)
	return dst
}

// EncodeUint32 is [Tokenizer.Encode] with the ids as uint32, the engines' wire type, allocated once at
// their exact size: the ids are gathered in a reused scratch slice, since a gateway tokenizes every
// prompt and the growing []int and its copy were most of what that allocated.
func (t *Tokenizer) EncodeUint32(text string) []uint32 { return t.encodeUint32(text, false) }

// EncodeSpecialUint32 is [Tokenizer.EncodeSpecial] as [Tokenizer.EncodeUint32] is Encode.
func (t *Tokenizer) EncodeSpecialUint32(text string) []uint32 { return t.encodeUint32(text, true) }

// scratchKeep bounds the scratch slices kept for reuse (ids), so one huge prompt is not held for good.
const scratchKeep = 1 << 16

func (t *Tokenizer) encodeUint32(text string, special bool) []uint32 {
	var sp *[]int
	if t.scratch != nil {
		sp, _ = t.scratch.Get().(*[]int)
	}
	if sp == nil {
		sp = new([]int)
	}
	ids := (*sp)[:0]
	if special {
		ids = append(ids, t.prefix...)
	}
	ids = t.AppendEncode(ids, text)
	if special {
		ids = append(ids, t.suffix...)
	}
	out := make([]uint32, len(ids))
	for i, id := range ids {
		out[i] = uint32(id)
	}
	if t.scratch != nil && cap(ids) <= scratchKeep {
		*sp = ids
		t.scratch.Put(sp)
	}
	return out
}

// EncodeSpecial returns the token ids of text as Hugging Face's encode(text, add_special_tokens=True)
// does: [Tokenizer.Encode]'s, between the special tokens the post-processor adds to a single sequence
// (Llama 3's <|begin_of_text|>; none for Qwen). vLLM tokenizes a completion's prompt so; a chat's
// rendered text it tokenizes without them, as EncodeChat does, since the template wrote them.
func (t *Tokenizer) EncodeSpecial(text string) []int {
	dst := append(make([]int, 0, len(text)/3+4+len(t.prefix)+len(t.suffix)), t.prefix...)
	return append(t.AppendEncode(dst, text), t.suffix...)
}

// MaxModelLen is the model's context length from config.json's max_position_embeddings, or 0 when the
// directory has no config.json.
func (t *Tokenizer) MaxModelLen() int { return t.maxModelLen }

// HasChatTemplate reports whether the model directory has a chat template.
func (t *Tokenizer) HasChatTemplate() bool { return t.template != nil }

// TokenStrings spells ids as the vocabulary does (transformers' convert_ids_to_tokens: byte-level
// runes, "Ġ" for a space); an id the vocabulary lacks is "".
func (t *Tokenizer) TokenStrings(ids []int) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		if id >= 0 && id < len(t.tokens) {
			out[i] = t.tokens[id]
		}
	}
	return out
}
