"""`hapctl eval --question-file` (LLaVA question file in, LLaVA answer file out) against the
folder mode on the same questions: data/scenes-test's first questions are converted to LLaVA's
question format (question_id alternately a string and an integer), both modes run with the same
methods and budget, and the answers, the answer file's keys and types, and the metadata's
method, budget, kept tokens and FLOPs must match the folder mode's predictions and summary."""
import argparse
import json
import os
import shutil
import subprocess
import sys

LIMIT = 6
METHODS = ["none", "hap", "fastv", "visionzip"]
RETAIN = "32"
MAX_NEW = "8"
KEYS = ["question_id", "prompt", "text", "answer_id", "model_id", "metadata"]
SHORTUUID = set("23456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz")

failures = []
MODEL = ""  # --model, given to every hapctl run


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(hapctl, args, ok=True):
    args = args[:1] + ["--model", MODEL] + args[1:]
    p = subprocess.run([hapctl] + args, capture_output=True, text=True, errors="replace",
                       timeout=120)
    if ok and p.returncode != 0:
        sys.exit(f"hapctl {' '.join(args)} failed ({p.returncode}):\n{p.stderr}")
    return p


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hapctl", required=True)
    ap.add_argument("--data", required=True, help="data/scenes-test")
    ap.add_argument("--model", required=True, help="models/scenes-llava")
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    global MODEL
    MODEL = a.model
    w = a.workdir
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    images = os.path.join(a.data, "images")

    # The folder's first questions as a LLaVA question file.
    src = read_jsonl(os.path.join(a.data, "questions.jsonl"))[:LIMIT]
    qfile = os.path.join(w, "questions.jsonl")
    converted = []
    for i, q in enumerate(src):
        assert q["image"].startswith("images/"), q
        converted.append({"question_id": q["id"] if i % 2 == 0 else 1000 + i,
                          "image": q["image"][len("images/"):], "text": q["question"],
                          "category": q["type"]})
    with open(qfile, "w") as f:
        for q in converted:
            f.write(json.dumps(q) + "\n")

    # Folder mode, one run per method: predictions and the summary JSON.
    ref_pred, ref_summary = {}, {}
    for m in METHODS:
        pred = os.path.join(w, f"ref-{m}.jsonl")
        args = ["eval", "--data", a.data, "--limit", str(LIMIT), "--method", m,
                "--max-new-tokens", MAX_NEW, "--no-baseline", "--json", "--predictions", pred]
        if m != "none":
            args += ["--retain", RETAIN]
        ref_summary[m] = json.loads(run(a.hapctl, args).stdout.strip().splitlines()[-1])
        ref_pred[m] = read_jsonl(pred)

    # LLaVA mode, every method in one command.
    pattern = os.path.join(w, "answers", "{method}.jsonl")
    run(a.hapctl, ["eval", "--question-file", qfile, "--image-folder", images, "--answers-file",
                   pattern, "--method", ",".join(METHODS), "--retain", RETAIN,
                   "--max-new-tokens", MAX_NEW])
    answer_ids = []
    answers = {}
    model_id = os.path.basename(os.path.normpath(a.model))
    for m in METHODS:
        path = pattern.replace("{method}", m)
        with open(path, encoding="utf-8") as f:
            raw = [line for line in f.read().split("\n") if line]
        lines = [json.loads(line) for line in raw]
        answers[m] = lines
        check(len(lines) == LIMIT, f"{m}: {len(lines)} answers, expected {LIMIT}")
        for q, ref, got in zip(converted, ref_pred[m], lines):
            where = f"{m} question_id {q['question_id']!r}"
            check(list(got) == KEYS, f"{where}: keys {list(got)}")
            check(got["question_id"] == q["question_id"] and
                  type(got["question_id"]) is type(q["question_id"]),
                  f"{where}: question_id came back as {got['question_id']!r}")
            check(got["prompt"] == q["text"], f"{where}: prompt {got['prompt']!r}")
            check(got["text"] == ref["prediction"].strip(),
                  f"{where}: answer {got['text']!r}, folder mode {ref['prediction']!r}")
            check(isinstance(got["answer_id"], str) and len(got["answer_id"]) == 22 and
                  set(got["answer_id"]) <= SHORTUUID, f"{where}: answer_id {got['answer_id']!r}")
            answer_ids.append(got["answer_id"])
            check(got["model_id"] == model_id, f"{where}: model_id {got['model_id']!r}")
            md = got["metadata"]
            check(md["method"] == m, f"{where}: metadata method {md['method']!r}")
            if m == "none":
                check("retain" not in md and md["stages"] == [] and
                      md["average_visual_tokens"] == md["image_visual_tokens"],
                      f"{where}: unpruned metadata {md}")
            else:
                check(md.get("retain") == float(RETAIN) and "flops_budget" not in md,
                      f"{where}: budget in metadata {md}")
                kept = [s["visual_tokens_kept"] for s in md["stages"]]
                check(len(kept) >= 1 or m == "visionzip", f"{where}: no stages")
                check(kept == sorted(kept, reverse=True), f"{where}: stages {md['stages']}")
            check(md["conv_mode"] == "llava_hf", f"{where}: conv_mode {md['conv_mode']!r}")
            check(md["finish_reason"] in ("eos", "length", "stop") and
                  1 <= md["new_tokens"] <= int(MAX_NEW) and md["elapsed_ms"] > 0,
                  f"{where}: finish/tokens/time {md}")
            for k in ("flops_paper", "flops_full", "unpruned_flops_paper",
                      "unpruned_flops_full", "kv_cache_fraction", "prefill_ms", "decode_ms"):
                check(isinstance(md[k], (int, float)), f"{where}: metadata {k} {md.get(k)!r}")
        # Kept tokens and FLOPs as the folder mode's summary reports them (means over questions).
        s = ref_summary[m]
        n = max(1, len(lines))
        for key, ours in (
                ("average_visual_tokens", sum(x["metadata"]["average_visual_tokens"]
                                          for x in lines) / n),
                ("flops_full", sum(x["metadata"]["flops_full"] / x["metadata"]
                                   ["unpruned_flops_full"] for x in lines) / n),
                ("flops_paper", sum(x["metadata"]["flops_paper"] / x["metadata"]
                                    ["unpruned_flops_paper"] for x in lines) / n)):
            check(abs(ours - s[key]) <= 1e-9 * max(1.0, abs(s[key])),
                  f"{m}: mean {key} {ours}, folder mode {s[key]}")
    check(len(set(answer_ids)) == len(answer_ids), "answer_id values repeat")

    # A rerun gives the same answer ids (deterministic), --limit takes the first questions.
    again = os.path.join(w, "again.jsonl")
    run(a.hapctl, ["eval", "--question-file", qfile, "--image-folder", images, "--answers-file",
                   again, "--method", "hap", "--retain", RETAIN, "--max-new-tokens", MAX_NEW,
                   "--limit", "2"])
    check([x["answer_id"] for x in read_jsonl(again)] ==
          [x["answer_id"] for x in answers["hap"][:2]], "answer_id differs on a rerun")

    # --kv-dtype bf16: the same questions and pruning (the prefill attends in F32 either way),
    # other answer ids, since BF16 rows can change an answer.
    bf16 = os.path.join(w, "bf16.jsonl")
    run(a.hapctl, ["eval", "--question-file", qfile, "--image-folder", images, "--answers-file",
                   bf16, "--method", "hap", "--retain", RETAIN, "--max-new-tokens", MAX_NEW,
                   "--limit", "2", "--kv-dtype", "bf16"])
    got = read_jsonl(bf16)
    check([x["question_id"] for x in got] == [x["question_id"] for x in answers["hap"][:2]] and
          [x["metadata"]["stages"] for x in got] ==
          [x["metadata"]["stages"] for x in answers["hap"][:2]],
          f"--kv-dtype bf16: questions or pruning differ: {got}")
    check(all(x["answer_id"] != y["answer_id"] for x, y in zip(got, answers["hap"][:2])),
          "--kv-dtype bf16 keeps the f32 run's answer ids")

    # LLaVA's chunking: chunk 1 of 2 is the second half.
    chunk = os.path.join(w, "chunk.jsonl")
    run(a.hapctl, ["eval", "--question-file", qfile, "--image-folder", images, "--answers-file",
                   chunk, "--max-new-tokens", MAX_NEW, "--num-chunks", "2", "--chunk-idx", "1"])
    got = read_jsonl(chunk)
    check([x["question_id"] for x in got] == [q["question_id"] for q in converted[LIMIT // 2:]],
          f"chunk 1 of 2: {[x['question_id'] for x in got]}")
    check([x["text"] for x in got] == [x["text"] for x in answers["none"][LIMIT // 2:]],
          "chunk answers differ from the whole file's")

    # vicuna_v1: LLaVA's system prompt before "USER:", so a longer prompt.
    vic = os.path.join(w, "vicuna.jsonl")
    run(a.hapctl, ["eval", "--question-file", qfile, "--image-folder", images, "--answers-file",
                   vic, "--max-new-tokens", MAX_NEW, "--limit", "2", "--conv-mode", "vicuna_v1"])
    for v, h in zip(read_jsonl(vic), answers["none"]):
        check(v["metadata"]["conv_mode"] == "vicuna_v1" and
              v["metadata"]["prompt_tokens"] > h["metadata"]["prompt_tokens"] + 20,
              f"vicuna_v1 prompt tokens {v['metadata']['prompt_tokens']} vs "
              f"{h['metadata']['prompt_tokens']}")

    # Bad input: one line naming the file, the line and the field.
    def bad(name, lines, fragments, extra=()):
        path = os.path.join(w, name + ".jsonl")
        with open(path, "w") as f:
            f.write("".join(lines))
        p = run(a.hapctl, ["eval", "--question-file", path, "--image-folder", images,
                           "--answers-file", os.path.join(w, "bad-out.jsonl")] + list(extra),
                ok=False)
        err = p.stderr.strip()
        check(p.returncode in (1, 2) and len(err.splitlines()) == 1 and
              all(fr in err for fr in fragments), f"{name}: exit {p.returncode}, stderr {err!r}")

    good = json.dumps(converted[0]) + "\n"
    bad("missing-question-id", [good, json.dumps({"image": "test_0000.jpg", "text": "a"}) + "\n"],
        ["missing-question-id.jsonl:2", "question_id"])
    bad("float-question-id", [json.dumps({"question_id": 1.5, "image": "test_0000.jpg",
                                          "text": "a"}) + "\n"],
        ["float-question-id.jsonl:1", "question_id"])
    bad("missing-image", [good, good, json.dumps({"question_id": 7, "image": "nope.jpg",
                                                  "text": "a"}) + "\n"],
        ["missing-image.jsonl:3", "nope.jpg"])
    bad("text-not-string", [json.dumps({"question_id": 7, "image": "test_0000.jpg",
                                        "text": 3}) + "\n"],
        ["text-not-string.jsonl:1", "'text'"])
    bad("not-json", [good, "{not json\n"], ["not-json.jsonl:2", "JSON"])
    bad("no-placeholder", [good], ["{method}"], ["--method", "none,hap", "--retain", RETAIN])

    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print(f"ok: {len(METHODS)} methods x {LIMIT} questions match the folder mode")
    return 0


if __name__ == "__main__":
    sys.exit(main())
