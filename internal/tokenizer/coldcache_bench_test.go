package tokenizer_test

import (
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/tokenizer"
)

// words3 is n words of three random lowercase letters, space-separated, as sluice-bench's prompts.
func words3(r *rand.Rand, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		for range 3 {
			b.WriteByte(byte('a' + r.IntN(26)))
		}
	}
	return b.String()
}

// BenchmarkEncodeColdCache encodes chat prompts of 64 words drawn from ~17,600 (sluice-bench's prompt
// text) with the word cache full of them, warm, and cold: before each encode, 32 MiB are written
// (outside the timer), as the other work of a gateway and its neighbours evicts the cache between two
// requests.
func BenchmarkEncodeColdCache(b *testing.B) {
	tk, err := tokenizer.Load(filepath.Join("..", "sim", "bytetokenizer"))
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	texts := make([]string, 4096)
	for i := range texts {
		texts[i] = "<|im_start|>user\n" + words3(r, 64) + "<|im_end|>\n<|im_start|>assistant\n"
		tk.EncodeUint32(texts[i])
	}
	evict := make([]byte, 32<<20)
	ids := 0
	for _, cold := range []bool{false, true} {
		name := "warm"
		if cold {
			name = "cold"
		}
		b.Run(name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if cold {
					b.StopTimer()
					for j := 0; j < len(evict); j += 64 {
						evict[j]++
					}
					b.StartTimer()
				}
				ids += len(tk.EncodeUint32(texts[i%len(texts)]))
			}
		})
	}
	if ids == 0 {
		b.Fatal("no ids")
	}
}
