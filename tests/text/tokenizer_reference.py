"""Checks runtime/text's tokenizer.json reader against Hugging Face's tokenizers.js
(@huggingface/tokenizers, pinned in hf_reference/package.json) as an independent reference.

usage: tokenizer_reference.py TEXT_TOOL SOURCE_DIR WORK_DIR

Tokenizers: two byte-level BPEs trained by hf_reference/train_bytelevel.mjs (plain JS, not the
C++ code) on data/tokenizer/corpus.txt plus the adversarial texts below: one in Qwen2's layout,
one with Llama-3's digit pattern, tiktoken-style merges (several pairs per piece) and whole-word
pieces that only ignore_merges reaches; one trained by the project's own trainer
(runtime/tiny/bytelevel_bpe.h, as make-tiny's Qwen2.5-VL checkpoints get); and the default
model's (models/scenes-llava)
tokenizer.json, SentencePiece-style BPE with byte fallback as llava-hf ships it. Texts: the
adversarial list plus seeded random concatenations of its pieces. For every text:
`text_tool batch` ids with special tokens recognized == tokenizers.js ids (add_special_tokens
false); C++ decode == tokenizers.js decode (special tokens skipped, no clean-up); the streaming
detokenizer == C++ decode. For scenes-llava also: tokenizer.json ids with special tokens read
as text == tokenizer.model (SentencePiece) ids, and the same decode.

Exits 77 (ctest: skipped) with the reason when node or the npm package is missing.

Where tokenizers.js differs from the Rust library by design the texts avoid the difference
rather than model it: its (?i:..) folds ASCII only (Oniguruma also folds U+017F 'ſ' to 's'),
and code points assigned after Unicode 14 are left out (node's ICU is newer than runtime/text's
tables). One difference is stepped around in the comparison instead: its ByteFallback decoder
drops a U+FEFF that starts a byte run (see compare_json).
"""
import json
import os
import random
import sys

from reference_run import lines_of, node_with, run

TOOL, SOURCE_DIR, WORK_DIR = sys.argv[1:4]
HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "hf_reference")
CORPUS = os.path.join(SOURCE_DIR, "data", "tokenizer", "corpus.txt")
LLAVA_DIR = os.path.join(SOURCE_DIR, "models", "scenes-llava")
NUM_MERGES = 800
SHOW = 5  # mismatches printed per check


NODE = node_with(REFERENCE, "tokenizers")

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>",
            "<|vision_end|>", "<|image_pad|>"]

TEXTS = [
    # empty and whitespace only
    "", " ", "  ", "\n", "\t", "\r\n", " \t\n\r\n \u00a0\u3000 ", "\n\n\n",
    # plain words, contractions, punctuation
    "Hello world", "Hello, world! How's it going?", "I'm, you're, we've, they'll, he'd",
    "IT'S THEY'LL WE'VE I'D YOU'RE I'M DON'T", "'S'T'RE'VE'M'LL'D'x'", "rock'n'roll",
    "’s ’ll ‘quoted’", "' s", "''s", "'", "!!!", "...", "?!?", "--", "—–", "«quoted»",
    "(paren) [bracket] {brace}", "$100 #hashtag @user 50%", "snake_case_name a_b_c",
    "path/to/file.txt", "https://example.com/a?b=c&d=e", "<tag attr=\"v\">", "x=1;y=2 a+b=c",
    "  !!!  ", " ?x", "!\n", "!!\r\n\r\n", "x.\n\ny", "What colour is the car?",
    # letters of many scripts, marks, NFC
    "café", "cafe\u0301", "e\u0301\u0301\u0301", "\u0301start", "naïve résumé", "Ünïcödé",
    "A\u030a vs \u00c5 vs \u212b", "\u1e9b\u0323", "\u0041\u0300\u0316", "ﬁnance Ǆ ǅ ǆ",
    "ʰʲ ˈstress", "İstanbul ı", "ÀÉÎÕÜ àéîõü", "ß Σ ς σ",
    "\u1100\u1161\u11a8\u1102\u1161", "\u1112\u1161\u11ab\uae00", "한국어 텍스트",
    "日本語のテキスト", "中文，标点。", "Привет, мир!", "Γειά σου Κόσμε", "مرحبا بالعالم",
    "שלום עולם", "हिन्दी पाठ", "ภาษาไทย", "\u0915\u094d\u0937", "Ελληνικά ΆΈΉ",
    # emoji: ZWJ sequences, skin tones, flags, keycaps, variation selectors
    "😀", "👍🏽", "👨\u200d👩\u200d👧\u200d👦 family", "🏳️\u200d🌈", "a😀b", " 😀😀 ",
    "👩🏿\u200d💻 codes", "🇯🇵🇫🇷🇺🇸", "#\ufe0f\u20e3 1\ufe0f\u20e3", "❤\ufe0f ☺\ufe0e",
    "🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",
    # digits: scripts, long runs (Llama-3's \p{N}{1,3}), numbers that are not Nd
    "123", "1234567", "12,345.67", "٠١٢٣٤٥٦٧٨٩", "۱۲۳۴", "１２３４", "१२३", "²³ ½ Ⅻ", "x²",
    "v1.2.3-rc4", "3.14159265358979323846", "0" * 31, "9" * 100 + "x",
    "a1b22c333d4444", " 2024-01-01T12:34:56Z",
    # whitespace runs
    "a  b", "a   b", "trailing   ", "   leading", "\t\ttabs\t", "line\nbreak", "crlf\r\nline",
    "\r\n\r\n", "a\n\n\nb", " \n \n ", "\r", "  \r\n  x", "end\n", "mixed \t\n\r\n end  ",
    "nbsp\u00a0here", "ideographic\u3000space", "\u00a0\u00a0x", "x\u3000", "\u2028\u2029",
    "\u000b\u000c vt ff", "\u2000\u200a\u202f\u205f", "zero\u200bwidth", "nel\u0085line",
    "bom\ufeffinside", " " * 40 + "x", "x" + " " * 40, "\n" * 20 + "y", "\t \t \n",
    # special tokens in text; near misses
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n"
    "<|vision_start|><|image_pad|><|image_pad|><|vision_end|>What is it?<|im_end|>\n"
    "<|im_start|>assistant\n",
    "a<|image_pad|>b", "<|image_pad|><|image_pad|>", " <|im_end|> ", "<tool_call>",
    "<tool_call>{\"name\": \"f\"}</tool_call>", "x<tool_call>y", "<|im_sta", "<|im_start",
    "<|im_start|", "im_start|>", "<||>", "<|endoftext|><|endoftext|>", "<|IM_START|>",
    "<<|im_end|>>", "<s>hello</s>", "<image>\nWhat is this?", "a<image>b", "<pad><unk>",
    "USER: <image>\nDescribe. ASSISTANT:", "<s", "</s", "<ima",
    # long mixed paragraphs
    "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX! 1234567890 times; "
    "naïve café-owners don't re-enter the coöperative's 2nd floor (it's 3.5m high).\n\n"
    "Second paragraph:\tindented\r\nwith CRLF, emoji 🎉👍🏽 and 中文 mixed in.   ",
    "def f(x):\n    return x ** 2  # square\n\nprint(f(12))\n",
    "Q: How many circles are there?\nA: There are 3 circles.\n\n" * 3,
    "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３ ！？ and ｶﾀｶﾅ half-width",
    "Mixed: résumé, Ελληνικά, русский, العربية, עברית, हिन्दी, 日本語, 한국어, ไทย — all in one line.",
]

PIECES = [
    "a", "Z", "word", "Word", "WORD", "é", "e\u0301", "\u0301", "\u0308", "中", "文字", "カ",
    "한", "\u1100", "\u1161", "😀", "👍🏽", "\u200d", "👩\u200d💻", "\ufe0f", " ", "  ", "\t",
    "\n", "\r\n", "\r", "\u00a0", "\u3000", "0", "42", "12345", "٣", "１", "²", "½", "'", "'s",
    "'S", "'ll", "'LL", "'Re", "'vE", "'d", "’s", "!", "...", "—", "$", "_", "/", ",", ".", "?",
    "ǅ", "ß", "<|im_start|>", "<|im_end|>", "<|image_pad|>", "<tool_call>", "<|", "|>",
    "<|im_sta", "<s>", "</s>", "<image>", "<pad>", "<unk>",
]


def all_texts():
    rng = random.Random(20240601)
    texts = list(TEXTS)
    for _ in range(400):
        texts.append("".join(rng.choice(PIECES) for _ in range(rng.randint(1, 16))))
    return texts


def pieces_of(tokenizer_json):
    """id -> piece, for the diffs."""
    with open(tokenizer_json, encoding="utf-8") as f:
        t = json.load(f)
    pieces = {i: p for p, i in t["model"]["vocab"].items()}
    pieces.update({a["id"]: a["content"] for a in t.get("added_tokens", [])})
    return pieces


class Checker:
    def __init__(self, texts):
        self.texts = texts
        self.failures = 0
        self.compared = 0

    def ids(self, name, got, want, what, pieces):
        """got[i][what[0]] == want[i][what[1]] for every text."""
        bad = [i for i, (g, w) in enumerate(zip(got, want)) if g[what[0]] != w[what[1]]]
        self.report(name, bad)
        for i in bad[:SHOW]:
            g, w = got[i][what[0]], want[i][what[1]]
            at = next((k for k, (a, b) in enumerate(zip(g, w)) if a != b), min(len(g), len(w)))
            print(f"  text {self.texts[i]!r}\n    first difference at position {at}\n"
                  f"    {what[2]}: {g}\n      {[pieces.get(x) for x in g[at:at + 6]]}\n"
                  f"    {what[3]}: {w}\n      {[pieces.get(x) for x in w[at:at + 6]]}")

    def strings(self, name, got, want, what, only=None):
        bad = [i for i, (g, w) in enumerate(zip(got, want))
               if (only is None or only[i]) and g[what[0]] != w[what[1]]]
        self.report(name, bad, None if only is None else sum(only))
        for i in bad[:SHOW]:
            g, w = got[i][what[0]], want[i][what[1]]
            at = next((k for k, (a, b) in enumerate(zip(g, w)) if a != b), min(len(g), len(w)))
            print(f"  text {self.texts[i]!r}\n    first difference at character {at}\n"
                  f"    {what[2]}: {g!r}\n    {what[3]}: {w!r}")

    def report(self, name, bad, n=None):
        n = len(self.texts) if n is None else n
        self.compared += n
        self.failures += len(bad)
        print(f"{'FAIL' if bad else 'ok  '} {name}: {n - len(bad)}/{n} texts agree")


def compare_json(check, name, directory, texts_path, n):
    tokenizer_json = os.path.join(directory, "tokenizer.json")
    cpp = lines_of([TOOL, "batch", tokenizer_json, texts_path], n, "texts")
    js = lines_of([NODE, os.path.join(REFERENCE, "encode.mjs"), directory, texts_path], n, "texts")
    pieces = pieces_of(tokenizer_json)
    check.ids(f"{name}: ids, special tokens recognized (C++ vs tokenizers.js)", cpp, js,
              ("recognized", "recognized", "C++", "JS "), pieces)
    # tokenizers.js's ByteFallback decoder uses a TextDecoder that drops a U+FEFF starting a
    # byte run (ignoreBOM false); the Rust library's String::from_utf8 keeps it, as C++ does.
    with open(tokenizer_json, encoding="utf-8") as f:
        byte_fallback = '"ByteFallback"' in json.dumps(json.load(f).get("decoder"))
    js_decodes = [not (byte_fallback and "\ufeff" in t) for t in check.texts]
    check.strings(f"{name}: decode (C++ vs tokenizers.js)", cpp, js,
                  ("decoded", "decoded", "C++", "JS "), only=js_decodes)
    check.strings(f"{name}: streaming detokenizer vs decode (C++)", cpp, cpp,
                  ("streamed", "decoded", "streamed", "decoded "))
    return cpp, pieces


def main():
    texts = all_texts()
    os.makedirs(WORK_DIR, exist_ok=True)
    texts_path = os.path.join(WORK_DIR, "texts.json")
    with open(texts_path, "w", encoding="utf-8") as f:
        json.dump(texts, f)

    # The training corpus: the project's, then the adversarial texts (three times, so that some
    # of their pairs are merged too).
    corpus_path = os.path.join(WORK_DIR, "train_corpus.txt")
    with open(CORPUS, encoding="utf-8") as f:
        corpus = f.read()
    with open(corpus_path, "w", encoding="utf-8") as f:
        f.write(corpus + "\n" + "\n".join(TEXTS * 3) + "\n")

    check = Checker(texts)
    train = os.path.join(REFERENCE, "train_bytelevel.mjs")
    for name, flags in (("qwen2", []), ("llama3", ["--llama3"])):
        directory = os.path.join(WORK_DIR, f"bytelevel_{name}")
        print(run([NODE, train, corpus_path, directory, str(NUM_MERGES), *flags]).strip())
        compare_json(check, f"bytelevel_{name}", directory, texts_path, len(texts))
    # The project's own trainer (make-tiny's Qwen2.5-VL tokenizer), on the same corpus.
    directory = os.path.join(WORK_DIR, "bytelevel_cpp")
    os.makedirs(directory, exist_ok=True)
    print(run([TOOL, "train-bytelevel", corpus_path, directory, str(NUM_MERGES)]).strip())
    compare_json(check, "bytelevel_cpp", directory, texts_path, len(texts))

    # The default model ships both files; they must give the same ids.
    for name in ("tokenizer.json", "tokenizer.model"):
        if not os.path.isfile(os.path.join(LLAVA_DIR, name)):
            sys.exit(f"FAIL: {LLAVA_DIR} has no {name}")
    cpp, pieces = compare_json(check, "scenes-llava", LLAVA_DIR, texts_path, len(texts))
    spm = lines_of([TOOL, "batch", os.path.join(LLAVA_DIR, "tokenizer.model"), texts_path],
                   len(texts), "texts")
    check.ids("scenes-llava: ids, special tokens as text (tokenizer.json vs tokenizer.model)",
              cpp, spm, ("as_text", "as_text", "json ", "model"), pieces)
    # Decoding compares where the text spells no special token (tokenizer.model has none).
    plain = [c["as_text"] == c["recognized"] for c in cpp]
    check.strings("scenes-llava: decode (tokenizer.json vs tokenizer.model)", cpp, spm,
                  ("decoded", "decoded", "json ", "model"), only=plain)

    if check.failures:
        sys.exit(f"FAIL: {check.failures} disagreements in {check.compared} comparisons")
    print(f"PASS: {check.compared} comparisons over {len(texts)} texts agree")


main()
