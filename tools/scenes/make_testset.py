#!/usr/bin/python3
"""Writes a scenes split to disk: JPEG images + questions.jsonl (format in
data/scenes-test/README.md).

  /usr/bin/python3 tools/scenes/make_testset.py --out data/scenes-test --split test --images 340

Each image gets `--per-image` questions of different types (types rotate over images so every
type gets the same count); the answer of each question is drawn uniformly first and scenes are
resampled until they fit, so answers within a type are balanced.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scenes  # noqa: E402


def make_image_questions(rng, types, size, n_min, n_max):
    targets = [rng.choice(scenes.ANSWERS[t]) for t in types]
    for attempt in range(20000):
        relax = attempt >= 10000  # keep the first type's target, let the others be free
        scene = scenes.random_scene(rng, size, n_min, n_max)
        qas = []
        for i, t in enumerate(types):
            qa = scenes.make_question(scene, t, rng, targets[i] if (i == 0 or not relax) else None)
            if qa is None:
                break
            qas.append((t, qa[0], qa[1]))
        if len(qas) == len(types):
            return scene, qas
    raise RuntimeError("could not build questions for an image")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--split", default="test")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--images", type=int, default=340)
    ap.add_argument("--per-image", type=int, default=3)
    ap.add_argument("--size", type=int, default=168)
    ap.add_argument("--min-shapes", type=int, default=3)
    ap.add_argument("--max-shapes", type=int, default=6)
    ap.add_argument("--quality", type=int, default=90)
    args = ap.parse_args()

    os.makedirs(os.path.join(args.out, "images"), exist_ok=True)
    nt = len(scenes.QTYPES)
    lines = []
    for i in range(args.images):
        rng = scenes.split_rng(args.split, args.seed, i)
        types = [scenes.QTYPES[(i * args.per_image + k) % nt] for k in range(args.per_image)]
        scene, qas = make_image_questions(rng, types, args.size, args.min_shapes, args.max_shapes)
        rel = f"images/{args.split}_{i:04d}.jpg"
        scenes.render(scene).save(os.path.join(args.out, rel), format="JPEG",
                                  quality=args.quality)
        for k, (t, q, a) in enumerate(qas):
            lines.append(dict(id=f"{args.split}-{i:04d}-{k}", image=rel, question=q, answer=a,
                              type=t))
    with open(os.path.join(args.out, "questions.jsonl"), "w") as f:
        for d in lines:
            f.write(json.dumps(d) + "\n")
    print(f"wrote {len(lines)} questions over {args.images} images to {args.out}")


if __name__ == "__main__":
    main()
