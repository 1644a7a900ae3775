#!/usr/bin/env python3
"""Writes a LLaVA-1.5-7B-shape checkpoint with random BF16 weights, for timing only.

Takes the layout from a small checkpoint that `hapctl make-tiny` wrote with distinct sizes
(text hidden 96, text FFN 176, vision hidden 64, so vision FFN 256): its tokenizer and processor
files are copied, its config is scaled to the 7B shapes (32 decoder layers of 4096 with FFN 11008
and 32 heads; a 24-layer CLIP ViT-L/14 at 336 px), and each of its tensors is written for every
layer at the scaled shape. Weights are N(0, 0.02) drawn with torch (on the GPU when there is one),
norms 1, biases 0. About 14 GB, in 4 GB shards.

  make_7b_checkpoint.py TEMPLATE_DIR OUT_DIR [--text-layers N] [--vision-layers N]
(fewer layers: a quick check of the layout)
"""
import argparse
import json
import os
import re
import shutil
import struct
import sys
import time

import torch

TEXT = dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
            num_attention_heads=32, num_key_value_heads=32, head_dim=128)
VISION = dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
              num_attention_heads=16, projection_dim=768)
# Template size -> 7B size, per part (the template's sizes are distinct within a part).
SCALE = {"text": {96: 4096, 176: 11008}, "vision": {64: 1024, 256: 4096},
         "projector": {96: 4096, 64: 1024}}
TEMPLATE_TEXT = dict(hidden_size=96, intermediate_size=176)
TEMPLATE_VISION = dict(hidden_size=64, intermediate_size=256)


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return {k: v for k, v in json.loads(f.read(n)).items() if k != "__metadata__"}


def save_file(tensors, path):
    """A safetensors file of BF16 tensors (header, then the bytes in order), written as it goes."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, t in tensors.items():
        n = t.numel() * 2
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for t in tensors.values():
            f.write(t.view(torch.int16).numpy().tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("template")
    ap.add_argument("out")
    ap.add_argument("--text-layers", type=int, default=TEXT["num_hidden_layers"])
    ap.add_argument("--vision-layers", type=int, default=VISION["num_hidden_layers"])
    args = ap.parse_args()
    template, out = args.template, args.out
    TEXT["num_hidden_layers"] = args.text_layers
    VISION["num_hidden_layers"] = args.vision_layers
    config = json.load(open(os.path.join(template, "config.json")))
    for part, want in (("text_config", TEMPLATE_TEXT), ("vision_config", TEMPLATE_VISION)):
        for key, size in want.items():
            if config[part][key] != size:
                sys.exit(f"{template}/config.json: {part}.{key} is {config[part][key]}, expected "
                         f"{size} (make-tiny --hidden 96 --intermediate 176 --vision-hidden 64)")
    if config["vision_config"]["image_size"] != 336:
        sys.exit(f"{template}/config.json: vision_config.image_size must be 336 (--image-size 336)")
    header = read_header(os.path.join(template, "model.safetensors"))

    os.makedirs(out, exist_ok=True)
    for name in os.listdir(template):
        if name != "config.json" and not name.startswith("model.safetensors"):
            shutil.copy(os.path.join(template, name), os.path.join(out, name))
    config["text_config"].update(TEXT)
    config["vision_config"].update(VISION)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)

    layers = {"text": TEXT["num_hidden_layers"], "vision": VISION["num_hidden_layers"]}
    tensors = []  # (name, shape, kind)
    for name, info in header.items():
        part = ("vision" if name.startswith("vision_tower.") else
                "projector" if name.startswith("multi_modal_projector.") else "text")
        shape = [SCALE[part].get(d, d) for d in info["shape"]]
        if name == "multi_modal_projector.linear_1.weight":
            shape = [4096, 1024]
        kind = ("ones" if re.search(r"norm[^.]*\.weight$|layrnorm\.weight$", name) else
                "zeros" if name.endswith(".bias") else "normal")
        m = re.search(r"\.layers\.0\.", name)
        if m is None:
            tensors.append((name, shape, kind))
            continue
        for i in range(layers["vision" if part == "vision" else "text"]):
            tensors.append((name.replace(".layers.0.", f".layers.{i}.", 1), shape, kind))

    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator(device=device).manual_seed(0)
    shard, shard_bytes, index, shards = {}, 0, {}, []
    t0 = time.time()

    def flush():
        nonlocal shard, shard_bytes
        if not shard:
            return
        file = f"model-{len(shards) + 1:05d}.safetensors"
        save_file(shard, os.path.join(out, file))
        for k in shard:
            index[k] = file
        shards.append(file)
        shard, shard_bytes = {}, 0

    total = 0
    for name, shape, kind in tensors:
        if kind == "ones":
            t = torch.ones(shape, dtype=torch.bfloat16)
        elif kind == "zeros":
            t = torch.zeros(shape, dtype=torch.bfloat16)
        else:
            t = (torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * 0.02)
            t = t.to(torch.bfloat16).cpu()
        shard[name] = t.contiguous()
        shard_bytes += t.numel() * 2
        total += t.numel() * 2
        if shard_bytes >= 4 << 30:
            flush()
    flush()
    # make-tiny's names for shards are model-0000i-of-0000N.safetensors; rename to that form.
    final = {}
    for i, file in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        os.rename(os.path.join(out, file), os.path.join(out, name))
        final[file] = name
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total},
                   "weight_map": {k: final[v] for k, v in index.items()}}, f, indent=1)
    print(f"wrote {out}: {len(tensors)} tensors, {total / 1e9:.1f} GB in {len(shards)} shards, "
          f"{time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
