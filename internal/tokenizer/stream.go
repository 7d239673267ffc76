package tokenizer

// DecodeStream turns generated token ids into text as they come, the job of Hugging Face's DecodeStream
// and vLLM's incremental detokenizer, without decoding text again each step as they do (their prefix
// and read offsets): a byte-level token's bytes do not depend on its neighbours, so the only state is
// the bytes of a character not yet complete. Concatenating every Step's text and Flush's is Decode of
// all the ids. A DecodeStream is not safe for concurrent use.
type DecodeStream struct {
	t           *Tokenizer
	skipSpecial bool
	pending     []byte // bytes of an unfinished character (with clean-up on: text not yet safe to clean)
	scratch     []byte
	sp          spState // a SentencePiece decoder's state instead (spdecode.go)
}

// NewDecodeStream starts a stream of one generation's ids.
func (t *Tokenizer) NewDecodeStream(skipSpecial bool) *DecodeStream {
	d := &DecodeStream{t: t, skipSpecial: skipSpecial}
	if t.spDec != nil {
		d.sp.stripLeft = t.spDec.stripN
	}
	return d
}

// Step takes the next id and returns the text it completes, possibly "": bytes that begin a character
// are held until the character is whole, and bytes that can no longer become one come out as U+FFFD,
// as Decode writes them. An unknown id is an *[UnknownTokenError] and leaves the stream as it was.
func (d *DecodeStream) Step(id int) (string, error) {
	t := d.t
	f, err := t.tokenFlags(id, -1)
	if err != nil {
		return "", err
	}
	if d.skipSpecial && f&tokSpecial != 0 {
		return "", nil
	}
	if t.spDec != nil {
		return d.stepSP(id), nil
	}
	if !t.cleanUp && len(d.pending) == 0 && f&tokComplete != 0 {
		return t.text[id], nil // the common step: whole characters, nothing held
	}
	d.pending = append(d.pending, t.text[id]...)
	var n int
	d.scratch, n = appendLossy(d.scratch[:0], d.pending, false)
	d.pending = append(d.pending[:0], d.pending[n:]...)
	if !t.cleanUp {
		return string(d.scratch), nil
	}
	// Clean-up rewrites spaces before up to 3 more bytes, so text is cleaned and emitted only up to a
	// point after 3 bytes with no space: no pattern spans it, and none ever will, since clean-up only
	// deletes spaces.
	cut := safeCut(d.scratch)
	out := cleanUpTokenization(string(d.scratch[:cut]))
	held := append(d.scratch[cut:], d.pending...) // scratch and pending never share an array
	d.pending = append(d.pending[:0], held...)
	return out, nil
}

// safeCut is the last position of b after 3 bytes that are not spaces, or 0.
func safeCut(b []byte) int {
	run := 0
	cut := 0
	for i, c := range b {
		if c == ' ' {
			run = 0
			continue
		}
		if run++; run >= 3 {
			cut = i + 1
		}
	}
	return cut
}

// Flush returns the text still held at the end of the generation: an unfinished character becomes
// U+FFFD, as Decode writes it.
func (d *DecodeStream) Flush() string {
	if d.t.spDec != nil {
		return d.flushSP()
	}
	out, _ := appendLossy(d.scratch[:0], d.pending, true)
	d.pending = d.pending[:0]
	s := string(out)
	if d.t.cleanUp {
		s = cleanUpTokenization(s)
	}
	return s
}
