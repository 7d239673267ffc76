package tokenizer_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/tokenizer"
)

// spFixture is a SentencePiece-style tokenizer.json: ids 0-255 are <0x00>..<0xFF>, then the characters
// of chars, then each merge's result, then <s> (added, special).
type spFixture struct {
	chars      string
	merges     [][2]string
	normalizer string // JSON, "null" when empty
	pre        string // JSON, "null" when empty
	decoder    string // JSON
}

func (f spFixture) write(t *testing.T) (string, map[string]int) {
	t.Helper()
	vocab := map[string]int{}
	for b := range 256 {
		vocab[fmt.Sprintf("<0x%02X>", b)] = b
	}
	for _, r := range f.chars {
		if _, ok := vocab[string(r)]; !ok {
			vocab[string(r)] = len(vocab)
		}
	}
	for _, m := range f.merges {
		vocab[m[0]+m[1]] = len(vocab)
	}
	bos := len(vocab)
	vocab["<s>"] = bos
	tj := map[string]any{
		"added_tokens":   []map[string]any{{"id": bos, "content": "<s>", "special": true}},
		"normalizer":     orJSON(f.normalizer, "null"),
		"pre_tokenizer":  orJSON(f.pre, "null"),
		"post_processor": json.RawMessage(`{"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}], "special_tokens": {"<s>": {"ids": [` + fmt.Sprint(bos) + `]}}}`),
		"decoder":        json.RawMessage(f.decoder),
		"model":          map[string]any{"type": "BPE", "byte_fallback": true, "vocab": vocab, "merges": f.merges},
	}
	dir := t.TempDir()
	writeJSON(t, filepath.Join(dir, "tokenizer.json"), tj)
	return dir, vocab
}

const (
	llama2Normalizer = `{"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}`
	llama2Decoder    = `{"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}`
)

func spTokens(vocab map[string]int, toks ...string) []int {
	out := make([]int, len(toks))
	for i, s := range toks {
		id, ok := vocab[s]
		if !ok {
			panic("no token " + s)
		}
		out[i] = id
	}
	return out
}

func TestSentencePieceEncode(t *testing.T) {
	t.Parallel()
	merges := [][2]string{{"▁", "▁"}, {"▁", "h"}, {"▁h", "i"}, {"h", "i"}}
	tests := []struct {
		name       string
		normalizer string
		pre        string
		text       string
		want       []string
	}{
		// Llama 2: ▁ before every piece between added tokens, spaces as ▁, no pre-tokenizer.
		{"prepend", llama2Normalizer, "", "hi  hi", []string{"▁hi", "▁▁", "hi"}},
		{"prepend after added", llama2Normalizer, "", "hi<s>hi", []string{"▁hi", "<s>", "▁hi"}},
		// A character the vocabulary lacks is its UTF-8 bytes' <0xNN> tokens.
		{"byte fallback", llama2Normalizer, "", "hé", []string{"▁h", "<0xC3>", "<0xA9>"}},
		// Metaspace: "first" prepends only to the piece at the start of the input, and not when it
		// already starts with ▁; split cuts before each ▁ (MergedWithNext).
		{"metaspace first", "", `{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false}`, "hi<s>hi", []string{"▁hi", "<s>", "hi"}},
		{"metaspace space", "", `{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false}`, " hi", []string{"▁hi"}},
		{"metaspace always", "", `{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}`, "hi<s>hi", []string{"▁hi", "<s>", "▁hi"}},
		{"metaspace never", "", `{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": true}`, "hi", []string{"hi"}},
		// With split, "▁▁hi" is "▁" then "▁hi": the ▁▁ merge never sees the pair.
		{"metaspace split", "", `{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": true}`, "  hi", []string{"▁", "▁hi"}},
		{"metaspace no split", "", `{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": false}`, "  hi", []string{"▁▁", "hi"}},
		// Gemma 3: a Split on " " merged with the previous piece, after the normalizer.
		{"split merged with previous", "", `{"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": false}`, "hi hi", []string{"hi", " ", "hi"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, vocab := spFixture{chars: "▁hi ", merges: merges, normalizer: tc.normalizer, pre: tc.pre, decoder: llama2Decoder}.write(t)
			tk, err := tokenizer.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			want := spTokens(vocab, tc.want...)
			for range 2 { // the second pass reads the word cache
				if got := tk.Encode(tc.text); !slices.Equal(got, want) {
					t.Errorf("Encode(%q) = %v %q, want %v %q", tc.text, got, tk.TokenStrings(got), want, tc.want)
				}
			}
			if got := tk.EncodeSpecial(tc.text); !slices.Equal(got, slices.Concat(spTokens(vocab, "<s>"), want)) {
				t.Errorf("EncodeSpecial(%q) = %v, want <s> first", tc.text, got)
			}
		})
	}
}

// TestSentencePieceCutsOnlyWhereNoTokenCrosses: a word is merged in parts cut before ▁, except where a
// token holding ▁ after another character could form; the ids are those of merging it whole.
func TestSentencePieceCutsOnlyWhereNoTokenCrosses(t *testing.T) {
	t.Parallel()
	merges := [][2]string{{">", "▁"}, {">▁", "<"}, {"▁", "<"}}
	dir, vocab := spFixture{chars: "▁<>a", merges: merges, decoder: llama2Decoder}.write(t)
	tk, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		text string
		want []string
	}{
		{"a>▁<a", []string{"a", ">▁<", "a"}},
		{"a▁<a", []string{"a", "▁<", "a"}},
		{"a>▁a", []string{"a", ">▁", "a"}},
	} {
		if got, want := tk.Encode(tc.text), spTokens(vocab, tc.want...); !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %q, want %q", tc.text, tk.TokenStrings(got), tc.want)
		}
	}
}

func TestSentencePieceDecode(t *testing.T) {
	t.Parallel()
	merges := [][2]string{{"▁", "h"}, {"▁h", "i"}, {"▁", "▁"}}
	tests := []struct {
		name    string
		decoder string
		toks    []string
		skip    bool
		want    string
	}{
		// Strip after Fuse takes one leading space of the whole text, wherever it came from.
		{"strip", llama2Decoder, []string{"▁hi", "▁hi"}, false, "hi hi"},
		{"strip once", llama2Decoder, []string{"▁▁", "▁hi"}, false, "  hi"},
		{"strip a byte", llama2Decoder, []string{"<0x20>", "▁hi"}, false, " hi"},
		{"strip after skipped", llama2Decoder, []string{"<s>", "▁hi"}, true, "hi"},
		{"strip not after kept", llama2Decoder, []string{"<s>", "▁hi"}, false, "<s> hi"},
		// Metaspace drops every ▁ of the first token, and only of the first (tokenizers'
		// decoders: Metaspace, i == 0); a <0xNN> first token is the first token.
		{"metaspace", `{"type": "Sequence", "decoders": [{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false}, {"type": "ByteFallback"}, {"type": "Fuse"}]}`, []string{"▁▁", "▁hi"}, false, " hi"},
		{"metaspace byte first", `{"type": "Sequence", "decoders": [{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}, {"type": "ByteFallback"}, {"type": "Fuse"}]}`, []string{"<0x41>", "▁hi"}, false, "A hi"},
		{"metaspace never", `{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": true}`, []string{"▁hi", "▁hi"}, false, " hi hi"},
		// Without ByteFallback a <0xNN> token is its spelling.
		{"no byte fallback", `{"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "Fuse"}]}`, []string{"<0x41>", "▁hi"}, false, "<0x41> hi"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, vocab := spFixture{chars: "▁hi", merges: merges, normalizer: llama2Normalizer, decoder: tc.decoder}.write(t)
			tk, err := tokenizer.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			ids := spTokens(vocab, tc.toks...)
			got, err := tk.Decode(ids, tc.skip)
			if err != nil || got != tc.want {
				t.Errorf("Decode(%q, skip %v) = %q, %v; want %q", tc.toks, tc.skip, got, err, tc.want)
			}
			d := tk.NewDecodeStream(tc.skip)
			var sb strings.Builder
			for _, id := range ids {
				s, err := d.Step(id)
				if err != nil {
					t.Fatal(err)
				}
				sb.WriteString(s)
			}
			if sb.WriteString(d.Flush()); sb.String() != tc.want {
				t.Errorf("stream of %q = %q, want %q", tc.toks, sb.String(), tc.want)
			}
		})
	}
}

func TestSentencePieceLoadRejectsWhatItDoesNotImplement(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		f       spFixture
		wantErr string
	}{
		{"no decoder", spFixture{decoder: "null"}, "decoder"},
		{"other decoder", spFixture{decoder: `{"type": "WordPiece"}`}, `decoder[0] "WordPiece"`},
		{"strip the end", spFixture{decoder: `{"type": "Sequence", "decoders": [{"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 0, "stop": 1}]}`}, "Strip"},
		{"strip before fuse", spFixture{decoder: `{"type": "Sequence", "decoders": [{"type": "Strip", "content": " ", "start": 1, "stop": 0}, {"type": "Fuse"}]}`}, "Strip"},
		{"replace regex", spFixture{decoder: `{"type": "Replace", "pattern": {"Regex": " +"}, "content": " "}`}, "Replace"},
		{"normalizer", spFixture{decoder: llama2Decoder, normalizer: `{"type": "Lowercase"}`}, `normalizer[0] "Lowercase"`},
		{"split regex", spFixture{decoder: llama2Decoder, pre: `{"type": "Split", "pattern": {"Regex": " "}, "behavior": "MergedWithPrevious"}`}, "pre_tokenizer Split"},
		{"split isolated", spFixture{decoder: llama2Decoder, pre: `{"type": "Split", "pattern": {"String": " "}, "behavior": "Isolated"}`}, "Isolated"},
		{"byte level", spFixture{decoder: llama2Decoder, pre: `{"type": "ByteLevel"}`}, "ByteLevel decoder"},
		{"prepend scheme", spFixture{decoder: llama2Decoder, pre: `{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "sometimes"}`}, "prepend_scheme"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, _ := tc.f.write(t)
			_, err := tokenizer.Load(dir)
			if !errors.Is(err, tokenizer.ErrUnsupported) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Load: %v, want ErrUnsupported mentioning %q", err, tc.wantErr)
			}
		})
	}
}
