"""Encoder for a byte-level BPE tokenizer.json in Qwen2's layout (NFC, the Qwen2 Split
pre-tokenizer, ByteLevel, BPE merges, added tokens), written from the Hugging Face tokenizers
format, not from the C++ in runtime/text. For training the scenes Qwen2.5-VL
(tools/train/train_qwen.py) without the tokenizers library.

ASCII text only: Python's re has no \\p{L} / \\p{N}, and on ASCII the Qwen2 pattern's classes
are exactly [A-Za-z] and [0-9]. Encoding anything else raises ValueError rather than risk ids
that differ from the engine's. Added tokens (<|im_start|> ...) are recognized in the text, as
tokenizers does with special tokens on.
"""
import json
import re

# The Qwen2 split pattern with its Unicode classes spelled for ASCII.
_SPLIT = re.compile(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\na-zA-Z0-9]?[a-zA-Z]+|[0-9]"
                    r"| ?[^\sa-zA-Z0-9]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def _byte_chars():
    """GPT-2's bytes_to_unicode: byte -> printable character."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + \
        list(range(0xAE, 0xFF + 1))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


class ByteLevelBpe:
    def __init__(self, tokenizer_json):
        model = tokenizer_json["model"]
        if model.get("type") != "BPE":
            raise ValueError(f"model.type {model.get('type')!r}: expected BPE")
        pre = json.dumps(tokenizer_json.get("pre_tokenizer"))
        if "ByteLevel" not in pre:
            raise ValueError("pre_tokenizer has no ByteLevel step: not a byte-level BPE")
        self.vocab = dict(model["vocab"])
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
                  for m in model["merges"]]
        self.ranks = {m: i for i, m in enumerate(merges)}
        self.added = {t["content"]: t["id"] for t in tokenizer_json.get("added_tokens", [])}
        self.id_to_token = {i: t for t, i in self.vocab.items()}
        self.id_to_token.update({i: t for t, i in self.added.items()})
        self._bytes = _byte_chars()
        self._chars = {c: b for b, c in self._bytes.items()}
        self._added_re = (re.compile("|".join(re.escape(t) for t in
                                              sorted(self.added, key=len, reverse=True)))
                          if self.added else None)
        self._cache = {}

    @staticmethod
    def load(path):
        with open(path, encoding="utf-8") as f:
            return ByteLevelBpe(json.load(f))

    def token_id(self, token):
        return self.added[token] if token in self.added else self.vocab[token]

    def _word(self, word):
        """BPE of one pre-token: merge the lowest-ranked adjacent pair until none applies."""
        if word in self._cache:
            return self._cache[word]
        parts = [self._bytes[b] for b in word.encode("utf-8")]
        while len(parts) > 1:
            ranked = [(self.ranks[p], p) for p in zip(parts, parts[1:]) if p in self.ranks]
            if not ranked:
                break
            a, b = min(ranked)[1]
            merged, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and parts[i] == a and parts[i + 1] == b:
                    merged.append(a + b)
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        ids = [self.vocab[p] for p in parts]
        self._cache[word] = ids
        return ids

    def _plain(self, text):
        if not text.isascii():
            raise ValueError(f"{text!r}: this encoder reads ASCII text only")
        ids = []
        for piece in _SPLIT.findall(text):
            ids += self._word(piece)
        return ids

    def encode(self, text):
        """Ids of `text`, added tokens recognized (no BOS: Qwen2 adds none)."""
        if self._added_re is None:
            return self._plain(text)
        ids, at = [], 0
        for m in self._added_re.finditer(text):
            ids += self._plain(text[at:m.start()])
            ids.append(self.added[m.group(0)])
            at = m.end()
        return ids + self._plain(text[at:])

    def decode(self, ids):
        out = bytearray()
        for i in ids:
            tok = self.id_to_token[i]
            if tok in self.added:
                out += tok.encode("utf-8")
            else:
                out += bytes(self._chars[c] for c in tok)
        return out.decode("utf-8", errors="replace")
