"""The default model (models/scenes-llava) answers alike in the C++ runtime and in PyTorch.

Runs `hapctl eval --method none` and the PyTorch reference (tools/pytorch/llava_model.py, f32,
via tools/train/eval_torch.py) on the first --limit questions of data/scenes-test and compares
them question by question: the answers (normalised text) must agree on at least --min-agree of
the questions, and both runtimes must reach --min-accuracy. Prints the agreement, where the
greedy token sequences differ, and both accuracies per question type; --json writes them.

  /usr/bin/python3 tests/parity/default_model_test.py --hapctl build/tools/hapctl/hapctl \\
      [--limit 0 (= the whole split)] [--json out.json]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))


def hapctl_eval(hapctl, model, data, limit):
    with tempfile.TemporaryDirectory() as tmp:
        pred = os.path.join(tmp, "pred.jsonl")
        cmd = [hapctl, "eval", "--model", model, "--data", data, "--method", "none", "--json",
               "--no-baseline", "--predictions", pred]
        if limit:
            cmd += ["--limit", str(limit)]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        if p.returncode != 0:
            sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}")
        summary = json.loads(p.stdout.strip().splitlines()[-1])
        with open(pred) as f:
            return summary, [json.loads(line) for line in f if line.strip()]


def per_type(eval_torch, rows):
    """{type: accuracy} of prediction rows (hapctl eval's and eval_torch's share the fields)."""
    return {t: c / n for t, (c, n) in eval_torch.summarise(rows)[1].items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--hapctl", required=True)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "scenes-llava"))
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "scenes-test"))
    ap.add_argument("--limit", type=int, default=200, help="first N questions (0 = all)")
    ap.add_argument("--min-agree", type=float, default=0.995)
    ap.add_argument("--min-accuracy", type=float, default=0.9)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    if not os.path.exists(os.path.join(a.model, "config.json")):
        sys.exit(f"FAIL: {a.model}/config.json not found (the default model is committed under "
                 f"models/scenes-llava)")

    import torch
    import common
    import eval_torch
    torch.set_num_threads(a.threads)

    summary, cpp = hapctl_eval(a.hapctl, a.model, a.data, a.limit)
    model = common.lm.load_llava(a.model)
    sp = common.load_sp(os.path.join(a.model, "tokenizer.model"))
    qs = eval_torch.load_questions(a.data, a.limit or None)
    ref = eval_torch.evaluate(model, sp, qs, a.data)
    if [r["id"] for r in cpp] != [r["id"] for r in ref]:
        sys.exit("FAIL: hapctl eval and the PyTorch evaluation saw different questions")

    same_answer = sum(common.normalise_answer(c["prediction"]) == r["prediction"]
                      for c, r in zip(cpp, ref))
    same_tokens = sum(c["tokens"] == r["tokens"] for c, r in zip(cpp, ref))
    n = len(ref)
    acc_cpp = sum(c["correct"] for c in cpp) / n
    acc_ref = sum(r["correct"] for r in ref) / n
    result = dict(questions=n, same_answer=same_answer, agreement=same_answer / n,
                  same_tokens=same_tokens, accuracy_cpp=acc_cpp, accuracy_torch=acc_ref,
                  per_type_cpp=per_type(eval_torch, cpp),
                  per_type_torch=per_type(eval_torch, ref),
                  cpp_summary_accuracy=summary["accuracy"])
    print(f"{n} questions: same answer {same_answer}/{n} ({100 * same_answer / n:.2f}%), "
          f"same greedy tokens {same_tokens}/{n}")
    print(f"accuracy: C++ {100 * acc_cpp:.1f}%, PyTorch {100 * acc_ref:.1f}%")
    for t in result["per_type_cpp"]:
        print(f"  {t:7s} C++ {100 * result['per_type_cpp'][t]:5.1f}%  "
              f"PyTorch {100 * result['per_type_torch'][t]:5.1f}%")
    for c, r in zip(cpp, ref):
        if common.normalise_answer(c["prediction"]) != r["prediction"]:
            print(f"  differs: {r['id']} {r['question']!r}: C++ {c['prediction']!r}, "
                  f"PyTorch {r['prediction']!r} (reference {r['answer']!r})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    failed = []
    if same_answer / n < a.min_agree:
        failed.append(f"agreement {same_answer / n:.4f} < {a.min_agree}")
    if min(acc_cpp, acc_ref) < a.min_accuracy:
        failed.append(f"accuracy {min(acc_cpp, acc_ref):.3f} < {a.min_accuracy}")
    if failed:
        sys.exit("FAIL: " + "; ".join(failed))
    print("OK")


if __name__ == "__main__":
    main()
