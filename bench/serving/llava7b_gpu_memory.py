#!/usr/bin/env python3
"""GPU memory one LLaVA-1.5-7B request needs on the CUDA backend, from the model's shapes and the
HAP plan (hapctl plan --json), unpruned and at each HAP budget. Computed, not measured: no GPU.

What the CUDA backend holds on the device (kernels/cuda, runtime/model):
  weights    every tensor of the service's part, uploaded once in its stored dtype (BF16);
  prefill    the activations of one forward pass, sized for the prompt's rows (hidden, q, k, v,
             attention output, gate, up, LSE, positions; the F32->BF16 copy of a product's input;
             the pruning maps of a HAP group). The prefill's KV cache goes to host memory layer by
             layer (it is sent to hap-decode), so it is not on the prefill GPU;
  decode     the request's KV blocks: every layer's rows (its pruned length) plus the answer's
             tokens, in F32 or BF16 blocks of 16 rows.
Usage: /usr/bin/python3 bench/serving/llava7b_gpu_memory.py [--hapctl build/tools/hapctl/hapctl]
"""
import argparse
import json
import math
import subprocess

L, D, FFN, HEADS, VOCAB = 32, 4096, 11008, 32, 32064
V = 576
VIS_LAYERS, VIS_D, VIS_FFN, PATCH, IMG = 23, 1024, 4096, 14, 336  # layers up to feature layer -2
BF16 = 2


def language_weight_bytes():
    per_layer = 4 * D * D + 3 * D * FFN + 2 * D
    return (L * per_layer + 2 * VOCAB * D + D) * BF16


def vision_weight_bytes():
    per_layer = 4 * VIS_D * VIS_D + 2 * VIS_D * VIS_FFN + 9 * VIS_D + VIS_FFN
    tower = VIS_LAYERS * per_layer + 3 * PATCH * PATCH * VIS_D + (V + 1) * VIS_D + 3 * VIS_D
    projector = VIS_D * D + D * D + 2 * D
    # Norms, biases and embeddings are F32 after load (4 bytes); the matrices stay BF16.
    return tower * BF16 + projector * BF16


def prefill_activation_bytes(rows, text_tokens, group_layers):
    """group_layers: layers of the largest HAP group (0 unpruned: no maps)."""
    per_row = 6 * D + 2 * FFN + HEADS + 1  # x, h, q, k, v, attn, gate, up, lse, position
    scratch = rows * FFN * BF16             # the largest product input rounded to BF16
    logits = VOCAB
    maps = 0
    if group_layers:  # the heads' maps of a layer, the layer maps of a group, token scores
        maps = HEADS * text_tokens * V + group_layers * text_tokens * V + V
    return rows * per_row * 4 + scratch + logits * 4 + maps * 4


def prefill_kv_bytes(layer_rows, elem):
    """The prefill's cache on the device until the transfer is acknowledged: each layer its rows."""
    return sum(layer_rows) * D * 2 * elem


def decode_kv_bytes(layer_rows, new_tokens, elem, block_rows=16):
    blocks = sum(math.ceil((r + new_tokens) / block_rows) for r in layer_rows)
    return blocks * block_rows * D * 2 * elem


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hapctl", default="build/tools/hapctl/hapctl")
    ap.add_argument("--text-tokens", type=int, default=40)
    ap.add_argument("--new-tokens", type=int, default=256)
    args = ap.parse_args()
    t = args.text_tokens
    gib = 1024.0 ** 3
    print(f"LLaVA-1.5-7B, {t} text tokens + {V} visual, {args.new_tokens} new tokens")
    print(f"weights on the device: prefill/decode {language_weight_bytes() / gib:.2f} GiB, "
          f"encoder {vision_weight_bytes() / gib:.2f} GiB")
    print(f"{'budget':>10} {'avg vis':>8} {'prefill act':>12} {'prefill KV F32':>15} "
          f"{'prefill KV BF16':>16} {'decode KV F32':>14} {'decode KV BF16':>15}")
    rows = [("unpruned", [V] * L, 0)]
    for budget in ["33.3%", "22.2%", "11.1%", "5.6%"]:
        plan = json.loads(subprocess.check_output(
            [args.hapctl, "plan", "--preset", "llava-1.5-7b", "--retain", budget,
             "--text-tokens", str(t), "--json"]))
        biggest_group = max(g["n_layers"] for g in plan["groups"])
        rows.append((f"HAP {budget}", plan["per_layer_visual_tokens"], biggest_group))
    for name, vis, group_layers in rows:
        layer_rows = [t + v for v in vis]
        act = prefill_activation_bytes(t + V, t, group_layers)
        f32 = decode_kv_bytes(layer_rows, args.new_tokens, 4)
        bf16 = decode_kv_bytes(layer_rows, args.new_tokens, 2)
        p32 = prefill_kv_bytes(layer_rows, 4)
        p16 = prefill_kv_bytes(layer_rows, 2)
        print(f"{name:>10} {sum(vis) / L:8.1f} {act / 2**20:9.0f} MiB {p32 / 2**20:11.0f} MiB "
              f"{p16 / 2**20:12.0f} MiB {f32 / 2**20:10.0f} MiB {bf16 / 2**20:11.0f} MiB")


if __name__ == "__main__":
    main()
