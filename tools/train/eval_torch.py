#!/usr/bin/python3
"""Evaluates a llava-hf model directory on a scenes split with the PyTorch reference model.

  /usr/bin/python3 tools/train/eval_torch.py --model models/scenes-llava \
      [--data data/scenes-test] [--limit N] [--predictions preds.jsonl] [--bf16]

Greedy decoding (llava_model.Llava.greedy, stops at EOS), exact match after lower-casing and
stripping spaces/periods. Prints overall and per-type accuracy; --predictions writes one JSON
object per question ({"id", "type", "question", "answer", "prediction", "correct", "tokens"}) so
another runtime's answers can be compared question by question.
"""
import argparse
import collections
import json
import os
import sys
import time

# Other jobs share these cores: spinning OpenMP threads then stall at every barrier (measured
# 50 s/step instead of 6.5 under load 9); passive waiting costs little when the machine is idle.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import lm  # noqa: E402


def load_questions(data_dir, limit=None):
    with open(os.path.join(data_dir, "questions.jsonl")) as f:
        qs = [json.loads(line) for line in f if line.strip()]
    return qs[:limit] if limit else qs


def evaluate(model, sp, questions, data_dir, max_new_tokens=8, bf16=False, log_every=0):
    """-> list of prediction dicts (see module doc)."""
    size = model.cfg.vision["image_size"]
    out, cache = [], {}
    t0 = time.time()
    for n, q in enumerate(questions):
        path = os.path.join(data_dir, q["image"])
        if path not in cache:
            cache.clear()
            cache[path] = lm.preprocess(Image.open(path), size)
        ids = lm.prompt_ids(sp, q["question"], model.cfg.image_token_index,
                            model.cfg.num_visual_tokens, bos_id=sp.bos_id())
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            toks, _ = model.greedy(cache[path], torch.tensor([ids]), max_new_tokens,
                                   eos_id=sp.eos_id())
        # Ids past the tokenizer (the image and pad ids) have no text.
        text = sp.decode([t for t in toks if t != sp.eos_id() and t < sp.get_piece_size()])
        pred = common.normalise_answer(text)
        out.append(dict(id=q["id"], type=q.get("type", ""), question=q["question"],
                        answer=q["answer"], prediction=pred, correct=pred == q["answer"],
                        tokens=toks))
        if log_every and (n + 1) % log_every == 0:
            acc = sum(r["correct"] for r in out) / len(out)
            print(f"  {n + 1}/{len(questions)} acc {acc:.3f} "
                  f"({(time.time() - t0) / (n + 1):.3f} s/question)", flush=True)
    return out


def summarise(results):
    """-> (overall accuracy, {type: (correct, total)})."""
    per = collections.defaultdict(lambda: [0, 0])
    for r in results:
        per[r["type"]][0] += int(r["correct"])
        per[r["type"]][1] += 1
    total = sum(v[1] for v in per.values())
    overall = sum(v[0] for v in per.values()) / max(1, total)
    return overall, {k: tuple(v) for k, v in sorted(per.items())}


def format_summary(results):
    overall, per = summarise(results)
    lines = [f"overall {overall * 100:.1f}% ({sum(r['correct'] for r in results)}/{len(results)})"]
    for t, (c, n) in per.items():
        lines.append(f"  {t:7s} {100 * c / n:5.1f}% ({c}/{n})")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default=os.path.join(common.ROOT, "models", "scenes-llava"))
    ap.add_argument("--data", default=os.path.join(common.ROOT, "data", "scenes-test"))
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--predictions", default="")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast (faster, not the reference)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    model = lm.load_llava(args.model)
    sp = common.load_sp(os.path.join(args.model, "tokenizer.model"))
    qs = load_questions(args.data, args.limit or None)
    t0 = time.time()
    res = evaluate(model, sp, qs, args.data, bf16=args.bf16, log_every=200)
    print(format_summary(res))
    print(f"{(time.time() - t0) / max(1, len(qs)):.3f} s/question")
    if args.predictions:
        with open(args.predictions, "w") as f:
            for r in res:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
