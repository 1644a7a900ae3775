"""Shared helpers for training and evaluating the scenes LLaVA: tokenizer building, example ->
tensors, and exact-match answer checking."""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "pytorch"))
sys.path.insert(0, os.path.join(ROOT, "tools", "scenes"))
import llava_model as lm  # noqa: E402
import scenes  # noqa: E402

# The C++ side trains/loads SentencePiece with exactly these options.
SPM_OPTIONS = ["--model_type=bpe", "--character_coverage=1.0", "--byte_fallback=true",
               "--split_digits=true", "--normalization_rule_name=identity",
               "--remove_extra_whitespaces=false", "--add_dummy_prefix=true", "--unk_id=0",
               "--bos_id=1", "--eos_id=2", "--pad_id=-1", "--num_threads=1"]


def build_tokenizer(out_path, vocab_size=512, seed=0, lines=20000):
    """Trains the BPE SentencePiece model with Debian's spm_train on generator text."""
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "w") as f:
            f.write("\n".join(scenes.corpus_lines(lines, seed)) + "\n")
        # Relative paths, run inside tmp: the model file records them, so its bytes are
        # reproducible.
        cmd = ["spm_train", "--input=corpus.txt", "--model_prefix=sp",
               f"--vocab_size={vocab_size}"] + SPM_OPTIONS
        subprocess.run(cmd, check=True, cwd=tmp, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
        shutil.copyfile(os.path.join(tmp, "sp.model"), out_path)
    return spm_command(vocab_size)


def spm_command(vocab_size):
    return " ".join(["spm_train", "--input=corpus.txt", "--model_prefix=sp",
                     f"--vocab_size={vocab_size}"] + SPM_OPTIONS)


def load_sp(path):
    import sentencepiece as spm
    return spm.SentencePieceProcessor(model_file=path)


def answer_ids(sp, answer):
    """Target after `ASSISTANT:`: the answer's pieces (with the dummy-prefix space) then EOS."""
    return sp.encode(answer) + [sp.eos_id()]


def pixels_from_image(img):
    """PIL RGB image already at the model's size -> normalised float32 [3, S, S]
    (equal to llava_model.preprocess for a same-size image)."""
    arr = np.asarray(img, dtype=np.float32) / 255.0
    arr = (arr - np.array(lm.CLIP_MEAN, np.float32)) / np.array(lm.CLIP_STD, np.float32)
    return torch.from_numpy(arr.transpose(2, 0, 1).copy())


def encode_conversation(sp, cfg, qas):
    """Multi-turn LLaVA-1.5 conversation about one image:
    `USER: <image>\n{q1} ASSISTANT: {a1}</s>USER: {q2} ASSISTANT: {a2}</s>...`.
    Turn 1 is exactly the single-turn inference prompt; each turn's answer + EOS is supervised.
    -> (input ids, targets) lists; targets = -100 except where the next token is an answer's
    (one turn is a single question: the prompt, then its answer)."""
    toks, is_tgt = [], []
    for k, (q, a) in enumerate(qas):
        if k == 0:
            p = lm.prompt_ids(sp, q, cfg.image_token_index, cfg.num_visual_tokens,
                              bos_id=sp.bos_id())
        else:
            p = sp.encode("USER: " + q + " ASSISTANT:")
        ans = answer_ids(sp, a)
        toks += p + ans
        is_tgt += [False] * len(p) + [True] * len(ans)
    ids = toks[:-1]
    tgt = [t if m else -100 for t, m in zip(toks[1:], is_tgt[1:])]
    return ids, tgt


def collate(examples, pad_id):
    """examples: list of (ids, tgt); right-padded (the causal mask alone is then correct)."""
    n = max(len(e[0]) for e in examples)
    ids = torch.full((len(examples), n), pad_id, dtype=torch.long)
    tgt = torch.full((len(examples), n), -100, dtype=torch.long)
    for i, (a, b) in enumerate(examples):
        ids[i, :len(a)] = torch.tensor(a)
        tgt[i, :len(b)] = torch.tensor(b)
    return ids, tgt


def normalise_answer(text):
    return text.strip().strip(".").lower()
