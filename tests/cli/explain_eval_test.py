#!/usr/bin/python3
"""hapctl explain and hapctl eval on both families.

explain: the visual tokens' cells over the image the tower saw (LLaVA's 12 x 12 square, a Qwen2.5-VL
image's own rows x columns of merge units), kept tokens inside them and equal to the last group's,
head statistics over every layer at the image's V. eval --data on a Qwen2.5-VL checkpoint: a budget
in % is of each image's visual tokens; --question-file refuses the family with the reason.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import unittest

from PIL import Image

ARGS = None


def run(*argv, check=True):
    p = subprocess.run([ARGS.hapctl, *argv], capture_output=True, text=True, timeout=240)
    if check and p.returncode != 0:
        raise AssertionError(f"hapctl {' '.join(argv)} exited with {p.returncode}: {p.stderr}")
    return p


class ExplainEvalTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.makedirs(ARGS.workdir, exist_ok=True)
        cls.qwen = os.path.join(ARGS.workdir, "qwen-tiny8")
        shutil.rmtree(cls.qwen, ignore_errors=True)
        run("make-tiny", "--family", "qwen2.5-vl", "--out", cls.qwen, "--layers", "8",
            "--seed", "4")
        # 280 x 112 pixels: 8 x 20 patches of 14, 4 x 10 merge units, 40 visual tokens.
        cls.wide = os.path.join(ARGS.workdir, "wide.png")
        img = Image.new("RGB", (280, 112))
        img.putdata([((x * 7) % 256, (y * 5) % 256, ((x + y) * 3) % 256)
                     for y in range(112) for x in range(280)])
        img.save(cls.wide)

    def explain(self, model, image, retain, name):
        out = os.path.join(ARGS.workdir, name)
        shutil.rmtree(out, ignore_errors=True)
        run("explain", "--model", model, "--image", image, "--prompt", "What colour is it?",
            "--retain", retain, "--out", out)
        with open(os.path.join(out, "explain.json")) as f:
            return out, json.load(f)

    def check_layout(self, out, j, rows, cols, cell):
        self.assertEqual((j["grid_rows"], j["grid_cols"]), (rows, cols))
        v = j["pruning"]["image_visual_tokens"]
        self.assertEqual(v, rows * cols)
        for name in ("image.png", "kept.png"):
            with Image.open(os.path.join(out, name)) as png:
                self.assertEqual(png.size, (cols * cell, rows * cell), name)
        kept = j["final_kept_tokens"]
        self.assertTrue(kept and all(0 <= k < v for k in kept))
        self.assertEqual(len(set(kept)), len(kept))
        self.assertEqual(kept, j["groups"][-1]["kept_tokens"])
        self.assertEqual(len(kept), j["pruning"]["layer_visual_tokens"][-1])
        for g in j["groups"]:
            self.assertTrue(os.path.exists(os.path.join(out, g["heatmap"])))
        stats = j["head_stats"]
        self.assertEqual(stats["visual_tokens"], v)
        self.assertEqual(len(stats["layers"]), len(j["pruning"]["layer_visual_tokens"]))
        self.assertTrue(all(layer["visual_tokens"] == v for layer in stats["layers"]))

    def test_explain_maps_qwen_tokens_to_merge_units(self):
        out, j = self.explain(self.qwen, self.wide, "50%", "explain-qwen")
        self.check_layout(out, j, rows=4, cols=10, cell=28)
        self.assertAlmostEqual(j["pruning"]["average_visual_tokens"], 20, delta=1.0)

    def test_explain_maps_llava_tokens_to_patches(self):
        out, j = self.explain(ARGS.model, ARGS.image, "11.1%", "explain-llava")
        self.check_layout(out, j, rows=12, cols=12, cell=14)

    def test_eval_takes_a_percentage_of_each_images_tokens(self):
        p = run("eval", "--model", self.qwen, "--data", ARGS.data, "--limit", "4", "--method",
                "hap", "--retain", "50%", "--json", "--no-baseline")
        j = json.loads(p.stdout)
        self.assertEqual(j["total"], 4)
        self.assertEqual(j["average_image_visual_tokens"], 36)  # 168 x 168 scenes
        self.assertAlmostEqual(j["average_visual_tokens"], 18, delta=1.0)

    def test_question_files_refuse_qwen_with_the_reason(self):
        qfile = os.path.join(ARGS.workdir, "questions.jsonl")
        with open(qfile, "w") as f:
            f.write(json.dumps({"question_id": 1, "image": os.path.basename(ARGS.image),
                                "text": "What colour is it?"}) + "\n")
        p = run("eval", "--model", self.qwen, "--question-file", qfile, "--image-folder",
                os.path.dirname(ARGS.image), "--answers-file",
                os.path.join(ARGS.workdir, "answers.jsonl"), check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("Qwen2.5-VL", p.stderr)
        self.assertIn("--data", p.stderr)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    for flag in ("--hapctl", "--model", "--data", "--image", "--workdir"):
        parser.add_argument(flag, required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest])
