"""Checks the C++ Qwen2.5-VL index functions (runtime/model/qwen_vision_layout.h,
mrope_positions.h) against the PyTorch reference (tools/pytorch/qwen2_5_vl_model.py):
patch rows/columns (rot_pos_ids), window order and boundaries (get_window_index, repeated
boundaries dropped as the model drops them), per-frame boundaries (full_cu_seqlens) and M-RoPE
positions with the decode position (get_rope_index), on seeded random prompts of 1-3 images of
random grids and both window sizes Qwen2.5-VL uses; and the CPU backend's RopeAxes against the
reference's rotary: M-RoPE at those positions (mrope_cos_sin) and the vision tower's 2-D rotary
at the patches' rows and columns (rot_pos_emb).

usage: qwen_layout_parity.py QWEN_LAYOUT_TOOL SOURCE_DIR
"""
import json
import os
import random
import subprocess
import sys

TOOL, SOURCE_DIR = sys.argv[1:3]
sys.path.insert(0, os.path.join(SOURCE_DIR, "tools", "pytorch"))
import qwen2_5_vl_model as Q  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

IMAGE, VISION_START, VISION_END = 90, 91, 92
rng = random.Random(20261127)


def case():
    merge = 2
    grids = [[1, merge * rng.randint(1, 20), merge * rng.randint(1, 20)]
             for _ in range(rng.randint(1, 3))]
    ids = []
    for t, h, w in grids:
        ids += [rng.randint(0, 80) for _ in range(rng.randint(0, 4))]
        ids += [VISION_START] + [IMAGE] * (t * h * w // merge // merge) + [VISION_END]
    ids += [rng.randint(0, 80) for _ in range(rng.randint(0, 5))]
    return {"grids": grids, "patch_size": 14, "merge": merge,
            "window_size": rng.choice([56, 112, 224]), "ids": ids, "image_token_id": IMAGE}


def main():
    cases = [case() for _ in range(300)]
    proc = subprocess.run([TOOL], input="".join(json.dumps(c) + "\n" for c in cases),
                          capture_output=True, text=True, check=True)
    failures = 0
    for c, line in zip(cases, proc.stdout.splitlines()):
        got = json.loads(line)
        pos = Q.rot_pos_ids(c["grids"], c["merge"])
        index, cu = Q.get_window_index(c["grids"], c["window_size"], c["patch_size"], c["merge"])
        rope, delta = Q.get_rope_index(c["ids"], c["grids"], c["merge"], IMAGE, 93, VISION_START)
        want = {"row": pos[:, 0].tolist(), "col": pos[:, 1].tolist(),
                "window_index": index.tolist(), "window_bounds": Q.unique_consecutive(cu),
                "frame_bounds": Q.full_cu_seqlens(c["grids"]),
                "mrope": {"t": rope[0].tolist(), "h": rope[1].tolist(), "w": rope[2].tolist(),
                          "next": len(c["ids"]) + delta}}
        for key in want:
            if got.get(key) != want[key]:
                failures += 1
                print(f"FAIL {key} for grids {c['grids']} window {c['window_size']}:\n"
                      f"  C++       {str(got.get(key))[:300]}\n  reference {str(want[key])[:300]}")
                break
    # Rotary: random rows rotated by the C++ RopeAxes and by the reference's cos/sin.
    ropes, wants = [], []
    for c in cases[:40]:
        heads = 2
        for kind in ("text", "vision"):
            if kind == "text":
                head_dim, theta, sections, per_section = 16, 1e6, [2, 3, 3], False
                pos, _ = Q.get_rope_index(c["ids"], c["grids"], c["merge"], IMAGE, 93, VISION_START)
                cos, sin = Q.mrope_cos_sin(pos, head_dim, theta, sections)
            else:
                head_dim, theta, sections, per_section = 20, 1e4, [5, 5, 0], True
                pos = Q.rot_pos_ids(c["grids"], c["merge"]).T
                angles = torch.from_numpy(Q.rot_pos_emb(c["grids"], head_dim, c["merge"], theta))
                emb = torch.cat([angles, angles], dim=-1)
                cos, sin = emb.cos(), emb.sin()
            rows = pos.shape[1]
            x = torch.from_numpy(np.random.RandomState(rows).randn(rows, heads, head_dim)
                                 .astype(np.float32))
            want = x * cos[:, None] + Q.rotate_half(x) * sin[:, None]
            ropes.append({"rope": {"x": x.reshape(-1).tolist(), "positions": pos.tolist(),
                                   "heads": heads, "head_dim": head_dim, "theta": theta,
                                   "sections": sections, "per_section": per_section}})
            wants.append((kind, want.reshape(-1).numpy()))
    proc = subprocess.run([TOOL], input="".join(json.dumps(r) + "\n" for r in ropes),
                          capture_output=True, text=True, check=True)
    worst = {"text": 0.0, "vision": 0.0}
    for (kind, want), line in zip(wants, proc.stdout.splitlines()):
        got = np.asarray(json.loads(line)["x"], dtype=np.float32)
        worst[kind] = max(worst[kind], float(np.abs(got - want).max()))
    for kind, err in worst.items():
        # The reference's angles are float32 (as transformers'), the engine's float64.
        if not err < 1e-4:
            failures += 1
            print(f"FAIL {kind} rotary differs from the reference by {err:.2e}")
    if failures:
        sys.exit(f"FAIL: {failures} of {len(cases)} cases differ")
    print(f"PASS: {len(cases)} random prompts agree with the PyTorch reference; rotary worst "
          f"difference {worst['text']:.1e} (M-RoPE), {worst['vision']:.1e} (2-D vision)")


main()
