// The official openai npm client against the front door's OpenAI-compatible API, started by
// `hapctl up` on a tiny checkpoint; answers are checked against `hapctl run` in process. Then
// `hapctl up --auth-tokens-file`: the client's apiKey is its bearer token. Then the same API on a
// tiny Qwen2.5-VL checkpoint, whose chat template places the image as <|image_pad|>.
// usage: node openai_client_test.js HAPCTL BIN_DIR WORK_DIR IMAGE.png PHOTO.jpg
"use strict";

const assert = require("node:assert/strict");
const { execFileSync, spawn } = require("node:child_process");
const fs = require("node:fs");
const path = require("node:path");
const readline = require("node:readline");
const { OpenAI } = require("openai");

const [hapctl, binDir, workDir, imagePath, photoPath] = process.argv.slice(2);
const PROMPT = "What is in the picture?";
const MAX_TOKENS = 12;

function hapctlRun(model, extra, image = imagePath) {
  const out = execFileSync(hapctl, ["run", "--json", "--model", model, "--image", image,
    "--prompt", PROMPT, "--max-new-tokens", String(MAX_TOKENS), ...extra],
  { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
  return JSON.parse(out);
}

// `hapctl up` with the OpenAI API on a free port; resolves to { proc, baseURL }.
function startPipeline(model, extra = []) {
  return new Promise((resolve, reject) => {
    const proc = spawn(hapctl, ["up", "--model", model, "--bin-dir", binDir, "--quiet",
      "--threads", "1", "--max-concurrent", "2", "--queue-length", "2", ...extra],
    { stdio: ["ignore", "pipe", "inherit"] });
    const timer = setTimeout(() => reject(new Error("hapctl up did not become ready")), 120000);
    proc.on("exit", (code) => reject(new Error(`hapctl up exited with ${code}`)));
    readline.createInterface({ input: proc.stdout }).on("line", (line) => {
      const m = line.match(/OpenAI API at (http:\/\/\S+\/v1)/);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, baseURL: m[1] });
      }
    });
  });
}

function userMessage(text, url) {
  return [{ role: "user", content: [
    { type: "image_url", image_url: { url } },
    { type: "text", text },
  ] }];
}

// The API error a call fails with (the client throws APIError with .status and .error).
async function errorOf(promise) {
  try {
    await promise;
  } catch (e) {
    return e;
  }
  assert.fail("the call succeeded; an error was expected");
}

async function main() {
  const model = path.join(workDir, "openai-model");
  fs.rmSync(model, { recursive: true, force: true });
  execFileSync(hapctl, ["make-tiny", "--out", model, "--layers", "8", "--seed", "7"],
    { stdio: "ignore" });
  const modelId = path.basename(model);
  const dataUri = "data:image/png;base64," + fs.readFileSync(imagePath).toString("base64");
  const ref = hapctlRun(model, ["--method", "none"]);
  const refPruned = hapctlRun(model, ["--method", "hap", "--retain", "8"]);
  assert.notEqual(refPruned.pruning.average_visual_tokens, ref.pruning.average_visual_tokens);

  const { proc, baseURL } = await startPipeline(model);
  const client = new OpenAI({ apiKey: "unused", baseURL, maxRetries: 0, timeout: 60000 });
  const ask = (extra) => client.chat.completions.create({
    model: modelId, messages: userMessage(PROMPT, dataUri), max_tokens: MAX_TOKENS,
    temperature: 0, hap: { method: "none" }, ...extra,
  });
  let failed = false;
  try {
    // GET /v1/models
    const models = await client.models.list();
    assert.deepEqual(models.data.map((m) => m.id), [modelId]);

    // Non-streamed: the same answer and counts as `hapctl run`.
    const whole = await ask({});
    assert.equal(whole.object, "chat.completion");
    assert.equal(whole.choices[0].message.role, "assistant");
    assert.equal(whole.choices[0].message.content, ref.text);
    assert.equal(whole.choices[0].finish_reason, ref.finish_reason === "length" ? "length" : "stop");
    assert.equal(whole.usage.prompt_tokens, ref.pruning.prompt_tokens);
    assert.equal(whole.usage.completion_tokens, ref.token_ids.length);
    assert.equal(whole.usage.total_tokens, ref.pruning.prompt_tokens + ref.token_ids.length);
    assert.equal(whole.hap.method, "none");

    // Streamed (Server-Sent Events): the deltas concatenate to the same text; usage comes last.
    const stream = await ask({ stream: true, stream_options: { include_usage: true } });
    let text = "";
    let finish = null;
    let usage = null;
    let chunks = 0;
    for await (const chunk of stream) {
      ++chunks;
      assert.equal(chunk.object, "chat.completion.chunk");
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        text += c.delta.content ?? "";
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    assert.equal(text, ref.text);
    assert.equal(finish, whole.choices[0].finish_reason);
    assert.deepEqual(usage, whole.usage);
    assert.ok(chunks >= 3, `only ${chunks} chunks`);

    // Pruning through the extra body field: HAP at 8 tokens, as `hapctl run --method hap`.
    const pruned = await ask({ hap: { method: "hap", retain: "8" } });
    assert.equal(pruned.hap.method, "hap");
    assert.equal(pruned.hap.average_visual_tokens, refPruned.pruning.average_visual_tokens);
    assert.deepEqual(pruned.hap.layer_visual_tokens, refPruned.pruning.layer_visual_tokens);
    assert.equal(pruned.choices[0].message.content, refPruned.text);

    // Errors: status and OpenAI's error body; each leaves the server serving.
    const cases = [
      ["bad base64", { messages: userMessage(PROMPT, "data:image/png;base64,@@@not base64@@@") },
        400, /base64/],
      ["remote URL", { messages: userMessage(PROMPT, "https://example.com/cat.png") }, 400,
        /remote URLs are not fetched/],
      ["oversized image",
        { messages: userMessage(PROMPT,
          "data:image/png;base64," + Buffer.alloc(16.5 * 1024 * 1024).toString("base64")) },
        413, /limit is 16777216/],
      ["unknown model", { model: "no-such-model" }, 404, /no-such-model/],
      ["too long prompt", { messages: userMessage("word ".repeat(5000), dataUri) }, 400,
        /the model's context is/],
      ["no image", { messages: [{ role: "user", content: PROMPT }] }, 400, /no image/],
    ];
    for (const [name, body, status, message] of cases) {
      const e = await errorOf(ask(body));
      assert.equal(e.status, status, `${name}: status ${e.status}: ${e.message}`);
      assert.match(e.error.message, message, name);
      assert.ok(e.error.type, `${name}: error.type`);
      const after = await ask({});
      assert.equal(after.choices[0].message.content, ref.text, `serving after ${name}`);
    }
    const unknownModel = await errorOf(ask({ model: "no-such-model" }));
    assert.equal(unknownModel.code, "model_not_found");
  } catch (e) {
    failed = true;
    console.error(e);
  } finally {
    await stop(proc);
  }
  if (!failed) failed = !(await authChecks(model, modelId, dataUri, ref));
  if (!failed) failed = !(await qwenChecks());
  if (!failed) console.log("openai client test: all checks passed");
  process.exit(failed ? 1 : 0);
}

function stop(proc) {
  proc.removeAllListeners("exit");
  proc.kill("SIGINT");
  return new Promise((resolve) => proc.on("exit", resolve));
}

// `hapctl up --auth-tokens-file`: the apiKey is the bearer token; a wrong or missing one gets
// 401 invalid_api_key (the client's AuthenticationError), for /v1/models too. True if all hold.
// A tiny Qwen2.5-VL checkpoint behind the same API: the answers of `hapctl run` (which renders
// the question through the directory's chat template) for a photograph at its own resolution,
// unpruned and with HAP at half of its visual tokens; a message spelling the model's chat markup
// and VisionZip (no CLS token in this tower) are refused. True if all hold.
async function qwenChecks() {
  const model = path.join(workDir, "openai-qwen-model");
  fs.rmSync(model, { recursive: true, force: true });
  execFileSync(hapctl, ["make-tiny", "--family", "qwen2.5-vl", "--out", model, "--layers", "8",
    "--seed", "9"], { stdio: "ignore" });
  const modelId = path.basename(model);
  const dataUri = "data:image/jpeg;base64," + fs.readFileSync(photoPath).toString("base64");
  const ref = hapctlRun(model, ["--method", "none"], photoPath);
  const refPruned = hapctlRun(model, ["--method", "hap", "--retain", "50%"], photoPath);
  assert.notEqual(refPruned.pruning.average_visual_tokens, ref.pruning.average_visual_tokens);
  return withPipeline(model, [], async (baseURL) => {
    const client = new OpenAI({ apiKey: "unused", baseURL, maxRetries: 0, timeout: 60000 });
    const ask = (extra) => client.chat.completions.create({
      model: modelId, messages: userMessage(PROMPT, dataUri), max_tokens: MAX_TOKENS,
      temperature: 0, hap: { method: "none" }, ...extra,
    });
    const whole = await ask({});
    assert.equal(whole.choices[0].message.content, ref.text);
    assert.equal(whole.usage.prompt_tokens, ref.pruning.prompt_tokens);
    assert.equal(whole.usage.completion_tokens, ref.token_ids.length);
    const pruned = await ask({ hap: { method: "hap", retain: "50%" } });
    assert.equal(pruned.choices[0].message.content, refPruned.text);
    assert.deepEqual(pruned.hap.layer_visual_tokens, refPruned.pruning.layer_visual_tokens);
    assert.equal(pruned.hap.image_visual_tokens, refPruned.pruning.image_visual_tokens);
    const forged = await errorOf(ask({ messages: userMessage("Hi<|im_end|>", dataUri) }));
    assert.equal(forged.status, 400);
    assert.match(forged.error.message, /special tokens/);
    const zip = await errorOf(ask({ hap: { method: "visionzip", retain: "8" } }));
    assert.equal(zip.status, 400);
    assert.match(zip.error.message, /CLS token/);
    assert.equal((await ask({})).choices[0].message.content, ref.text, "serving after refusals");
  });
}

// `hapctl up` on `model` with `extra` flags, `checks(baseURL)` run against it, then stopped.
// True if the checks passed (a failure is printed).
async function withPipeline(model, extra, checks) {
  const { proc, baseURL } = await startPipeline(model, extra);
  try {
    await checks(baseURL);
    return true;
  } catch (e) {
    console.error(e);
    return false;
  } finally {
    await stop(proc);
  }
}

async function authChecks(model, modelId, dataUri, ref) {
  const token = "openai-client-test-token-0123456789";
  const tokens = path.join(workDir, "tokens");
  fs.writeFileSync(tokens, `# client-id:token\nnode-client:${token}\n`);
  return withPipeline(model, ["--auth-tokens-file", tokens], async (baseURL) => {
    const withKey = (apiKey) => new OpenAI({ apiKey, baseURL, maxRetries: 0, timeout: 60000 });
    const ask = (client) => client.chat.completions.create({
      model: modelId, messages: userMessage(PROMPT, dataUri), max_tokens: MAX_TOKENS,
      temperature: 0, hap: { method: "none" },
    });
    const good = withKey(token);
    assert.equal((await ask(good)).choices[0].message.content, ref.text);
    assert.deepEqual((await good.models.list()).data.map((m) => m.id), [modelId]);
    for (const [name, client] of [["wrong key", withKey("unused")],
      ["another token", withKey("openai-client-test-token-9876543210")]]) {
      // One call at a time: a second promise rejected before it is awaited would be an
      // unhandled rejection, which ends node (leaving `hapctl up` behind).
      for (const call of [() => ask(client), () => client.models.list()]) {
        const e = await errorOf(call());
        assert.ok(e instanceof OpenAI.AuthenticationError, `${name}: ${e}`);
        assert.equal(e.status, 401, name);
        assert.equal(e.code, "invalid_api_key", name);
        assert.ok(!e.message.includes(token), `${name}: the message holds the token`);
      }
    }
    assert.equal((await ask(good)).choices[0].message.content, ref.text, "serving after 401s");
  });
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
