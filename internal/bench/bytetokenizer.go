package bench

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// writeByteTokenizer writes to dir a byte-level BPE tokenizer whose ids 0-255 are the bytes (no
// merges), with ChatML's two added tokens and chat template: what the gateway needs in front of a
// simulator run with --grpc-byte-token-ids, whose output ids are its text's UTF-8 bytes. Every byte is
// one token, so tokenizing and detokenizing cost what they cost per token on a real vocabulary's
// pre-tokenizer, without shipping a model's tokenizer.
func writeByteTokenizer(dir string) error {
	vocab := make(map[string]int, 256)
	unprintable := 0
	for c := range 256 {
		// GPT-2's byte-to-unicode table: printable Latin-1 bytes are themselves, the others are
		// shifted past 255 in order.
		r := rune(c)
		printable := c >= '!' && c <= '~' || c >= 0xA1 && c <= 0xAC || c >= 0xAE
		if !printable {
			r = rune(256 + unprintable)
			unprintable++
		}
		vocab[string(r)] = c
	}
	tj := map[string]any{
		"added_tokens": []map[string]any{
			{"id": 256, "content": "<|im_start|>", "special": true},
			{"id": 257, "content": "<|im_end|>", "special": true},
		},
		"normalizer": map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`},
				"behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "ByteLevel"},
		"decoder":        map[string]any{"type": "ByteLevel"},
		"model":          map[string]any{"type": "BPE", "vocab": vocab, "merges": [][2]string{}},
	}
	config := map[string]any{"eos_token": "<|im_end|>", "chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}" +
		"{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"}
	for name, v := range map[string]any{"tokenizer.json": tj, "tokenizer_config.json": config} {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}
