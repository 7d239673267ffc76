// Prints {"template": ...}: the chat template of a model whose npm tokenizer package ships none, taken
// from @huggingface/ollama-utils, which records each Ollama library model's GGUF chat template (the
// tokenizer.chat_template field, copied from the model's tokenizer_config.json when the GGUF was made).
// The table is not exported, so its TypeScript source (shipped in the package) is loaded as a module
// once its two type annotations are removed. Usage: node template.mjs library/llama2:7b
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

const require = createRequire(import.meta.url);
const pkg = dirname(dirname(require.resolve("@huggingface/ollama-utils"))); // dist/index.js
const source = readFileSync(join(pkg, "src", "chat-template-automap.ts"), "utf8")
  .replace(/^import type .*$/m, "")
  .replace(/OLLAMA_CHAT_TEMPLATE_MAPPING\s*:\s*OllamaChatTemplateMapEntry\[\]/, "OLLAMA_CHAT_TEMPLATE_MAPPING");
const { OLLAMA_CHAT_TEMPLATE_MAPPING } = await import(
  "data:text/javascript;base64," + Buffer.from(source).toString("base64")
);
const model = process.argv[2];
const entry = OLLAMA_CHAT_TEMPLATE_MAPPING.find((e) => e.model === model);
if (!entry) {
  console.error(`no GGUF chat template recorded for ${model}`);
  process.exit(1);
}
process.stdout.write(JSON.stringify({ template: entry.gguf }));
