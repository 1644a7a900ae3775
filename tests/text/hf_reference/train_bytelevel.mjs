// Trains a small byte-level BPE in plain JavaScript, independently of runtime/text, and writes
// it in the layout Qwen2 / Qwen2.5-VL ship (or, with --llama3, as Llama-3's: \p{N}{1,3},
// tiktoken-style merges, whole-word pieces and ignore_merges), so tokenizer_reference.py can
// compare runtime/text with tokenizers.js on it.
// usage: node train_bytelevel.mjs CORPUS OUT_DIR NUM_MERGES [--llama3]
//   CORPUS is UTF-8 text; writes OUT_DIR/tokenizer.json and OUT_DIR/tokenizer_config.json.
// Deterministic: the most frequent adjacent pair is merged first, ties go to the smaller pair
// (left piece, then right piece, by UTF-16 code units).
import fs from "node:fs";
import path from "node:path";

const args = process.argv.slice(2);
const llama3 = args.includes("--llama3");
const [corpusPath, outDir, numMergesArg] = args.filter((a) => a !== "--llama3");
const numMerges = Number(numMergesArg);
if (!corpusPath || !outDir || !Number.isInteger(numMerges) || numMerges < 0) {
  console.error("usage: node train_bytelevel.mjs CORPUS OUT_DIR NUM_MERGES [--llama3]");
  process.exit(2);
}

// The Oniguruma pattern as the file ships it, and the same for JavaScript (no inline (?i:..)).
const DIGITS = llama3 ? String.raw`\p{N}{1,3}` : String.raw`\p{N}`;
const CONTRACTIONS = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
const CONTRACTIONS_JS = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
const REST = String.raw`|[^\r\n\p{L}\p{N}]?\p{L}+|` + DIGITS +
  String.raw`| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
const PATTERN = CONTRACTIONS + REST;
const PATTERN_JS = new RegExp(CONTRACTIONS_JS + REST, "gu");

// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the rest to U+0100...
function bytesToUnicode() {
  const keep = [];
  for (let b = 0x21; b <= 0x7e; ++b) keep.push(b);
  for (let b = 0xa1; b <= 0xac; ++b) keep.push(b);
  for (let b = 0xae; b <= 0xff; ++b) keep.push(b);
  const chars = keep.map((b) => String.fromCodePoint(b));
  const order = [...keep];
  let n = 0;
  for (let b = 0; b < 256; ++b) {
    if (!keep.includes(b)) {
      order.push(b);
      chars.push(String.fromCodePoint(256 + n++));
    }
  }
  const table = new Array(256);
  order.forEach((b, i) => { table[b] = chars[i]; });
  return { table, order: chars };
}
const { table: BYTE_CHAR, order: BYTE_ORDER } = bytesToUnicode();
const encoder = new TextEncoder();
const toByteLevel = (s) => Array.from(encoder.encode(s), (b) => BYTE_CHAR[b]).join("");

// Word counts of the NFC-normalized corpus, each word a list of byte-level symbols.
const text = fs.readFileSync(corpusPath, "utf8").normalize("NFC");
const counts = new Map();
for (const m of text.matchAll(PATTERN_JS)) {
  const w = toByteLevel(m[0]);
  counts.set(w, (counts.get(w) ?? 0) + 1);
}
const words = [...counts.keys()].sort()
  .map((w) => ({ symbols: Array.from(w), count: counts.get(w) }));

const vocab = new Map(BYTE_ORDER.map((c, i) => [c, i]));
const merges = [];
const compare = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
while (merges.length < numMerges) {
  const pairs = new Map();  // "left\u0000right" -> count
  for (const { symbols, count } of words) {
    for (let i = 0; i + 1 < symbols.length; ++i) {
      const key = symbols[i] + "\u0000" + symbols[i + 1];
      pairs.set(key, (pairs.get(key) ?? 0) + count);
    }
  }
  let best = null;
  let bestCount = 0;
  for (const [key, c] of pairs) {
    if (c > bestCount || (c === bestCount && compare(key, best) < 0)) {
      best = key;
      bestCount = c;
    }
  }
  if (best === null) break;
  const [left, right] = best.split("\u0000");
  const merged = left + right;
  merges.push([left, right]);
  // Two pairs may spell the same piece ("ab"+"c", "a"+"bc"); the piece keeps its first id.
  if (!vocab.has(merged)) vocab.set(merged, vocab.size);
  for (const w of words) {
    const s = w.symbols;
    const out = [];
    for (let i = 0; i < s.length; ++i) {
      if (i + 1 < s.length && s[i] === left && s[i + 1] === right) {
        out.push(merged);
        ++i;
      } else {
        out.push(s[i]);
      }
    }
    w.symbols = out;
  }
}

// --llama3: the merges as a tiktoken vocabulary converted to tokenizer.json lists them (Llama-3's
// file): for each piece in id order, every split of it into two pieces with smaller ids. Some
// pieces then have several pairs, and a word may be a piece that the merges do not reach,
// which is where ignore_merges matters.
const fileMerges = [];
if (llama3) {
  for (const [piece, id] of vocab) {
    if (id < 256) continue;
    const chars = Array.from(piece);
    const splits = [];
    for (let k = 1; k < chars.length; ++k) {
      const a = chars.slice(0, k).join("");
      const b = chars.slice(k).join("");
      if (vocab.get(a) < id && vocab.get(b) < id) splits.push([a, b]);
    }
    splits.sort((x, y) => vocab.get(x[0]) - vocab.get(y[0]) || vocab.get(x[1]) - vocab.get(y[1]));
    fileMerges.push(...splits);
  }
  // And, as tiktoken's whole-word pieces, the most frequent words the merges did not make,
  // with no merges at all: only ignore_merges reaches them.
  const whole = [...counts].filter(([w]) => Array.from(w).length > 1 && !vocab.has(w))
    .sort((x, y) => y[1] - x[1] || compare(x[0], y[0])).slice(0, 64);
  for (const [w] of whole) vocab.set(w, vocab.size);
} else {
  fileMerges.push(...merges);
}

const byteLevel = {
  type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false,
};
const added = (id, content, special) => ({
  id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special,
});
const specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>",
  "<|vision_end|>", "<|image_pad|>"];
const addedTokens = specials.map((c, i) => added(vocab.size + i, c, true));
addedTokens.push(added(vocab.size + specials.length, "<tool_call>", false));

const tokenizer = {
  version: "1.0",
  truncation: null,
  padding: null,
  added_tokens: addedTokens,
  normalizer: { type: "NFC" },
  pre_tokenizer: {
    type: "Sequence",
    pretokenizers: [
      { type: "Split", pattern: { Regex: PATTERN }, behavior: "Isolated", invert: false },
      byteLevel,
    ],
  },
  post_processor: byteLevel,
  decoder: byteLevel,
  model: {
    type: "BPE",
    dropout: null,
    unk_token: null,
    continuing_subword_prefix: "",
    end_of_word_suffix: "",
    fuse_unk: false,
    byte_fallback: false,
    ignore_merges: llama3,
    vocab: Object.fromEntries(vocab),
    merges: fileMerges,
  },
};
const config = {
  add_prefix_space: false,
  bos_token: null,
  eos_token: "<|im_end|>",
  pad_token: "<|endoftext|>",
  unk_token: null,
  clean_up_tokenization_spaces: false,
  errors: "replace",
  split_special_tokens: false,
  model_max_length: 32768,
  tokenizer_class: "Qwen2Tokenizer",
  additional_special_tokens: specials.slice(1),
};
fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, "tokenizer.json"), JSON.stringify(tokenizer, null, 2) + "\n");
fs.writeFileSync(path.join(outDir, "tokenizer_config.json"), JSON.stringify(config, null, 2) + "\n");
console.log(`${outDir}: ${merges.length} merges learned, ${fileMerges.length} in the file, ` +
  `${vocab.size} pieces, ` +
  `${addedTokens.length} added tokens` +
  (llama3 ? " (Llama-3 pattern, tiktoken-style merges, ignore_merges)" : ""));
