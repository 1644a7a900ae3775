"""The Qwen2.5-VL default model (models/scenes-qwen2.5-vl) answers alike in the C++ runtime and
in PyTorch.

Runs `hapctl eval --method none` and the PyTorch reference (tools/pytorch/qwen2_5_vl_model.py,
F32 greedy decoding, prompts as tools/train/train_qwen.py builds them) on the first --limit
questions of data/scenes-test. Every question must give the same greedy tokens, except where the
reference's two best first-token logits lie within --tie (the runtimes' summation orders may
then pick either); at most --max-ties such questions may differ; the engine's accuracy must
reach --min-accuracy.

  /usr/bin/python3 tests/parity/qwen_default_model_test.py --hapctl build/tools/hapctl/hapctl \\
      [--limit 0 (= the whole split)]
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))

import torch  # noqa: E402
from PIL import Image  # noqa: E402

import default_model_test  # noqa: E402  (hapctl_eval)
import train_qwen as TQ  # noqa: E402

MODEL = os.path.join(ROOT, "models", "scenes-qwen2.5-vl")
DATA = os.path.join(ROOT, "data", "scenes-test")
# The scenes' size and the pixel budget the model was trained with (its preprocessor_config.json).
SCENES = dict(image_size=168)


def load_reference():
    fam = TQ.QwenFamily()
    model = TQ.Q.load_qwen25vl(MODEL)
    with open(os.path.join(MODEL, "preprocessor_config.json")) as f:
        pre = json.load(f)
    scenes = dict(SCENES, min_pixels=pre["min_pixels"], max_pixels=pre["max_pixels"])
    model.cfg = fam.config_of(dict(model.cfg.raw, scenes=scenes))
    return fam, model, TQ.Tokenizer(MODEL)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hapctl", required=True)
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--min-accuracy", type=float, default=0.85)
    ap.add_argument("--tie", type=float, default=0.01)
    ap.add_argument("--max-ties", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    summary, preds = default_model_test.hapctl_eval(a.hapctl, MODEL, DATA, a.limit)
    fam, model, tok = load_reference()
    side = model.cfg.grid_side
    with open(os.path.join(DATA, "questions.jsonl")) as f:
        questions = {q["id"]: q for q in map(json.loads, f)}
    differ, ties = [], 0
    for p in preds:
        q = questions[p["id"]]
        ids, _ = fam.encode_conversation(tok, model.cfg, [(q["question"], "x")])
        img = Image.open(os.path.join(DATA, q["image"])).convert("RGB")
        want, logits = model.generate(ids[:-1], fam.pixels(img, model.cfg).numpy(),
                                      [(1, side, side)], max_new_tokens=4,
                                      eos_token_id=tok.im_end)
        if p["tokens"] == want:
            continue
        top = torch.topk(logits[0], 2).values
        if float(top[0] - top[1]) < a.tie:
            ties += 1
            continue
        differ.append((p["id"], p["tokens"], want))
    accuracy = summary["accuracy"]
    print(f"{len(preds)} questions: engine accuracy {100 * accuracy:.1f}%, greedy tokens equal "
          f"to the reference on {len(preds) - ties - len(differ)}, near-ties {ties}, "
          f"other differences {len(differ)}")
    for d in differ[:5]:
        print("  differs:", d)
    ok = not differ and ties <= a.max_ties and accuracy >= a.min_accuracy
    print("OK" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
