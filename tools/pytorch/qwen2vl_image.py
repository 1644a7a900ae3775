"""Qwen2-VL / Qwen2.5-VL image preprocessing in numpy + PIL, written from transformers'
Qwen2VLImageProcessor (the slow, PIL path), not from the C++ in runtime/image.

The independent reference that runtime/image/qwen2vl_preprocess is checked against
(tests/image/qwen2vl_parity.py), and the image input of a PyTorch Qwen2-VL reference model.
Only the standard library, numpy and PIL are needed (no torch, no transformers).

Shapes: an image of H x W pixels becomes grid (t, h, w) = (1, H' / P, W' / P), where
H' x W' = smart_resize(H, W) and P = patch_size, and pixel_values F32 [t * h * w, C * T * P * P]
with C = 3 channels and T = temporal_patch_size. Patches are ordered so that each run of
merge_size**2 consecutive rows is one merge_size x merge_size block of neighbouring patches
(the order the vision tower's patch merger expects).
"""
import math

import numpy as np

# transformers.utils.constants.OPENAI_CLIP_MEAN / OPENAI_CLIP_STD: Qwen2VLImageProcessor's
# defaults, and the values every published Qwen2-VL / Qwen2.5-VL config spells out.
OPENAI_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
OPENAI_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

# Qwen2VLImageProcessor.__init__ defaults (transformers >= 4.45). `size` is
# {"shortest_edge": min_pixels, "longest_edge": max_pixels}: both are pixel counts, not edges.
DEFAULTS = {
    "do_resize": True,
    "size": {"shortest_edge": 56 * 56, "longest_edge": 28 * 28 * 1280},
    "resample": 3,  # PIL.Image.BICUBIC
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": OPENAI_CLIP_MEAN,
    "image_std": OPENAI_CLIP_STD,
    "do_convert_rgb": True,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
}

# Qwen/Qwen2.5-VL-*-Instruct's preprocessor_config.json, as published.
QWEN2_5_VL_CONFIG = {
    "min_pixels": 3136,
    "max_pixels": 12845056,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": OPENAI_CLIP_MEAN,
    "image_std": OPENAI_CLIP_STD,
    "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen2_5_VLProcessor",
}


def smart_resize(height, width, factor=28, min_pixels=56 * 56, max_pixels=28 * 28 * 1280):
    """(resized_height, resized_width) as transformers' qwen2_vl smart_resize computes them:
    both multiples of `factor`, close to the input's aspect ratio, pixel count within
    [min_pixels, max_pixels] (when the rounded size leaves it: scale by sqrt of the ratio, then
    floor resp. ceil to the factor).

    Python's round() rounds halves to even: 70 / 28 = 2.5 -> 2. Sides smaller than the factor
    are not rejected (transformers < 4.49 raised ValueError): they round to 0 and the
    min_pixels branch scales them up. Raises ValueError when the aspect ratio exceeds 200.
    """
    if max(height, width) / min(height, width) > 200:
        raise ValueError(
            f"absolute aspect ratio must be smaller than 200, "
            f"got {max(height, width) / min(height, width)}")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def resolve_config(config):
    """A preprocessor_config.json dict -> the complete settings Qwen2VLImageProcessor uses.

    `size` must hold both shortest_edge and longest_edge when present; the legacy top-level
    min_pixels / max_pixels keys override them (as every Qwen2-VL config on the Hub has them).
    Adds "min_pixels" and "max_pixels" to the result.
    """
    p = dict(DEFAULTS)
    p.update({k: v for k, v in config.items() if v is not None})
    size = config.get("size")
    if size is None:
        size = dict(DEFAULTS["size"])
    elif "shortest_edge" not in size or "longest_edge" not in size:
        raise ValueError("size must contain 'shortest_edge' and 'longest_edge' keys.")
    size = dict(size)
    if config.get("min_pixels") is not None:
        size["shortest_edge"] = config["min_pixels"]
    if config.get("max_pixels") is not None:
        size["longest_edge"] = config["max_pixels"]
    p["size"] = size
    p["min_pixels"], p["max_pixels"] = size["shortest_edge"], size["longest_edge"]
    return p


def convert_rgb(image):
    """transformers' convert_to_rgb: non-RGB images are alpha-composited over white."""
    from PIL import Image
    if image.mode == "RGB":
        return image
    rgba = image.convert("RGBA")
    background = Image.new("RGBA", rgba.size, (255, 255, 255))
    return Image.alpha_composite(background, rgba).convert("RGB")


def normalized_image(image, config):
    """PIL image -> (F32 [3, H', W'] normalised pixels, (H', W')): convert RGB, PIL resize
    (reducing_gap=None) to smart_resize's size, float32(float64(x) * rescale_factor), then
    (x - mean) / std with mean and std as float32 and float32 arithmetic."""
    p = resolve_config(config)
    if p["do_convert_rgb"]:
        image = convert_rgb(image)
    width, height = image.size
    factor = p["patch_size"] * p["merge_size"]
    resized_height, resized_width = height, width
    if p["do_resize"]:
        resized_height, resized_width = smart_resize(height, width, factor, p["min_pixels"],
                                                     p["max_pixels"])
        # transformers' resize hands uint8 arrays to PIL unchanged (no rescale round trip).
        image = image.resize((resized_width, resized_height), resample=p["resample"],
                             reducing_gap=None)
    x = np.asarray(image)  # uint8 [H', W', 3]
    if p["do_rescale"]:
        x = (x.astype(np.float64) * p["rescale_factor"]).astype(np.float32)
    if p["do_normalize"]:
        mean, std = p["image_mean"], p["image_std"]
        mean = [mean] * 3 if isinstance(mean, (int, float)) else mean
        std = [std] * 3 if isinstance(std, (int, float)) else std
        if not np.issubdtype(x.dtype, np.floating):
            x = x.astype(np.float32)
        x = (x - np.array(mean, dtype=x.dtype)) / np.array(std, dtype=x.dtype)
    x = np.asarray(x, dtype=np.float32) if x.dtype != np.float32 else x
    return x.transpose(2, 0, 1), (resized_height, resized_width)


def patchify(frames, patch_size=14, temporal_patch_size=2, merge_size=2):
    """F32 [F, C, H, W] frames -> (F32 [t * h * w, C * T * P * P], (t, h, w)).

    The last frame is repeated until F is a multiple of T = temporal_patch_size (one image:
    T copies of it). Feature order within a row is (channel, frame, row in patch, column in
    patch); rows are (t, h / m, w / m, m, m) with m = merge_size.
    """
    patches = np.asarray(frames)
    if patches.shape[0] % temporal_patch_size != 0:
        repeats = np.repeat(patches[-1][np.newaxis],
                            temporal_patch_size - patches.shape[0] % temporal_patch_size, axis=0)
        patches = np.concatenate([patches, repeats], axis=0)
    channel = patches.shape[1]
    grid_t = patches.shape[0] // temporal_patch_size
    grid_h, grid_w = patches.shape[2] // patch_size, patches.shape[3] // patch_size
    patches = patches.reshape(grid_t, temporal_patch_size, channel,
                              grid_h // merge_size, merge_size, patch_size,
                              grid_w // merge_size, merge_size, patch_size)
    patches = patches.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    flat = patches.reshape(grid_t * grid_h * grid_w,
                           channel * temporal_patch_size * patch_size * patch_size)
    return np.ascontiguousarray(flat, dtype=np.float32), (grid_t, grid_h, grid_w)


def preprocess(image, config=None):
    """PIL image + preprocessor_config.json dict -> (pixel_values F32 [N, C * T * P * P],
    (t, h, w)), as Qwen2VLImageProcessor(**config)(images=image) returns pixel_values and
    image_grid_thw[0]. Raises ValueError for an aspect ratio above 200 and for a size that is
    not a multiple of patch_size * merge_size with do_resize false (numpy cannot reshape it)."""
    p = resolve_config(config or {})
    chw, (resized_height, resized_width) = normalized_image(image, config or {})
    factor = p["patch_size"] * p["merge_size"]
    if resized_height % factor or resized_width % factor:
        raise ValueError(f"image size {resized_height}x{resized_width} is not a multiple of "
                         f"{factor} (do_resize is false)")
    return patchify(chw[np.newaxis], p["patch_size"], p["temporal_patch_size"], p["merge_size"])


def resized_size(image_height, image_width, config=None):
    """(H', W') for an image of that size under `config`, without touching pixels."""
    p = resolve_config(config or {})
    if not p["do_resize"]:
        return image_height, image_width
    return smart_resize(image_height, image_width, p["patch_size"] * p["merge_size"],
                        p["min_pixels"], p["max_pixels"])
