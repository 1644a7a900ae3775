#!/usr/bin/python3
"""Pruning accuracy benchmark: every pruning method at the paper's retention levels on a
visual-QA folder, plus a head-mode analysis (sink / dispersed / optimal heads per layer).

Accuracy comes from `hapctl eval` (one process per method and budget, run one after another),
the head statistics from `hapctl explain` (its "head_stats": an unpruned pass per question).
Results go to a JSON file; --update-readme rewrites the marked sections of the top-level
README.md and of bench/pruning_accuracy/README.md (each model family has its own: LLaVA's, and
Qwen2.5-VL's, whose V is measured per image). Standard library only.

    /usr/bin/python3 bench/pruning_accuracy/run.py --update-readme
    /usr/bin/python3 bench/pruning_accuracy/run.py --model models/scenes-qwen2.5-vl --update-readme
"""
import argparse
import datetime
import json
import math
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

METHODS = ["none", "hap", "uniform", "fastv", "pdrop", "sparsevlm", "visionzip", "random",
           "divprune", "cdpruner-llm",
           "hap-flat", "uniform-flat",  # with hap and uniform: the factorial ablation below
           "dart"]
# The paper's retained-token levels of LLaVA-1.5 (192/128/64/32 of 576), as fractions of V.
RETAINS = ["192/576", "128/576", "64/576", "32/576"]

# The paper's factorial ablation (hap-paper.tex, appendix "Factorial Ablation of HAP Components",
# Table "Factorial ablation": LLaVA-1.5-7B, 32 tokens retained = 5.6%): scoring rule x budget
# schedule, and the relative score (%) the paper reports for each cell.
ABLATION = [  # (method, scoring, schedule, paper's relative score %)
    ("hap", "PAQ-softmax", "pyramid", 99.1),
    ("hap-flat", "PAQ-softmax", "flat", 96.8),
    ("uniform", "uniform", "pyramid", 89.4),
    ("uniform-flat", "uniform", "flat", 86.2),
]
ABLATION_PAPER_SETTING = "LLaVA-1.5-7B, 32 of 576 tokens"

# Head-mode thresholds (bench/pruning_accuracy/README.md explains them).
THRESHOLDS = {
    "text_invariant_paq_below": 0.2,   # PAQ < 0.2: the text explains < 20% of the spatial entropy
    "optimal_paq_at_least": 0.5,       # PAQ >= 0.5: the text explains at least half of it
    "sink_entropy_norm_at_most": 0.5,  # H(V)/ln V <= 0.5: mass on <= sqrt(V) effective tokens
    "dispersed_entropy_norm_at_least": 0.9,  # H(V)/ln V >= 0.9: >= V^0.9 effective tokens
}
MODES = ["sink", "dispersed", "optimal", "other"]

README_BEGIN = "<!-- pruning-accuracy:begin (bench/pruning_accuracy/run.py writes this part) -->"
README_END = "<!-- pruning-accuracy:end -->"
HEADS_BEGIN = "<!-- head-modes:begin (run.py writes this part) -->"
HEADS_END = "<!-- head-modes:end -->"
# Qwen2.5-VL models write their own sections, so the LLaVA table stays.
QWEN_README_BEGIN = ("<!-- pruning-accuracy-qwen2.5-vl:begin "
                     "(bench/pruning_accuracy/run.py writes this part) -->")
QWEN_README_END = "<!-- pruning-accuracy-qwen2.5-vl:end -->"
QWEN_HEADS_BEGIN = "<!-- head-modes-qwen2.5-vl:begin (run.py writes this part) -->"
QWEN_HEADS_END = "<!-- head-modes-qwen2.5-vl:end -->"
# Per family: (README begin, end, title of a new section; bench README begin, end, title).
SECTIONS = {
    "llava": (README_BEGIN, README_END, "Pruning accuracy",
              HEADS_BEGIN, HEADS_END, "Results"),
    "qwen2.5-vl": (QWEN_README_BEGIN, QWEN_README_END, "Pruning accuracy: Qwen2.5-VL",
                   QWEN_HEADS_BEGIN, QWEN_HEADS_END, "Results: Qwen2.5-VL"),
}
# The default model keeps results/results.json; any other model results/results-<dir name>.json.
DEFAULT_MODEL = os.path.join(ROOT, "models", "scenes-llava")


def log(msg):
    print(msg, flush=True)


def rel(path):
    """A path for the record: relative to the repository when inside it, else its base name."""
    p = os.path.abspath(path)
    return os.path.relpath(p, ROOT) if p.startswith(ROOT + os.sep) else os.path.basename(p)


def parse_retain(spec):
    """'192/576' -> fraction of V; '33.3%' -> percentage; '48' -> absolute tokens.
    Returns (hapctl --retain argument, fraction of V or None, label)."""
    s = spec.strip()
    if "/" in s:
        a, b = s.split("/", 1)
        frac = float(a) / float(b)
        return f"{100 * frac:.10g}%", frac, s
    if s.endswith("%"):
        frac = float(s[:-1]) / 100
        return s, frac, s
    float(s)
    return s, None, s


def is_qwen(cfg):
    """The engine's test (runtime/io/qwen_config.cc): model_type or architectures."""
    return cfg.get("model_type") == "qwen2_5_vl" or (
        "Qwen2_5_VLForConditionalGeneration" in (cfg.get("architectures") or []))


def model_dims(model_dir):
    """Decoder layers, heads, hidden size and V. LLaVA's V follows from the vision config; a
    Qwen2.5-VL image's V follows from its size, so V is None here and set from the unpruned
    run's average_image_visual_tokens (set_measured_v)."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    if is_qwen(cfg):
        # transformers reads the text part from text_config when there is one, else from the
        # top level (the published, flat layout); defaults as runtime/io/qwen_config.h's.
        t = cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg
        heads = t.get("num_attention_heads", 64)
        return {"family": "qwen2.5-vl", "V": None, "V_per_image": True,
                "layers": t.get("num_hidden_layers", 80), "heads": heads,
                "kv_heads": t.get("num_key_value_heads", heads),
                "hidden": t.get("hidden_size", 8192)}
    t, v = cfg.get("text_config", {}), cfg.get("vision_config", {})
    image, patch = v.get("image_size", 336), v.get("patch_size", 14)
    V = (image // patch) ** 2
    if cfg.get("vision_feature_select_strategy", "default") == "full":
        V += 1
    return {"V": V, "layers": t.get("num_hidden_layers", 32), "heads": t.get("num_attention_heads", 32),
            "hidden": t.get("hidden_size", 4096)}


def family(res_or_dims):
    d = res_or_dims.get("model_dims", res_or_dims)
    return d.get("family", "llava")


def image_size(path):
    """(width, height) from a PNG or JPEG header; None for anything else."""
    try:
        with open(path, "rb") as f:
            head = f.read(24)
            if head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR":
                return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
            if head[:2] != b"\xff\xd8":
                return None
            f.seek(2)
            while True:
                b = f.read(1)
                while b and b != b"\xff":
                    b = f.read(1)
                while b == b"\xff":
                    b = f.read(1)
                if not b:
                    return None
                marker = b[0]
                if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
                    continue  # no length field
                n = int.from_bytes(f.read(2), "big")
                if marker in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB,
                              0xCD, 0xCE, 0xCF):
                    seg = f.read(5)
                    return int.from_bytes(seg[3:5], "big"), int.from_bytes(seg[1:3], "big")
                f.seek(n - 2, 1)
    except (OSError, ValueError):
        return None


def set_measured_v(dims, base, data, questions):
    """A Qwen2.5-VL model's V: the unpruned run's average visual tokens per image, and whether
    it is every image's (all the questions' images have one size, so one grid)."""
    if not dims.get("V_per_image") or base is None or "average_image_visual_tokens" not in base:
        return
    dims["V"] = base["average_image_visual_tokens"]
    sizes = {image_size(os.path.join(data, q["image"])) for q in questions[:base["total"]]}
    dims["V_same_for_all_images"] = len(sizes) == 1 and None not in sizes
    if dims["V_same_for_all_images"]:
        dims["image_size"] = list(next(iter(sizes)))


def fmt_v(V):
    """144 -> '144'; 36.0 -> '36'; 36.25 -> '36.2'."""
    return str(int(V)) if float(V) == int(V) else f"{V:.1f}"


def v_phrase(d):
    """The model line's 'V = ...': LLaVA's fixed V, or Qwen2.5-VL's measured one."""
    if not d.get("V_per_image"):
        return f"V = {d['V']} visual tokens"
    if d.get("V") is None:
        return "V not measured (no unpruned run)"
    if d.get("V_same_for_all_images"):
        w, h = d["image_size"]
        return f"V = {fmt_v(d['V'])} visual tokens per {w} x {h} image"
    return f"V = {fmt_v(d['V'])} visual tokens per image on average (V follows each image's size)"


def hapctl_env(threads):
    env = dict(os.environ)
    if threads > 0:
        env["OPENBLAS_NUM_THREADS"] = str(threads)
        env["OMP_NUM_THREADS"] = str(threads)
    return env


# Methods hapctl refuses on a model family whatever the budget (its InvalidArgument, exit
# code 2), recognised by a phrase of the message: recorded as {"unsupported": message}.
UNSUPPORTED = {
    "visionzip": "CLS token",  # Qwen2.5-VL's vision tower has no CLS token to read
}


def run_eval(a, method, retain_arg):
    """One `hapctl eval` run; returns its JSON summary plus per-question predictions, or
    {"unreachable": message} when the method refuses the budget as below its minimum (hapctl's
    InvalidArgument exit code 2 naming the "minimum reachable" average), or
    {"unsupported": message} when it refuses the method on this model (UNSUPPORTED)."""
    with tempfile.TemporaryDirectory() as tmp:
        pred = os.path.join(tmp, "pred.jsonl")
        cmd = [a.hapctl, "eval", "--model", a.model, "--data", a.data, "--method", method,
               "--json", "--no-baseline", "--predictions", pred]
        if retain_arg is not None:
            cmd += ["--retain", retain_arg]
        if a.limit > 0:
            cmd += ["--limit", str(a.limit)]
        if a.threads > 0:
            cmd += ["--threads", str(a.threads)]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=hapctl_env(a.threads))
        err = []  # stderr passes through (progress lines) and is kept for the check below

        def tee():
            for chunk in iter(lambda: p.stderr.read(256), ""):
                sys.stderr.write(chunk)
                sys.stderr.flush()
                err.append(chunk)

        t = threading.Thread(target=tee)
        t.start()
        stdout = p.stdout.read()
        p.wait()
        t.join()
        err = "".join(err)
        if p.returncode == 2 and "minimum reachable" in err:
            return {"unreachable": err.strip().splitlines()[-1]}
        if p.returncode == 2 and method in UNSUPPORTED and UNSUPPORTED[method] in err:
            return {"unsupported": err.strip().splitlines()[-1]}
        if p.returncode != 0:
            sys.exit(f"hapctl eval failed ({method}, retain {retain_arg}): exit {p.returncode}")
        out = json.loads(stdout.strip().splitlines()[-1])
        with open(pred) as f:
            out["predictions"] = [json.loads(line) for line in f if line.strip()]
    return out


def load_questions(data, limit):
    qs = []
    with open(os.path.join(data, "questions.jsonl")) as f:
        for line in f:
            if line.strip():
                qs.append(json.loads(line))
            if limit > 0 and len(qs) >= limit:
                break
    return qs


# ---------------------------------------------------------------------------------------------
# head modes


def classify(paq, hnorm, th=THRESHOLDS):
    if paq >= th["optimal_paq_at_least"]:
        return "optimal"
    if paq < th["text_invariant_paq_below"]:
        if hnorm <= th["sink_entropy_norm_at_most"]:
            return "sink"
        if hnorm >= th["dispersed_entropy_norm_at_least"]:
            return "dispersed"
    return "other"


def quantile(sorted_xs, q):
    if not sorted_xs:
        return float("nan")
    pos = q * (len(sorted_xs) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def no_nan(x):
    """NaN -> None, so the results file is strict JSON."""
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {k: no_nan(v) for k, v in x.items()}
    if isinstance(x, list):
        return [no_nan(v) for v in x]
    return x


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def std(xs):
    if len(xs) < 2:
        return 0.0
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


def ranks(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def pearson(x, y):
    mx, my = mean(x), mean(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sx = math.sqrt(sum((a - mx) ** 2 for a in x))
    sy = math.sqrt(sum((b - my) ** 2 for b in y))
    return sxy / (sx * sy) if sx > 0 and sy > 0 else float("nan")


def spearman(x, y):
    return pearson(ranks(x), ranks(y))


def run_heads(a, questions):
    """hapctl explain on each question; returns the per-question head_stats layers."""
    per_q = []
    budget = "100%"  # head_stats comes from an unpruned pass; HAP itself then prunes nothing
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for n, q in enumerate(questions, 1):
            cmd = [a.hapctl, "explain", "--model", a.model,
                   "--image", os.path.join(a.data, q["image"]), "--prompt", q["question"],
                   "--retain", budget, "--max-new-tokens", "1", "--out", tmp]
            if a.paq_temperature != 1.0:
                # head_stats' weights, effective heads and KL at this PAQ-softmax temperature.
                cmd += ["--paq-temperature", repr(a.paq_temperature)]
            p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env=hapctl_env(a.threads))
            if p.returncode != 0:
                sys.exit(f"hapctl explain failed on {q['id']}: {p.stderr.strip()}")
            with open(os.path.join(tmp, "explain.json")) as f:
                j = json.load(f)
            if "head_stats" not in j:
                sys.exit(f"{a.hapctl} explain writes no head_stats: rebuild hapctl")
            # The weights (and so effective_heads / weights_kl_uniform) are explain's own, at the
            # temperature it reports.
            if j["head_stats"].get("paq_temperature", 1.0) != a.paq_temperature:
                sys.exit(f"{a.hapctl} explain used PAQ-softmax temperature "
                         f"{j['head_stats'].get('paq_temperature', 1.0)}, asked "
                         f"{a.paq_temperature}: rebuild hapctl")
            per_q.append({"id": q["id"], "type": q["type"],
                          "text_tokens": j["head_stats"]["text_tokens"],
                          "layers": j["head_stats"]["layers"]})
            if n % 20 == 0 or n == len(questions):
                print(f"\rheads      {n}/{len(questions)} questions ({time.time() - t0:.0f}s)",
                      end="\n" if n == len(questions) else "", file=sys.stderr, flush=True)
    return per_q


def summarise_heads(per_q):
    n_layers = len(per_q[0]["layers"])
    H = len(per_q[0]["layers"][0]["head_paq"])
    layers = []
    all_paq, all_h, all_hn, all_neff, all_kl, all_intra_std = [], [], [], [], [], []
    overall = {m: 0 for m in MODES}
    # modal class of each (layer, head) over the questions, and how often it holds
    for l in range(n_layers):
        paqs, hns, neffs, kls, lpaqs, vmass, intra = [], [], [], [], [], [], []
        counts = {m: 0 for m in MODES}
        head_modes = [{m: 0 for m in MODES} for _ in range(H)]
        for q in per_q:
            rec = q["layers"][l]
            intra.append(std(rec["head_paq"]))
            for h in range(H):
                p, hn = rec["head_paq"][h], rec["head_spatial_entropy_norm"][h]
                m = classify(p, hn)
                counts[m] += 1
                head_modes[h][m] += 1
                paqs.append(p)
                hns.append(hn)
                all_h.append(rec["head_spatial_entropy"][h])
                vmass.append(rec["head_visual_mass"][h])
            neffs.append(rec["effective_heads"])
            kls.append(rec["weights_kl_uniform"])
            lpaqs.append(rec["layer_paq"])
        s = sorted(paqs)
        total = sum(counts.values())
        modal = []
        for h in range(H):
            m = max(MODES, key=lambda k: head_modes[h][k])
            modal.append({"mode": m, "share": head_modes[h][m] / len(per_q)})
        layers.append({
            "layer": l,
            "paq_mean": mean(paqs), "paq_std": std(paqs), "paq_min": s[0],
            "paq_q25": quantile(s, 0.25), "paq_median": quantile(s, 0.5),
            "paq_q75": quantile(s, 0.75), "paq_max": s[-1],
            "paq_intra_layer_std": mean(intra),
            "entropy_norm_mean": mean(hns),
            "visual_mass_mean": mean(vmass),
            "layer_paq_mean": mean(lpaqs),
            "effective_heads_mean": mean(neffs),
            "weights_kl_uniform_mean": mean(kls),
            "modes": {m: counts[m] / total for m in MODES},
            "modal_mode_per_head": modal,
        })
        for m in MODES:
            overall[m] += counts[m]
        all_paq += paqs
        all_hn += hns
        all_neff += neffs
        all_kl += kls
        all_intra_std += intra
    total = sum(overall.values())
    # PAQ quintiles vs spatial entropy (the paper's PAQ-to-pattern correspondence)
    order = sorted(range(len(all_paq)), key=lambda i: all_paq[i])
    quint = []
    for k in range(5):
        idx = order[k * len(order) // 5:(k + 1) * len(order) // 5]
        quint.append({"quintile": k + 1,
                      "paq_mean": mean([all_paq[i] for i in idx]),
                      "spatial_entropy_mean": mean([all_h[i] for i in idx]),
                      "entropy_norm_mean": mean([all_hn[i] for i in idx])})
    return {
        "questions": len(per_q),
        "heads": H,
        "layers_count": n_layers,
        "text_tokens_mean": mean([q["text_tokens"] for q in per_q]),
        "thresholds": THRESHOLDS,
        "paq_mean": mean(all_paq),
        "paq_intra_layer_std_mean": mean(all_intra_std),
        "effective_heads_mean": mean(all_neff),
        "weights_kl_uniform_mean": mean(all_kl),
        "weights_kl_uniform_max_layer": max(x["weights_kl_uniform_mean"] for x in layers),
        "modes": {m: overall[m] / total for m in MODES},
        "spearman_paq_entropy": spearman(all_paq, all_h),
        "paq_quintiles": quint,
        "layers": layers,
    }


# ---------------------------------------------------------------------------------------------
# tables


def pct(x, digits=1):
    return "n/a" if x is None or math.isnan(x) else f"{100 * x:.{digits}f}"


UNREACHABLE_CELL = "below min."
UNSUPPORTED_CELL = "not supported"


def retain_headers(res):
    """Column titles of the retention levels: '33.3% (48 of 144)' or '48 tokens'. A Qwen2.5-VL
    budget in % is of each image's own V; the tokens shown are of the measured (average) V."""
    V = res["model_dims"]["V"]
    head = []
    for s in res["retains"]:
        arg, frac, label = parse_retain(s)
        if frac is not None and V is None:
            head.append(f"{pct(frac)}%")
        elif frac is not None:
            head.append(f"{pct(frac)}% ({V * frac:.4g} of {fmt_v(V)})")
        else:
            head.append(f"{label} tokens")
    return head


def split_runs(res):
    """(runs that ran, keyed by (method, retain spec); the refused ones' keys -> their cell)."""
    ran = {(r["method"], r["retain_spec"]): r for r in res["runs"]
           if "unreachable" not in r and "unsupported" not in r}
    refused = {(r["method"], r["retain_spec"]): UNSUPPORTED_CELL if "unsupported" in r
               else UNREACHABLE_CELL for r in res["runs"]
               if "unreachable" in r or "unsupported" in r}
    return ran, refused


def hapctl_message(line):
    """hapctl's error line without its 'hapctl eval: ' prefix."""
    return re.sub(r"^hapctl \w+: ", "", line.strip())


def accuracy_tables(res):
    runs, refused = split_runs(res)
    base = runs.get(("none", None))
    specs = res["retains"]
    methods = [m for m in res["methods"] if m != "none"]
    head = retain_headers(res)
    lines = []
    if base:
        pt = ", ".join(f"{k} {pct(v['accuracy'])}" for k, v in sorted(base["per_type"].items()))
        lines.append(f"Unpruned (`none`): **{pct(base['accuracy'])}%** ({base['correct']}/"
                     f"{base['total']}; {pt}).")
        lines.append("")

    def table(title, cell):
        """A method-by-budget table under `title`; cell(s, r) writes run r of budget s (a
        refused run shows why instead)."""
        lines.append(title)
        lines.append("")
        lines.append("| method | " + " | ".join(head) + " |")
        lines.append("|---|" + "---|" * len(specs))
        for m in methods:
            cells = [cell(s, runs[(m, s)]) if (m, s) in runs else refused.get((m, s), "—")
                     for s in specs]
            lines.append(f"| {m} | " + " | ".join(cells) + " |")

    best = {}
    for s in specs:
        vals = [runs[(m, s)]["accuracy"] for m in methods if (m, s) in runs]
        best[s] = max(vals) if vals else None

    def accuracy_cell(s, r):
        c = f"{pct(r['accuracy'])} ({pct(r['relative_score'], 0)})"
        return f"**{c}**" if best[s] is not None and r["accuracy"] == best[s] else c

    table("Accuracy % (relative score = accuracy / unpruned accuracy, in parentheses); "
          "best pruned method per column in bold:", accuracy_cell)
    lines.append("")
    table("Achieved average visual tokens per layer / prefill FLOPs (full convention, % of "
          "unpruned) / answers identical to the unpruned model's (%):",
          lambda s, r: (f"{r['average_visual_tokens']:.1f} / {pct(r['flops_full'], 0)} / "
                        f"{pct(r['same_as_unpruned'], 0)}"))
    # HAP against each baseline, said plainly
    if all(("hap", s) in runs for s in specs):
        notes = []
        for s, col in zip(specs, head):
            h = runs[("hap", s)]["accuracy"]
            others = [(m, runs[(m, s)]["accuracy"]) for m in methods if m != "hap" and (m, s) in runs]
            ahead = [f"{m} {pct(x)}" for m, x in others if x > h]
            tied = [m for m, x in others if x == h]
            if ahead or tied:
                part = f"at {col.split(' ')[0]} (HAP {pct(h)}):"
                if ahead:
                    part += " behind " + ", ".join(ahead)
                if tied:
                    part += ("; " if ahead else " ") + "tied with " + ", ".join(tied)
                notes.append(part)
        lines.append("")
        last = runs[("hap", specs[-1])]
        lines.append(f"HAP at the lowest retention keeps {pct(last['relative_score'])}% of the "
                     f"unpruned accuracy (goal: >= 95%).")
        if notes:
            lines.append("HAP is **not** ahead of every baseline: " + "; ".join(notes) + ".")
        else:
            lines.append("HAP is ahead of every baseline at every retention.")
    minima = {}
    for r in res["runs"]:
        if "unreachable" in r:
            found = re.search(r"minimum reachable (?:average of )?([0-9.]+)", r["unreachable"])
            minima[r["method"]] = found.group(1) if found else r["unreachable"]
            of = re.search(r"([0-9.]+)% of ([0-9]+)", r["unreachable"])
            if found and of and res["model_dims"].get("V_per_image"):
                # A Qwen2.5-VL minimum is for the V of the image hapctl checked the budget on.
                minima[r["method"]] = f"{found.group(1)} of {of.group(2)} ({of.group(1)}%)"
    if minima:
        lines.append("")
        lines.append(f"{UNREACHABLE_CELL}: the method refuses the budget as below the lowest "
                     "average visual tokens per layer it can reach (" +
                     ", ".join(f"{m} {x}" for m, x in sorted(minima.items())) + ").")
    unsupported = {}
    for r in res["runs"]:
        if "unsupported" in r:
            unsupported[r["method"]] = hapctl_message(r["unsupported"])
    if unsupported:
        lines.append("")
        lines.append(f"{UNSUPPORTED_CELL}: hapctl refuses the method on this model (" +
                     "; ".join(f"{m}: {x}" for m, x in sorted(unsupported.items())) + ").")
    n = base["total"] if base else 0
    if n:
        se = math.sqrt(0.25 / n)
        lines.append("")
        lines.append(f"With {n} questions one accuracy has a standard error of up to "
                     f"{pct(se)} points; differences of a few points are within noise.")
    return "\n".join(lines)


def ablation_table(res):
    """The paper's factorial ablation (ABLATION): the four cells at the bench's retention levels,
    the paper's reported relative score beside them. Empty when none of the four ran."""
    runs, refused = split_runs(res)
    specs = res["retains"]
    cells_run = [m for m, _, _, _ in ABLATION if m in res["methods"]]
    if not cells_run:
        return ""
    head = retain_headers(res)
    lines = ["Factorial ablation (the paper's appendix table): scoring rule x token schedule. "
             "`flat` = HAP's groups with every pruned group at one count for the same average "
             "(docs/design.md §4). Accuracy % (relative score); the paper's relative score at "
             f"{ABLATION_PAPER_SETTING} in the last column:", "",
             "| scoring | schedule | method | " + " | ".join(head) + f" | paper ({ABLATION_PAPER_SETTING}) |",
             "|---|---|---|" + "---|" * len(specs) + "---|"]
    for m, scoring, schedule, paper in ABLATION:
        cells = []
        for s in specs:
            r = runs.get((m, s))
            if r is None:
                cells.append(refused.get((m, s), "—"))
            else:
                cells.append(f"{pct(r['accuracy'])} ({pct(r['relative_score'])})")
        lines.append(f"| {scoring} | {schedule} | {m} | " + " | ".join(cells) + f" | {paper} |")
    # The paper's ranking against the one measured at each retention level.
    paper_order = " > ".join(m for m, *_ in sorted(ABLATION, key=lambda x: -x[3]))
    measured = []
    for s, col in zip(specs, head):
        got = [(runs[(m, s)]["accuracy"], m) for m, *_ in ABLATION if (m, s) in runs]
        if len(got) == len(ABLATION):
            got.sort(key=lambda x: -x[0])
            order = got[0][1]
            for (prev, _), (acc, m) in zip(got, got[1:]):
                order += (" = " if acc == prev else " > ") + m
            measured.append(f"{col.split(' ')[0]}: {order}")
    lines.append("")
    lines.append(f"Paper's ranking: {paper_order}." + (
        " Measured: " + "; ".join(measured) + "." if measured else ""))
    return "\n".join(lines)


def heads_summary_text(hs):
    m = hs["modes"]
    q = hs["paq_quintiles"]
    return (
        f"Head modes ({hs['questions']} questions x {hs['layers_count']} layers x {hs['heads']} "
        f"heads, unpruned pass; definitions and the per-layer table in "
        f"[bench/pruning_accuracy/README.md](bench/pruning_accuracy/README.md)): "
        f"sink {pct(m['sink'])}%, dispersed {pct(m['dispersed'])}%, optimal "
        f"{pct(m['optimal'])}%, other {pct(m['other'])}% of head maps. Mean head PAQ "
        f"{hs['paq_mean']:.3f}, mean intra-layer standard deviation {hs['paq_intra_layer_std_mean']:.3f}; "
        f"mean N_eff = 1/sum w^2 = {hs['effective_heads_mean']:.2f} of {hs['heads']} heads, "
        f"KL(w || uniform) {hs['weights_kl_uniform_mean']:.4f} nats on average. Spearman "
        f"rho(PAQ, spatial entropy) = {hs['spearman_paq_entropy']:.2f}; spatial entropy "
        f"{q[-1]['spatial_entropy_mean']:.2f} nats in the top PAQ quintile vs "
        f"{q[0]['spatial_entropy_mean']:.2f} in the bottom one.")


def heads_table(hs):
    lines = [f"{hs['questions']} questions, {hs['heads']} heads per layer, "
             f"{hs['text_tokens_mean']:.1f} query-text tokens on average. PAQ over all "
             f"(question, head) maps of the layer; mode shares in %; N_eff and KL are per "
             f"question, averaged.", "",
             "| layer | PAQ mean | min | q25 | median | q75 | max | intra-layer std | "
             "H(V)/ln V | sink | dispersed | optimal | other | N_eff | KL(w‖u) | layer PAQ |",
             "|---|" + "---|" * 15]
    for x in hs["layers"]:
        md = x["modes"]
        lines.append(
            f"| {x['layer']} | {x['paq_mean']:.3f} | {x['paq_min']:.3f} | {x['paq_q25']:.3f} | "
            f"{x['paq_median']:.3f} | {x['paq_q75']:.3f} | {x['paq_max']:.3f} | "
            f"{x['paq_intra_layer_std']:.3f} | {x['entropy_norm_mean']:.2f} | "
            f"{pct(md['sink'], 0)} | {pct(md['dispersed'], 0)} | {pct(md['optimal'], 0)} | "
            f"{pct(md['other'], 0)} | {x['effective_heads_mean']:.2f} | "
            f"{x['weights_kl_uniform_mean']:.4f} | {x['layer_paq_mean']:.3f} |")
    m = hs["modes"]
    lines += ["", f"All layers: sink {pct(m['sink'])}%, dispersed {pct(m['dispersed'])}%, "
              f"optimal {pct(m['optimal'])}%, other {pct(m['other'])}%. "
              f"Spearman rho(PAQ, spatial entropy) = {hs['spearman_paq_entropy']:.2f}.", "",
              "PAQ quintiles (all maps) against the spatial entropy of the head's map:", "",
              "| PAQ quintile | mean PAQ | mean H(V), nats | mean H(V)/ln V |", "|---|---|---|---|"]
    for r in hs["paq_quintiles"]:
        lines.append(f"| {r['quintile']} | {r['paq_mean']:.3f} | {r['spatial_entropy_mean']:.2f} | "
                     f"{r['entropy_norm_mean']:.2f} |")
    return "\n".join(lines)


def replace_between(path, begin, end, body, section_title):
    with open(path) as f:
        text = f.read()
    block = f"{begin}\n{body}\n{end}"
    if begin in text and end in text:
        pre = text[:text.index(begin)]
        post = text[text.index(end) + len(end):]
        text = pre + block + post
    else:
        text = text.rstrip("\n") + f"\n\n## {section_title}\n\n{block}\n"
    with open(path, "w") as f:
        f.write(text)


def readme_block(res):
    d = res["model_dims"]
    lim = f"the first {res['questions']} of" if res["limit"] else "all"
    head = [f"Model: **{res['label']}** (`{res['model']}`; {v_phrase(d)}, "
            f"{d['layers']} decoder layers, {d['heads']} heads). Data: {lim} the questions of "
            f"`{res['data']}`. Measured {res['date']} by `{res['command']}`.", ""]
    if res.get("note"):
        head += [res["note"], ""]
    body = "\n".join(head) + "\n" + accuracy_tables(res)
    ablation = ablation_table(res)
    if ablation:
        body += "\n\n" + ablation
    if res.get("head_modes"):
        body += "\n\n" + heads_summary_text(res["head_modes"])
    return body


# ---------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "scenes-test"))
    ap.add_argument("--limit", type=int, default=0, help="first N questions (0 = all)")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--retains", default=",".join(RETAINS),
                    help="comma list: a/b (fraction of V), P%% or K tokens")
    ap.add_argument("--head-questions", type=int, default=200,
                    help="questions for the head-mode analysis (0 = skip it)")
    ap.add_argument("--out", default=None,
                    help="results JSON (default: results/results.json for models/scenes-llava, "
                         "results/results-<model dir name>.json for any other model)")
    ap.add_argument("--update-readme", action="store_true",
                    help="rewrite the model family's marked sections of --readme and "
                         "--bench-readme (LLaVA's or Qwen2.5-VL's)")
    ap.add_argument("--render-only", action="store_true",
                    help="run nothing: print the README text from --out as it is (and with "
                         "--update-readme write it)")
    ap.add_argument("--readme", default=os.path.join(ROOT, "README.md"))
    ap.add_argument("--bench-readme", default=os.path.join(HERE, "README.md"))
    ap.add_argument("--label", default="", help="model description for the README")
    ap.add_argument("--note", default="", help="a paragraph for the README under the model line")
    ap.add_argument("--hapctl", default=os.path.join(ROOT, "build", "tools", "hapctl", "hapctl"))
    ap.add_argument("--threads", type=int, default=0,
                    help="CPU threads per hapctl (also OPENBLAS_NUM_THREADS); 0 = hapctl's default")
    ap.add_argument("--resume", action="store_true",
                    help="reuse runs already in --out made with the same model, data and limit")
    ap.add_argument("--paq-temperature", type=float, default=1.0,
                    help="PAQ-softmax temperature of the head statistics' weights (effective "
                         "heads, KL to uniform); 1 = the paper's. With PAQ in [0, 1] and 1, "
                         "N_eff >= 25.2 of 32 heads and KL <= 0.123 nats for any model")
    a = ap.parse_args()
    if not 0.01 <= a.paq_temperature <= 100:
        sys.exit(f"--paq-temperature {a.paq_temperature}: use a value in [0.01, 100]")
    if a.out is None:
        same = os.path.abspath(a.model).rstrip(os.sep) == DEFAULT_MODEL
        name = os.path.basename(os.path.abspath(a.model).rstrip(os.sep))
        a.out = os.path.join(HERE, "results", "results.json" if same else f"results-{name}.json")
    if a.render_only:
        if not os.path.exists(a.out):
            sys.exit(f"--render-only: {a.out} does not exist")
        with open(a.out) as f:
            write_readmes(a, json.load(f))
        return

    for p, what in ((a.hapctl, "hapctl"), (os.path.join(a.model, "config.json"), "model"),
                    (os.path.join(a.data, "questions.jsonl"), "data")):
        if not os.path.exists(p):
            sys.exit(f"{what}: {p} does not exist")
    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    for m in methods:
        if m not in METHODS:
            sys.exit(f"unknown method {m}; valid: {', '.join(METHODS)}")
    if "none" not in methods:
        methods.insert(0, "none")  # the relative score needs it
    specs = [s.strip() for s in a.retains.split(",") if s.strip()]
    for s in specs:
        try:
            parse_retain(s)
        except ValueError:
            sys.exit(f"bad retain {s!r}: use a/b, P% or K")
    dims = model_dims(a.model)
    questions = load_questions(a.data, a.limit)
    # The recorded command: without --resume and the cosmetic --label/--note texts.
    argv, skip = [], False
    for x in sys.argv[1:]:
        if skip:
            skip = False
        elif x in ("--label", "--note"):
            skip = True
        elif x != "--resume" and not x.startswith(("--label=", "--note=")):
            argv.append(x)
    res = {
        "label": a.label or rel(a.model), "note": a.note,
        "model": rel(a.model), "model_dims": dims, "data": rel(a.data), "limit": a.limit,
        "questions": len(questions), "methods": methods, "retains": specs,
        "date": datetime.date.today().isoformat(),
        "command": "/usr/bin/python3 bench/pruning_accuracy/run.py " + " ".join(
            shlex.quote(rel(x) if os.path.isabs(x) else x) for x in argv),
        "runs": [],
    }
    old = {}
    if a.resume and os.path.exists(a.out):
        with open(a.out) as f:
            prev = json.load(f)
        if (prev.get("model") == res["model"] and prev.get("data") == res["data"]
                and prev.get("limit") == a.limit):
            old = {(r["method"], r["retain_spec"]): r for r in prev.get("runs", [])}
            if prev.get("head_modes") and prev["head_modes"].get("questions") == min(
                    a.head_questions, len(questions)):
                res["head_modes"] = prev["head_modes"]

    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)

    def save():
        with open(a.out, "w") as f:
            json.dump(no_nan(res), f, indent=1, allow_nan=False)
            f.write("\n")

    jobs = [("none", None)] + [(m, s) for s in specs for m in methods if m != "none"]
    base = None
    unsupported = {}  # method -> its refusal, which holds at every budget
    t_all = time.time()

    def tag_of(m, s):
        return f"({time.time() - t_all:.0f}s total{', reused' if (m, s) in old else ''})"

    for k, (m, s) in enumerate(jobs, 1):
        if (m, s) in old:
            r = old[(m, s)]
        elif m in unsupported:
            r = {"method": m, "retain_spec": s, "retain_arg": parse_retain(s)[0] if s else None,
                 "unsupported": unsupported[m]}
        else:
            arg = parse_retain(s)[0] if s else None
            t0 = time.time()
            out = run_eval(a, m, arg)
            if "unreachable" in out or "unsupported" in out:  # refused: recorded, not run
                r = {"method": m, "retain_spec": s, "retain_arg": arg, **out}
            else:
                preds = out.pop("predictions")
                r = {"method": m, "retain_spec": s, "retain_arg": arg, **out,
                     "wall_s": round(time.time() - t0, 1),
                     # per question, in data order: 1 = correct
                     "correct_bits": "".join("1" if p["correct"] else "0" for p in preds)}
                answers = [p["prediction"].strip() for p in preds]
                if m == "none":
                    r["answers"] = answers  # the unpruned answers, to compare the others with
                else:
                    # per question: 1 = the same answer as the unpruned model
                    r["same_bits"] = "".join("1" if x == y else "0"
                                             for x, y in zip(answers, base["answers"]))
        if "unsupported" in r:
            unsupported[m] = r["unsupported"]
            res["runs"].append(r)
            save()
            log(f"[{k}/{len(jobs)}] {m:<9} {s or 'unpruned':<8} not supported: "
                f"{r['unsupported']} {tag_of(m, s)}")
            continue
        if m == "none":
            base = r
            r["same_bits"] = "1" * len(r["answers"])
            set_measured_v(dims, base, a.data, questions)
        tag = tag_of(m, s)
        if "unreachable" in r:
            res["runs"].append(r)
            save()
            log(f"[{k}/{len(jobs)}] {m:<9} {s or 'unpruned':<8} unreachable: {r['unreachable']} "
                f"{tag}")
            continue
        r["relative_score"] = r["accuracy"] / base["accuracy"] if base["accuracy"] > 0 else None
        bits = r["same_bits"]
        r["same_as_unpruned"] = bits.count("1") / len(bits) if bits else None
        res["runs"].append(r)
        save()
        log(f"[{k}/{len(jobs)}] {m:<9} {s or 'unpruned':<8} acc {pct(r['accuracy'])}% "
            f"rel {pct(r['relative_score'])}% avg visual {r['average_visual_tokens']:.1f} "
            f"FLOPs {pct(r['flops_full'])}% same-as-unpruned {pct(r['same_as_unpruned'])}% {tag}")

    if a.head_questions > 0 and "head_modes" not in res:
        per_q = run_heads(a, questions[:a.head_questions])
        res["head_modes"] = summarise_heads(per_q)
        res["head_modes"]["paq_temperature"] = a.paq_temperature
        save()

    write_readmes(a, res)
    log(f"wrote {rel(a.out)}")


def write_readmes(a, res):
    """Prints the README text and, with --update-readme, writes it between the model family's
    markers (SECTIONS)."""
    log("")
    log(readme_block(res))
    if res.get("head_modes"):
        log("")
        log(heads_table(res["head_modes"]))
    if a.update_readme:
        begin, end, title, hbegin, hend, htitle = SECTIONS[family(res)]
        replace_between(a.readme, begin, end, readme_block(res), title)
        if res.get("head_modes"):
            replace_between(a.bench_readme, hbegin, hend,
                            f"Model: **{res['label']}** (`{res['model']}`), measured "
                            f"{res['date']}.\n\n" + heads_table(res["head_modes"]),
                            htitle)
        log(f"\nupdated {rel(a.readme)} and {rel(a.bench_readme)}")


if __name__ == "__main__":
    main()
