// Calls a running sluice gateway with the official OpenAI SDK for Node (npm "openai"): embeddings (the
// SDK asks for base64 and decodes it, unless told "float"), and a chat completion for comparison.
//
// Environment:
//   SLUICE_URL        gateway base URL, e.g. http://127.0.0.1:8080 (required)
//   SLUICE_MODEL      model the gateway's workers serve (required)
//   SLUICE_EMBED_DIM  length of the engines' embeddings (required)
//
// Run: node --test tests/tsclient/openai.test.mjs   (tests/tsclient/openai_test.go runs it against an
// in-process gateway in front of simulated engines)
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

const baseUrl = process.env.SLUICE_URL;
const model = process.env.SLUICE_MODEL;
const dim = Number(process.env.SLUICE_EMBED_DIM);
if (!baseUrl || !model || !dim) {
  throw new Error("SLUICE_URL, SLUICE_MODEL and SLUICE_EMBED_DIM must be set");
}
const client = new OpenAI({ baseURL: `${baseUrl}/v1`, apiKey: "unused", maxRetries: 0, timeout: 10_000 });

test("embeddings, the SDK's default encoding (base64, decoded by the SDK)", async () => {
  const res = await client.embeddings.create({ model, input: ["first text", "second text"] });
  assert.equal(res.object, "list");
  assert.equal(res.data.length, 2);
  assert.deepEqual(res.data.map((d) => d.index), [0, 1]);
  for (const d of res.data) {
    assert.equal(d.embedding.length, dim);
    const norm = Math.sqrt(d.embedding.reduce((s, x) => s + x * x, 0));
    assert.ok(Math.abs(norm - 1) < 1e-5, `norm ${norm}`); // float32 round trip of a unit vector
  }
  assert.ok(res.usage.prompt_tokens > 0);
});

test("embeddings as floats match the base64 ones", async () => {
  const b64 = await client.embeddings.create({ model, input: "same text" });
  const flt = await client.embeddings.create({ model, input: "same text", encoding_format: "float" });
  assert.equal(flt.data[0].embedding.length, dim);
  for (let i = 0; i < dim; i++) {
    assert.ok(Math.abs(b64.data[0].embedding[i] - flt.data[0].embedding[i]) < 1e-6);
  }
});

test("an unknown model is a 404 the SDK raises", async () => {
  await assert.rejects(client.embeddings.create({ model: "nobody-serves-this", input: "x" }), (err) => err.status === 404);
});

test("chat completion", async () => {
  const res = await client.chat.completions.create({ model, max_tokens: 3, messages: [{ role: "user", content: "hi" }] });
  assert.equal(res.choices.length, 1);
  assert.ok(res.choices[0].message.content.length > 0);
});
