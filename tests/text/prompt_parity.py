"""Checks runtime/text against Python SentencePiece and llava_model.prompt_ids.

usage: prompt_parity.py TEXT_TOOL SOURCE_DIR WORK_DIR

Trains tokenizer.model with the C++ TrainTokenizer (spm_train), then requires, for the same
model file: BuildLlavaPrompt ids == llava_model.prompt_ids ids, Tokenizer::Encode ==
sp.encode, Tokenizer::Decode and the streaming detokenizer == sp.decode, and that Python's
SentencePieceTrainer with the same options learns the same vocabulary.
"""
import os
import random
import subprocess
import sys

import sentencepiece as spm

TOOL, SOURCE_DIR, WORK_DIR = sys.argv[1:4]
sys.path.insert(0, os.path.join(SOURCE_DIR, "tools", "pytorch"))
import llava_model  # noqa: E402

CORPUS = os.path.join(SOURCE_DIR, "data", "tokenizer", "corpus.txt")
IMAGE_ID, N_VIS, MAX_TOKENS = 32000, 576, 4096
failures = []


def tool(*args, check=True):
    r = subprocess.run([TOOL, *map(str, args)], capture_output=True)
    if check and r.returncode != 0:
        sys.exit(f"text_tool {args[0]} failed: {r.stderr.decode(errors='replace')}")
    return r


def ints(line):
    return [int(x) for x in line.split()]


def expect(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


os.makedirs(WORK_DIR, exist_ok=True)
model = os.path.join(WORK_DIR, "parity_tokenizer.model")
tool("train", CORPUS, model, 1000)
sp = spm.SentencePieceProcessor(model_file=model)
expect(sp.get_piece_size() == 1000, f"vocab size {sp.get_piece_size()}")

# The same options through the Python trainer must learn the same pieces in the same order.
options = tool("options").stdout.decode().split()
py_prefix = os.path.join(WORK_DIR, "parity_py")
spm.SentencePieceTrainer.train(" ".join([f"--input={CORPUS}", f"--model_prefix={py_prefix}",
                                         "--vocab_size=1000", "--minloglevel=2", *options]))
sp_py = spm.SentencePieceProcessor(model_file=py_prefix + ".model")
cli_pieces = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
py_pieces = [(sp_py.id_to_piece(i), sp_py.get_score(i)) for i in range(sp_py.get_piece_size())]
expect(cli_pieces == py_pieces, "spm_train CLI and SentencePieceTrainer vocabularies differ")

questions = [
    "What colour is the car?",
    "How many circles are there?",
    "Describe the image in detail.",
    " leading and trailing spaces ",
    "two  spaces\tand a tab",
    "multi\nline\nquestion",
    "\nstarts with a newline",
    "What does <image> mean here?",
    "<image>",
    "Numbers: 0 12 345 6789, 3.14 and -7!",
    "Café, naïve, 5 €, 東京?",
    "Rare: ß Ω 😀 ŝ ǅ ﬁ",
    "Punctuation!?;:'\"()[]{}<>/\\|@#%&*+-=_~^`",
    "USER: ASSISTANT: nested template words",
    "a",
    "?",
]
for q in questions:
    r = tool("prompt", model, IMAGE_ID, N_VIS, MAX_TOKENS, q)
    lines = r.stdout.decode().splitlines()
    vis_begin, n_vis = ints(lines[0])
    got = ints(lines[1])
    want = llava_model.prompt_ids(sp, q, IMAGE_ID, N_VIS, bos_id=sp.bos_id())
    expect(got == want, f"prompt ids differ for {q!r}:\n  c++ {got[:8]}..{got[vis_begin + n_vis:]}"
                        f"\n  py  {want[:8]}..{want[vis_begin + n_vis:]}")
    expect(n_vis == N_VIS and got[vis_begin:vis_begin + n_vis] == [IMAGE_ID] * N_VIS
           and got.count(IMAGE_ID) == N_VIS, f"visual span wrong for {q!r}")

    enc = ints(tool("encode", model, q).stdout.decode())
    expect(enc == sp.encode(q), f"encode differs for {q!r}: {enc} vs {sp.encode(q)}")

# Decoding, batch and streamed, of real encodings plus random id soup (image/pad ids,
# BOS/EOS, stray byte pieces that form invalid UTF-8).
rng = random.Random(1234)
byte_ids = [i for i in range(sp.get_piece_size()) if sp.is_byte(i)]
cases = [sp.encode(q) for q in questions]
cases += [[1] + sp.encode(q) + [IMAGE_ID, 32001, 2] for q in questions[:4]]
for _ in range(40):
    n = rng.randint(1, 24)
    cases.append([rng.choice([rng.randrange(1003), rng.choice(byte_ids), 32000, 32001])
                  for _ in range(n)])
for ids in cases:
    lines = tool("decode", model, *ids).stdout.decode().splitlines()
    batch, streamed = bytes.fromhex(lines[0]), bytes.fromhex(lines[1])
    want = sp.decode([i for i in ids if 0 <= i < sp.get_piece_size()]).encode()
    expect(batch == want, f"decode differs for {ids}: {batch!r} vs {want!r}")
    expect(streamed == want, f"streamed decode differs for {ids}: {streamed!r} vs {want!r}")

# Errors surface with the numbers.
r = tool("prompt", model, IMAGE_ID, N_VIS, 580, "What colour is the car?", check=False)
expect(r.returncode != 0 and b"576 visual" in r.stderr and b"context is 580" in r.stderr,
       f"too-long prompt: {r.stderr!r}")
r = tool("prompt", model, IMAGE_ID, N_VIS, MAX_TOKENS, "  \n ", check=False)
expect(r.returncode != 0 and b"prompt is empty" in r.stderr, f"empty prompt: {r.stderr!r}")

if failures:
    sys.exit(f"{len(failures)} parity failure(s)")
print(f"prompt/encode/decode parity OK: {len(questions)} questions, {len(cases)} decode cases")
