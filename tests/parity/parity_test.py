"""Runtime parity: the C++ runtime against the PyTorch reference on tiny random checkpoints.

For each variant (F32/BF16/F16, with and without grouped-query attention, single-file and
sharded) it writes a checkpoint with `hapctl make-tiny`, runs `hapctl dump` on an image and a
question, and checks against tools/pytorch/llava_model.py (written from the architecture
description, not from the C++):
  pixels ≤ 1e-5 (PIL preprocessing, as the directory's preprocessor_config.json says; one
  variant rewrites it to bilinear with other mean/std), prompt ids identical, vision features
  ≤ 1e-4, prefill logits ≤ 1e-3, 32 greedy tokens identical; and the llava-hf side files
  make-tiny writes (runtime/io/side_files.cc) are byte for byte those of
  llava_model.side_files, which also wrote the committed default model's.
BF16 checkpoints: on a CPU with AVX512-BF16 the engine rounds activations to BF16 for its
products with BF16 weights (docs/design.md §6, as BF16 inference elsewhere does), so against the F32-arithmetic reference their features, embeddings and logits are held
to BF16_TOL (measured 4e-3 to 1.1e-2).
Greedy tokens: identical, or, where the two part, the C++ sequence fed through the reference
must pick at every step a token whose reference logit is within the logits tolerance of the
maximum (a near tie that rounding may break either way; random weights make them common).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch
from PIL import Image, ImageDraw

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "pytorch"))
import llava_model as L  # noqa: E402
import sentencepiece as spm  # noqa: E402

VARIANTS = [
    # name, make-tiny flags
    ("f32-mha-single", ["--dtype", "f32", "--heads", "4", "--kv-heads", "4"]),
    ("f32-gqa-sharded", ["--dtype", "f32", "--heads", "4", "--kv-heads", "2", "--shards", "3"]),
    ("bf16-gqa-single", ["--dtype", "bf16", "--heads", "8", "--kv-heads", "2", "--hidden", "96"]),
    ("bf16-mha-sharded", ["--dtype", "bf16", "--heads", "4", "--kv-heads", "4", "--shards", "2",
                          "--layers", "3", "--image-size", "84"]),
    ("f16-gqa-single", ["--dtype", "f16", "--heads", "4", "--kv-heads", "1"]),
    ("f32-bilinear-proc", ["--dtype", "f32", "--image-size", "42"]),
]
# preprocessor_config.json keys a variant rewrites after make-tiny.
PROC_OVERRIDES = {
    "f32-bilinear-proc": {"resample": 2, "image_mean": [0.5, 0.25, 0.75],
                          "image_std": [0.2, 0.4, 0.6], "rescale_factor": 0.0039},
}
BF16_TOL = 3e-2
QUESTION = "What colour is the circle in the top left corner?"


def make_image(path):
    rng = np.random.default_rng(7)
    img = Image.new("RGB", (75, 61), (30, 40, 50))
    d = ImageDraw.Draw(img)
    for _ in range(6):
        x, y = rng.integers(0, 60), rng.integers(0, 45)
        col = tuple(int(c) for c in rng.integers(0, 256, 3))
        d.ellipse([x, y, x + 14, y + 12], fill=col)
    img.save(path)


def max_abs(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def check_variant(hapctl, workdir, name, flags, image_path):
    model_dir = os.path.join(workdir, name)
    dump_dir = os.path.join(workdir, name + "-dump")
    subprocess.run([hapctl, "make-tiny", "--out", model_dir, "--seed", "3"] + flags, check=True,
                   stdout=subprocess.DEVNULL)
    failures = side_file_failures(model_dir)
    if name in PROC_OVERRIDES:
        proc = L.load_preprocessor_config(model_dir)
        proc.update(PROC_OVERRIDES[name])
        with open(os.path.join(model_dir, "preprocessor_config.json"), "w") as f:
            json.dump(proc, f, indent=2, sort_keys=True)
    subprocess.run([hapctl, "dump", "--model", model_dir, "--image", image_path, "--prompt",
                    QUESTION, "--out", dump_dir, "--max-new-tokens", "32"], check=True,
                   stdout=subprocess.DEVNULL)
    got = {k: np.load(os.path.join(dump_dir, k + ".npy")) for k in
           ("pixels", "vision_features", "image_embeds", "input_ids", "prefill_logits", "tokens")}

    model = L.load_llava(model_dir)
    cfg = model.cfg
    sp = spm.SentencePieceProcessor(model_file=os.path.join(model_dir, "tokenizer.model"))

    pixels = L.preprocess(Image.open(image_path), cfg.vision["image_size"],
                          L.load_preprocessor_config(model_dir))
    err = max_abs(got["pixels"], pixels[0].numpy())
    if err > 1e-5:
        failures.append(f"pixels differ by {err:.3g} (> 1e-5)")

    ids = L.prompt_ids(sp, QUESTION, cfg.image_token_index, cfg.num_visual_tokens)
    if list(got["input_ids"]) != ids:
        failures.append(f"prompt ids differ: C++ {list(got['input_ids'])[:12]}... "
                        f"torch {ids[:12]}...")

    with torch.no_grad():
        # Same pixels for both sides from here on, so each stage is compared on its own.
        px = torch.from_numpy(got["pixels"])[None]
        feats = model.vision_features(px)[0]
        bf16 = name.startswith("bf16")
        tol_feat = BF16_TOL if bf16 else 1e-4
        tol_logits = BF16_TOL if bf16 else 1e-3
        err_feat = max_abs(got["vision_features"], feats.numpy())
        if err_feat > tol_feat:
            failures.append(f"vision features differ by {err_feat:.3g} (> {tol_feat:g})")
        emb = model.project(feats[None])[0]
        err_emb = max_abs(got["image_embeds"], emb.numpy())
        if err_emb > tol_feat:
            failures.append(f"image embeddings differ by {err_emb:.3g} (> {tol_feat:g})")
        tokens, logits = model.greedy(px, torch.tensor([ids]), 32, eos_id=sp.eos_id())
        err_logits = max_abs(got["prefill_logits"], logits.numpy())
        if err_logits > tol_logits:
            failures.append(f"prefill logits differ by {err_logits:.3g} (> {tol_logits:g})")
        c_tokens = [int(t) for t in got["tokens"]]
        verdict = f"{len(tokens)} greedy tokens identical"
        if c_tokens != tokens:
            gaps = teacher_forced_gaps(model, px, ids, c_tokens)
            step = next(i for i, (a, b) in enumerate(zip(c_tokens, tokens + [-1])) if a != b)
            verdict = (f"greedy tokens part at step {step} on a near tie (reference margin "
                       f"{gaps[step]:.1e}); worst margin of the C++ tokens {max(gaps):.1e}")
            if max(gaps) > tol_logits:
                failures.append(f"greedy tokens differ: C++ {c_tokens} torch {tokens}; the C++ "
                                f"token at step {gaps.index(max(gaps))} is {max(gaps):.3g} below "
                                f"the reference's best (> {tol_logits:g})")
    print(f"{name}: features {err_feat:.2e}, embeds {err_emb:.2e}, logits {err_logits:.2e}, "
          f"{verdict}")
    return failures


def teacher_forced_gaps(model, px, ids, c_tokens):
    """For each C++ greedy token: the reference's best logit minus the token's logit, with the
    C++ tokens fed back (0 where the reference agrees)."""
    seq = ids + c_tokens[:-1]
    emb = model.embed(torch.tensor([seq]), model.project(model.vision_features(px)))
    h, _, _ = model.decoder(emb, torch.arange(len(seq))[None])
    lg = model.logits(h[0, len(ids) - 1:])
    return [float(lg[i].max() - lg[i, t]) for i, t in enumerate(c_tokens)]


def side_file_failures(model_dir):
    """The side files in model_dir differ from what llava_model.side_files makes of its
    config.json and tokenizer.model: one message per file."""
    cfg = L.Config.load(model_dir)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(model_dir, "tokenizer.model"))
    out = []
    for name, text in L.side_files(cfg, sp).items():
        path = os.path.join(model_dir, name)
        if not os.path.exists(path):
            out.append(f"{path} is missing")
            continue
        with open(path) as f:
            got = f.read()
        if got != text:
            out.append(f"{path} differs from llava_model.side_files:\n{got}\nvs\n{text}")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hapctl", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    torch.set_num_threads(2)
    os.makedirs(args.workdir, exist_ok=True)
    image_path = os.path.join(args.workdir, "image.png")
    make_image(image_path)
    all_failures = []
    default_model = os.path.join(HERE, "..", "..", "models", "scenes-llava")
    if os.path.exists(os.path.join(default_model, "config.json")):
        all_failures += [f"default model: {f} (rewrite them with `tools/pytorch/llava_model.py "
                         f"side-files models/scenes-llava`)"
                         for f in side_file_failures(default_model)]
    for name, flags in VARIANTS:
        all_failures += [f"{name}: {f}" for f in check_variant(args.hapctl, args.workdir, name,
                                                               flags, image_path)]
    for f in all_failures:
        print("FAIL", f)
    n_fail = 1 if all_failures else 0
    print(f"parity: {len(VARIANTS) - len({f.split(':')[0] for f in all_failures})} passed, "
          f"{len({f.split(':')[0] for f in all_failures})} failed")
    return n_fail


if __name__ == "__main__":
    sys.exit(main())
