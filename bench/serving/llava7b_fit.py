#!/usr/bin/python3
"""LLaVA-1.5-7B's exact dimensions through the three services on one machine.

Writes (once) a checkpoint with LLaVA-1.5-7B's shapes and random BF16 weights, sharded like the
llava-hf release (`hapctl make-tiny`), starts hap-encoder, hap-prefill and hap-decode on it
(`hapctl up`), asks one question unpruned and one with HAP, and prints each service's load time
and peak resident memory against the bytes of the part of the checkpoint it loads, the prefill
tokens/s and the answer's decode tokens/s. Needs about 15 GB of disk and 16 GB of memory.

    /usr/bin/python3 bench/serving/llava7b_fit.py [--build build] [--max-new-tokens 8]
"""
import argparse
import json
import os
import re
import signal
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHAPE = ["--layers", "32", "--hidden", "4096", "--heads", "32", "--kv-heads", "32",
         "--intermediate", "11008", "--image-size", "336", "--vision-layers", "24",
         "--vision-hidden", "1024", "--vision-heads", "16", "--model-vocab", "32064",
         "--dtype", "bf16", "--shards", "3"]


def part_bytes(model):
    """Bytes of the language part and of the vision part (tower + projector), from the headers."""
    lang = vision = 0
    for name in sorted(os.listdir(model)):
        if not name.endswith(".safetensors"):
            continue
        with open(os.path.join(model, name), "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        for key, t in header.items():
            if key == "__metadata__":
                continue
            size = t["data_offsets"][1] - t["data_offsets"][0]
            if key.startswith("language_model.") or key.startswith("model.language_model.") \
                    or key.startswith("lm_head."):
                lang += size
            else:
                vision += size
    return lang, vision


def peak_rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def children(pid):
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")[0].decode()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out[os.path.basename(cmd)] = int(p)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--model", default="", help="default: <build>/bench-models/llava7b")
    ap.add_argument("--image", default=os.path.join(ROOT, "data/scenes-test/images/test_0000.jpg"))
    ap.add_argument("--max-new-tokens", type=int, default=8)
    ap.add_argument("--retain", default="11.1%")
    a = ap.parse_args()
    hapctl = os.path.join(a.build, "tools/hapctl/hapctl")
    model = a.model or os.path.join(a.build, "bench-models/llava7b")
    if not os.path.exists(os.path.join(model, "config.json")):
        print(f"writing {model} (LLaVA-1.5-7B shapes, random BF16 weights) ...", flush=True)
        t = time.time()
        subprocess.run([hapctl, "make-tiny", "--out", model] + SHAPE, check=True,
                       stdout=subprocess.DEVNULL)
        print(f"  written in {time.time() - t:.0f} s", flush=True)
    lang, vision = part_bytes(model)
    total = sum(os.path.getsize(os.path.join(model, f)) for f in os.listdir(model)
                if f.endswith(".safetensors"))
    print(f"checkpoint {total / 1e9:.2f} GB: language part {lang / 1e9:.2f} GB, "
          f"vision tower + projector {vision / 1e9:.2f} GB", flush=True)

    env = dict(os.environ, HAP_BIN_DIR=os.path.join(a.build, "bin"))
    t_start = time.time()
    up = subprocess.Popen([hapctl, "up", "--model", model, "--method", "none"], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    loads, address = {}, None
    for line in up.stdout:
        m = re.search(r"(hap-\w+): loaded the \w+ part of .* in (\d+) ms", line)
        if m:
            loads[m.group(1)] = int(m.group(2))
        m = re.search(r"hap-prefill listening on (\S+)", line)
        if m:
            address = m.group(1)
        if line.startswith("hapctl up: ready"):
            break
        if up.poll() is not None:
            sys.exit(f"hapctl up exited: {line}")
    ready_s = time.time() - t_start
    procs = children(up.pid)
    try:
        rows = []
        for label, extra in (("none (unpruned)", ["--method", "none"]),
                             (f"hap {a.retain}", ["--method", "hap", "--retain", a.retain])):
            t = time.time()
            out = subprocess.run([hapctl, "generate", "--server", address, "--image", a.image,
                                  "--prompt", "What is in the picture?", "--max-new-tokens",
                                  str(a.max_new_tokens), "--deadline-ms", "1800000", "--json"]
                                 + extra, check=True, capture_output=True, text=True)
            j = json.loads(out.stdout)
            rows.append((label, j, time.time() - t))
        rss = {name: peak_rss(pid) for name, pid in procs.items()}
    finally:
        up.send_signal(signal.SIGTERM)
        up.wait(timeout=120)

    print(f"services ready {ready_s:.1f} s after start (model load and first-touch included)")
    print(f"  {'service':12s} {'load ms':>8s} {'peak RSS':>10s} {'part':>10s} {'RSS/part':>9s}"
          f" {'RSS/checkpoint':>15s}")
    for name, part in (("hap-encoder", vision), ("hap-prefill", lang), ("hap-decode", lang)):
        r = rss.get(name, 0)
        print(f"  {name:12s} {loads.get(name, -1):8d} {r / 1e9:8.2f}GB {part / 1e9:8.2f}GB "
              f"{r / part:9.3f} {r / total:15.3f}")
    for label, j, wall in rows:
        t = j["timings"]
        prompt = j["prompt_tokens"]
        prefill_ms = t["prefill_ms"]
        print(f"  {label:16s} prompt {prompt} tokens ({j['average_visual_tokens']:.1f} visual per "
              f"layer), prefill {prefill_ms / 1e3:.1f} s = {t['prefill_tokens_per_s']:.1f} tok/s, TTFT "
              f"{t['ttft_ms'] / 1e3:.1f} s, decode {t['decode_tokens_per_s']:.2f} "
              f"tok/s, {len(j.get('token_ids', []))} tokens, request {wall:.1f} s")


if __name__ == "__main__":
    main()
