"""Smoke test of the pruning-accuracy bench and of `hapctl explain`'s head_stats on a tiny
random checkpoint (`hapctl make-tiny`): run.py writes its JSON and replaces (not appends) the
marked README sections on a rerun; a budget below a method's minimum is recorded as refused, not
a failure; the factorial-ablation table (hap, hap-flat, uniform, uniform-flat beside the paper's
numbers) is written; every head_stats field is present and consistent; on a tiny Qwen2.5-VL
directory V is measured per image, VisionZip is recorded as not supported and the README
sections are Qwen2.5-VL's own."""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import run  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hapctl", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    w = a.workdir
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    model = os.path.join(w, "model")
    subprocess.run([a.hapctl, "make-tiny", "--out", model, "--seed", "3", "--layers", "8",
                    "--heads", "4", "--kv-heads", "2"], check=True, stdout=subprocess.DEVNULL)
    # A three-question data folder from the committed test split.
    data = os.path.join(w, "data")
    os.makedirs(os.path.join(data, "images"))
    src = os.path.join(ROOT, "data", "scenes-test")
    with open(os.path.join(src, "questions.jsonl")) as f:
        qs = [json.loads(line) for line in f][:3]
    with open(os.path.join(data, "questions.jsonl"), "w") as f:
        for q in qs:
            shutil.copy(os.path.join(src, q["image"]), os.path.join(data, q["image"]))
            f.write(json.dumps(q) + "\n")

    # explain: head_stats next to the existing fields.
    out = os.path.join(w, "explain")
    subprocess.run([a.hapctl, "explain", "--model", model, "--image",
                    os.path.join(data, qs[0]["image"]), "--prompt", qs[0]["question"],
                    "--retain", "50%", "--max-new-tokens", "2", "--out", out], check=True,
                   stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "explain.json")) as f:
        j = json.load(f)
    for key in ("layers", "groups", "final_kept_tokens", "pruning"):
        check(key in j, f"explain.json keeps '{key}'")
    hs = j.get("head_stats", {})
    check(hs.get("pass") == "unpruned", "head_stats.pass")
    check(hs.get("text_tokens", 0) > 0, "head_stats.text_tokens")
    layers = hs.get("layers", [])
    check(len(layers) == 8, f"head_stats has every layer ({len(layers)})")
    V = hs.get("visual_tokens")
    for rec in layers:
        l = rec["layer"]
        check(rec["visual_tokens"] == V, f"layer {l}: all V tokens present (unpruned pass)")
        for key in ("head_paq", "head_mutual_info", "head_spatial_entropy",
                    "head_spatial_entropy_norm", "head_row_entropy", "head_max_token_mass",
                    "head_argmax_token", "head_visual_mass", "head_weights"):
            check(len(rec.get(key, [])) == 4, f"layer {l}: {key} has one value per head")
        for h in range(4):
            p, mi, hv = rec["head_paq"][h], rec["head_mutual_info"][h], rec["head_spatial_entropy"][h]
            check(0 <= p <= 1, f"layer {l} head {h}: PAQ in [0,1]")
            check(abs(mi / hv - p) < 1e-3 if hv > 1e-9 else p == 0,
                  f"layer {l} head {h}: PAQ = I / H(V) ({p} vs {mi}/{hv})")
            check(abs(rec["head_spatial_entropy_norm"][h] - hv / math.log(V)) < 1e-9,
                  f"layer {l} head {h}: normalised entropy")
            check(rec["head_row_entropy"][h] <= hv + 1e-6, f"layer {l} head {h}: H(V|T) <= H(V)")
            check(1.0 / V - 1e-6 <= rec["head_max_token_mass"][h] <= 1 + 1e-6,
                  f"layer {l} head {h}: max token mass")
            check(0 <= rec["head_argmax_token"][h] < V, f"layer {l} head {h}: argmax token")
            check(0 <= rec["head_visual_mass"][h] <= 1 + 1e-5, f"layer {l} head {h}: visual mass")
        ws = rec["head_weights"]
        check(abs(sum(ws) - 1) < 1e-5, f"layer {l}: head weights sum to 1")
        check(abs(rec["effective_heads"] - 1 / sum(x * x for x in ws)) < 1e-4,
              f"layer {l}: effective_heads = 1/sum w^2")
        check(rec["weights_kl_uniform"] >= -1e-9, f"layer {l}: KL >= 0")
    if j.get("layers") and layers:
        # The same quantity from two kernels (HAP's PAQ from fused row entropies, head_stats'
        # from the maps): equal up to float rounding.
        check(all(abs(a - b) < 1e-5 for a, b in zip(j["layers"][0]["head_paq"],
                                                     layers[0]["head_paq"])),
              "layer 0: head PAQ of the HAP pass equals the unpruned pass's")

    # The bench end to end, twice: the second run must replace the marked sections.
    readme = os.path.join(w, "README.md")
    bench_readme = os.path.join(w, "bench.md")
    with open(readme, "w") as f:
        f.write(f"# t\n\n## Pruning accuracy\n\n{run.README_BEGIN}\nold\n{run.README_END}\n\n## After\n")
    with open(bench_readme, "w") as f:
        f.write("# b\n")
    res_path = os.path.join(w, "results", "r.json")
    # V = 16, L = 8. 20% = 3.2 tokens per layer is below HAP's M = L minimum (27/8 = 3.375), so
    # hap, uniform, their flat variants and random refuse it; DART (one unpruned layer: minimum
    # 23/8 = 2.875), FastV (clamps) and VisionZip run.
    methods = ["hap", "uniform", "hap-flat", "uniform-flat", "fastv", "visionzip", "random", "dart"]
    refused_at_20 = {"hap", "uniform", "hap-flat", "uniform-flat", "random"}
    cmd = [sys.executable, os.path.join(HERE, "run.py"), "--hapctl", a.hapctl, "--model", model,
           "--data", data, "--limit", "3", "--methods", ",".join(methods),
           "--retains", "1/2,20%", "--head-questions", "2", "--threads", "1", "--out", res_path,
           "--update-readme", "--readme", readme, "--bench-readme", bench_readme]
    for attempt in range(2):
        p = subprocess.run(cmd + (["--resume"] if attempt else []), capture_output=True,
                           text=True)
        check(p.returncode == 0, f"run.py exit code (attempt {attempt}): {p.stderr[-2000:]}")
    with open(res_path) as f:
        res = json.load(f)
    check(len(res["runs"]) == 1 + len(methods) * 2, f"runs: {len(res['runs'])}")
    refused = set()
    for r in res["runs"]:
        if "unreachable" in r:
            refused.add((r["method"], r["retain_spec"]))
            check("minimum reachable" in r["unreachable"], f"{r['method']}: refusal names the "
                  f"minimum: {r['unreachable']}")
            continue
        check(r["total"] == 3 and len(r["correct_bits"]) == 3, f"{r['method']}: 3 questions")
        check(0 <= r["same_as_unpruned"] <= 1, f"{r['method']}: same_as_unpruned")
    check(refused == {(m, "20%") for m in refused_at_20}, f"refused runs: {sorted(refused)}")
    first = res["runs"][0]
    check(first["method"] == "none" and first["relative_score"] in (1.0, None),
          "the first run is the unpruned one")
    hm = res.get("head_modes", {})
    check(hm.get("questions") == 2 and len(hm.get("layers", [])) == 8, "head_modes summary")
    for x in hm.get("layers", []):
        check(abs(sum(x["modes"].values()) - 1) < 1e-9, f"layer {x['layer']}: mode shares sum to 1")
    text = open(readme).read()
    check(text.count(run.README_BEGIN) == 1 and text.count(run.README_END) == 1,
          "README markers once")
    check("\nold\n" not in text and "| hap |" in text and text.endswith("## After\n"),
          "README section replaced in place")
    check("| scoring | schedule | method |" in text and "| PAQ-softmax | flat | hap-flat |" in text
          and "| 86.2 |" in text and run.UNREACHABLE_CELL in text, "README ablation table")
    check(text.count("Factorial ablation") == 1, "one ablation table")
    btext = open(bench_readme).read()
    check(btext.count(run.HEADS_BEGIN) == 1 and "| layer |" in btext, "bench README head table")
    # The ablation table from a stub result: cells, refusals, the paper's column, the rankings.
    stub = {"retains": ["1/2", "8"], "model_dims": {"V": 16}, "methods": ["none"] + [
        m for m, *_ in run.ABLATION], "runs": []}
    for (m, *_), acc in zip(run.ABLATION, (0.9, 0.6, 0.8, 0.7)):
        stub["runs"].append({"method": m, "retain_spec": "1/2", "accuracy": acc,
                             "relative_score": acc / 0.9})
        stub["runs"].append({"method": m, "retain_spec": "8", "unreachable": "x"} if m == "hap"
                            else {"method": m, "retain_spec": "8", "accuracy": 0.5,
                                  "relative_score": 0.5 / 0.9})
    table = run.ablation_table(stub)
    check("| PAQ-softmax | pyramid | hap | 90.0 (100.0) | below min. | 99.1 |" in table,
          f"ablation stub: hap row\n{table}")
    check("| uniform | flat | uniform-flat | 70.0 (77.8) | 50.0 (55.6) | 86.2 |" in table,
          f"ablation stub: uniform-flat row\n{table}")
    check("Paper's ranking: hap > hap-flat > uniform > uniform-flat. Measured: 50.0%: "
          "hap > uniform > uniform-flat > hap-flat." in table, f"ablation stub: ranking\n{table}")
    check(run.ablation_table({**stub, "methods": ["none", "fastv"]}) == "",
          "no ablation table without its methods")
    # A Qwen2.5-VL directory: V measured per image (36 for the 168-px scenes), VisionZip refused
    # as not supported at every budget, and its own README sections (LLaVA's left as they were).
    qmodel = os.path.join(w, "qwen")
    subprocess.run([a.hapctl, "make-tiny", "--family", "qwen2.5-vl", "--out", qmodel, "--seed",
                    "3", "--layers", "4"], check=True, stdout=subprocess.DEVNULL)
    with open(readme, "a") as f:
        f.write(f"\n{run.QWEN_README_BEGIN}\nold qwen\n{run.QWEN_README_END}\n")
    llava_part = open(readme).read()
    llava_part = llava_part[:llava_part.index(run.QWEN_README_BEGIN)]
    qres_path = os.path.join(w, "results", "q.json")
    p = subprocess.run([sys.executable, os.path.join(HERE, "run.py"), "--hapctl", a.hapctl,
                        "--model", qmodel, "--data", data, "--limit", "3",
                        "--methods", "hap,visionzip,divprune", "--retains", "1/2,1/4",
                        "--head-questions", "1", "--threads", "1", "--out", qres_path,
                        "--update-readme", "--readme", readme, "--bench-readme", bench_readme],
                       capture_output=True, text=True)
    check(p.returncode == 0, f"run.py on Qwen2.5-VL: {p.stderr[-2000:]}")
    with open(qres_path) as f:
        qres = json.load(f)
    check(qres["model_dims"]["V"] == 36 and qres["model_dims"]["layers"] == 4,
          f"Qwen2.5-VL dims: {qres['model_dims']}")
    zips = [r for r in qres["runs"] if r["method"] == "visionzip"]
    check(len(zips) == 2 and all("CLS" in r.get("unsupported", "") for r in zips),
          f"visionzip not supported on Qwen2.5-VL: {zips}")
    # hap at 1/4: below its minimum (about 35% of V at 4 layers), checked on the first
    # question's image.
    check([(r["method"], r["retain_spec"]) for r in qres["runs"] if "unreachable" in r]
          == [("hap", "1/4")], "Qwen2.5-VL: hap refuses 1/4")
    check(all(r.get("total") == 3 for r in qres["runs"] if r["method"] != "visionzip"
              and "unreachable" not in r), "Qwen2.5-VL runs: 3 questions each")
    text = open(readme).read()
    check(text.startswith(llava_part) and "old qwen" not in text
          and "V = 36 visual tokens per 168 x 168 image" in text
          and "| 50.0% (18 of 36) | 25.0% (9 of 36) |" in text
          and "| visionzip | not supported | not supported |" in text
          and re.search(r"\(hap [0-9.]+ of 36 \([0-9.]+%\)\)", text),
          "Qwen2.5-VL README section written, LLaVA's kept")
    btext = open(bench_readme).read()
    check(btext.count(run.QWEN_HEADS_BEGIN) == 1 and btext.count(run.HEADS_BEGIN) == 1,
          "bench README: one head table per family")
    check(run.classify(0.6, 0.95) == "optimal" and run.classify(0.05, 0.3) == "sink"
          and run.classify(0.05, 0.95) == "dispersed" and run.classify(0.3, 0.95) == "other",
          "classify")
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")
    print("ok")


if __name__ == "__main__":
    main()
