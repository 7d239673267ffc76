package tokenizer

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// spDecoder is a SentencePiece-style tokenizer.json decoder, as tokenizers (Rust) runs it
// (tokenizers/src/decoders): a Sequence of Metaspace (first, if at all), Replace steps, ByteFallback,
// Fuse and a final Strip of leading characters (Llama 2 and Mistral end in Strip(" ", 1, 0), Gemma 3 has
// none), or Metaspace alone. Each step but ByteFallback and Strip rewrites tokens one by one, so a
// token's text is computed at Load; ByteFallback turns a run of <0xNN> tokens into its bytes if they are
// UTF-8, else into one U+FFFD per byte (not per invalid sequence, as from_utf8_lossy would); Strip acts
// on the fused text, so only on its start.
type spDecoder struct {
	meta     string      // Metaspace's replacement: " " in tokens, dropped from the first unless scheme never
	metaDrop bool        // whether it is dropped from the first token
	replaces [][2]string // the Replace steps in order
	bytes    bool        // ByteFallback
	strip    rune        // Strip's character
	stripN   int         // and how many of it Strip takes from the start at most
}

const tokByte = tokComplete << 1 // a <0xNN> token ByteFallback decodes; its text is the byte

func loadSPDecoder(raw json.RawMessage) (*spDecoder, error) {
	var c spComponent
	if isNull(raw) || json.Unmarshal(raw, &c) != nil {
		return nil, fmt.Errorf("decoder %s (only ByteLevel, or SentencePiece's Metaspace, Replace, ByteFallback, Fuse and Strip)", strings.TrimSpace(string(raw)))
	}
	steps := []spComponent{c}
	if c.Type == "Sequence" {
		steps = c.Decoders
	}
	d := &spDecoder{}
	fused := false
	for i, s := range steps {
		if d.stripN > 0 {
			return nil, fmt.Errorf("decoder[%d] %q after Strip (only Strip last)", i, s.Type)
		}
		switch s.Type {
		case "Metaspace":
			if i != 0 || utf8.RuneCountInString(s.Replacement) != 1 {
				return nil, fmt.Errorf("decoder[%d] Metaspace not first or its replacement %q not one character", i, s.Replacement)
			}
			scheme, err := parseScheme(s)
			if err != nil {
				return nil, fmt.Errorf("decoder Metaspace: %w", err)
			}
			d.meta, d.metaDrop = s.Replacement, scheme != prependNever
		case "Replace":
			if s.Pattern.String == nil || *s.Pattern.String == "" || d.bytes || fused {
				return nil, fmt.Errorf("decoder[%d] Replace of a regex, or after ByteFallback or Fuse", i)
			}
			d.replaces = append(d.replaces, [2]string{*s.Pattern.String, s.Content})
		case "ByteFallback":
			if fused {
				return nil, fmt.Errorf("decoder[%d] ByteFallback after Fuse", i)
			}
			d.bytes = true
		case "Fuse":
			fused = true
		case "Strip":
			r, n := utf8.DecodeRuneInString(s.Content)
			if !fused || s.Stop != 0 || n == 0 || n != len(s.Content) || s.Start <= 0 {
				return nil, fmt.Errorf("decoder[%d] Strip before Fuse, of the end (stop %d) or of %q (only from the start after Fuse)", i, s.Stop, s.Content)
			}
			d.strip, d.stripN = r, s.Start
		default:
			return nil, fmt.Errorf("decoder[%d] %q (only ByteLevel, or SentencePiece's Metaspace, Replace, ByteFallback, Fuse and Strip)", i, s.Type)
		}
	}
	return d, nil
}

// text is what the per-token steps make of tok; first is whether it is the first token decoded.
func (d *spDecoder) text(tok string, first bool) string {
	if d.meta != "" {
		to := " "
		if first && d.metaDrop {
			to = ""
		}
		tok = strings.ReplaceAll(tok, d.meta, to)
	}
	for _, r := range d.replaces {
		tok = strings.ReplaceAll(tok, r[0], r[1])
	}
	return tok
}

// fallbackByte is the byte a token stands for if ByteFallback reads it as one: six bytes "<0xHH>", HH
// what Rust's u8::from_str_radix(HH, 16) accepts.
func fallbackByte(tok string) (byte, bool) {
	if len(tok) != 6 || !strings.HasPrefix(tok, "<0x") || tok[5] != '>' {
		return 0, false
	}
	v, err := strconv.ParseUint(strings.TrimPrefix(tok[3:5], "+"), 16, 8)
	return byte(v), err == nil
}

// setDecodingSP fills the per-id tables for a SentencePiece decoder (see setDecoding).
func (t *Tokenizer) setDecodingSP(added []addedToken) {
	d := t.spDec
	t.text = make([]string, len(t.tokens))
	t.flags = make([]uint8, len(t.tokens))
	for id, tok := range t.tokens {
		if tok == "" {
			continue
		}
		t.flags[id] = tokKnown | tokComplete
		s := d.text(tok, false)
		if b, ok := fallbackByte(s); ok && d.bytes {
			t.flags[id] = tokKnown | tokByte
			s = string([]byte{b})
		}
		t.text[id] = s
	}
	for _, a := range added {
		if a.Special {
			t.flags[a.ID] |= tokSpecial
		}
	}
}

// spState is a decode in progress: Decode's, or a stream's between steps.
type spState struct {
	run       []byte // the bytes of a run of <0xNN> tokens, written when the run ends
	started   bool   // a token has reached the decoder
	stripLeft int    // how many more leading Strip characters to remove, while none other came
}

// step appends the text id adds to dst; ids are known and not skipped.
func (s *spState) step(dst []byte, t *Tokenizer, id int) []byte {
	if t.flags[id]&tokByte != 0 {
		s.run = append(s.run, t.text[id][0])
		s.started = true
		return dst
	}
	start := len(dst)
	dst = s.endRun(dst)
	if !s.started && t.spDec.metaDrop {
		dst = append(dst, t.spDec.text(t.tokens[id], true)...)
	} else {
		dst = append(dst, t.text[id]...)
	}
	s.started = true
	return s.stripFrom(dst, start, t.spDec.strip)
}

// finish appends what is held at the end.
func (s *spState) finish(dst []byte, t *Tokenizer) []byte {
	start := len(dst)
	return s.stripFrom(s.endRun(dst), start, t.spDec.strip)
}

// endRun writes a run of fallback bytes as ByteFallback does: as they are if the whole run is UTF-8, else
// one U+FFFD per byte (decoders/byte_fallback.rs).
func (s *spState) endRun(dst []byte) []byte {
	if len(s.run) == 0 {
		return dst
	}
	if utf8.Valid(s.run) {
		dst = append(dst, s.run...)
	} else {
		for range s.run {
			dst = utf8.AppendRune(dst, utf8.RuneError)
		}
	}
	s.run = s.run[:0]
	return dst
}

// stripFrom removes Strip's characters from dst[start:] while nothing else has been written.
func (s *spState) stripFrom(dst []byte, start int, c rune) []byte {
	for s.stripLeft > 0 && len(dst) > start {
		r, n := utf8.DecodeRune(dst[start:])
		if r != c {
			s.stripLeft = 0
			break
		}
		dst = append(dst[:start], dst[start+n:]...)
		s.stripLeft--
	}
	return dst
}

// decodeSP is Decode for a SentencePiece decoder; ids are known.
func (t *Tokenizer) decodeSP(ids []int, skipSpecial bool, size int) string {
	st := spState{stripLeft: t.spDec.stripN}
	b := make([]byte, 0, size+8)
	for _, id := range ids {
		if skipSpecial && t.flags[id]&tokSpecial != 0 {
			continue
		}
		b = st.step(b, t, id)
	}
	return string(st.finish(b, t))
}

// stepSP is Step for a SentencePiece decoder. A run of <0xNN> tokens is held until it ends (the next
// other token, or Flush): ByteFallback makes the whole run U+FFFD if any byte of it is wrong, so not even
// its first whole characters can be sent before then.
func (d *DecodeStream) stepSP(id int) string {
	t := d.t
	if d.sp.stripLeft == 0 && len(d.sp.run) == 0 && t.flags[id]&tokByte == 0 && (d.sp.started || !t.spDec.metaDrop) {
		d.sp.started = true
		return t.text[id] // the common step
	}
	d.scratch = d.sp.step(d.scratch[:0], t, id)
	return string(d.scratch)
}

func (d *DecodeStream) flushSP() string {
	d.scratch = d.sp.finish(d.scratch[:0], d.t)
	return string(d.scratch)
}
