#!/usr/bin/python3
"""Writes the demo images examples/scene{1,2,3}.png and examples/README.md.

  /usr/bin/python3 tools/scenes/make_examples.py --model models/scenes-llava

Candidates come from the `examples` split (disjoint from train/val/test). With --model, a
candidate is kept only if the model answers its question correctly (PyTorch reference, greedy),
so the demo questions in examples/README.md are ones the shipped model gets right.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import scenes  # noqa: E402

WANT = ["color", "shape", "relpos"]


def write_examples(out, model_dir="", seed=0):
    model = sp = None
    if model_dir:
        sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
        import common
        import torch
        from common import lm
        model = lm.load_llava(model_dir)
        sp = common.load_sp(os.path.join(model_dir, "tokenizer.model"))

    os.makedirs(out, exist_ok=True)
    rows = []
    index = 0
    for n, qtype in enumerate(WANT):
        for _ in range(200):
            rng = scenes.split_rng("examples", seed, index)
            index += 1
            scene, q, a, _ = scenes.sample_example(rng, qtype, 4, 6)
            img = scenes.render(scene)
            if model is None:
                break
            ids = lm.prompt_ids(sp, q, model.cfg.image_token_index, model.cfg.num_visual_tokens,
                                bos_id=sp.bos_id())
            toks, _ = model.greedy(lm.preprocess(img, model.cfg.vision["image_size"]),
                                   torch.tensor([ids]), 8, eos_id=sp.eos_id())
            pred = common.normalise_answer(sp.decode([t for t in toks if t != sp.eos_id()]))
            if pred == a:
                break
        else:
            raise RuntimeError(f"the model answered no {qtype} candidate correctly")
        name = f"scene{n + 1}.png"
        img.save(os.path.join(out, name))
        objs = ", ".join(f"{o['color']} {o['kind']} ({scenes.cell_name(o['row'], o['col'])})"
                         for o in scene["objects"])
        rows.append((name, q, a, objs))

    checked = (f"Each question below is answered correctly by `{os.path.relpath(model_dir, ROOT)}` "
               "(checked with the PyTorch\nreference, greedy, when these files were written)."
               if model else "The answers have NOT been checked against a model yet: re-run "
               "with --model.")
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("# Example images for the demo\n\n"
                "Synthetic scenes (tools/scenes, `examples` split, disjoint from train/val/test) "
                "at the default\nmodel's image size, 168x168. " + checked + "\n\n"
                "Regenerate: `/usr/bin/python3 tools/scenes/make_examples.py "
                "--model models/scenes-llava`\n\n"
                "| image | question | expected answer | what is in it |\n|---|---|---|---|\n")
        for name, q, a, objs in rows:
            f.write(f"| `{name}` | {q} | {a} | {objs} |\n")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "examples"))
    ap.add_argument("--model", default="")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    write_examples(args.out, args.model, args.seed)
    print(open(os.path.join(args.out, "README.md")).read())


if __name__ == "__main__":
    main()
