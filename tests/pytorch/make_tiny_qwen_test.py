"""`hapctl make-tiny --family qwen2.5-vl` writes directories the PyTorch reference
(tools/pytorch/qwen2_5_vl_model.py) loads: every tensor name and shape it reads, in F32 one
file and BF16 two shards, and a config it parses to the same model. A forward pass over a
prompt with an image preprocessed by tools/pytorch/qwen2vl_image.py with the directory's own
preprocessor_config.json gives finite logits, and BF16 stays near F32.

usage: make_tiny_qwen_test.py HAPCTL SOURCE_DIR WORK_DIR
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
from PIL import Image

HAPCTL, SOURCE_DIR, WORK_DIR = sys.argv[1:4]
sys.path.insert(0, os.path.join(SOURCE_DIR, "tools", "pytorch"))
import qwen2_5_vl_model as Q  # noqa: E402
import qwen2vl_image  # noqa: E402


def make(name, *flags):
    out = os.path.join(WORK_DIR, name)
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([HAPCTL, "make-tiny", "--family", "qwen2.5-vl", "--out", out, "--seed", "3",
                    *flags], check=True, stdout=subprocess.DEVNULL)
    return out


def logits_of(model_dir):
    model = Q.load_qwen25vl(model_dir)
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    proc = json.load(open(os.path.join(model_dir, "preprocessor_config.json")))
    rng = np.random.RandomState(5)
    image = Image.fromarray(rng.randint(0, 256, (90, 130, 3), dtype=np.uint8))
    pixels, grid = qwen2vl_image.preprocess(image, proc)
    n_image = grid[0] * grid[1] * grid[2] // 4
    ids = ([1, 2, cfg["vision_start_token_id"]] + [cfg["image_token_id"]] * n_image +
           [cfg["vision_end_token_id"], 3, 4, 5])
    with torch.no_grad():
        logits = model.forward(torch.tensor(ids), torch.from_numpy(pixels), [list(grid)])
    return np.asarray(logits, dtype=np.float32), grid


def main():
    os.makedirs(WORK_DIR, exist_ok=True)
    f32, f32_grid = logits_of(make("f32"))
    bf16, _ = logits_of(make("bf16", "--dtype", "bf16", "--shards", "2"))
    failures = []
    if not np.isfinite(f32).all():
        failures.append("F32 logits are not finite")
    if f32.std() < 1e-3:
        failures.append(f"F32 logits are flat (std {f32.std():.2e})")
    worst = float(np.abs(f32 - bf16).max())
    if not worst < 0.05 + 0.05 * float(np.abs(f32).max()):
        failures.append(f"BF16 logits differ from F32 by {worst:.4f}")
    print(f"grid {f32_grid}, logits {f32.shape}, std {f32.std():.3f}, BF16 worst diff {worst:.4f}")
    if failures:
        sys.exit("FAIL: " + "; ".join(failures))
    print("PASS")


main()
