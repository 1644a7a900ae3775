"""Checks runtime/image's Qwen2-VL preprocessing against tools/pytorch/qwen2vl_image.py (numpy +
PIL, written from transformers' Qwen2VLImageProcessor) and transformers.js (pinned in
hf_reference/package.json).

usage: qwen2vl_parity.py IMAGE_TOOL SOURCE_DIR WORK_DIR

Generates PNGs (gradients + noise + a flat block, so resampling matters) at many sizes and
aspect ratios, and preprocessor_config.json files (Qwen2.5-VL's published one, the defaults,
size-only and small-max_pixels budgets, do_resize false, bilinear, merge_size 1 /
temporal_patch_size 1, do_normalize false), runs `image_tool qwen2vl` on each pair and requires:
  * grid (t, h, w) and resized size == qwen2vl_image.smart_resize's, and pixel_values ==
    qwen2vl_image.preprocess's bit for bit (both are the same float32 operations on the same
    PIL-resized bytes);
  * every input Python refuses (aspect ratio above 200, do_resize false off the 28 grid, a size
    without longest_edge) makes image_tool exit 2 with a message naming the problem.

transformers.js, where node_modules is installed (else that part alone is SKIPPED):
  * grid == C++ grid, except where its smart_resize differs by design, which is asserted
    instead: Math.round rounds halves up (70 / 28 = 2.5 -> 3; Python -> 2), and a side
    smaller than the factor first scales the whole image up to it;
  * no resize (already at the smart_resize size, or do_resize false): pixel_values == C++'s
    within 1e-6 (layout and normalisation exactly; transformers.js normalises in float64 with
    float64 mean/std, Python in float32, so the last bit may differ);
  * resized: transformers.js resizes with sharp's (libvips) affine transform, which interpolates
    without antialiasing, not with PIL's convolution, so only statistics are bounded, in
    normalised units, per band of the per-axis scale s = new / old (see TOLERANCES);
  * RGBA: transformers.js drops alpha where transformers composites over white, so its output
    is compared with the Python reference fed the alpha-dropped image instead.
Exits 77 (ctest: skipped) only when the test cannot run at all (numpy or PIL missing).
"""
import json
import math
import os
import shutil
import subprocess
import sys

try:
    import numpy as np
    from PIL import Image
except ImportError as e:  # the C++ checks need the Python reference
    print(f"SKIPPED: {e} (tools/install-deps.sh installs python3-numpy and python3-pil)")
    sys.exit(77)

TOOL, SOURCE_DIR, WORK_DIR = sys.argv[1:4]
sys.path.insert(0, os.path.join(SOURCE_DIR, "tools", "pytorch"))
import qwen2vl_image as ref  # noqa: E402

sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "common"))
from parity_checks import Checks  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
JS_DIR = os.path.join(HERE, "hf_reference")
# Bounds on sharp vs PIL for resampled pixels, by the per-axis scale s = new / old: (name,
# lowest s, highest s, mean abs diff bound, max abs diff bound or None). Normalised units: one
# grey level is ~0.015, the images' noise sigma 14 is ~0.2, a one-patch misplacement of the
# layout gives a mean abs diff of 0.5-1.2 on these images (printed per case as "misplaced").
# Measured with @huggingface/transformers 4.3.1 (sharp 0.35): near 1 (e.g. 640 -> 644) mean
# <= 0.017, max <= 0.2; 0.56x down to 4x up mean <= 0.16 (the two sample grids differ by a
# fraction of a pixel, apparently affine's corner vs PIL's centre alignment, and on the noise
# that is most of its sigma); 4.2x down mean 0.41 (sharp point-samples where PIL averages
# ~4x4 pixels). Bounds are ~1.5x the measurements.
TOLERANCES = [
    ("near 1", 0.9, 1.1, 0.025, 0.3),
    ("moderate", 0.45, 4.0, 0.25, None),
    ("strong", 0.0, 1e9, 0.6, None),
]

os.makedirs(WORK_DIR, exist_ok=True)
rng = np.random.RandomState(20240921)
CHECKS = Checks()
expect = CHECKS.expect


def path(*parts):
    return os.path.join(WORK_DIR, *parts)


def scene(w, h):
    """uint8 [h, w, 3]: per-channel sinusoid gradients, a flat block, gaussian noise."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.stack([128 + 100 * np.sin(x / (3 + 5 * c) + y / (7 + 3 * c) + c)
                    for c in range(3)], -1)
    img[h // 4: h // 2 + 1, w // 3: 2 * w // 3 + 1] = rng.randint(0, 256, 3)
    img += rng.normal(0, 14, img.shape)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def make_image(name, w, h, mode="RGB"):
    p = path("images", f"{name}.png")
    if not os.path.exists(p):
        rgb = scene(w, h)
        if mode == "RGB":
            im = Image.fromarray(rgb, "RGB")
        elif mode == "RGBA":  # alpha sweeps 0..255 along x, so compositing matters everywhere
            alpha = np.broadcast_to((np.arange(w) * 255 // max(w - 1, 1)).astype(np.uint8)[None],
                                    (h, w))
            im = Image.fromarray(np.dstack([rgb, alpha]), "RGBA")
        elif mode == "L":
            im = Image.fromarray(rgb, "RGB").convert("L")
        elif mode == "P":  # palette without transparency
            im = Image.fromarray(rgb, "RGB").quantize(64)
        im.save(p)
    return p


# ------------------------------------------------------------------------------------------
# Configs: preprocessor_config.json files as a model directory holds them.

CONFIGS = {
    "qwen2_5_vl": ref.QWEN2_5_VL_CONFIG,
    "defaults": {"image_processor_type": "Qwen2VLImageProcessor"},
    # budget from `size` only (transformers >= 4.50 saves it so), floor path for big images
    "size_small_max": {"size": {"shortest_edge": 3136, "longest_edge": 250000},
                       "image_processor_type": "Qwen2VLImageProcessor"},
    # min_pixels / max_pixels override size
    "override_size": {"size": {"shortest_edge": 3136, "longest_edge": 12845056},
                      "min_pixels": 100352, "max_pixels": 200704,
                      "image_processor_type": "Qwen2VLImageProcessor"},
    "thin_max": dict(ref.QWEN2_5_VL_CONFIG, max_pixels=50000),
    "no_resize": dict(ref.QWEN2_5_VL_CONFIG, do_resize=False),
    "bilinear": dict(ref.QWEN2_5_VL_CONFIG, resample=2),
    "merge1_t1": dict(ref.QWEN2_5_VL_CONFIG, merge_size=1, temporal_patch_size=1),
    "no_normalize": dict(ref.QWEN2_5_VL_CONFIG, do_normalize=False),
    "bad_size": {"size": {"shortest_edge": 3136},
                 "image_processor_type": "Qwen2VLImageProcessor"},
}
config_paths = {}
for name, cfg in CONFIGS.items():
    os.makedirs(path("configs", name), exist_ok=True)
    config_paths[name] = path("configs", name, "preprocessor_config.json")
    with open(config_paths[name], "w") as f:
        json.dump(cfg, f, indent=2)
os.makedirs(path("images"), exist_ok=True)
os.makedirs(path("out"), exist_ok=True)

# (name, width, height, config, mode). Widths and heights are PIL's (w, h).
CASES = [
    ("640x480", 640, 480, "qwen2_5_vl", "RGB"),
    ("480x640", 480, 640, "qwen2_5_vl", "RGB"),
    ("1000x300", 1000, 300, "qwen2_5_vl", "RGB"),
    ("333x777", 333, 777, "qwen2_5_vl", "RGB"),
    ("1920x1080_defaults", 1920, 1080, "defaults", "RGB"),  # default max_pixels: floor path
    ("28x28_min", 28, 28, "defaults", "RGB"),                # min_pixels path: 56 x 56
    ("30x30_min", 30, 30, "defaults", "RGB"),                # 30 * sqrt(3136 / 900) vs 56
    ("100x70_min", 100, 70, "override_size", "RGB"),         # min/max override size
    ("10x1000_tiny", 10, 1000, "qwen2_5_vl", "RGB"),         # side rounds to 0
    ("1000x10_tiny", 1000, 10, "qwen2_5_vl", "RGB"),
    ("2000x2000_floor", 2000, 2000, "size_small_max", "RGB"),
    ("1344x1344_identity", 1344, 1344, "qwen2_5_vl", "RGB"),
    ("126x70_ties", 126, 70, "qwen2_5_vl", "RGB"),           # 4.5 -> 4, 2.5 -> 2 (to even)
    ("70x126_ties", 70, 126, "qwen2_5_vl", "RGB"),
    ("98x42_ties_up", 98, 42, "qwen2_5_vl", "RGB"),          # 3.5 -> 4, 1.5 -> 2
    ("154x210_ties_up", 154, 210, "qwen2_5_vl", "RGB"),      # 5.5 -> 6, 7.5 -> 8
    ("5600x28_aspect200", 5600, 28, "qwen2_5_vl", "RGB"),    # exactly 200: allowed, identity
    ("30x5999_aspect199", 30, 5999, "qwen2_5_vl", "RGB"),    # 199.97
    ("5600x28_thin_max", 5600, 28, "thin_max", "RGB"),       # floor to 0 -> max(factor, 0)
    ("224x112_no_resize", 224, 112, "no_resize", "RGB"),
    ("640x480_bilinear", 640, 480, "bilinear", "RGB"),
    ("333x777_bilinear", 333, 777, "bilinear", "RGB"),
    ("333x777_merge1_t1", 333, 777, "merge1_t1", "RGB"),
    ("640x480_merge1_t1", 640, 480, "merge1_t1", "RGB"),
    ("224x224_merge1_t1_identity", 224, 224, "merge1_t1", "RGB"),
    ("640x480_no_normalize", 640, 480, "no_normalize", "RGB"),
    ("300x200_rgba", 300, 200, "qwen2_5_vl", "RGBA"),
    ("224x168_rgba_identity", 224, 168, "qwen2_5_vl", "RGBA"),
    ("300x200_grey", 300, 200, "qwen2_5_vl", "L"),
    ("300x200_palette", 300, 200, "qwen2_5_vl", "P"),
]
# Inputs Python refuses: (name, width, height, config, words the C++ message must contain).
ERROR_CASES = [
    ("30x6001_aspect", 30, 6001, "qwen2_5_vl", ["aspect ratio", "200"]),
    ("28x5601_aspect", 5601, 28, "qwen2_5_vl", ["aspect ratio", "200"]),
    ("100x90_no_resize", 100, 90, "no_resize", ["28"]),
    ("64x64_bad_size", 64, 64, "bad_size", ["longest_edge"]),
]


def run_tool(image, config, out):
    r = subprocess.run([TOOL, "qwen2vl", image, config, out], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def parse_tool_stdout(text):
    """'grid T H W resized HEIGHT WIDTH' -> ((t, h, w), (height, width))."""
    f = text.split()
    assert f[0] == "grid" and f[4] == "resized", text
    return tuple(map(int, f[1:4])), (int(f[5]), int(f[6]))


# ------------------------------------------------------------------------------------------
# 1. C++ vs the Python reference: exact.

results = {}  # name -> dict(cpp=..., py=..., grid=..., resized=...)
print(f"{'case':30} {'config':15} {'resized':>11} {'grid':>12}  C++ vs Python")
for name, w, h, cfg, mode in CASES:
    img_path = make_image(name, w, h, mode)
    config = CONFIGS[cfg]
    want, want_grid = ref.preprocess(Image.open(img_path), config)
    want_resized = ref.resized_size(h, w, config)
    out = path("out", f"{name}.npy")
    rc, stdout, stderr = run_tool(img_path, config_paths[cfg], out)
    if not expect(rc == 0, f"{name}: image_tool exit {rc}: {stderr.strip()}"):
        continue
    grid, resized = parse_tool_stdout(stdout)
    got = np.load(out)
    expect(grid == tuple(want_grid), f"{name}: grid {grid} != Python {want_grid}")
    expect(resized == tuple(want_resized), f"{name}: resized {resized} != Python {want_resized}")
    expect(got.dtype == np.float32 and got.shape == want.shape,
           f"{name}: pixel_values {got.dtype} {got.shape} != Python float32 {want.shape}")
    same = got.shape == want.shape and np.array_equal(got, want)
    if got.shape == want.shape and not same:
        diff = np.abs(got.astype(np.float64) - want)
        worst = np.unravel_index(np.argmax(diff), diff.shape)
        expect(False, f"{name}: pixel_values differ: max abs {diff.max():.3g} at {worst} "
                      f"(C++ {got[worst]!r}, Python {want[worst]!r}), "
                      f"{np.count_nonzero(diff)} of {diff.size} elements")
    else:
        expect(same, f"{name}: pixel_values differ")
    print(f"{name:30} {cfg:15} {resized[0]:5}x{resized[1]:<5} {str(grid):>12}  "
          f"{'bit-exact' if same else 'DIFFERENT'}")
    results[name] = dict(w=w, h=h, cfg=cfg, mode=mode, img=img_path, cpp=got, grid=grid,
                         resized=resized)

for name, w, h, cfg, words in ERROR_CASES:
    img_path = make_image(name, w, h)
    try:
        ref.preprocess(Image.open(img_path), CONFIGS[cfg])
        expect(False, f"{name}: the Python reference accepted it")
    except ValueError:
        pass
    out = path("out", f"{name}.npy")
    if os.path.exists(out):
        os.remove(out)
    rc, stdout, stderr = run_tool(img_path, config_paths[cfg], out)
    message = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    expect(rc == 2, f"{name}: image_tool exit {rc} (want 2): {stderr.strip()}")
    expect(all(word.lower() in stderr.lower() for word in words),
           f"{name}: message {message!r} does not name {words}")
    expect(not os.path.exists(out), f"{name}: wrote an output anyway")
    print(f"{name:30} {cfg:15} refused (exit {rc}): {message}")

# ------------------------------------------------------------------------------------------
# 2. C++ vs transformers.js, where installed.


def js_smart_resize(height, width, factor, min_pixels, max_pixels):
    """transformers.js 4.3.1's smart_resize: scales a side below `factor` up first, rounds
    halves up (Math.round), otherwise as Python's. Returns (height, width)."""
    def js_round(x):
        return math.floor(x + 0.5)
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = js_round(height * scale), js_round(width * scale)
    h_bar = js_round(height / factor) * factor
    w_bar = js_round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def run_js():
    node = shutil.which("node")
    if not node:
        return "node is not installed"
    if not os.path.isfile(os.path.join(JS_DIR, "node_modules", "@huggingface", "transformers",
                                       "package.json")):
        return "@huggingface/transformers is not installed (npm ci in tests/image/hf_reference)"
    cases = [{"image": r["img"], "config": config_paths[r["cfg"]],
              "out": path("out", f"{name}.js.bin")} for name, r in results.items()]
    with open(path("js_cases.json"), "w") as f:
        json.dump(cases, f)
    p = subprocess.run([node, os.path.join(JS_DIR, "qwen2vl.mjs"), path("js_cases.json")],
                       capture_output=True, text=True, cwd=JS_DIR)
    if p.returncode != 0:
        expect(False, f"qwen2vl.mjs exit {p.returncode}: {p.stderr.strip()}")
        return None
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    expect(len(lines) == len(cases), f"qwen2vl.mjs printed {len(lines)} of {len(cases)} results")

    print(f"\n{'case':30} {'scale h w':>11}  C++ vs transformers.js")
    for (name, r), js in zip(results.items(), lines):
        if "error" in js:
            expect(False, f"{name}: transformers.js failed: {js['error']}")
            continue
        p_ = ref.resolve_config(CONFIGS[r["cfg"]])
        factor = p_["patch_size"] * p_["merge_size"]
        grid, js_grid = r["grid"], tuple(js["grid"])
        if p_["do_resize"]:
            js_resized = js_smart_resize(r["h"], r["w"], factor, p_["min_pixels"],
                                         p_["max_pixels"])
        else:
            js_resized = (r["h"], r["w"])
        expect(tuple(js["resized"]) == js_resized,
               f"{name}: transformers.js resized {js['resized']} != its documented "
               f"smart_resize {js_resized}")
        if js_resized != r["resized"]:  # a documented difference: assert it, compare no pixels
            print(f"{name:30} {'':>11}  resized {r['resized']} vs {tuple(js['resized'])}: "
                  f"documented difference (round half up / upscale of a side < {factor})")
            continue
        expect(js_grid == grid, f"{name}: transformers.js grid {js_grid} != C++ {grid}")
        got = np.fromfile(path("out", f"{name}.js.bin"), dtype="<f4")
        if not expect(got.size == r["cpp"].size, f"{name}: transformers.js pixel_values size "
                                                 f"{got.size} != C++ {r['cpp'].size}"):
            continue
        got = got.reshape(r["cpp"].shape)
        want = r["cpp"]
        note = ""
        if r["mode"] == "RGBA":  # documented: transformers.js drops alpha
            want, _ = ref.preprocess(Image.open(r["img"]).convert("RGB"), CONFIGS[r["cfg"]])
            note = " (vs Python on alpha dropped)"
        diff = np.abs(got.astype(np.float64) - want)
        scales = (r["resized"][0] / r["h"], r["resized"][1] / r["w"])
        misplaced = np.abs(want - np.roll(want, 1, axis=0)).mean()
        if r["resized"] == (r["h"], r["w"]):
            ok = expect(diff.max() <= 1e-6, f"{name}: no resize, max abs diff {diff.max():.3g} "
                                            f"> 1e-6{note}")
            verdict = "no resize: " + ("exact (<= 1e-6)" if ok else "DIFFERENT")
        else:
            band, _, _, mean_tol, max_tol = next(
                t for t in TOLERANCES if all(t[1] <= x <= t[2] for x in scales))
            ok = expect(diff.mean() < mean_tol and (max_tol is None or diff.max() < max_tol),
                        f"{name}: resampled ({band}), mean abs diff {diff.mean():.4f} "
                        f"(bound {mean_tol}), max {diff.max():.3f} (bound {max_tol}){note}")
            verdict = f"{band}: " + ("within bounds" if ok else "OUT OF BOUNDS")
        print(f"{name:30} {scales[0]:5.2f} {scales[1]:5.2f}  max {diff.max():8.3g} mean "
              f"{diff.mean():8.3g} misplaced {misplaced:.2f}  {verdict}{note}")
    return None


skipped = run_js()
if skipped:
    print(f"\nSKIPPED (transformers.js part only): {skipped} (tools/install-deps.sh installs it)")

CHECKS.exit_if_failed("\n")
print(f"\nqwen2vl parity OK: {CHECKS.count} checks ({len(CASES)} cases, "
      f"{len(ERROR_CASES)} refusals)")
