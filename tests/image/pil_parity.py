"""Checks runtime/image against PIL and llava_model.preprocess.

usage: pil_parity.py IMAGE_TOOL SOURCE_DIR WORK_DIR

Generates PNGs (every colour type, bit depths 1-16, palette/tRNS transparency, Adam7
interlacing) and JPEGs (baseline with 4:4:4/4:2:2/4:2:0 subsampling, progressive, greyscale,
CMYK) at odd sizes, decodes them with the C++ image_tool and requires:
  * decoded RGB == PIL's (convert RGBA, alpha-composite over white, convert RGB) exactly;
  * Resize == PIL Image.resize(BICUBIC and BILINEAR, reducing_gap=None) exactly (up/down/
    one-axis/identity/extreme aspect ratios), ResizeBicubicRegion == the same window of it;
  * ClipPreprocess == llava_model.preprocess within 1e-6 (bicubic; bilinear on a few images);
  * WritePng round-trips through PIL.
"""
import os
import struct
import subprocess
import sys
import zlib

import numpy as np
from PIL import Image

TOOL, SOURCE_DIR, WORK_DIR = sys.argv[1:4]
sys.path.insert(0, os.path.join(SOURCE_DIR, "tools", "pytorch"))
import llava_model  # noqa: E402

sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "common"))
from parity_checks import Checks  # noqa: E402

os.makedirs(WORK_DIR, exist_ok=True)
rng = np.random.RandomState(20240607)
CHECKS = Checks()
expect = CHECKS.expect


def tool(*args):
    r = subprocess.run([TOOL, *map(str, args)], capture_output=True)
    if r.returncode != 0:
        raise RuntimeError(f"image_tool {' '.join(map(str, args))}: {r.stderr.decode()}")


def path(name):
    return os.path.join(WORK_DIR, name)


def scene(h, w, channels=3):
    """Smooth gradients + a few hard-edged shapes + noise: realistic for JPEG and resizing."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    base = [128 + 100 * np.sin(x / (3 + 5 * c) + y / (7 + 3 * c) + c) for c in range(channels)]
    img = np.stack(base, -1)
    img[h // 4: h // 2, w // 3: 2 * w // 3] = rng.randint(0, 256, channels)
    img += rng.normal(0, 12, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


# ------------------------------------------------------------------------------------------
# A small PNG writer (independent of PIL's encoder) for the cases PIL cannot save: 16-bit
# colour, 1/2/4-bit grey, Adam7 interlacing.

ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
         (0, 1, 1, 2)]


def _chunk(tag, data):
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def _scanlines(samples, bit_depth):
    """samples: [h, w, c] integer array -> filter-type-0 scanlines."""
    h = samples.shape[0]
    out = b""
    for row in samples.reshape(h, -1):
        if bit_depth == 16:
            data = row.astype(">u2").tobytes()
        elif bit_depth == 8:
            data = row.astype(np.uint8).tobytes()
        else:
            data = np.packbits(np.unpackbits(row.astype(np.uint8)[:, None], axis=1)
                               [:, 8 - bit_depth:].reshape(-1)).tobytes()
        out += b"\x00" + data
    return out


def write_png(name, samples, color_type, bit_depth, interlace=False, palette=None, trns=None):
    if samples.ndim == 2:
        samples = samples[:, :, None]
    h, w = samples.shape[:2]
    raw = b""
    if interlace:
        for x0, y0, dx, dy in ADAM7:
            sub = samples[y0::dy, x0::dx]
            if sub.shape[0] and sub.shape[1]:
                raw += _scanlines(sub, bit_depth)
    else:
        raw = _scanlines(samples, bit_depth)
    png = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, bit_depth,
                                                               color_type, 0, 0, int(interlace)))
    if palette is not None:
        png += _chunk(b"PLTE", palette.astype(np.uint8).tobytes())
    if trns is not None:
        png += _chunk(b"tRNS", trns)
    png += _chunk(b"IDAT", zlib.compress(raw, 9)) + _chunk(b"IEND", b"")
    with open(path(name), "wb") as f:
        f.write(png)
    return path(name)


def pil_rgb(p):
    """What llava_model.preprocess feeds to resize: RGB, alpha composited over white."""
    image = Image.open(p)
    if image.mode != "RGB":
        rgba = image.convert("RGBA")
        bg = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        image = Image.alpha_composite(bg, rgba).convert("RGB")
    return np.asarray(image)


def cpp_decode(p):
    out = p + ".dec.npy"
    tool("decode", p, out)
    return np.load(out)


# ------------------------------------------------------------------------------------------
# Image corpus

images = {}  # name -> (path, expected RGB or None to use PIL)

# Every (value, alpha) pair, to pin the compositing formula down exactly.
v, a = np.meshgrid(np.arange(256), np.arange(256))
exhaustive = np.stack([v, 255 - v, (v * 7) % 256, a], -1).astype(np.uint8)
Image.fromarray(exhaustive, "RGBA").save(path("alpha_all.png"))
images["alpha_all"] = path("alpha_all.png")

rgb = scene(23, 37)
Image.fromarray(rgb).save(path("rgb.png"))
images["rgb"] = path("rgb.png")
rgba = np.concatenate([scene(41, 29), rng.randint(0, 256, (41, 29, 1)).astype(np.uint8)], -1)
rgba[0, :5, 3] = 0
Image.fromarray(rgba, "RGBA").save(path("rgba.png"))
images["rgba"] = path("rgba.png")
gray = scene(30, 17, 1)[:, :, 0]
Image.fromarray(gray, "L").save(path("l.png"))
images["l"] = path("l.png")
Image.fromarray(np.stack([gray, 255 - gray], -1), "LA").save(path("la.png"))
images["la"] = path("la.png")

pal = rng.randint(0, 256, (256, 3)).astype(np.uint8)
idx = rng.randint(0, 256, (19, 26)).astype(np.uint8)
p_img = Image.fromarray(idx, "P")
p_img.putpalette(pal.tobytes())
p_img.save(path("p.png"))
images["p"] = path("p.png")
p_img.save(path("p_trns.png"), transparency=bytes(rng.randint(0, 256, 256).astype(np.uint8)))
images["p_trns"] = path("p_trns.png")
p_img.save(path("p_trns1.png"), transparency=int(idx[3, 4]))
images["p_trns1"] = path("p_trns1.png")
Image.fromarray(gray, "L").save(path("l_trns.png"), transparency=int(gray[5, 5]))
images["l_trns"] = path("l_trns.png")
Image.fromarray(rgb).save(path("rgb_trns.png"), transparency=tuple(int(c) for c in rgb[2, 3]))
images["rgb_trns"] = path("rgb_trns.png")
Image.fromarray(gray > 128).save(path("bilevel.png"))
images["bilevel"] = path("bilevel.png")

# Our own writer: low bit depths, 16-bit, interlaced, small palettes.
for bits in (1, 2, 4):
    g = rng.randint(0, 1 << bits, (13, 21))
    images[f"gray{bits}"] = write_png(f"gray{bits}.png", g, 0, bits)
    images[f"gray{bits}_i"] = write_png(f"gray{bits}_i.png", g, 0, bits, interlace=True)
    images[f"pal{bits}"] = write_png(f"pal{bits}.png", g, 3, bits,
                                     palette=rng.randint(0, 256, (1 << bits, 3)))
rgb16 = rng.randint(0, 65536, (15, 22, 3))
images["rgb16"] = write_png("rgb16.png", rgb16, 2, 16)
images["rgb16_i"] = write_png("rgb16_i.png", rgb16, 2, 16, interlace=True)
rgba16 = rng.randint(0, 65536, (15, 22, 4))
images["rgba16"] = write_png("rgba16.png", rgba16, 6, 16)
la16 = rng.randint(0, 65536, (9, 31, 2))
images["la16"] = write_png("la16.png", la16, 4, 16)
images["rgb_i"] = write_png("rgb_i.png", scene(35, 27), 2, 8, interlace=True)
images["rgba_i"] = write_png("rgba_i.png", rgba, 6, 8, interlace=True)
images["p_i"] = write_png("p_i.png", idx, 3, 8, interlace=True, palette=pal,
                          trns=bytes(rng.randint(0, 256, 200).astype(np.uint8)))
images["tiny_i"] = write_png("tiny_i.png", scene(1, 3), 2, 8, interlace=True)

# 16-bit greyscale: PIL opens it as mode "I" and convert() clips values to 255; the C++
# decoder keeps the high byte instead (see png_decode.cc), checked against numpy below.
gray16 = rng.randint(0, 65536, (12, 10))
gray16_path = write_png("gray16.png", gray16, 0, 16)

# JPEGs, encoded by PIL (libjpeg-turbo), decoded by both.
big = scene(67, 93)
for name, kwargs in {"jpeg444": dict(subsampling=0, quality=95),
                     "jpeg422": dict(subsampling=1, quality=90),
                     "jpeg420": dict(subsampling=2, quality=75),
                     "jpeg_prog": dict(progressive=True, quality=85),
                     "jpeg_opt": dict(optimize=True, quality=60)}.items():
    Image.fromarray(big).save(path(name + ".jpg"), **kwargs)
    images[name] = path(name + ".jpg")
Image.fromarray(scene(17, 33)).save(path("jpeg_odd.jpg"), quality=88)
images["jpeg_odd"] = path("jpeg_odd.jpg")
Image.fromarray(gray).save(path("jpeg_gray.jpg"), quality=90)
images["jpeg_gray"] = path("jpeg_gray.jpg")
Image.fromarray(gray).save(path("jpeg_gray_prog.jpg"), quality=90, progressive=True)
images["jpeg_gray_prog"] = path("jpeg_gray_prog.jpg")
Image.fromarray(scene(21, 34, 4), "CMYK").save(path("jpeg_cmyk.jpg"), quality=92)
images["jpeg_cmyk"] = path("jpeg_cmyk.jpg")

# ------------------------------------------------------------------------------------------
# 1. Decoding

for name, p in images.items():
    got, want = cpp_decode(p), pil_rgb(p)
    expect(got.shape == want.shape and np.array_equal(got, want),
           f"decode {name}: shape {got.shape} vs {want.shape}, "
           f"{np.count_nonzero(got != want) if got.shape == want.shape else '-'} bytes differ")

got = cpp_decode(gray16_path)
want = np.repeat((gray16 >> 8).astype(np.uint8)[:, :, None], 3, -1)
expect(np.array_equal(got, want), "decode gray16: expected the high byte of each sample")

# ------------------------------------------------------------------------------------------
# 2. Resizing (inputs are lossless PNGs, so this isolates the resampler)

resize_cases = [
    ((37, 23), (336, 200)),   # upscale
    ((1000, 700), (336, 235)),  # downscale (antialias support 2 * 2.98)
    ((5, 3), (7, 11)),        # tiny, mixed
    ((640, 480), (640, 336)),  # vertical pass only
    ((480, 640), (336, 640)),  # horizontal pass only
    ((37, 23), (37, 23)),     # identity (both passes skipped)
    ((1, 1), (336, 336)),
    ((400, 2), (300, 17)),    # extreme aspect ratio
    ((3, 500), (2, 9)),       # extreme downscale
    ((333, 501), (335, 499)),  # near-identity, odd
    ((7, 1000), (336, 48000)),  # very tall output
]
for (w, h), (ow, oh) in resize_cases:
    src = scene(h, w)
    p = path(f"resize_{w}x{h}.png")
    Image.fromarray(src).save(p)
    out = path(f"resize_{w}x{h}_{ow}x{oh}.npy")
    tool("resize", p, ow, oh, out)
    got = np.load(out)
    want = np.asarray(Image.fromarray(src).resize((ow, oh), Image.BICUBIC, reducing_gap=None))
    diff = np.abs(got.astype(int) - want.astype(int)) if got.shape == want.shape else None
    expect(diff is not None and diff.max() == 0,
           f"resize {w}x{h}->{ow}x{oh}: shape {got.shape} vs {want.shape}, max diff "
           f"{diff.max() if diff is not None else '-'}")
    tool("resize", p, ow, oh, out, 2)
    got2 = np.load(out)
    want2 = np.asarray(Image.fromarray(src).resize((ow, oh), Image.BILINEAR, reducing_gap=None))
    expect(got2.shape == want2.shape and np.array_equal(got2, want2),
           f"bilinear resize {w}x{h}->{ow}x{oh}: shape {got2.shape} vs {want2.shape}, "
           f"{np.count_nonzero(got2 != want2) if got2.shape == want2.shape else '-'} bytes differ")
    # A window of the same output, computed on its own.
    x0, y0 = ow // 3, oh // 4
    ww, wh = max(1, ow // 2), max(1, oh // 2)
    tool("region", p, ow, oh, x0, y0, ww, wh, out)
    expect(np.array_equal(np.load(out), want[y0:y0 + wh, x0:x0 + ww]),
           f"region of resize {w}x{h}->{ow}x{oh} differs")

# ------------------------------------------------------------------------------------------
# 3. CLIP preprocessing, end to end from the file, against llava_model.preprocess

pre_cases = dict(images)
for (w, h) in [(336, 336), (337, 335), (1, 1), (2000, 1500), (1200, 5), (5, 1200), (640, 480),
               (480, 640), (350, 900)]:
    p = path(f"pre_{w}x{h}.png")
    Image.fromarray(scene(h, w)).save(p)
    pre_cases[f"pre_{w}x{h}"] = p
for name, p in pre_cases.items():
    for size in ((336, 224, 14) if name in ("rgb", "pre_337x335", "jpeg420") else (336,)):
        out = path(f"{name}_pre{size}.npy")
        tool("preprocess", p, size, out)
        got = np.load(out)
        want = llava_model.preprocess(Image.open(p), size)[0].numpy()
        err = np.abs(got - want).max() if got.shape == want.shape else float("inf")
        expect(err <= 1e-6, f"preprocess {name} size {size}: shape {got.shape} vs "
                            f"{want.shape}, max abs diff {err}")
    if name in ("rgb", "pre_2000x1500", "pre_350x900", "jpeg420"):  # bilinear, from a config
        out = path(f"{name}_pre_bilinear.npy")
        tool("preprocess", p, 336, out, 2)
        got = np.load(out)
        proc = dict(llava_model.clip_processor_config(336), resample=2)
        want = llava_model.preprocess(Image.open(p), 336, proc)[0].numpy()
        err = np.abs(got - want).max() if got.shape == want.shape else float("inf")
        expect(err <= 1e-6, f"bilinear preprocess {name}: max abs diff {err}")

# ------------------------------------------------------------------------------------------
# 4. PNG encoding round trip

for name in ("rgb", "jpeg420", "alpha_all"):
    out = path(f"{name}_enc.png")
    tool("encode", images[name], out)
    back = Image.open(out)
    expect(back.mode == "RGB" and np.array_equal(np.asarray(back), cpp_decode(images[name])),
           f"encode {name}: PIL reads back different pixels")

CHECKS.exit_if_failed()
print(f"image parity OK: {CHECKS.count} checks ({len(images)} decoded images, {len(resize_cases)} "
      f"resizes, {len(pre_cases)} preprocessed)")
