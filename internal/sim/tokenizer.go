package sim

import "strings"

// appendByteTokens appends text's UTF-8 bytes as token ids: the byte-level vocabulary of ByteTokenIDs
// (bytetokenizer/, ids 0-255 the bytes), which a gateway holding that tokenizer encodes alike.
func appendByteTokens(dst []uint32, text string) []uint32 {
	for i := range len(text) {
		dst = append(dst, uint32(text[i]))
	}
	return dst
}

// appendTokens tokenizes text (see the package doc) and appends the token ids to dst.
func appendTokens(dst []uint32, text string) []uint32 {
	i := 0
	for i < len(text) {
		c := text[i]
		switch {
		case isSpace(c):
			i++
		case isPunct(c):
			dst = append(dst, uint32(c))
			i++
		default:
			// A word chunk: up to 4 bytes that are neither space nor punctuation.
			var id uint32
			n := 0
			for n < 4 && i < len(text) && !isSpace(text[i]) && !isPunct(text[i]) {
				id |= uint32(text[i]) << (8 * n)
				n++
				i++
			}
			dst = append(dst, id)
		}
	}
	return dst
}

// countTokens is appendTokens without the ids.
func countTokens(text string) int {
	n := 0
	i := 0
	for i < len(text) {
		c := text[i]
		switch {
		case isSpace(c):
			i++
		case isPunct(c):
			n++
			i++
		default:
			k := 0
			for k < 4 && i < len(text) && !isSpace(text[i]) && !isPunct(text[i]) {
				k++
				i++
			}
			n++
		}
	}
	return n
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f'
}

func isPunct(c byte) bool {
	return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') || (c >= '{' && c <= '~')
}

// Hashing: a fixed (process independent) 64-bit mix, because prefill and decode engines in different
// processes compare prompt hashes.
const hashSeed uint64 = 0x9e3779b97f4a7c15

func mix64(h, v uint64) uint64 {
	h ^= v + 0x9e3779b97f4a7c15 + (h << 6) + (h >> 2)
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// hashTokens hashes a token sequence (the prompt hash the PD handshake checks).
func hashTokens(ids []uint32) uint64 {
	h := mix64(hashSeed, uint64(len(ids)))
	for _, id := range ids {
		h = mix64(h, uint64(id))
	}
	return h
}

// vocab are the output words; those longer than 4 letters are dropped so each output word is one token.
var vocab = strings.Fields(`the of and to in is it you that he was for on are as with his they at be this
have from or one had by word but not what all were we when your can said there use an each which she do how
their if will up other about out many then them these so some her would make like him into time has look two
more write go see way could no than been call who its now find long down day did get come made may part
over new sound take only work know place year live me back give most very after thing our just name good
man say great where help much too mean old any same tell boy does set three want air well also play small
end put home read hand port big even land here must why ask went men kind off need near self tree move
try plan save hold test grid wave stop loop node edge data call fast slow cold warm blue gold`)

// rng is a splitmix64 PRNG: tiny, fast and deterministic.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// vocabText are the vocabulary words as output text (with a leading space), vocabIDs their token ids.
var vocabText, vocabIDs = func() ([]string, []uint32) {
	var text []string
	var ids []uint32
	for _, w := range vocab {
		if len(w) > 4 {
			continue // must stay one token
		}
		text = append(text, " "+w)
		ids = append(ids, 0)
		i := len(ids) - 1
		for j := 0; j < len(w); j++ {
			ids[i] |= uint32(w[j]) << (8 * j)
		}
	}
	return text, ids
}()

// word returns the next output token's text (with its leading space) and id.
func (r *rng) word() (string, uint32) {
	i := r.next() % uint64(len(vocabText))
	return vocabText[i], vocabIDs[i]
}

// outputSeed derives the PRNG seed of one sampled (not greedy) choice; nonce (sampleSpec.nonce),
// when not 0, sets apart samples that are otherwise alike.
func outputSeed(engineSeed int64, reqSeed int64, promptHash uint64, choice int, nonce uint64) uint64 {
	h := mix64(hashSeed, uint64(engineSeed))
	h = mix64(h, uint64(reqSeed))
	h = mix64(h, promptHash)
	h = mix64(h, uint64(choice)+1)
	if nonce != 0 {
		h = mix64(h, nonce)
	}
	return h
}
