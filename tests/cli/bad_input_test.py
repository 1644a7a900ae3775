"""hapctl on bad input: each case must exit non-zero (not by a signal) with exactly one line on
stderr that names the problem, and nothing may crash. Corrupted checkpoints are derived from a
valid tiny checkpoint written by `hapctl make-tiny`."""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

from PIL import Image


def run(hapctl, args):
    p = subprocess.run([hapctl] + args, capture_output=True, text=True, errors="replace",
                       timeout=120)
    return p.returncode, p.stderr.strip()


def copy_model(src, dst):
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    return dst


def read_st(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


def write_st(path, header, body):
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + body)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hapctl", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    w = a.workdir
    os.makedirs(w, exist_ok=True)
    good = os.path.join(w, "good")
    subprocess.run([a.hapctl, "make-tiny", "--out", good, "--seed", "1"], check=True,
                   stdout=subprocess.DEVNULL)
    img = os.path.join(w, "img.png")
    Image.new("RGB", (40, 30), (200, 10, 10)).save(img)
    st = os.path.join(good, "model.safetensors")

    cases = []  # (name, model_dir, image, prompt, extra args, expected stderr fragment)

    def model_case(name, fragment, mutate):
        d = copy_model(good, os.path.join(w, name))
        mutate(d)
        cases.append((name, d, img, "What colour is it?", [], fragment))

    def truncate(d):
        p = os.path.join(d, "model.safetensors")
        data = open(p, "rb").read()
        open(p, "wb").write(data[:len(data) // 2])
    model_case("truncated-safetensors", "model.safetensors", truncate)

    def header_past_eof(d):
        p = os.path.join(d, "model.safetensors")
        data = open(p, "rb").read()
        open(p, "wb").write(struct.pack("<Q", 1 << 40) + data[8:])
    model_case("header-past-eof", "header", header_past_eof)

    def overlapping(d):
        p = os.path.join(d, "model.safetensors")
        h, body = read_st(p)
        names = [k for k in h if k != "__metadata__"]
        a0, a1 = h[names[0]]["data_offsets"]
        b0, b1 = h[names[1]]["data_offsets"]
        size = b1 - b0
        h[names[1]]["data_offsets"] = [a0, a0 + size] if a1 - a0 >= size else [a0, a0 + size]
        write_st(p, h, body)
    model_case("overlapping-offsets", "overlap", overlapping)

    def wrong_dtype(d):
        p = os.path.join(d, "model.safetensors")
        h, body = read_st(p)
        k = next(k for k in h if k != "__metadata__")
        h[k]["dtype"] = "I64"
        write_st(p, h, body)
    model_case("wrong-dtype", "I64", wrong_dtype)

    def missing_tensor(d):
        p = os.path.join(d, "model.safetensors")
        h, body = read_st(p)
        del h["language_model.model.norm.weight"]
        write_st(p, h, body)
    model_case("missing-tensor", "language_model.model.norm.weight", missing_tensor)

    def shape_mismatch(d):
        p = os.path.join(d, "model.safetensors")
        h, body = read_st(p)
        k = "language_model.model.norm.weight"
        (n,) = h[k]["shape"]
        # Same bytes, different (wrong) shape: [n/2, 2].
        h[k]["shape"] = [n // 2, 2]
        write_st(p, h, body)
    model_case("shape-mismatch", "language_model.model.norm.weight", shape_mismatch)

    def size_mismatch(d):
        p = os.path.join(d, "model.safetensors")
        h, body = read_st(p)
        k = "language_model.model.norm.weight"
        h[k]["shape"] = [h[k]["shape"][0] + 1]
        write_st(p, h, body)
    model_case("byte-size-mismatch", "bytes", size_mismatch)

    def bad_config(d):
        open(os.path.join(d, "config.json"), "w").write('{"model_type": "llava", "text_config": {')
    model_case("malformed-config", "config.json", bad_config)

    def unknown_arch(d):
        p = os.path.join(d, "config.json")
        c = json.load(open(p))
        c["model_type"] = "qwen2_vl"
        c["architectures"] = ["Qwen2VLForConditionalGeneration"]
        json.dump(c, open(p, "w"))
    model_case("unknown-architecture", "qwen2_vl", unknown_arch)

    def qwen25_vl(d):
        p = os.path.join(d, "config.json")
        c = json.load(open(p))
        c["model_type"] = "qwen2_5_vl"
        json.dump(c, open(p, "w"))
    # A LLaVA directory relabelled Qwen2.5-VL: read as one, refused at the first field that does
    # not fit (CLIP's activation), named.
    model_case("qwen2.5-vl-label-on-llava", "vision_config.hidden_act", qwen25_vl)

    def no_tokenizer(d):
        for name in ("tokenizer.json", "tokenizer.model"):
            if os.path.exists(os.path.join(d, name)):
                os.remove(os.path.join(d, name))
    model_case("missing-tokenizer", "tokenizer.json or tokenizer.model", no_tokenizer)

    def unsupported_tokenizer_json(d):
        p = os.path.join(d, "tokenizer.json")
        t = json.load(open(p, encoding="utf-8"))
        t["normalizer"] = {"type": "NFKD"}
        json.dump(t, open(p, "w", encoding="utf-8"))
    model_case("unsupported-tokenizer-json", "normalizer.type", unsupported_tokenizer_json)

    def truncated_tokenizer_json(d):
        p = os.path.join(d, "tokenizer.json")
        data = open(p, "rb").read()
        open(p, "wb").write(data[:len(data) // 2])
    model_case("truncated-tokenizer-json", "tokenizer.json is not a JSON object",
               truncated_tokenizer_json)

    def missing_shard_index(d):
        json.dump({"metadata": {}, "weight_map": {"language_model.model.norm.weight":
                                                 "model-00001-of-00002.safetensors"}},
                  open(os.path.join(d, "model.safetensors.index.json"), "w"))
        os.remove(os.path.join(d, "model.safetensors"))
    model_case("index-names-missing-shard", "model-00001-of-00002.safetensors",
               missing_shard_index)

    empty = os.path.join(w, "empty.png")
    open(empty, "wb").close()
    corrupt = os.path.join(w, "corrupt.jpg")
    open(corrupt, "wb").write(b"\xff\xd8\xff\xe0" + b"garbage" * 50)
    gif = os.path.join(w, "img.gif")
    Image.new("RGB", (8, 8)).save(gif)
    big = os.path.join(w, "big.png")
    Image.new("RGB", (9000, 9000), (1, 2, 3)).save(big)
    cases += [
        ("empty-image", good, empty, "What?", [], "empty"),
        ("corrupt-image", good, corrupt, "What?", [], "JPEG"),
        ("unsupported-image", good, gif, "What?", [], "unsupported image format"),
        ("oversized-image", good, big, "What?", [], "pixels"),
        ("missing-image", good, os.path.join(w, "nope.png"), "What?", [], "nope.png"),
        ("empty-prompt", good, img, "   ", [], "prompt is empty"),
        ("prompt-too-long", good, img, "why " * 5000, [], "context"),
        ("unknown-method", good, img, "What?", ["--method", "magic", "--retain", "4"], "magic"),
        ("budget-below-minimum", good, img, "What?", ["--method", "hap", "--retain", "0.5"],
         "minimum"),
        ("bad-temperature", good, img, "What?", ["--temperature", "-1"], "temperature"),
        ("unknown-flag", good, img, "What?", ["--frobnicate", "1"], "frobnicate"),
        ("bad-kv-dtype", good, img, "What?", ["--kv-dtype", "f16"],
         "--kv-dtype 'f16' is not f32 or bf16"),
        ("bad-decode-graphs", good, img, "What?", ["--decode-graphs", "yes"],
         "--decode-graphs must be on or off, got 'yes'"),
        ("missing-model-dir", os.path.join(w, "no-such-model"), img, "What?", [],
         "no-such-model"),
    ]

    runs = [(name, ["run", "--model", model, "--image", image, "--prompt", prompt,
                    "--max-new-tokens", "2"] + extra, fragment)
            for name, model, image, prompt, extra, fragment in cases]
    # The other commands that load a model take --kv-dtype through the same check.
    data = os.path.join(w, "data")
    os.makedirs(data, exist_ok=True)
    runs += [
        ("eval-bad-kv-dtype", ["eval", "--model", good, "--data", data, "--kv-dtype", "x"],
         "--kv-dtype 'x' is not f32 or bf16"),
        ("dump-bad-kv-dtype", ["dump", "--model", good, "--image", img, "--prompt", "What?",
                               "--out", os.path.join(w, "dump"), "--kv-dtype", "f16"],
         "--kv-dtype 'f16' is not f32 or bf16"),
    ]

    passed = failed = 0
    for name, args, fragment in runs:
        code, err = run(a.hapctl, args)
        lines = [l for l in err.splitlines() if l.strip()]
        problems = []
        if code == 0:
            problems.append("exit code 0")
        if code < 0:
            problems.append(f"killed by signal {-code}")
        if len(lines) != 1:
            problems.append(f"{len(lines)} stderr lines")
        if fragment.lower() not in err.lower():
            problems.append(f"message lacks '{fragment}'")
        if problems:
            failed += 1
            print(f"FAIL {name}: {', '.join(problems)}\n    stderr: {err[:400]}")
        else:
            passed += 1
            print(f"ok   {name}: {err}")
    print(f"bad input: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
