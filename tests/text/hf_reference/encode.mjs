// Encodes and decodes texts with Hugging Face's tokenizers.js, the reference that
// tokenizer_reference.py compares runtime/text's tokenizer.json reader with.
// usage: node encode.mjs DIR TEXTS.json
//   DIR holds tokenizer.json and, optionally, tokenizer_config.json; TEXTS.json is a JSON list of
//   strings. Prints one JSON line per text: {"recognized": ids (special tokens in the text
//   recognized, no BOS/EOS added), "decoded": those ids decoded with special tokens skipped and
//   no clean-up of tokenization spaces}.
import fs from "node:fs";
import path from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";

const [dir, textsPath] = process.argv.slice(2);
if (!dir || !textsPath) {
  console.error("usage: node encode.mjs DIR TEXTS.json");
  process.exit(2);
}
const readJson = (p) => JSON.parse(fs.readFileSync(p, "utf8"));
const configPath = path.join(dir, "tokenizer_config.json");
const tokenizer = new Tokenizer(readJson(path.join(dir, "tokenizer.json")),
  fs.existsSync(configPath) ? readJson(configPath) : {});

const lines = [];
for (const text of readJson(textsPath)) {
  const ids = tokenizer.encode(text, { add_special_tokens: false }).ids;
  // decode() throws on an empty list; no ids decode to "".
  const decoded = ids.length === 0 ? "" : tokenizer.decode(ids,
    { skip_special_tokens: true, clean_up_tokenization_spaces: false });
  lines.push(JSON.stringify({ recognized: ids, decoded }));
}
process.stdout.write(lines.join("\n") + (lines.length ? "\n" : ""));
