package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// spModel is a SentencePiece-style BPE (Llama 2, Gemma, Mistral): text in its own characters, spaces
// written as ▁ by a normalizer or the Metaspace pre-tokenizer, a word's characters starting as their
// vocabulary ids and, for a character the vocabulary lacks, the ids of its UTF-8 bytes' <0xNN> tokens
// (byte_fallback), then merged as byte-level BPE merges (tokenizers/src/models/bpe/model.rs merge_word).
type spModel struct {
	norms  []spNorm
	pre    spPre
	ascii  [utf8.RuneSelf]int32 // the ids of one-character tokens: ASCII here, -1 where none
	chars  map[rune]int32       // and the others
	byteID [256]int             // <0xNN>
	merges map[uint64]merge
	cache  wordCache
	whole  map[string]int // with model.ignore_merges: a pre-tokenized word that is a token is that token

	// A word is merged in parts cut before each ▁ that follows another character (the parts are what the
	// cache keeps), which gives the ids of merging it whole as long as no merge can make a token across
	// the cut: a token holding ▁ after another character. cross lists those tokens (Gemma 3 has one,
	// ">▁</"), and a cut where one of them matches the text is not made. noCut is set when merges
	// involve <0xNN> tokens, whose spelling is not the text they stand for.
	cross []crossing
	noCut bool
}

type crossing struct {
	tok string
	at  int // the byte offset of a ▁ that follows another character
}

const metaspace = "▁"

type spNormKind int

const (
	normPrepend spNormKind = iota
	normReplace
	normNFC
	normNFKC
)

// spNorm is one normalizer of tokenizer.json's normalizer (a Sequence is flattened).
type spNorm struct {
	kind     spNormKind
	from, to string // Prepend: to; Replace: from -> to
}

type prependScheme int

const (
	prependAlways prependScheme = iota
	prependFirst
	prependNever
)

// spPre is the pre-tokenizer: none, a Split on a literal merged with the previous or next piece
// (Gemma 3's, on " ", which its normalizer has already replaced), or Metaspace.
type spPre struct {
	kind      string // "", "Split" or "Metaspace"
	lit       string // Split: the literal; Metaspace: the replacement
	mergeNext bool   // Split: MergedWithNext (else MergedWithPrevious); Metaspace: split
	scheme    prependScheme
}

// spComponent is the part of a SentencePiece tokenizer.json's normalizer, pre_tokenizer and decoder that
// this file reads.
type spComponent struct {
	Type        string        `json:"type"`
	Normalizers []spComponent `json:"normalizers"`
	Decoders    []spComponent `json:"decoders"`
	Prepend     string        `json:"prepend"`
	Pattern     struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Content       string  `json:"content"`
	Behavior      string  `json:"behavior"`
	Invert        bool    `json:"invert"`
	Replacement   string  `json:"replacement"`
	PrependScheme *string `json:"prepend_scheme"`
	AddPrefix     *bool   `json:"add_prefix_space"`
	Split         *bool   `json:"split"`
	Start         int     `json:"start"`
	Stop          int     `json:"stop"`
}

// loadSentencePiece loads a BPE whose decoder is not ByteLevel: SentencePiece's, with byte fallback.
func (t *Tokenizer) loadSentencePiece(tj *tokenizerJSON) error {
	dec, err := loadSPDecoder(tj.Decoder)
	if err != nil {
		return err
	}
	m := &tj.Model
	if !m.ByteFallback {
		return errors.New("model.byte_fallback is not set with a SentencePiece decoder (only byte fallback, never unk)")
	}
	sp := &spModel{chars: map[rune]int32{}, cache: wordCache{max: 1 << 16, maxBytes: 64}}
	if sp.norms, err = loadSPNormalizer(tj.Normalizer); err != nil {
		return err
	}
	if sp.pre, err = loadSPPreTokenizer(tj.PreTok); err != nil {
		return err
	}
	if err := t.loadPostProcessor(tj.PostProc); err != nil {
		return err
	}
	for i := range sp.ascii {
		sp.ascii[i] = -1
	}
	for tok, id := range m.Vocab {
		if r, n := utf8.DecodeRuneInString(tok); n == len(tok) && n > 0 && (r != utf8.RuneError || n > 1) {
			if r < utf8.RuneSelf {
				sp.ascii[r] = int32(id)
			} else {
				sp.chars[r] = int32(id)
			}
		}
		if strings.Contains(tok[min(len(tok), 1):], metaspace) {
			for i := 1; i < len(tok); i++ {
				if strings.HasPrefix(tok[i:], metaspace) && !strings.HasSuffix(tok[:i], metaspace) {
					sp.cross = append(sp.cross, crossing{tok: tok, at: i})
				}
			}
		}
	}
	byteTok := map[int]bool{}
	for c := range 256 {
		id, ok := m.Vocab[fmt.Sprintf("<0x%02X>", c)]
		if !ok {
			return fmt.Errorf("model.vocab lacks the byte fallback token <0x%02X>", c)
		}
		sp.byteID[c] = id
		byteTok[id] = true
	}
	if sp.merges, err = loadMerges(m.Vocab, m.Merges); err != nil {
		return err
	}
	for k := range sp.merges {
		if byteTok[int(k>>32)] || byteTok[int(uint32(k))] {
			sp.noCut = true
			break
		}
	}
	if m.IgnoreMerges {
		sp.whole = make(map[string]int, len(m.Vocab))
		for tok, id := range m.Vocab {
			sp.whole[tok] = id
		}
	}
	t.sp, t.spDec = sp, dec
	return t.loadVocab(tj)
}

func loadSPNormalizer(raw json.RawMessage) ([]spNorm, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c spComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	list := []spComponent{c}
	if c.Type == "Sequence" {
		list = c.Normalizers
	}
	var out []spNorm
	for i, n := range list {
		switch n.Type {
		case "Prepend":
			out = append(out, spNorm{kind: normPrepend, to: n.Prepend})
		case "Replace":
			if n.Pattern.String == nil || *n.Pattern.String == "" {
				return nil, fmt.Errorf("normalizer[%d] Replace with a regex pattern (only a string)", i)
			}
			out = append(out, spNorm{kind: normReplace, from: *n.Pattern.String, to: n.Content})
		case "NFC":
			out = append(out, spNorm{kind: normNFC})
		case "NFKC":
			out = append(out, spNorm{kind: normNFKC})
		default:
			return nil, fmt.Errorf("normalizer[%d] %q (only Prepend, Replace, NFC and NFKC)", i, n.Type)
		}
	}
	return out, nil
}

func loadSPPreTokenizer(raw json.RawMessage) (spPre, error) {
	if isNull(raw) {
		return spPre{}, nil
	}
	var c spComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return spPre{}, fmt.Errorf("pre_tokenizer: %w", err)
	}
	switch c.Type {
	case "Split":
		if c.Pattern.String == nil || *c.Pattern.String == "" || c.Invert {
			return spPre{}, errors.New("pre_tokenizer Split on a regex or inverted (only on a string)")
		}
		if c.Behavior != "MergedWithPrevious" && c.Behavior != "MergedWithNext" {
			return spPre{}, fmt.Errorf("pre_tokenizer Split behavior %q (only MergedWithPrevious or MergedWithNext)", c.Behavior)
		}
		return spPre{kind: "Split", lit: *c.Pattern.String, mergeNext: c.Behavior == "MergedWithNext"}, nil
	case "Metaspace":
		if utf8.RuneCountInString(c.Replacement) != 1 {
			return spPre{}, fmt.Errorf("pre_tokenizer Metaspace replacement %q is not one character", c.Replacement)
		}
		p := spPre{kind: "Metaspace", lit: c.Replacement, mergeNext: c.Split == nil || *c.Split}
		scheme, err := parseScheme(c)
		if err != nil {
			return spPre{}, fmt.Errorf("pre_tokenizer Metaspace: %w", err)
		}
		p.scheme = scheme
		return p, nil
	case "ByteLevel", "Sequence":
		return spPre{}, fmt.Errorf("pre_tokenizer %q without the ByteLevel decoder (a byte-level BPE needs both)", c.Type)
	}
	return spPre{}, fmt.Errorf("pre_tokenizer %q (only Split on a string or Metaspace)", c.Type)
}

// parseScheme reads Metaspace's prepend_scheme, or the add_prefix_space of files written before it.
func parseScheme(c spComponent) (prependScheme, error) {
	if c.PrependScheme == nil {
		if c.AddPrefix != nil && !*c.AddPrefix {
			return prependNever, nil
		}
		return prependAlways, nil
	}
	switch *c.PrependScheme {
	case "always":
		return prependAlways, nil
	case "first":
		return prependFirst, nil
	case "never":
		return prependNever, nil
	}
	return 0, fmt.Errorf("prepend_scheme %q", *c.PrependScheme)
}

// appendText appends the ids of s, a piece of the input between added tokens; first says it starts the
// input (Metaspace's prepend_scheme "first").
func (m *spModel) appendText(dst []int, s string, first bool) []int {
	for _, n := range m.norms {
		switch n.kind {
		case normPrepend:
			if s != "" { // tokenizers' Prepend leaves an empty text empty
				s = n.to + s
			}
		case normReplace:
			s = replaceAll(s, n.from, n.to)
		case normNFC:
			s = norm.NFC.String(s)
		case normNFKC:
			s = norm.NFKC.String(s)
		}
	}
	switch m.pre.kind {
	case "":
		return m.appendWord(dst, s)
	case "Metaspace":
		rep := m.pre.lit
		s = strings.ReplaceAll(s, " ", rep)
		if m.pre.scheme == prependAlways || m.pre.scheme == prependFirst && first {
			if !strings.HasPrefix(s, rep) {
				s = rep + s
			}
		}
		if !m.pre.mergeNext {
			return m.appendWord(dst, s)
		}
	}
	splitLiteral(s, m.pre.lit, m.pre.mergeNext, func(w string) { dst = m.appendWord(dst, w) })
	return dst
}

// replaceAll is strings.ReplaceAll, in one pass of byte copies for a one-byte pattern (the normalizers'
// " " -> "▁"): strings.ReplaceAll's search call per space cost more than the copying.
func replaceAll(s, from, to string) string {
	if len(from) != 1 {
		return strings.ReplaceAll(s, from, to)
	}
	n := strings.Count(s, from)
	if n == 0 {
		return s
	}
	c := from[0]
	b := make([]byte, len(s)+n*(len(to)-1))
	j := 0
	for i := 0; i < len(s); i++ {
		if s[i] != c {
			b[j] = s[i]
			j++
			continue
		}
		for k := 0; k < len(to); k++ { // a call to memmove would cost more than these few bytes
			b[j+k] = to[k]
		}
		j += len(to)
	}
	return string(b)
}

// splitLiteral calls f with the pieces of s split at each occurrence of lit, which joins the piece after
// it (mergeNext) or before it, as tokenizers' Split does with MergedWithNext and MergedWithPrevious: of
// consecutive occurrences only the one next to the other text joins it, the rest stand alone.
func splitLiteral(s, lit string, mergeNext bool, f func(string)) {
	start := 0
	for i := 0; i < len(s); {
		k := strings.Index(s[i:], lit)
		if k < 0 {
			break
		}
		ms, me := i+k, i+k+len(lit)
		if mergeNext {
			if ms > start {
				f(s[start:ms])
			}
			start = ms
		} else {
			f(s[start:me])
			start = me
		}
		i = me
	}
	if start < len(s) {
		f(s[start:])
	}
}

// appendWord appends the ids of one pre-tokenized word.
func (m *spModel) appendWord(dst []int, w string) []int {
	if w == "" {
		return dst
	}
	if id, ok := m.whole[w]; ok {
		return append(dst, id)
	}
	if m.noCut {
		return m.appendPart(dst, w)
	}
	start := 0
	for i := 1; i < len(w); i++ {
		k := strings.IndexByte(w[i:], metaspace[0])
		if k < 0 {
			break
		}
		i += k
		if !strings.HasPrefix(w[i:], metaspace) || strings.HasSuffix(w[:i], metaspace) || m.crossesAt(w, i) {
			continue
		}
		dst = m.appendPart(dst, w[start:i])
		start = i
	}
	return m.appendPart(dst, w[start:])
}

// crossesAt reports whether a token holding ▁ after another character matches w across position i.
func (m *spModel) crossesAt(w string, i int) bool {
	for _, c := range m.cross {
		if s := i - c.at; s >= 0 && strings.HasPrefix(w[s:], c.tok) {
			return true
		}
	}
	return false
}

func (m *spModel) appendPart(dst []int, w string) []int {
	if out, ok := m.cache.appendGet(dst, w); ok {
		return out
	}
	start := len(dst)
	var symBuf [32]symbol
	var heapBuf [32]candidate
	syms := symBuf[:0]
	for i := 0; i < len(w); {
		r, n := decode(w, i)
		id := int32(-1)
		if r < utf8.RuneSelf {
			id = m.ascii[r]
		} else if r != utf8.RuneError || n > 1 {
			if v, ok := m.chars[r]; ok {
				id = v
			}
		}
		if id >= 0 {
			syms = append(syms, symbol{id: int(id), prev: len(syms) - 1, next: len(syms) + 1})
		} else {
			for _, c := range []byte(w[i : i+n]) {
				syms = append(syms, symbol{id: m.byteID[c], prev: len(syms) - 1, next: len(syms) + 1})
			}
		}
		i += n
	}
	syms[len(syms)-1].next = -1
	dst = mergeSymbols(dst, m.merges, syms, heapBuf[:0])
	m.cache.put(w, append([]int(nil), dst[start:]...))
	return dst
}

func (t *Tokenizer) normalizes() bool { return t.nfc || t.sp != nil && len(t.sp.norms) > 0 }
