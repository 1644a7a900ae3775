#!/usr/bin/python3
"""Depth growth in tools/train/train_llava.py, the recipe the default model is trained with.

1. grow_decoder maps small layer i to big layers r*i .. r*i+r-1, divides the residual-branch
   outputs (o_proj, down_proj) by r and copies everything else (checked tensor by tensor); with
   small residual branches the grown model's hidden states equal the small model's to first
   order, which a grown model without the 1/r does not.
2. A tiny run through all four stages grows 2 -> 4 layers at the stage boundary, keeps the
   grounding on every copy of the grounded layers, checkpoints, and a run started from its
   ckpt-stage3.pt reproduces its last loss exactly.

  /usr/bin/python3 tests/train/growth_test.py --workdir DIR
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))

import torch  # noqa: E402

import train_llava as T  # noqa: E402
from common import lm  # noqa: E402

TINY = ["--width", "32", "--ffn", "64", "--heads", "4", "--kv-heads", "2", "--vision-width", "32",
        "--vision-layers", "2", "--vision-heads", "2", "--layers", "4", "--grow-from", "2"]


def check_grow_decoder():
    a = T.parse_args(TINY)
    torch.manual_seed(0)
    small = lm.Llava(lm.Config(T.model_config(a, 2)))
    T.init_weights(small, 0)
    big = lm.Llava(lm.Config(T.model_config(a, 4)))
    T.grow_decoder(small, big, 2)
    s, b = small.state_dict(), big.state_dict()
    for name, t in b.items():
        if not name.startswith("layers."):
            assert torch.equal(t, s[name]), name
            continue
        _, i, rest = name.split(".", 2)
        want = s[f"layers.{int(i) // 2}.{rest}"]
        if rest in ("self_attn.o_proj.weight", "down_proj.weight"):
            want = want / 2
        assert torch.equal(t, want), name
    # First order: scale every residual branch by eps; the grown model then differs from the
    # small one by O(eps^2), one grown without the 1/r by O(eps).
    with torch.no_grad():
        for l in small.layers:
            l.self_attn.o_proj.weight.mul_(1e-2)
            l.down_proj.weight.mul_(1e-2)
    T.grow_decoder(small, big, 2)
    wrong = lm.Llava(lm.Config(T.model_config(a, 4)))
    T.grow_decoder(small, wrong, 2)
    with torch.no_grad():
        for l in wrong.layers:
            l.self_attn.o_proj.weight.mul_(2)
            l.down_proj.weight.mul_(2)
    ids = torch.randint(3, 500, (2, 12))
    pos = torch.arange(12)[None].expand(2, 12)

    def hidden(m):
        with torch.no_grad():
            h, _, _ = m.decoder(m.embed_tokens(ids), pos)
        return h

    hs, hb, hw = hidden(small), hidden(big), hidden(wrong)
    ref = (hs - hidden_no_branches(small, ids, pos)).norm()
    err, err_wrong = (hb - hs).norm(), (hw - hs).norm()
    print(f"grow_decoder: |grown - small| = {err:.2e}, without the 1/r {err_wrong:.2e}, "
          f"size of the residual updates {ref:.2e}")
    assert err < 0.05 * ref, (err, ref)
    assert err_wrong > 0.5 * ref, (err_wrong, ref)


def hidden_no_branches(m, ids, pos):
    """The final-norm output with every residual branch removed: the scale the updates have."""
    with torch.no_grad():
        return m.norm(m.embed_tokens(ids))


def run(workdir, *extra):
    cmd = [sys.executable, os.path.join(ROOT, "tools", "train", "train_llava.py"), "--threads", "1",
           "--vision-steps", "3", "--vision-batch", "2", "--steps", "3", "--focus-steps", "2",
           "--grow-steps", "3", "--batch", "2", "--val-size", "10", "--val-every", "2",
           "--log-every", "1", "--no-export", "--ground-layers", "1", *TINY, *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"train_llava.py failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out.stdout


def last_loss(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        recs = [json.loads(l) for l in f]
    return [r for r in recs if r["kind"] == "train"][-1]["loss"], recs


def check_run(workdir):
    shutil.rmtree(workdir, ignore_errors=True)
    a_dir, b_dir = os.path.join(workdir, "a"), os.path.join(workdir, "b")
    log = run(workdir, "--run-dir", a_dir)
    assert "grew the decoder from 2 to 4 layers" in log, log
    assert "grounding layers now 2,3" in log, log  # layer 1 of 2 -> its copies 2 and 3 of 4
    st = torch.load(os.path.join(a_dir, "ckpt.pt"))
    assert st["step"] == 3 + 3 + 2 + 3, st["step"]
    assert st["config"]["text_config"]["num_hidden_layers"] == 4
    stage3 = torch.load(os.path.join(a_dir, "ckpt-stage3.pt"))
    assert stage3["config"]["text_config"]["num_hidden_layers"] == 2
    loss_a, recs = last_loss(a_dir)
    depths = [r["layers"] for r in recs if r["kind"] == "train"]
    assert depths == [2] * 5 + [4] * 3, depths
    assert any(r["kind"] == "grown" for r in recs)
    # From the stage-3 checkpoint, in a fresh run dir: growth again, then the same steps.
    run(workdir, "--run-dir", b_dir, "--init-from", os.path.join(a_dir, "ckpt-stage3.pt"))
    loss_b, _ = last_loss(b_dir)
    print(f"last loss {loss_a:.6f}, resumed from ckpt-stage3.pt {loss_b:.6f}")
    assert loss_a == loss_b, (loss_a, loss_b)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    check_grow_decoder()
    check_run(a.workdir)
    print("OK")


if __name__ == "__main__":
    main()
