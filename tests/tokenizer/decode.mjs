// Text oracle: reads {"cases": [{"ids": [int, ...], "skip": bool}, ...]} on stdin and writes
// {"texts": [string, ...]}, each case decoded by @lenml/tokenizers (a JavaScript port of Hugging Face
// tokenizers) with a model family's tokenizer.json and tokenizer_config.json (@lenml/tokenizer-FAMILY,
// FAMILY the first argument, qwen3 without one), as tokenizer.decode(ids, {skip_special_tokens: skip}).
import { readFileSync } from "node:fs";

const family = process.argv[2] ?? "qwen3";
const { fromPreTrained } = await import(`@lenml/tokenizer-${family}`);
const tokenizer = fromPreTrained();
const input = JSON.parse(readFileSync(0, "utf8"));
// The port refuses an empty list; Hugging Face decodes it to "".
const texts = input.cases.map((c) =>
  c.ids.length === 0 ? "" : tokenizer.decode(c.ids, { skip_special_tokens: c.skip }),
);
process.stdout.write(JSON.stringify({ texts }));
