"""Qwen2.5-VL (images only) in PyTorch, written from transformers' modeling_qwen2_5_vl.py
(Qwen2_5_VLForConditionalGeneration), not from the C++.

The independent reference the C++ engine's Qwen2.5-VL path is checked against. Reads the Hugging
Face layout (config.json flat as published or nested in text_config / rope_parameters;
model.safetensors or shards + model.safetensors.index.json) and writes tiny random checkpoints
in it. One sequence, no batching, F32 arithmetic throughout (BF16 weights are widened on load).
Only numpy and torch are needed; safetensors I/O is llava_model.py's.

Shapes: an image of grid (t, h, w) is t*h*w rows of pixel_values [N, C*T*P*P] in the order
tools/pytorch/qwen2vl_image.py writes them (runs of m*m neighbouring patches, m =
spatial_merge_size); the vision tower turns them into N / m^2 rows, one per image token.
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llava_model as L  # noqa: E402  (safetensors I/O, RMSNorm)
import qwen2vl_image  # noqa: E402

# ----------------------------------------------------------------------------------------------
# config (defaults: Qwen2_5_VLVisionConfig / Qwen2_5_VLTextConfig, as runtime/io/qwen_config.h)

VISION_DEFAULTS = dict(depth=32, hidden_size=3584, intermediate_size=3420, num_heads=16,
                       in_channels=3, patch_size=14, spatial_merge_size=2, temporal_patch_size=2,
                       window_size=112, out_hidden_size=3584, tokens_per_second=4,
                       fullatt_block_indexes=[7, 15, 23, 31], hidden_act="silu")
TEXT_DEFAULTS = dict(vocab_size=152064, hidden_size=8192, intermediate_size=29568,
                     num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8,
                     max_position_embeddings=32768, rms_norm_eps=1e-5, rope_theta=1000000.0,
                     mrope_section=[16, 24, 24], tie_word_embeddings=False,
                     bos_token_id=151643, eos_token_id=151645, hidden_act="silu")
TOKEN_DEFAULTS = dict(image_token_id=151655, video_token_id=151656, vision_start_token_id=151652,
                      vision_end_token_id=151653)
VISION_RMS_EPS = 1e-6  # Qwen2_5_VLVisionBlock's norm1/norm2 and the merger's ln_q


class Config:
    """config.json in either layout: the text model's keys at the top level (the published
    files) or in text_config (transformers >= 4.53); RoPE as rope_theta + rope_scaling
    {"type": "mrope", "mrope_section"} or rope_parameters (5.x). `vision` and `text` are plain
    dicts with every key of VISION_DEFAULTS / TEXT_DEFAULTS."""

    def __init__(self, d):
        self.raw = d
        v = d.get("vision_config")
        if not isinstance(v, dict):
            raise ValueError("config.json: vision_config is missing or not an object")
        # transformers reads in_channels and patch_size; the published files also carry
        # in_chans and spatial_patch_size, which its config keeps as unused attributes.
        self.vision = {k: v.get(k, dflt) for k, dflt in VISION_DEFAULTS.items()}
        nested = d.get("text_config") is not None
        t_src = d["text_config"] if nested else d
        t = {k: t_src.get(k, dflt) for k, dflt in TEXT_DEFAULTS.items() if k != "mrope_section"}
        t["mrope_section"] = list(TEXT_DEFAULTS["mrope_section"])  # only under rope_*
        # tie_word_embeddings: the top level's, then text_config's (as the C++ reader).
        t["tie_word_embeddings"] = t_src.get("tie_word_embeddings",
                                             d.get("tie_word_embeddings", False))
        for key in ("rope_scaling", "rope_parameters"):
            rp = t_src.get(key)
            if rp is None:
                continue
            kind = rp.get("rope_type", rp.get("type", "default"))
            if kind not in ("mrope", "default"):
                raise ValueError(f"config.json: {key} type {kind!r} is not supported")
            t["mrope_section"] = list(rp.get("mrope_section", t["mrope_section"]))
            t["rope_theta"] = rp.get("rope_theta", t["rope_theta"])
        if t_src.get("use_sliding_window", False):
            raise ValueError("config.json: use_sliding_window is not supported")
        t["head_dim"] = t["hidden_size"] // t["num_attention_heads"]
        self.text = t
        for k, dflt in TOKEN_DEFAULTS.items():
            setattr(self, k, d.get(k, dflt))
        self.torch_dtype = d.get("torch_dtype", d.get("dtype"))
        if len(t["mrope_section"]) != 3 or 2 * sum(t["mrope_section"]) != t["head_dim"]:
            raise ValueError(f"mrope_section {t['mrope_section']} must be 3 counts summing to "
                             f"head_dim / 2 = {t['head_dim'] // 2}")
        if self.vision["hidden_size"] // self.vision["num_heads"] % 4:
            raise ValueError("vision head_dim must be a multiple of 4 (2-D rotary halves)")

    @staticmethod
    def load(model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            return Config(json.load(f))

    def to_json(self):
        """The flat layout, key for key and byte for byte as runtime/io/qwen_config.cc's
        Qwen25VLConfigToJson writes it (nlohmann sorts keys; indent 2; trailing newline)."""
        v, t = self.vision, self.text
        vision = {"depth": v["depth"], "fullatt_block_indexes": list(v["fullatt_block_indexes"]),
                  "hidden_act": v["hidden_act"], "hidden_size": v["hidden_size"],
                  "in_chans": v["in_channels"], "intermediate_size": v["intermediate_size"],
                  "model_type": "qwen2_5_vl", "num_heads": v["num_heads"],
                  "out_hidden_size": v["out_hidden_size"], "patch_size": v["patch_size"],
                  "spatial_merge_size": v["spatial_merge_size"],
                  "spatial_patch_size": v["patch_size"],
                  "temporal_patch_size": v["temporal_patch_size"],
                  "tokens_per_second": v["tokens_per_second"], "window_size": v["window_size"]}
        root = {"architectures": self.raw.get("architectures",
                                              ["Qwen2_5_VLForConditionalGeneration"]),
                "attention_dropout": 0.0, "bos_token_id": t["bos_token_id"],
                "eos_token_id": t["eos_token_id"], "hidden_act": t["hidden_act"],
                "hidden_size": t["hidden_size"], "image_token_id": self.image_token_id,
                "intermediate_size": t["intermediate_size"],
                "max_position_embeddings": t["max_position_embeddings"],
                "model_type": self.raw.get("model_type", "qwen2_5_vl"),
                "num_attention_heads": t["num_attention_heads"],
                "num_hidden_layers": t["num_hidden_layers"],
                "num_key_value_heads": t["num_key_value_heads"],
                "rms_norm_eps": _shortest(t["rms_norm_eps"]),
                "rope_scaling": {"mrope_section": list(t["mrope_section"]), "type": "mrope"},
                "rope_theta": _shortest(t["rope_theta"]),
                "tie_word_embeddings": bool(t["tie_word_embeddings"]),
                "use_sliding_window": False, "video_token_id": self.video_token_id,
                "vision_config": vision, "vision_end_token_id": self.vision_end_token_id,
                "vision_start_token_id": self.vision_start_token_id,
                "vocab_size": t["vocab_size"]}
        if self.torch_dtype:
            root["torch_dtype"] = self.torch_dtype
        return json.dumps(root, indent=2, sort_keys=True) + "\n"


def _shortest(x):
    """io_internal::ShortestDouble: the float32 value, printed with the fewest digits that
    read back to the same float32."""
    f = np.float32(x)
    for precision in range(6, 10):
        s = "%.*g" % (precision, float(f))
        if np.float32(float(s)) == f:
            return float(s)
    return float(f)


# ----------------------------------------------------------------------------------------------
# vision tower: positions and windows (plain numpy, callable from a C++ parity test)


def rot_pos_ids(grid_thw, spatial_merge_size):
    """int64 [N, 2]: (row, column) in the patch grid of each pixel_values row, in the
    merge-grouped order (t, h/m, w/m, m, m); rot_pos_emb's hpos/wpos."""
    m = spatial_merge_size
    out = []
    for t, h, w in grid_thw:
        hpos = np.broadcast_to(np.arange(h)[:, None], (h, w))
        wpos = np.broadcast_to(np.arange(w)[None, :], (h, w))
        group = lambda a: a.reshape(h // m, m, w // m, m).transpose(0, 2, 1, 3).reshape(-1)
        out.append(np.tile(np.stack([group(hpos), group(wpos)], axis=-1), (t, 1)))
    return np.concatenate(out, axis=0).astype(np.int64)


def rot_pos_emb(grid_thw, head_dim, spatial_merge_size, theta=10000.0):
    """F32 [N, head_dim / 2] rotary angles of each patch: the row's angles over
    inv_freq = 1 / theta^(2i / (head_dim/2)), i < head_dim/4, then the column's. As
    Qwen2_5_VisionRotaryEmbedding(head_dim // 2): all float32 (a table of
    arange(max grid side) x inv_freq, indexed by the positions)."""
    dim = head_dim // 2
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
    max_side = max(max(h, w) for _, h, w in grid_thw)
    table = torch.outer(torch.arange(max_side, dtype=torch.float), inv_freq)
    pos = torch.from_numpy(rot_pos_ids(grid_thw, spatial_merge_size))
    return table[pos].flatten(1).numpy()


def get_window_index(grid_thw, window_size, patch_size, spatial_merge_size):
    """(window_index int64 [N / m^2], cu_window_seqlens list of int), as transformers'
    Qwen2_5_VisionTransformerPretrainedModel.get_window_index.

    Each image's merged grid (h/m, w/m) is padded at the bottom and right to whole windows of
    k = window_size // m // patch_size merged patches per side (a side already a multiple of
    k still gets k padding: a whole row / column of empty windows); windows are taken row by
    row, merged patches row-major inside each. window_index lists the merged patches (numbered
    across images) in that order; cu_window_seqlens starts at 0 and adds each window's patch
    count (m^2 per merged patch), empty windows included, so it repeats boundaries: the model
    drops consecutive repeats (unique_consecutive) before use.
    """
    m = spatial_merge_size
    k = window_size // m // patch_size
    window_index, cu = [], [0]
    base = 0
    for t, h, w in grid_thw:
        gh, gw = h // m, w // m
        index = np.arange(t * gh * gw).reshape(t, gh, gw)
        pad_h, pad_w = k - gh % k, k - gw % k
        nwh, nww = (gh + pad_h) // k, (gw + pad_w) // k
        padded = np.full((t, gh + pad_h, gw + pad_w), -100, dtype=np.int64)
        padded[:, :gh, :gw] = index
        padded = padded.reshape(t, nwh, k, nww, k).transpose(0, 1, 3, 2, 4)
        padded = padded.reshape(t, nwh * nww, k, k)
        seqlens = (padded != -100).sum(axis=(2, 3)).reshape(-1)
        flat = padded.reshape(-1)
        window_index.append(flat[flat != -100] + base)
        cu.extend((np.cumsum(seqlens) * m * m + cu[-1]).tolist())
        base += t * gh * gw
    return np.concatenate(window_index).astype(np.int64), [int(c) for c in cu]


def unique_consecutive(values):
    """torch.unique_consecutive on a list: drops each value equal to the one before it."""
    return [v for i, v in enumerate(values) if i == 0 or v != values[i - 1]]


def full_cu_seqlens(grid_thw):
    """[0, ...] boundaries of full attention: one sequence per frame (h*w patches)."""
    cu = [0]
    for t, h, w in grid_thw:
        for _ in range(t):
            cu.append(cu[-1] + h * w)
    return cu


# ----------------------------------------------------------------------------------------------
# vision tower: modules (names as the checkpoint's visual.* tensors)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class PatchEmbed(nn.Module):
    def __init__(self, v):
        super().__init__()
        self.c, self.t, self.p = v["in_channels"], v["temporal_patch_size"], v["patch_size"]
        kernel = (self.t, self.p, self.p)
        self.proj = nn.Conv3d(self.c, v["hidden_size"], kernel, stride=kernel, bias=False)

    def forward(self, x):  # F32 [N, C*T*P*P] -> [N, D]
        x = x.view(-1, self.c, self.t, self.p, self.p)
        return self.proj(x).view(x.shape[0], -1)


class VisionAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=True)
        self.proj = nn.Linear(dim, dim, bias=True)

    def forward(self, x, cu_seqlens, cos, sin):
        """x [N, D]; cos/sin [N, hd]; attention only within [cu[i], cu[i+1])."""
        n, d = x.shape
        hd = d // self.heads
        q, k, v = self.qkv(x).reshape(n, 3, self.heads, hd).permute(1, 0, 2, 3).unbind(0)
        # apply_rotary_pos_emb_vision: in float32 (the inputs already are here).
        q = q * cos[:, None] + rotate_half(q) * sin[:, None]  # [N, H, hd]
        k = k * cos[:, None] + rotate_half(k) * sin[:, None]
        out = torch.empty_like(q)
        for b, e in zip(cu_seqlens[:-1], cu_seqlens[1:]):
            qs, ks, vs = (a[b:e].transpose(0, 1) for a in (q, k, v))  # [H, L, hd]
            scores = (qs @ ks.transpose(-1, -2)) * hd ** -0.5
            out[b:e] = (scores.softmax(-1, dtype=torch.float32) @ vs).transpose(0, 1)
        return self.proj(out.reshape(n, d))


class SwiGLU(nn.Module):
    """Qwen2_5_VLMLP (vision, bias=True) and Qwen2MLP (text, bias=False)."""

    def __init__(self, d, inner, bias):
        super().__init__()
        self.gate_proj = nn.Linear(d, inner, bias=bias)
        self.up_proj = nn.Linear(d, inner, bias=bias)
        self.down_proj = nn.Linear(inner, d, bias=bias)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class VisionBlock(nn.Module):
    def __init__(self, v):
        super().__init__()
        d = v["hidden_size"]
        self.norm1 = L.RMSNorm(d, VISION_RMS_EPS)
        self.norm2 = L.RMSNorm(d, VISION_RMS_EPS)
        self.attn = VisionAttention(d, v["num_heads"])
        self.mlp = SwiGLU(d, v["intermediate_size"], bias=True)

    def forward(self, x, cu_seqlens, cos, sin):
        x = x + self.attn(self.norm1(x), cu_seqlens, cos, sin)
        return x + self.mlp(self.norm2(x))


class PatchMerger(nn.Module):
    """RMSNorm each patch, concatenate runs of m^2 patches, Linear, exact GELU, Linear."""

    def __init__(self, v):
        super().__init__()
        d = v["hidden_size"]
        self.width = d * v["spatial_merge_size"] ** 2
        self.ln_q = L.RMSNorm(d, VISION_RMS_EPS)
        self.mlp = nn.Sequential(nn.Linear(self.width, self.width), nn.GELU(),
                                 nn.Linear(self.width, v["out_hidden_size"]))

    def forward(self, x):  # [N, D] -> [N / m^2, out_hidden]
        return self.mlp(self.ln_q(x).view(-1, self.width))


class VisionTower(nn.Module):
    def __init__(self, v):
        super().__init__()
        self.v = v
        self.patch_embed = PatchEmbed(v)
        self.blocks = nn.ModuleList(VisionBlock(v) for _ in range(v["depth"]))
        self.merger = PatchMerger(v)

    def forward(self, pixel_values, grid_thw, trace=None):
        """pixel_values F32 [N, C*T*P*P], grid_thw [(t, h, w), ...] -> F32 [N / m^2, out].

        trace (a dict, optional) receives named intermediates: patch_embed [N, D] and
        rotary [N, hd/2] in pixel_values' order; window_index, cu_window_seqlens (deduplicated)
        and cu_seqlens; block{i} [N, D] and merger [N / m^2, out] in window order."""
        v = self.v
        unit = v["spatial_merge_size"] ** 2
        head_dim = v["hidden_size"] // v["num_heads"]
        grid_thw = [tuple(int(a) for a in g) for g in grid_thw]
        x = torch.as_tensor(pixel_values, dtype=torch.float32)
        n_patches = sum(t * h * w for t, h, w in grid_thw)
        if x.shape[0] != n_patches:
            raise ValueError(f"pixel_values has {x.shape[0]} rows, the grids {n_patches}")
        x = self.patch_embed(x)  # [N, D]
        rotary = torch.from_numpy(rot_pos_emb(grid_thw, head_dim, v["spatial_merge_size"]))
        window_index, cu_window = get_window_index(grid_thw, v["window_size"], v["patch_size"],
                                                   v["spatial_merge_size"])
        cu_window = unique_consecutive(cu_window)
        cu_full = full_cu_seqlens(grid_thw)
        if trace is not None:
            trace.update(patch_embed=x.detach().clone(), rotary=rotary.clone(),
                         window_index=window_index, cu_window_seqlens=cu_window,
                         cu_seqlens=cu_full)
        # Reorder in units of m^2 patches so that each window is one contiguous run.
        widx = torch.from_numpy(window_index)
        n = x.shape[0]
        x = x.reshape(n // unit, unit, -1)[widx].reshape(n, -1)
        rotary = rotary.reshape(n // unit, unit, -1)[widx].reshape(n, -1)
        emb = torch.cat([rotary, rotary], dim=-1)  # [N, hd]
        cos, sin = emb.cos(), emb.sin()
        for i, blk in enumerate(self.blocks):
            cu = cu_full if i in v["fullatt_block_indexes"] else cu_window
            x = blk(x, cu, cos, sin)
            if trace is not None:
                trace[f"block{i}"] = x.detach().clone()
        x = self.merger(x)
        if trace is not None:
            trace["merger"] = x.detach().clone()
        return x[torch.argsort(widx)]


# ----------------------------------------------------------------------------------------------
# language model: M-RoPE positions and the Qwen2 decoder


def get_rope_index(input_ids, image_grid_thw, spatial_merge_size=2, image_token_id=151655,
                   video_token_id=151656, vision_start_token_id=151652):
    """(position ids int64 [3, S] (temporal, height, width), delta), as transformers'
    Qwen2_5_VLModel.get_rope_index for one unpadded sequence of images.

    The images are the vision_start tokens directly followed by an image token; for each, in
    order, the next image token at or after the cursor starts its run of t*h*w/m^2 tokens.
    Text before it advances all three axes from (largest position so far + 1); the image's
    tokens take temporal 0 (frame index * second_per_grid_t = 0 for images) and the row and
    column in the merged (h/m, w/m) grid, all offset by the position after that text. Text
    after the last image continues from the largest position + 1. delta = largest + 1 - S:
    decode step s (0-based token index S + s) is at S + s + delta on all three axes. Without
    grids: 0..S-1 and delta 0."""
    ids = [int(i) for i in input_ids]
    s = len(ids)
    if image_grid_thw is None or len(image_grid_thw) == 0:
        return np.tile(np.arange(s, dtype=np.int64), (3, 1)), 0
    starts = [i for i, tok in enumerate(ids) if tok == vision_start_token_id and i + 1 < s]
    n_images = sum(ids[i + 1] == image_token_id for i in starts)
    if any(ids[i + 1] == video_token_id for i in starts):
        raise NotImplementedError("video inputs are not supported")
    parts, st = [], 0
    next_pos = lambda: int(parts[-1].max()) + 1 if parts else 0
    for image in range(n_images):
        ed = ids.index(image_token_id, st)
        t, h, w = (int(a) for a in image_grid_thw[image])
        gt, gh, gw = t, h // spatial_merge_size, w // spatial_merge_size
        text_len = ed - st
        st_idx = next_pos()
        parts.append(np.tile(np.arange(text_len, dtype=np.int64), (3, 1)) + st_idx)
        t_index = np.zeros(gt * gh * gw, dtype=np.int64)  # long(frame * 0 * tokens_per_second)
        h_index = np.broadcast_to(np.arange(gh)[None, :, None], (gt, gh, gw)).reshape(-1)
        w_index = np.broadcast_to(np.arange(gw)[None, None, :], (gt, gh, gw)).reshape(-1)
        parts.append(np.stack([t_index, h_index, w_index]) + text_len + st_idx)
        st = ed + gt * gh * gw
    if st < s:
        parts.append(np.tile(np.arange(s - st, dtype=np.int64), (3, 1)) + next_pos())
    pos = np.concatenate(parts, axis=1)
    return pos, int(pos.max()) + 1 - s


def mrope_cos_sin(positions, head_dim, theta, mrope_section):
    """positions int [3, S] -> cos, sin F32 [S, head_dim].

    Qwen2_5_VLRotaryEmbedding (float32: inv_freq = 1 / theta^(2i/hd), angle = pos * inv_freq,
    emb = cat(angles, angles)) for each axis, then apply_multimodal_rotary_pos_emb's selection:
    emb.split(mrope_section * 2) and chunk j taken from axis j % 3, so in each half the first
    section[0] pairs rotate with the temporal position, the next section[1] with the height,
    the last section[2] with the width."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float()
                                / head_dim))
    pos = torch.as_tensor(np.asarray(positions), dtype=torch.float32)  # [3, S]
    freqs = pos[:, :, None] * inv_freq[None, None, :]  # [3, S, hd/2]
    emb = torch.cat([freqs, freqs], dim=-1)  # [3, S, hd]
    cos, sin = emb.cos(), emb.sin()
    sections = list(mrope_section) * 2
    pick = lambda e: torch.cat([c[j % 3] for j, c in enumerate(e.split(sections, dim=-1))], -1)
    return pick(cos), pick(sin)


class TextAttention(nn.Module):
    def __init__(self, t):
        super().__init__()
        d, self.h, self.kvh, self.hd = (t["hidden_size"], t["num_attention_heads"],
                                        t["num_key_value_heads"], t["head_dim"])
        self.q_proj = nn.Linear(d, self.h * self.hd, bias=True)
        self.k_proj = nn.Linear(d, self.kvh * self.hd, bias=True)
        self.v_proj = nn.Linear(d, self.kvh * self.hd, bias=True)
        self.o_proj = nn.Linear(self.h * self.hd, d, bias=False)

    def forward(self, x, cos, sin, cache=None):
        """x [S, D]; cos/sin [S, hd]; cache (k, v) [KVH, P, hd] of the P earlier tokens.
        Causal: token i sees the P earlier tokens and new tokens 0..i."""
        s = x.shape[0]
        q = self.q_proj(x).view(s, self.h, self.hd).transpose(0, 1)  # [H, S, hd]
        k = self.k_proj(x).view(s, self.kvh, self.hd).transpose(0, 1)  # [KVH, S, hd]
        v = self.v_proj(x).view(s, self.kvh, self.hd).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=1), torch.cat([cache[1], v], dim=1)
        past = k.shape[1] - s
        rep = self.h // self.kvh  # query head j reads kv head j // rep (repeat_kv)
        kr, vr = k.repeat_interleave(rep, dim=0), v.repeat_interleave(rep, dim=0)
        scores = (q @ kr.transpose(-1, -2)) * self.hd ** -0.5  # [H, S, P+S]
        mask = torch.triu(torch.full((s, past + s), float("-inf")), diagonal=past + 1)
        probs = (scores + mask).softmax(-1, dtype=torch.float32)
        o = (probs @ vr).transpose(0, 1).reshape(s, self.h * self.hd)
        return self.o_proj(o), (k, v)


class DecoderLayer(nn.Module):
    def __init__(self, t):
        super().__init__()
        d = t["hidden_size"]
        self.self_attn = TextAttention(t)
        self.mlp = SwiGLU(d, t["intermediate_size"], bias=False)
        self.input_layernorm = L.RMSNorm(d, t["rms_norm_eps"])
        self.post_attention_layernorm = L.RMSNorm(d, t["rms_norm_eps"])

    def forward(self, x, cos, sin, cache=None):
        a, new_cache = self.self_attn(self.input_layernorm(x), cos, sin, cache)
        x = x + a
        return x + self.mlp(self.post_attention_layernorm(x)), new_cache


class TextModel(nn.Module):
    def __init__(self, t):
        super().__init__()
        self.embed_tokens = nn.Embedding(t["vocab_size"], t["hidden_size"])
        self.layers = nn.ModuleList(DecoderLayer(t) for _ in range(t["num_hidden_layers"]))
        self.norm = L.RMSNorm(t["hidden_size"], t["rms_norm_eps"])


# ----------------------------------------------------------------------------------------------
# the whole model


class Qwen25VL(nn.Module):
    """Submodule names are the checkpoint's: visual.*, model.*, lm_head (absent when tied)."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        t = cfg.text
        self.visual = VisionTower(cfg.vision)
        self.model = TextModel(t)
        self.lm_head = (None if t["tie_word_embeddings"]
                        else nn.Linear(t["hidden_size"], t["vocab_size"], bias=False))

    # -- vision ----------------------------------------------------------------------------------
    @torch.no_grad()
    def vision_forward(self, pixel_values, grid_thw, trace=None):
        return self.visual(pixel_values, grid_thw, trace)

    # -- language --------------------------------------------------------------------------------
    def rope_index(self, input_ids, image_grid_thw):
        c = self.cfg
        return get_rope_index(input_ids, image_grid_thw, c.vision["spatial_merge_size"],
                              c.image_token_id, c.video_token_id, c.vision_start_token_id)

    def embed(self, input_ids, image_embeds=None):
        """Token embeddings [S, D], the image tokens' rows replaced by image_embeds in order
        (masked_scatter); their counts must agree."""
        ids = torch.as_tensor(input_ids, dtype=torch.long).reshape(-1)
        x = self.model.embed_tokens(ids)
        mask = ids == self.cfg.image_token_id
        n_feat = 0 if image_embeds is None else image_embeds.shape[0]
        if int(mask.sum()) != n_feat:
            raise ValueError(f"Image features and image tokens do not match: tokens "
                             f"{int(mask.sum())}, features {n_feat}")
        if n_feat:
            x = x.clone()
            x[mask] = image_embeds.to(x.dtype)
        return x

    def decoder(self, x, positions, caches=None):
        """x [S, D]; positions int [3, S]; caches: per-layer (k, v) of earlier tokens.
        Returns (hidden after the final norm [S, D], new caches)."""
        t = self.cfg.text
        cos, sin = mrope_cos_sin(positions, t["head_dim"], t["rope_theta"], t["mrope_section"])
        new_caches = []
        for i, layer in enumerate(self.model.layers):
            x, c = layer(x, cos, sin, None if caches is None else caches[i])
            new_caches.append(c)
        return self.model.norm(x), new_caches

    def logits(self, h):
        w = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return h @ w.t()

    @torch.no_grad()
    def forward(self, input_ids, pixel_values=None, image_grid_thw=None):
        """input_ids [S] (each image expanded to its t*h*w/m^2 image tokens) -> logits
        F32 [S, vocab]."""
        image_embeds = None
        if pixel_values is not None:
            image_embeds = self.vision_forward(pixel_values, image_grid_thw)
        positions, _ = self.rope_index(input_ids, image_grid_thw)
        h, _ = self.decoder(self.embed(input_ids, image_embeds), positions)
        return self.logits(h)

    @torch.no_grad()
    def generate(self, input_ids, pixel_values=None, image_grid_thw=None, max_new_tokens=16,
                 eos_token_id=None):
        """Greedy decoding with a KV cache. Returns (new token ids, logits F32 [k, vocab] that
        chose each of them: the prefill's last row, then each step's)."""
        image_embeds = None
        if pixel_values is not None:
            image_embeds = self.vision_forward(pixel_values, image_grid_thw)
        positions, delta = self.rope_index(input_ids, image_grid_thw)
        h, caches = self.decoder(self.embed(input_ids, image_embeds), positions)
        logits = self.logits(h[-1:])
        tokens, all_logits = [], []
        n = len(input_ids)
        for step in range(max_new_tokens):
            all_logits.append(logits[0])
            tok = int(logits[0].argmax())
            tokens.append(tok)
            if tok == eos_token_id or step == max_new_tokens - 1:
                break
            pos = np.full((3, 1), n + step + delta, dtype=np.int64)
            h, caches = self.decoder(self.embed([tok]), pos, caches)
            logits = self.logits(h)
        return tokens, torch.stack(all_logits)

    # -- checkpoint ------------------------------------------------------------------------------
    def hf_state_dict(self):
        """{tensor name as published: F32 numpy array}."""
        return {k: p.detach().float().numpy() for k, p in self.state_dict().items()}

    def load_hf_tensors(self, tensors):
        """Loads the published names (visual.*, model.*, lm_head.weight) or transformers >= 4.52's
        (model.visual.*, model.language_model.*). With tied embeddings lm_head.weight, if
        present, is ignored: the output matrix is embed_tokens'."""
        def canon(name):
            if name.startswith("model.visual."):
                return name[len("model."):]
            if name.startswith("model.language_model."):
                return "model." + name[len("model.language_model."):]
            return name
        tensors = {canon(k): v for k, v in tensors.items()}
        if self.lm_head is None:
            tensors.pop("lm_head.weight", None)
        own = self.state_dict()
        missing = sorted(set(own) - set(tensors))
        extra = sorted(set(tensors) - set(own))
        if missing or extra:
            raise KeyError(f"checkpoint lacks {missing[:5]}, has unexpected {extra[:5]}")
        with torch.no_grad():
            for k, p in own.items():
                src = torch.from_numpy(np.ascontiguousarray(tensors[k], dtype=np.float32))
                if tuple(src.shape) != tuple(p.shape):
                    raise ValueError(f"{k}: shape {tuple(src.shape)} != {tuple(p.shape)}")
                p.copy_(src)


def load_qwen25vl(model_dir):
    m = Qwen25VL(Config.load(model_dir))
    m.load_hf_tensors(L.read_checkpoint_tensors(model_dir))
    m.eval()
    return m


# ----------------------------------------------------------------------------------------------
# tiny random checkpoints

# The special tokens sit after the tokenizer's BPE vocabulary in runtime/tiny/bytelevel_bpe's
# order (<|endoftext|> first, as 151643 in the published one); 498 + 14 = 512 = vocab_size.
TINY_SPECIAL_BASE = 498
TINY_CONFIG = {
    "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
    "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
    "tie_word_embeddings": False,
    "bos_token_id": TINY_SPECIAL_BASE, "eos_token_id": TINY_SPECIAL_BASE + 2,  # <|im_end|>
    "vision_start_token_id": TINY_SPECIAL_BASE + 9, "vision_end_token_id": TINY_SPECIAL_BASE + 10,
    "image_token_id": TINY_SPECIAL_BASE + 12, "video_token_id": TINY_SPECIAL_BASE + 13,
    # window_size 56 = 2 merged patches of 2 x 14 px per side: windows of 2 x 2 merged patches.
    "vision_config": {"depth": 4, "fullatt_block_indexes": [1, 3], "hidden_act": "silu",
                      "hidden_size": 32, "in_chans": 3, "intermediate_size": 48, "num_heads": 2,
                      "out_hidden_size": 64, "patch_size": 14, "spatial_merge_size": 2,
                      "temporal_patch_size": 2, "tokens_per_second": 2, "window_size": 56},
}


def tiny_config(cfg_overrides=None):
    """TINY_CONFIG updated by cfg_overrides (flat layout keys; vision_config is merged key by
    key; rope_scaling replaced whole)."""
    d = json.loads(json.dumps(TINY_CONFIG))
    for k, val in (cfg_overrides or {}).items():
        if k == "vision_config":
            d["vision_config"].update(val)
        else:
            d[k] = val
    return Config(d)


def random_tensors(model, seed):
    """Deterministic random weights, drawn with numpy in sorted-name order: matrices (and the
    conv, and embeddings) N(0, 1/fan_in) so activations stay O(1); biases N(0, 0.1^2); norm
    weights 1 + N(0, 0.1^2)."""
    rng = np.random.RandomState(seed)
    out = {}
    for name, p in sorted(model.state_dict().items()):
        shape = tuple(p.shape)
        x = rng.standard_normal(shape).astype(np.float32)
        if "norm" in name or "ln_q" in name:
            x = 1 + 0.1 * x
        elif name.endswith(".bias"):
            x = 0.1 * x
        elif name == "model.embed_tokens.weight":
            pass
        else:
            x = x / math.sqrt(int(np.prod(shape[1:])))
        out[name] = x.astype(np.float32)
    return out


def preprocessor_config(vision, min_pixels=56 * 56, max_pixels=None):
    """preprocessor_config.json of Qwen2.5-VL's form for this vision tower (as
    runtime/io/preprocessor_config.cc's Qwen2VLPreprocessorConfigToJson writes it).
    max_pixels defaults to 64 merged patches (tiny images)."""
    factor = vision["patch_size"] * vision["spatial_merge_size"]
    if max_pixels is None:
        max_pixels = factor * factor * 64
    return {"do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
            "image_mean": list(qwen2vl_image.OPENAI_CLIP_MEAN),
            "image_processor_type": "Qwen2VLImageProcessor",
            "image_std": list(qwen2vl_image.OPENAI_CLIP_STD), "max_pixels": max_pixels,
            "merge_size": vision["spatial_merge_size"], "min_pixels": min_pixels,
            "patch_size": vision["patch_size"], "processor_class": "Qwen2_5_VLProcessor",
            "resample": 3, "rescale_factor": 1 / 255,
            "size": {"longest_edge": max_pixels, "shortest_edge": min_pixels},
            "temporal_patch_size": vision["temporal_patch_size"]}


def _shard_of(sizes, shards):
    """runtime/tiny/tiny_checkpoint.cc's split: tensors in order, a new shard once the bytes
    before reach the next 1/shards of the total, or when only one tensor per shard remains."""
    total, s, before, empty, out = sum(sizes), 0, 0, True, []
    for i, size in enumerate(sizes):
        remaining = len(sizes) - i
        if not empty and s < shards - 1 and (before * shards >= total * (s + 1)
                                             or remaining == shards - 1 - s):
            s += 1
        out.append(s)
        empty = False
        before += size
    return out


def write_random_checkpoint(out_dir, cfg_overrides=None, seed=0, dtype="F32", shards=1):
    """Writes a tiny random Qwen2.5-VL checkpoint in the published layout: config.json (flat,
    Config.to_json), model.safetensors or model-0000k-of-0000n.safetensors +
    model.safetensors.index.json, preprocessor_config.json. Returns the F32 tensors drawn
    (before any BF16 rounding)."""
    if dtype not in ("F32", "BF16"):
        raise ValueError(f"dtype {dtype}: expected F32 or BF16")
    os.makedirs(out_dir, exist_ok=True)
    cfg = tiny_config(cfg_overrides)
    cfg.torch_dtype = {"F32": "float32", "BF16": "bfloat16"}[dtype]
    tensors = random_tensors(Qwen25VL(cfg), seed)
    names = sorted(tensors)
    width = 4 if dtype == "F32" else 2
    sizes = [tensors[n].size * width for n in names]
    if shards <= 1:
        L.write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors, dtype)
    else:
        where = _shard_of(sizes, shards)
        weight_map = {}
        for k in range(shards):
            fn = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
            part = {n: tensors[n] for n, s in zip(names, where) if s == k}
            weight_map.update({n: fn for n in part})
            L.write_safetensors(os.path.join(out_dir, fn), part, dtype)
        index = {"metadata": {"total_size": sum(sizes)},
                 "weight_map": {n: weight_map[n] for n in names}}
        with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
            f.write(json.dumps(index, indent=2) + "\n")
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        f.write(cfg.to_json())
    with open(os.path.join(out_dir, "preprocessor_config.json"), "w") as f:
        f.write(json.dumps(preprocessor_config(cfg.vision), indent=2, sort_keys=True) + "\n")
    return tensors


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="Writes a tiny random Qwen2.5-VL checkpoint.")
    ap.add_argument("out_dir")
    ap.add_argument("--dtype", default="F32", choices=["F32", "BF16"])
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--config", default="{}", help="JSON object of config.json overrides")
    a = ap.parse_args()
    write_random_checkpoint(a.out_dir, json.loads(a.config), a.seed, a.dtype, a.shards)
