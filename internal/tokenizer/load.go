package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/ardanlabs/jinja"
	"github.com/sluicegw/sluice/internal/tokenizer/chattmpl"
)

// Errors of Load, by class: the directory cannot be read, or it holds a tokenizer this package does not
// implement (it never guesses: a wrong tokenizer would route on wrong tokens without saying so).
var (
	ErrRead        = errors.New("tokenizer: cannot read the model directory")
	ErrUnsupported = errors.New("tokenizer: unsupported tokenizer")
)

// Tokenizer tokenizes text and renders chats for one model. It is safe for concurrent use.
type Tokenizer struct {
	model       *bpe
	sp          *spModel   // a SentencePiece-style BPE instead (sentencepiece.go)
	spDec       *spDecoder // and its decoder (spdecode.go)
	nfc         bool
	digits      int          // the hand scanner's digits per piece (pretokenize.go), when split is nil
	o200k       *o200kSyntax // gpt-oss's or Mistral Tekken's pattern, scanned by hand (o200k.go)
	deepseek    bool         // DeepSeek V3's three patterns, scanned by hand (deepseek.go)
	split       regexSplit   // the other families' split patterns, or nil
	prefix      []int        // the special tokens encode(add_special_tokens=True) puts before the text
	suffix      []int        // and after it
	added       addedTokens
	tokens      []string           // by id: the vocabulary's spelling (byte-level runes), "" where no token
	text        []string           // by id: the token's bytes, as Decode joins them (decode.go)
	flags       []uint8            // by id: tokKnown, tokSpecial, tokComplete
	cleanUp     bool               // tokenizer_config's clean_up_tokenization_spaces
	template    *jinja.Template    // nil without a chat_template
	compiled    *chattmpl.Template // the template compiled to closures, or nil where chattmpl refused it
	fast        fastTemplate       // the template's fast path (qwen3.go, chat_fast.go), or nil
	special     map[string]string
	maxModelLen int
	scratch     *sync.Pool // *[]int: EncodeUint32's ids before they are copied out; shared by copies
}

// tokenizerJSON is the part of tokenizer.json that this package reads (tokenizers/src/tokenizer/serialization.rs).
type tokenizerJSON struct {
	AddedTokens []addedToken    `json:"added_tokens"`
	Normalizer  json.RawMessage `json:"normalizer"`
	PreTok      json.RawMessage `json:"pre_tokenizer"`
	PostProc    json.RawMessage `json:"post_processor"`
	Decoder     json.RawMessage `json:"decoder"`
	Model       struct {
		Type                    string          `json:"type"`
		Dropout                 *float64        `json:"dropout"`
		UnkToken                *string         `json:"unk_token"`
		ContinuingSubwordPrefix string          `json:"continuing_subword_prefix"`
		EndOfWordSuffix         string          `json:"end_of_word_suffix"`
		ByteFallback            bool            `json:"byte_fallback"`
		IgnoreMerges            bool            `json:"ignore_merges"`
		Vocab                   map[string]int  `json:"vocab"`
		Merges                  json.RawMessage `json:"merges"`
	} `json:"model"`
}

type addedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Special    bool   `json:"special"`
	Normalized bool   `json:"normalized"`
}

type component struct {
	Type          string      `json:"type"`
	Pretokenizers []component `json:"pretokenizers"`
	Normalizers   []component `json:"normalizers"`
	Processors    []component `json:"processors"`
	Pattern       struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior       string `json:"behavior"`
	Invert         bool   `json:"invert"`
	AddPrefixSpace bool   `json:"add_prefix_space"`
	UseRegex       bool   `json:"use_regex"`
	// TemplateProcessing's single sequence: special tokens around the text ($A).
	Single []struct {
		SpecialToken *struct {
			ID string `json:"id"`
		} `json:"SpecialToken"`
		Sequence *struct {
			ID string `json:"id"`
		} `json:"Sequence"`
	} `json:"single"`
	SpecialTokens map[string]struct {
		IDs []int `json:"ids"`
	} `json:"special_tokens"`
}

// Load reads a Hugging Face model directory: tokenizer.json (required), tokenizer_config.json (for the
// chat template and special tokens; optional) and config.json (for max_position_embeddings; optional).
func Load(dir string) (*Tokenizer, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrRead, dir, err)
	}
	var tj tokenizerJSON
	if err := json.Unmarshal(raw, &tj); err != nil {
		return nil, fmt.Errorf("%w %s: tokenizer.json: %w", ErrRead, dir, err)
	}
	t := &Tokenizer{special: map[string]string{}, scratch: new(sync.Pool)}
	if err := t.loadModel(&tj); err != nil {
		return nil, fmt.Errorf("%w: %s/tokenizer.json: %w", ErrUnsupported, dir, err)
	}
	if err := t.loadConfig(dir); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *Tokenizer) loadModel(tj *tokenizerJSON) error {
	m := &tj.Model
	switch {
	case m.Type != "BPE":
		return fmt.Errorf("model.type %q (only BPE)", m.Type)
	case m.Dropout != nil && *m.Dropout != 0:
		return errors.New("model.dropout is set")
	case m.ContinuingSubwordPrefix != "" || m.EndOfWordSuffix != "":
		return errors.New("model.continuing_subword_prefix or end_of_word_suffix is set")
	}
	if !isByteLevel(tj.Decoder) {
		return t.loadSentencePiece(tj) // sentencepiece.go
	}
	if err := t.loadNormalizer(tj.Normalizer); err != nil {
		return err
	}
	if err := t.loadPreTokenizer(tj.PreTok); err != nil {
		return err
	}
	if err := t.loadPostProcessor(tj.PostProc); err != nil {
		return err
	}
	if m.ByteFallback {
		return errors.New("model.byte_fallback is set with a ByteLevel decoder")
	}
	b := &bpe{cache: wordCache{max: 1 << 16, maxBytes: 64}}
	for c := range 256 {
		id, ok := m.Vocab[string(byteRune[c])]
		if !ok {
			return fmt.Errorf("model.vocab lacks the byte-level token of byte %#x (not a byte-level BPE)", c)
		}
		b.byteID[c] = id
	}
	var err error
	if b.merges, err = loadMerges(m.Vocab, m.Merges); err != nil {
		return err
	}
	t.model = b
	if err := t.loadVocab(tj); err != nil {
		return err
	}
	if m.IgnoreMerges {
		b.whole = make(map[string]int, len(m.Vocab))
		var buf []byte
		for tok, id := range m.Vocab {
			buf = appendTokenBytes(buf[:0], tok)
			b.whole[string(buf)] = id
		}
	}
	return nil
}

// loadMerges maps model.merges to (left id, right id) -> rank and merged id.
func loadMerges(vocab map[string]int, raw json.RawMessage) (map[uint64]merge, error) {
	pairs, err := parseMerges(raw)
	if err != nil {
		return nil, err
	}
	merges := make(map[uint64]merge, len(pairs))
	for rank, pr := range pairs {
		l, okl := vocab[pr[0]]
		r, okr := vocab[pr[1]]
		id, ok := vocab[pr[0]+pr[1]]
		if !okl || !okr || !ok {
			return nil, fmt.Errorf("model.merges[%d] %q %q names a token not in the vocab", rank, pr[0], pr[1])
		}
		k := pairKey(l, r)
		if _, dup := merges[k]; !dup { // the first (lowest) rank wins, as in tokenizers
			merges[k] = merge{rank: int32(rank), id: int32(id)}
		}
	}
	return merges, nil
}

// loadVocab reads the added tokens and fills the tables by id (spelling, decoded text, flags).
func (t *Tokenizer) loadVocab(tj *tokenizerJSON) error {
	m := &tj.Model
	var added []addedToken
	for _, a := range tj.AddedTokens {
		if a.SingleWord || a.LStrip || a.RStrip {
			return fmt.Errorf("added token %q uses single_word/lstrip/rstrip", a.Content)
		}
		if a.Content == "" {
			return fmt.Errorf("added token %d is empty", a.ID)
		}
		if a.Normalized && t.normalizes() {
			// Matched on the normalized text in tokenizers; here every added token is matched on the raw
			// text, which is the same only without a normalizer.
			return fmt.Errorf("added token %q is normalized and there is a normalizer", a.Content)
		}
		added = append(added, a)
	}
	t.added = newAddedTokens(added)
	maxID := 0
	for _, id := range m.Vocab {
		maxID = max(maxID, id)
	}
	for _, a := range added {
		maxID = max(maxID, a.ID)
	}
	if maxID >= 1<<24 {
		return fmt.Errorf("token id %d is implausibly large", maxID)
	}
	t.tokens = make([]string, maxID+1)
	for tok, id := range m.Vocab {
		if id < 0 {
			return fmt.Errorf("model.vocab[%q] has a negative id", tok)
		}
		t.tokens[id] = tok
	}
	for _, a := range added {
		if a.ID < 0 {
			return fmt.Errorf("added token %q has a negative id", a.Content)
		}
		t.tokens[a.ID] = a.Content
	}
	t.setDecoding(added)
	return nil
}

// parseMerges reads both spellings of model.merges: ["a b", ...] (tokenizers < 0.20) and [["a","b"], ...].
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err == nil {
		return pairs, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err != nil {
		return nil, fmt.Errorf("model.merges: %w", err)
	}
	pairs = make([][2]string, len(lines))
	for i, l := range lines {
		a, b, ok := strings.Cut(l, " ")
		if !ok {
			return nil, fmt.Errorf("model.merges[%d] %q is not a pair", i, l)
		}
		pairs[i] = [2]string{a, b}
	}
	return pairs, nil
}

func (t *Tokenizer) loadNormalizer(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("normalizer: %w", err)
	}
	if c.Type == "Sequence" && len(c.Normalizers) == 0 {
		return nil // DeepSeek V3's: normalizes nothing
	}
	if c.Type == "Sequence" && len(c.Normalizers) == 1 {
		c = c.Normalizers[0]
	}
	if c.Type != "NFC" {
		return fmt.Errorf("normalizer %q (only NFC or none)", c.Type)
	}
	t.nfc = true
	return nil
}

// loadPreTokenizer accepts Isolated regex Splits (one, or a Sequence of them) ending in a ByteLevel
// without add_prefix_space, or a ByteLevel alone with use_regex (GPT-2's pattern), when every pattern
// is one this package implements: Qwen2's, Llama 3's, o200k's, Tekken's and DeepSeek V3's by hand, GPT-2's (split.go) by regexp2.
func (t *Tokenizer) loadPreTokenizer(raw json.RawMessage) error {
	var c component
	if err := json.Unmarshal(raw, &c); err != nil || isNull(raw) {
		return fmt.Errorf("pre_tokenizer: missing or unreadable: %w", err)
	}
	steps := []component{c}
	if c.Type == "Sequence" {
		steps = c.Pretokenizers
	}
	if len(steps) == 0 || steps[len(steps)-1].Type != "ByteLevel" {
		return fmt.Errorf("pre_tokenizer %q (only Splits then a ByteLevel)", c.Type)
	}
	bl := steps[len(steps)-1]
	if bl.AddPrefixSpace {
		return errors.New("pre_tokenizer ByteLevel add_prefix_space is set")
	}
	var patterns []string
	for i, sp := range steps[:len(steps)-1] {
		if sp.Type != "Split" || sp.Behavior != "Isolated" || sp.Invert || sp.Pattern.Regex == nil {
			return fmt.Errorf("pre_tokenizer[%d] %q %q (only an Isolated regex Split)", i, sp.Type, sp.Behavior)
		}
		patterns = append(patterns, *sp.Pattern.Regex)
	}
	if bl.UseRegex {
		patterns = append(patterns, patternGPT2)
	}
	switch {
	case len(patterns) == 1 && patterns[0] == patternQwen2:
		t.digits = 1
		return nil
	case len(patterns) == 1 && patterns[0] == patternLlama3:
		t.digits = 3
		return nil
	case len(patterns) == 1 && patterns[0] == patternO200k:
		t.o200k = syntaxO200k
		return nil
	case len(patterns) == 1 && patterns[0] == patternTekken:
		t.o200k = syntaxTekken
		return nil
	case slices.Equal(patterns, patternsDeepSeek):
		t.deepseek = true
		return nil
	}
	if !slices.ContainsFunc(regexFamilies, func(f []string) bool { return slices.Equal(f, patterns) }) {
		return fmt.Errorf("pre_tokenizer split patterns %q are not a sequence this package implements", patterns)
	}
	var err error
	t.split, err = newRegexSplit(patterns)
	return err
}

// loadPostProcessor accepts ByteLevel (offsets only), none, and a TemplateProcessing whose single
// sequence is special tokens around the text (Llama 3's BOS), alone or after a ByteLevel in a Sequence;
// it keeps those tokens for EncodeSpecial.
func (t *Tokenizer) loadPostProcessor(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("post_processor: %w", err)
	}
	procs := []component{c}
	if c.Type == "Sequence" {
		procs = c.Processors
	}
	for i, p := range procs {
		switch p.Type {
		case "ByteLevel":
		case "TemplateProcessing":
			if err := t.loadTemplateProcessing(p); err != nil {
				return fmt.Errorf("post_processor[%d] TemplateProcessing: %w", i, err)
			}
		default:
			return fmt.Errorf("post_processor[%d] %q (only ByteLevel and TemplateProcessing)", i, p.Type)
		}
	}
	return nil
}

func (t *Tokenizer) loadTemplateProcessing(p component) error {
	seen := false
	for _, piece := range p.Single {
		switch {
		case piece.Sequence != nil && piece.Sequence.ID == "A" && !seen:
			seen = true
		case piece.SpecialToken != nil:
			st, ok := p.SpecialTokens[piece.SpecialToken.ID]
			if !ok {
				return fmt.Errorf("single names %q, which special_tokens lacks", piece.SpecialToken.ID)
			}
			if seen {
				t.suffix = append(t.suffix, st.IDs...)
			} else {
				t.prefix = append(t.prefix, st.IDs...)
			}
		default:
			return errors.New("single is not special tokens around one sequence $A")
		}
	}
	if !seen {
		return errors.New("single lacks the sequence $A")
	}
	return nil
}

// isByteLevel tells a byte-level BPE (its decoder is ByteLevel) from a SentencePiece-style one.
func isByteLevel(raw json.RawMessage) bool {
	var c component
	return !isNull(raw) && json.Unmarshal(raw, &c) == nil && c.Type == "ByteLevel"
}

func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}

// tokenizerConfig is the part of tokenizer_config.json that chat rendering reads (transformers
// PreTrainedTokenizerBase: chat_template, and the special tokens it passes to the template).
type tokenizerConfig struct {
	ChatTemplate json.RawMessage `json:"chat_template"`
	BOS          json.RawMessage `json:"bos_token"`
	EOS          json.RawMessage `json:"eos_token"`
	PAD          json.RawMessage `json:"pad_token"`
	UNK          json.RawMessage `json:"unk_token"`
	// Absent means false, transformers' default since v4.45 (the JS port still defaults to true).
	CleanUp           bool              `json:"clean_up_tokenization_spaces"`
	AdditionalSpecial []json.RawMessage `json:"additional_special_tokens"`
	TokenizerClass    string            `json:"tokenizer_class"`
	AddBOS            *bool             `json:"add_bos_token"`
	AddEOS            *bool             `json:"add_eos_token"`
}

func (t *Tokenizer) loadConfig(dir string) error {
	raw, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w %s: %w", ErrRead, dir, err)
	}
	var tc tokenizerConfig
	if err := json.Unmarshal(raw, &tc); err != nil {
		return fmt.Errorf("%w %s: tokenizer_config.json: %w", ErrRead, dir, err)
	}
	for name, v := range map[string]json.RawMessage{"bos_token": tc.BOS, "eos_token": tc.EOS, "pad_token": tc.PAD, "unk_token": tc.UNK} {
		if s, ok := tokenString(v); ok {
			t.special[name] = s
		}
	}
	t.cleanUp = tc.CleanUp
	if t.cleanUp && t.spDec != nil {
		return fmt.Errorf("%w: %s/tokenizer_config.json: clean_up_tokenization_spaces with a SentencePiece decoder", ErrUnsupported, dir)
	}
	if err := t.llamaPostProcessor(&tc); err != nil {
		return fmt.Errorf("%w: %s/tokenizer_config.json: %w", ErrUnsupported, dir, err)
	}
	specials := map[string]bool{}
	for _, s := range t.special {
		specials[s] = true
	}
	for _, raw := range tc.AdditionalSpecial {
		if s, ok := tokenString(raw); ok {
			specials[s] = true
		}
	}
	t.markSpecial(specials)
	src, err := chatTemplate(tc.ChatTemplate)
	if err != nil {
		return fmt.Errorf("%w: %s/tokenizer_config.json: %w", ErrUnsupported, dir, err)
	}
	if src == "" {
		// Newer models ship the template beside the config (transformers reads chat_template.jinja).
		if b, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
			src = string(b)
		}
	}
	if src != "" {
		if t.template, err = jinja.Compile(src); err != nil {
			return fmt.Errorf("%w: %s: chat_template: %w", ErrUnsupported, dir, err)
		}
		if t.compiled, err = chattmpl.Compile(src); err != nil {
			// The interpreter renders it, at several times the cost: worth a line at load.
			slog.Warn("tokenizer: chat template not compiled, the interpreter renders it", "dir", dir, "reason", err)
		}
		t.fast = fastTemplateFor(src, t.special)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "config.json")); err == nil {
		var mc struct {
			MaxPos int `json:"max_position_embeddings"`
		}
		if json.Unmarshal(b, &mc) == nil {
			t.maxModelLen = mc.MaxPos
		}
	}
	return nil
}

// llamaPostProcessor does what transformers' LlamaTokenizerFast does at load (update_post_processor):
// it replaces tokenizer.json's post-processor with BOS before the text unless add_bos_token is false, and
// EOS after it if add_eos_token is true. DeepSeek V3 declares that class, so Python's encode (and vLLM's
// completion prompt) starts with <｜begin▁of▁sentence｜>, though its tokenizer.json adds nothing; the
// JS port does not do this.
func (t *Tokenizer) llamaPostProcessor(tc *tokenizerConfig) error {
	if tc.TokenizerClass != "LlamaTokenizerFast" {
		return nil
	}
	t.prefix, t.suffix = nil, nil
	for _, e := range []struct {
		name string
		on   bool
		dst  *[]int
	}{{"bos_token", tc.AddBOS == nil || *tc.AddBOS, &t.prefix}, {"eos_token", tc.AddEOS != nil && *tc.AddEOS, &t.suffix}} {
		if !e.on {
			continue
		}
		tok, ok := t.special[e.name]
		id := slices.Index(t.tokens, tok)
		if !ok || id < 0 {
			return fmt.Errorf("tokenizer_class LlamaTokenizerFast adds %s, which names no token", e.name)
		}
		*e.dst = []int{id}
	}
	return nil
}

// tokenString reads a special token spelled as a string or as an AddedToken object ({"content": ...}).
func tokenString(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil && s != "" {
		return s, true
	}
	var o struct {
		Content string `json:"content"`
	}
	if json.Unmarshal(raw, &o) == nil && o.Content != "" {
		return o.Content, true
	}
	return "", false
}

// chatTemplate reads chat_template as a string, or as the list of named templates some models ship
// (transformers picks "default").
func chatTemplate(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", fmt.Errorf("chat_template is neither a string nor a list of named templates: %w", err)
	}
	if i := slices.IndexFunc(named, func(n struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}) bool {
		return n.Name == "default"
	}); i >= 0 {
		return named[i].Template, nil
	}
	return "", errors.New("chat_template lists no template named default")
}

// byteRune is GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others for the runes
// from U+0100 on, in byte order.
var byteRune = func() (t [256]rune) {
	n := 0
	for b := range 256 {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE {
			t[b] = rune(b)
		} else {
			t[b] = rune(256 + n)
			n++
		}
	}
	return t
}()
