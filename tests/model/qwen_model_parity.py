"""Qwen2.5-VL end to end against the PyTorch reference (tools/pytorch/qwen2_5_vl_model.py), on
checkpoints `hapctl make-tiny --family qwen2.5-vl` writes, for images of three aspect ratios:

- the image embeddings (patch embedding, 2-D rotary, window and full attention, merger, the
  window order undone) and the prompt's 3-D rotary positions;
- the prefill's last logits and the greedy tokens (decode continuing the rotary positions from
  the image-shortened count);
- pruned prefills (a method that prunes before the LLM and HAP, which prunes inside it): the
  reference recomputes each from the stages' kept tokens, dropping those rows where the engine
  did and rotating the rest at their original 3-D positions, so the logits and the tokens agree
  only if every kept token kept its positions and the decode continued from the right place;
- the same on the CUDA backend under SIMT emulation;
- `hapctl run` on the directory answers with the same tokens.

usage: qwen_model_parity.py --tool T --hapctl H --source DIR --workdir DIR
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
from PIL import Image

P = argparse.ArgumentParser()
P.add_argument("--tool", required=True)
P.add_argument("--hapctl", required=True)
P.add_argument("--source", required=True)
P.add_argument("--workdir", required=True)
ARGS = P.parse_args()
sys.path.insert(0, os.path.join(ARGS.source, "tools", "pytorch"))
import qwen2_5_vl_model as Q  # noqa: E402
import qwen2vl_image  # noqa: E402

MAX_NEW = 6
QUESTION = "What is in the picture? <|im_end|> answer"  # the special token stays text


def make(name, *flags):
    out = os.path.join(ARGS.workdir, name)
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([ARGS.hapctl, "make-tiny", "--family", "qwen2.5-vl", "--out", out, *flags],
                   check=True, stdout=subprocess.DEVNULL)
    return out


def run_tool(model_dir, image, *flags):
    proc = subprocess.run([ARGS.tool, "--model", model_dir, "--image", image, "--question",
                           QUESTION, "--max-new", str(MAX_NEW), *flags],
                          capture_output=True, text=True)
    out = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else {}
    if proc.returncode != 0 or "error" in out:
        raise RuntimeError(f"{' '.join(flags)}: {out.get('error', proc.stderr[-2000:])}")
    return out


def reference(model, ids, pixels, grid, vis_begin, n_vis, stages):
    """(image embeds, mrope positions [3, S], logits of the last row, greedy tokens) with the
    visual rows dropped after the stages' layers (after_layer -1: before layer 0)."""
    cfg = model.cfg
    t = cfg.text
    with torch.no_grad():
        embeds = model.vision_forward(torch.from_numpy(pixels), [list(grid)])
        positions, delta = model.rope_index(ids, [list(grid)])
        x = model.embed(ids, embeds)
        cos, sin = Q.mrope_cos_sin(positions, t["head_dim"], t["rope_theta"], t["mrope_section"])
        n = len(ids)
        rows = np.arange(n)  # original rows still present
        kept_at = {s["after_layer"]: s["kept"] for s in stages}

        def prune(kept):
            keep = set(vis_begin + k for k in kept)
            sel = [i for i, r in enumerate(rows) if r < vis_begin or r >= vis_begin + n_vis
                   or r in keep]
            return sel

        if -1 in kept_at:
            sel = prune(kept_at[-1])
            rows, x = rows[sel], x[sel]
        caches = []
        for l, layer in enumerate(model.model.layers):
            x, c = layer(x, cos[rows], sin[rows])
            caches.append(c)
            if l in kept_at:
                sel = prune(kept_at[l])
                rows, x = rows[sel], x[sel]
        logits = model.logits(model.model.norm(x[-1:]))
        first = logits[0].clone()
        tokens = []
        for step in range(MAX_NEW):
            tok = int(logits[0].argmax())
            tokens.append(tok)
            if step == MAX_NEW - 1:
                break
            pos = np.full((3, 1), n + step + delta, dtype=np.int64)
            c, s = Q.mrope_cos_sin(pos, t["head_dim"], t["rope_theta"], t["mrope_section"])
            h = model.embed([tok])
            for l, layer in enumerate(model.model.layers):
                h, caches[l] = layer(h, c, s, caches[l])
            logits = model.logits(model.model.norm(h))
    return embeds.numpy(), positions, first.numpy(), tokens


def main():
    os.makedirs(ARGS.workdir, exist_ok=True)
    model_dir = make("f32", "--layers", "4", "--seed", "7")
    model = Q.load_qwen25vl(model_dir)
    proc = json.load(open(os.path.join(model_dir, "preprocessor_config.json")))
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    failures = []
    rng = np.random.RandomState(11)
    runs = [("cpu", [])]
    for size in [(90, 130), (200, 60), (70, 70)]:  # height x width: wide, tall, square
        image = os.path.join(ARGS.workdir, f"image_{size[0]}x{size[1]}.png")
        Image.fromarray(rng.randint(0, 256, size + (3,), dtype=np.uint8)).save(image)
        pixels, grid = qwen2vl_image.preprocess(Image.open(image).convert("RGB"), proc)
        cases = [("none", []), ("divprune", ["--method", "divprune", "--keep-fraction", "0.5"]),
                 ("hap", ["--method", "hap", "--keep-fraction", "0.6"])]
        for device in ["cpu", "cuda-emulated"]:
            for name, flags in cases:
                if device != "cpu" and name == "divprune":
                    continue  # the emulated run covers the in-LLM stages
                label = f"{size[0]}x{size[1]} {device} {name}"
                got = run_tool(model_dir, image, "--device", device, *flags)
                stages = got.get("stages", [])
                if name != "none" and not stages:
                    failures.append(f"{label}: no pruning stage ran")
                ids = got["ids"]
                want_embeds, want_pos, want_logits, want_tokens = reference(
                    model, ids, pixels, grid, got["vis_begin"], got["n_vis"], stages)
                if list(got["grid"]) != list(grid):
                    failures.append(f"{label}: grid {got['grid']} != {grid}")
                n_vis = grid[1] * grid[2] // 4
                expect_span = ([cfg["vision_start_token_id"]] + [cfg["image_token_id"]] * n_vis +
                               [cfg["vision_end_token_id"]])
                vb = got["vis_begin"]
                if ids[vb - 1:vb + n_vis + 1] != expect_span or got["n_vis"] != n_vis:
                    failures.append(f"{label}: the image span of the prompt is wrong")
                # <|im_end|> closes the default system turn and the user's: the question's
                # own stays text.
                if ids.count(cfg["eos_token_id"]) != 2:
                    failures.append(f"{label}: the question's <|im_end|> became a special token")
                pos = np.stack([got["mrope"]["t"], got["mrope"]["h"], got["mrope"]["w"]])
                if not np.array_equal(pos, want_pos):
                    failures.append(f"{label}: M-RoPE positions differ")
                emb = np.asarray(got["image_embeds"], dtype=np.float32).reshape(want_embeds.shape)
                e_err = float(np.abs(emb - want_embeds).max())
                logits = np.asarray(got["logits"], dtype=np.float32)
                l_err = float(np.abs(logits - want_logits).max())
                scale = float(np.abs(want_logits).max())
                print(f"{label}: grid {grid}, {len(ids)} ids, stages "
                      f"{[(s['after_layer'], len(s['kept'])) for s in stages]}, embeds err "
                      f"{e_err:.2e}, logits err {l_err:.2e} (max |logit| {scale:.2f}), tokens "
                      f"{got['tokens']} / {want_tokens}")
                if not e_err < 2e-4:
                    failures.append(f"{label}: image embeddings differ by {e_err:.2e}")
                if not l_err < 2e-4 * max(1.0, scale):
                    failures.append(f"{label}: logits differ by {l_err:.2e}")
                if got["tokens"] != want_tokens:
                    failures.append(f"{label}: greedy tokens {got['tokens']} != {want_tokens}")
                if got["rope_delta"] != got["mrope"]["next"] - len(ids):
                    failures.append(f"{label}: rope_delta {got['rope_delta']}")
                if device == "cpu" and name != "divprune":
                    # `hapctl run` answers with the same tokens (greedy; it stops at EOS).
                    budget = ["--method", "hap", "--retain", "60%"] if name == "hap" else []
                    ran = subprocess.run(
                        [ARGS.hapctl, "run", "--model", model_dir, "--image", image, "--prompt",
                         QUESTION, "--max-new-tokens", str(MAX_NEW), "--json", *budget],
                        capture_output=True, text=True)
                    if ran.returncode != 0:
                        failures.append(f"{label}: hapctl run failed: {ran.stderr[-500:]}")
                        continue
                    run = json.loads(ran.stdout)
                    answer = run["token_ids"]
                    ended = len(answer) == MAX_NEW or answer[-1] == cfg["eos_token_id"]
                    if answer != want_tokens[:len(answer)] or not ended:
                        failures.append(f"{label}: hapctl run answered {answer}")
                    if run["pruning"]["prompt_tokens"] != len(ids):
                        failures.append(f"{label}: hapctl run's prompt has "
                                        f"{run['pruning']['prompt_tokens']} tokens")
    for f in failures:
        print("FAIL", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
