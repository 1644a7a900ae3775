"""LLaVA-1.5 in PyTorch, written from the architecture in docs/design.md §2, not from the C++.

Used as the independent reference the C++ runtime is checked against, and as the model the
default checkpoint is trained with. Reads and writes the Hugging Face llava-hf layout:
config.json + model.safetensors (or shards + model.safetensors.index.json) + tokenizer.model.
Only numpy and torch are needed (no transformers / safetensors packages).
"""
import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# ----------------------------------------------------------------------------------------------
# safetensors I/O

_DTYPES = {"F32": (np.float32, 4), "F16": (np.float16, 2), "BF16": (np.uint16, 2)}


def _bf16_to_f32(raw_u16):
    return (raw_u16.astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16(x):
    """Round-to-nearest-even float32 -> bfloat16 bits (uint16)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounding = ((bits >> 16) & 1) + 0x7FFF
    return ((bits + rounding) >> 16).astype(np.uint16)


def read_safetensors(path):
    """Returns {name: float32 numpy array}."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        np_dtype, size = _DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        raw = np.frombuffer(data, dtype=np_dtype, count=(end - begin) // size, offset=base + begin)
        arr = _bf16_to_f32(raw) if info["dtype"] == "BF16" else raw.astype(np.float32)
        out[name] = arr.reshape(info["shape"])
    return out


def write_safetensors(path, tensors, dtype="F32"):
    """tensors: {name: float array}; written in sorted name order with the given dtype."""
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        arr = np.asarray(tensors[name], dtype=np.float32)
        if dtype == "F32":
            raw = arr.astype("<f4").tobytes()
        elif dtype == "F16":
            raw = arr.astype("<f2").tobytes()
        elif dtype == "BF16":
            raw = _f32_to_bf16(arr).astype("<u2").tobytes()
        else:
            raise ValueError(f"unknown dtype {dtype}")
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * ((8 - len(hjson) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for c in chunks:
            f.write(c)


def read_checkpoint_tensors(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        out = {}
        for fn in files:
            out.update(read_safetensors(os.path.join(model_dir, fn)))
        return out
    return read_safetensors(os.path.join(model_dir, "model.safetensors"))


# ----------------------------------------------------------------------------------------------
# config (defaults as in transformers' LlavaConfig / CLIPVisionConfig / LlamaConfig)

_CLIP_DEFAULTS = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                      num_attention_heads=12, num_channels=3, image_size=224, patch_size=32,
                      hidden_act="quick_gelu", layer_norm_eps=1e-5, projection_dim=512)
# LlavaConfig builds this CLIP config when vision_config is absent.
_CLIP_LLAVA_DEFAULTS = dict(_CLIP_DEFAULTS, hidden_size=1024, intermediate_size=4096,
                            num_hidden_layers=24, num_attention_heads=16, image_size=336,
                            patch_size=14, projection_dim=768)
_LLAMA_DEFAULTS = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                       num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=None,
                       hidden_act="silu", max_position_embeddings=2048, rms_norm_eps=1e-6,
                       rope_theta=10000.0, bos_token_id=1, eos_token_id=2,
                       tie_word_embeddings=False, head_dim=None)


class Config:
    def __init__(self, d):
        self.raw = d
        v = d.get("vision_config")
        self.vision = dict(_CLIP_LLAVA_DEFAULTS) if v is None else dict(_CLIP_DEFAULTS, **v)
        t = dict(_LLAMA_DEFAULTS, **(d.get("text_config") or {}))
        if t["num_key_value_heads"] is None:
            t["num_key_value_heads"] = t["num_attention_heads"]
        if t["head_dim"] is None:
            t["head_dim"] = t["hidden_size"] // t["num_attention_heads"]
        self.text = t
        self.image_token_index = d.get("image_token_index", 32000)
        self.vision_feature_layer = d.get("vision_feature_layer", -2)
        self.vision_feature_select_strategy = d.get("vision_feature_select_strategy", "default")
        self.projector_hidden_act = d.get("projector_hidden_act", "gelu")
        self.projector_bias = d.get("multimodal_projector_bias", True)

    @staticmethod
    def load(model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            return Config(json.load(f))

    @property
    def num_visual_tokens(self):
        n = (self.vision["image_size"] // self.vision["patch_size"]) ** 2
        return n + (1 if self.vision_feature_select_strategy == "full" else 0)


# ----------------------------------------------------------------------------------------------
# modules


class LayerNorm(nn.LayerNorm):
    """nn.LayerNorm computed in float32 (identical for float32 inputs). Under CPU bf16 autocast
    torch 1.13 does not cast layer_norm's input, and a bf16 input with f32 weights fails."""

    def forward(self, x):
        return F.layer_norm(x.float(), self.normalized_shape, self.weight, self.bias, self.eps)


class ClipAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x):  # x [B, S, D]
        b, s, d = x.shape
        hd = d // self.heads
        q = self.q_proj(x).view(b, s, self.heads, hd).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.heads, hd).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-1, -2)) * (hd ** -0.5)
        o = att.softmax(-1) @ v
        return self.out_proj(o.transpose(1, 2).reshape(b, s, d))


class ClipLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["hidden_size"]
        self.self_attn = ClipAttention(d, c["num_attention_heads"])
        self.layer_norm1 = LayerNorm(d, eps=c["layer_norm_eps"])
        self.layer_norm2 = LayerNorm(d, eps=c["layer_norm_eps"])
        self.fc1 = nn.Linear(d, c["intermediate_size"])
        self.fc2 = nn.Linear(c["intermediate_size"], d)
        self.act = c["hidden_act"]

    def forward(self, x):
        x = x + self.self_attn(self.layer_norm1(x))
        h = self.fc1(self.layer_norm2(x))
        h = h * torch.sigmoid(1.702 * h) if self.act == "quick_gelu" else F.gelu(h)
        return x + self.fc2(h)


class ClipVision(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, p = c["hidden_size"], c["patch_size"]
        self.c = c
        self.patch_embedding = nn.Conv2d(c["num_channels"], d, p, stride=p, bias=False)
        self.class_embedding = nn.Parameter(torch.zeros(d))
        n_pos = (c["image_size"] // p) ** 2 + 1
        self.position_embedding = nn.Embedding(n_pos, d)
        self.pre_layrnorm = LayerNorm(d, eps=c["layer_norm_eps"])
        self.layers = nn.ModuleList(ClipLayer(c) for _ in range(c["num_hidden_layers"]))
        self.post_layernorm = LayerNorm(d, eps=c["layer_norm_eps"])

    def hidden_states(self, pixels, upto):
        """Returns hidden states after `upto` encoder layers (0 = embeddings after pre-LN)."""
        b = pixels.shape[0]
        x = self.patch_embedding(pixels).flatten(2).transpose(1, 2)  # [B, P, D]
        cls = self.class_embedding.to(x.dtype).expand(b, 1, -1)
        x = torch.cat([cls, x], dim=1) + self.position_embedding.weight.to(x.dtype)
        x = self.pre_layrnorm(x)
        for layer in self.layers[:upto]:
            x = layer(x)
        return x


def rope_cos_sin(positions, head_dim, theta):
    """positions: int tensor [...]; returns cos, sin [..., head_dim] (rotate-half layout)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    f = positions.to(torch.float64)[..., None] * inv
    emb = torch.cat([f, f], dim=-1)
    return emb.cos().float(), emb.sin().float()


def apply_rope(x, cos, sin):  # x [B, H, S, hd]; cos/sin [B, S, hd]
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None] + rot * sin[:, None]


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


class LlamaAttention(nn.Module):
    def __init__(self, t):
        super().__init__()
        d, self.h, self.kvh, self.hd = (t["hidden_size"], t["num_attention_heads"],
                                        t["num_key_value_heads"], t["head_dim"])
        self.q_proj = nn.Linear(d, self.h * self.hd, bias=False)
        self.k_proj = nn.Linear(d, self.kvh * self.hd, bias=False)
        self.v_proj = nn.Linear(d, self.kvh * self.hd, bias=False)
        self.o_proj = nn.Linear(self.h * self.hd, d, bias=False)

    def forward(self, x, cos, sin, mask, cache=None):
        """x [B, S, D]; mask additive [B or 1, 1, S, S_total]; cache: (k, v) of earlier tokens."""
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kvh, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kvh, self.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
        new_cache = (k, v)
        rep = self.h // self.kvh
        kr = k.repeat_interleave(rep, dim=1)
        vr = v.repeat_interleave(rep, dim=1)
        att = (q @ kr.transpose(-1, -2)) * (self.hd ** -0.5) + mask
        probs = att.float().softmax(-1).to(q.dtype)
        o = probs @ vr
        return self.o_proj(o.transpose(1, 2).reshape(b, s, self.h * self.hd)), new_cache, probs


class LlamaLayer(nn.Module):
    def __init__(self, t):
        super().__init__()
        d = t["hidden_size"]
        self.self_attn = LlamaAttention(t)
        self.input_layernorm = RMSNorm(d, t["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(d, t["rms_norm_eps"])
        self.gate_proj = nn.Linear(d, t["intermediate_size"], bias=False)
        self.up_proj = nn.Linear(d, t["intermediate_size"], bias=False)
        self.down_proj = nn.Linear(t["intermediate_size"], d, bias=False)

    def forward(self, x, cos, sin, mask, cache=None):
        a, new_cache, probs = self.self_attn(self.input_layernorm(x), cos, sin, mask, cache)
        x = x + a
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h)), new_cache, probs


class Llava(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        t, v = cfg.text, cfg.vision
        self.vision = ClipVision(v)
        self.linear_1 = nn.Linear(v["hidden_size"], t["hidden_size"], bias=cfg.projector_bias)
        self.linear_2 = nn.Linear(t["hidden_size"], t["hidden_size"], bias=cfg.projector_bias)
        self.embed_tokens = nn.Embedding(t["vocab_size"], t["hidden_size"])
        self.layers = nn.ModuleList(LlamaLayer(t) for _ in range(t["num_hidden_layers"]))
        self.norm = RMSNorm(t["hidden_size"], t["rms_norm_eps"])
        self.lm_head = nn.Linear(t["hidden_size"], t["vocab_size"], bias=False)

    # -- vision ----------------------------------------------------------------------------------
    def vision_features(self, pixels):
        """pixels [B, 3, S, S] normalised -> features [B, V, D_vision] at vision_feature_layer."""
        n = self.cfg.vision["num_hidden_layers"]
        fl = self.cfg.vision_feature_layer
        upto = fl if fl >= 0 else n + 1 + fl  # hidden_states index: 0 = embeddings
        x = self.vision.hidden_states(pixels, upto)
        if self.cfg.vision_feature_select_strategy == "default":
            x = x[:, 1:]
        return x

    def project(self, feats):
        h = self.linear_1(feats)
        h = F.gelu(h) if self.cfg.projector_hidden_act == "gelu" else F.gelu(h, approximate="tanh")
        return self.linear_2(h)

    # -- language --------------------------------------------------------------------------------
    def embed(self, input_ids, image_embeds):
        """input_ids [B, S] with image_token_index at image positions; image_embeds [B, V, D]."""
        x = self.embed_tokens(input_ids.clamp(max=self.embed_tokens.num_embeddings - 1))
        mask = input_ids == self.cfg.image_token_index
        if image_embeds is not None and mask.any():
            x = x.clone()
            x[mask] = image_embeds.reshape(-1, image_embeds.shape[-1]).to(x.dtype)
        return x

    def decoder(self, x, positions, attn_mask=None, caches=None, want_probs=False):
        """x [B, S, D]; positions [B, S]; attn_mask additive [B, 1, S, S_total] or None (causal).

        Returns hidden after final norm, new caches, and (optionally) per-layer attention probs.
        """
        b, s, _ = x.shape
        t = self.cfg.text
        cos, sin = rope_cos_sin(positions, t["head_dim"], t["rope_theta"])
        past = 0 if caches is None else caches[0][0].shape[2]
        if attn_mask is None:
            causal = torch.full((s, past + s), float("-inf"))
            causal = torch.triu(causal, diagonal=past + 1)
            attn_mask = causal[None, None]
        new_caches, all_probs = [], []
        for i, layer in enumerate(self.layers):
            x, c, p = layer(x, cos, sin, attn_mask, None if caches is None else caches[i])
            new_caches.append(c)
            if want_probs:
                all_probs.append(p)
        return self.norm(x), new_caches, all_probs

    def logits(self, h):
        return self.lm_head(h)

    # -- generation ------------------------------------------------------------------------------
    @torch.no_grad()
    def greedy(self, pixels, input_ids, max_new_tokens, eos_id=None):
        """Single-sequence greedy decoding. Returns (token ids, prefill logits of the last row)."""
        feats = self.vision_features(pixels)
        emb = self.embed(input_ids, self.project(feats))
        s = input_ids.shape[1]
        h, caches, _ = self.decoder(emb, torch.arange(s)[None])
        last_logits = self.logits(h[:, -1])
        out = []
        logits = last_logits
        pos = s
        for _ in range(max_new_tokens):
            tok = int(logits.argmax(-1)[0])
            out.append(tok)
            if eos_id is not None and tok == eos_id:
                break
            x = self.embed_tokens(torch.tensor([[tok]]))
            h, caches, _ = self.decoder(x, torch.tensor([[pos]]), caches=caches,
                                        attn_mask=torch.zeros(1, 1, 1, pos + 1))
            logits = self.logits(h[:, -1])
            pos += 1
        return out, last_logits[0]

    # -- llava-hf state dict ---------------------------------------------------------------------
    def hf_state_dict(self):
        """Tensors named as in llava-hf/llava-1.5-7b-hf (legacy prefixes)."""
        out = {}
        vp = "vision_tower.vision_model."
        v = self.vision
        out[vp + "embeddings.patch_embedding.weight"] = v.patch_embedding.weight
        out[vp + "embeddings.class_embedding"] = v.class_embedding
        out[vp + "embeddings.position_embedding.weight"] = v.position_embedding.weight
        for n in ("weight", "bias"):
            out[vp + "pre_layrnorm." + n] = getattr(v.pre_layrnorm, n)
            out[vp + "post_layernorm." + n] = getattr(v.post_layernorm, n)
        for i, l in enumerate(v.layers):
            p = f"{vp}encoder.layers.{i}."
            for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
                m = getattr(l.self_attn, proj)
                out[p + f"self_attn.{proj}.weight"] = m.weight
                out[p + f"self_attn.{proj}.bias"] = m.bias
            for ln in ("layer_norm1", "layer_norm2"):
                out[p + f"{ln}.weight"] = getattr(l, ln).weight
                out[p + f"{ln}.bias"] = getattr(l, ln).bias
            for fc in ("fc1", "fc2"):
                out[p + f"mlp.{fc}.weight"] = getattr(l, fc).weight
                out[p + f"mlp.{fc}.bias"] = getattr(l, fc).bias
        for lin in ("linear_1", "linear_2"):
            m = getattr(self, lin)
            out[f"multi_modal_projector.{lin}.weight"] = m.weight
            if m.bias is not None:
                out[f"multi_modal_projector.{lin}.bias"] = m.bias
        lp = "language_model.model."
        out[lp + "embed_tokens.weight"] = self.embed_tokens.weight
        out[lp + "norm.weight"] = self.norm.weight
        for i, l in enumerate(self.layers):
            p = f"{lp}layers.{i}."
            for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
                out[p + f"self_attn.{proj}.weight"] = getattr(l.self_attn, proj).weight
            for proj in ("gate_proj", "up_proj", "down_proj"):
                out[p + f"mlp.{proj}.weight"] = getattr(l, proj).weight
            out[p + "input_layernorm.weight"] = l.input_layernorm.weight
            out[p + "post_attention_layernorm.weight"] = l.post_attention_layernorm.weight
        out["language_model.lm_head.weight"] = self.lm_head.weight
        return {k: t.detach().float().cpu().numpy() for k, t in out.items()}

    def load_hf_tensors(self, tensors):
        """Loads from llava-hf tensors, accepting legacy and newer prefixes."""
        def canon(name):
            for new, old in (("model.language_model.", "language_model.model."),
                             ("model.vision_tower.", "vision_tower."),
                             ("model.multi_modal_projector.", "multi_modal_projector.")):
                if name.startswith(new):
                    return old + name[len(new):]
            if name == "lm_head.weight":
                return "language_model.lm_head.weight"
            return name
        tensors = {canon(k): v for k, v in tensors.items()}
        own = self.hf_state_dict()
        missing = [k for k in own if k not in tensors]
        if missing:
            raise KeyError(f"checkpoint lacks tensors: {missing[:5]}")
        # Map back onto parameters by walking hf_state_dict's construction order.
        params = self._hf_param_refs()
        with torch.no_grad():
            for k, p in params.items():
                src = torch.from_numpy(np.ascontiguousarray(tensors[k]))
                if tuple(src.shape) != tuple(p.shape):
                    raise ValueError(f"{k}: shape {tuple(src.shape)} != {tuple(p.shape)}")
                p.copy_(src)

    def _hf_param_refs(self):
        """{llava-hf name: Parameter}; _collect_refs lists them in hf_state_dict's order."""
        names = list(self.hf_state_dict().keys())
        refs = self._collect_refs()
        assert len(refs) == len(names)
        return dict(zip(names, refs))

    def _collect_refs(self):
        v = self.vision
        refs = [v.patch_embedding.weight, v.class_embedding, v.position_embedding.weight]
        for n in ("weight", "bias"):
            refs += [getattr(v.pre_layrnorm, n), getattr(v.post_layernorm, n)]
        for l in v.layers:
            for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
                m = getattr(l.self_attn, proj)
                refs += [m.weight, m.bias]
            for ln in ("layer_norm1", "layer_norm2"):
                refs += [getattr(l, ln).weight, getattr(l, ln).bias]
            for fc in ("fc1", "fc2"):
                refs += [getattr(l, fc).weight, getattr(l, fc).bias]
        for lin in ("linear_1", "linear_2"):
            m = getattr(self, lin)
            refs.append(m.weight)
            if m.bias is not None:
                refs.append(m.bias)
        refs += [self.embed_tokens.weight, self.norm.weight]
        for l in self.layers:
            for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
                refs.append(getattr(l.self_attn, proj).weight)
            for proj in ("gate_proj", "up_proj", "down_proj"):
                refs.append(getattr(l, proj).weight)
            refs += [l.input_layernorm.weight, l.post_attention_layernorm.weight]
        refs.append(self.lm_head.weight)
        return refs


def load_llava(model_dir):
    cfg = Config.load(model_dir)
    m = Llava(cfg)
    m.load_hf_tensors(read_checkpoint_tensors(model_dir))
    m.eval()
    return m


def save_llava(model, out_dir, dtype="BF16", config_extra=None):
    """Writes config.json + model.safetensors in the llava-hf layout (tokenizer not included)."""
    os.makedirs(out_dir, exist_ok=True)
    cfg = dict(model.cfg.raw)
    if config_extra:
        cfg.update(config_extra)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), model.hf_state_dict(), dtype)


# ----------------------------------------------------------------------------------------------
# preprocessing (llava-hf CLIPImageProcessor, set by preprocessor_config.json)

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
# CLIPImageProcessor's own defaults, for keys a preprocessor_config.json leaves out.
_CLIP_PROCESSOR_DEFAULTS = dict(do_resize=True, size={"shortest_edge": 224}, resample=3,
                                do_center_crop=True, crop_size={"height": 224, "width": 224},
                                do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
                                image_mean=list(CLIP_MEAN), image_std=list(CLIP_STD),
                                do_convert_rgb=True)


def clip_processor_config(size):
    """The preprocessor_config.json llava-hf ships for a CLIP tower of `size` px
    (llava-hf/llava-1.5-7b-hf at 336)."""
    return {"crop_size": {"height": size, "width": size}, "do_center_crop": True,
            "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
            "image_mean": list(CLIP_MEAN), "image_processor_type": "CLIPImageProcessor",
            "image_std": list(CLIP_STD), "processor_class": "LlavaProcessor", "resample": 3,
            "rescale_factor": 1 / 255, "size": {"shortest_edge": size}}


def load_preprocessor_config(model_dir):
    """model_dir/preprocessor_config.json, or clip_processor_config of the model's image size."""
    path = os.path.join(model_dir, "preprocessor_config.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return clip_processor_config(Config.load(model_dir).vision["image_size"])


def preprocess(image, size, proc=None):
    """PIL image -> float tensor [1, 3, H, W] as CLIPImageProcessor computes it with `proc` (a
    preprocessor_config.json dict; None = clip_processor_config(size)): RGB (alpha composited
    on white), resize with PIL's `resample` filter (reducing_gap=None) of the shortest edge to
    size.shortest_edge (long edge int(s * long / short)) or to size {height, width}, centre crop
    (top = (h - crop_h) // 2), float32(float64(x) * rescale_factor), (x - mean) / std in
    float32."""
    from PIL import Image
    p = dict(_CLIP_PROCESSOR_DEFAULTS, **(clip_processor_config(size) if proc is None else proc))
    if image.mode != "RGB":
        rgba = image.convert("RGBA")
        bg = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        image = Image.alpha_composite(bg, rgba).convert("RGB")
    if p["do_resize"]:
        target = p["size"] if isinstance(p["size"], dict) else {"shortest_edge": p["size"]}
        if "shortest_edge" in target:
            s = target["shortest_edge"]
            w, h = image.size
            short, long = (w, h) if w <= h else (h, w)
            new_long = int(s * long / short)
            nw, nh = (s, new_long) if w <= h else (new_long, s)
        else:
            nw, nh = target["width"], target["height"]
        image = image.resize((nw, nh), resample=p["resample"], reducing_gap=None)
    arr = np.asarray(image)
    if p["do_center_crop"]:
        crop = p["crop_size"]
        ch, cw = (crop["height"], crop["width"]) if isinstance(crop, dict) else (crop, crop)
        top, left = (arr.shape[0] - ch) // 2, (arr.shape[1] - cw) // 2
        arr = arr[top:top + ch, left:left + cw]
    if p["do_rescale"]:
        x = (arr.astype(np.float64) * p["rescale_factor"]).astype(np.float32)
    else:
        x = arr.astype(np.float32)
    if p["do_normalize"]:
        mean, std = p["image_mean"], p["image_std"]
        mean = [mean] * 3 if isinstance(mean, (int, float)) else mean
        std = [std] * 3 if isinstance(std, (int, float)) else std
        x = (x - np.array(mean, np.float32)) / np.array(std, np.float32)
    return torch.from_numpy(x.transpose(2, 0, 1).copy())[None]


def prompt_ids(sp, question, image_token_index, num_visual_tokens, bos_id=1):
    """Token ids for `USER: <image>\\n{question} ASSISTANT:` with the image expanded.

    As LLaVA's own tokenizer_image_token (llava/mm_utils.py): the text on each side of <image>
    is encoded on its own, each with SentencePiece's dummy-prefix space, so "USER: " ends in a
    lone '▁' and "\\n{question}..." starts with one ([.., 29871, <image>, 29871, 13, ..] with
    LLaMA's vocabulary, the ids transformers' llava tests show). A literal "<image>" inside the
    question stays text.
    """
    before = sp.encode("USER: ")
    after = sp.encode("\n" + question + " ASSISTANT:")
    return [bos_id] + before + [image_token_index] * num_visual_tokens + after


# ----------------------------------------------------------------------------------------------
# llava-hf side files (the same files, byte for byte, as hapctl make-tiny writes with
# runtime/io/side_files.cc; tests/parity checks that)

LLAVA15_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] != 'system' %}"
    "{{ message['role'].upper() + ': '}}{% endif %}"
    "{# Render all images first #}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{ '<image>\n' }}{% endfor %}"
    "{# Render all text next #}"
    "{% if message['role'] != 'assistant' %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{ content['text'] + ' '}}{% endfor %}"
    "{% else %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{% generation %}{{ content['text'] + ' '}}{% endgeneration %}{% endfor %}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}")


def _added_token(content, special=None):
    t = {"content": content, "lstrip": False, "normalized": False, "rstrip": False,
         "single_word": False}
    if special is not None:
        t["special"] = special
    return t


def tokenizer_json(cfg, sp):
    """tokenizer.json for a SentencePiece BPE tokenizer.model in llava-hf's (legacy) form, as
    runtime/text/tokenizer_json_writer.cc writes it: every split of a normal piece into two
    pieces is a merge, ranked by the merged piece's score, then its id; <image> and <pad> are
    added after the pieces. Key order as the tokenizers library writes the file."""
    n = sp.get_piece_size()
    pieces = [sp.id_to_piece(i) for i in range(n)]
    id_of = {p: i for i, p in enumerate(pieces)}
    cands = []
    for i, p in enumerate(pieces):
        if sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i) or sp.is_byte(i):
            continue
        for k in range(1, len(p)):
            if p[:k] in id_of and p[k:] in id_of:
                cands.append((-sp.get_score(i), i, p[:k], p[k:]))
    cands.sort(key=lambda c: (c[0], c[1]))  # stable: splits keep their order
    special = lambda i, content: {"id": i, "content": content, "single_word": False,
                                  "lstrip": False, "rstrip": False, "normalized": False,
                                  "special": True}
    added = [special(i, pieces[i]) for i in (sp.unk_id(), sp.bos_id(), sp.eos_id()) if i >= 0]
    extra = []
    if cfg.image_token_index >= n:
        extra.append((cfg.image_token_index, "<image>"))
    pad = cfg.text.get("pad_token_id")
    if pad is None:
        pad = cfg.raw.get("pad_token_id")
    if pad is not None and pad >= n and pad != cfg.image_token_index:
        extra.append((pad, "<pad>"))
    added += [special(i, c) for i, c in sorted(extra)]
    bos = pieces[sp.bos_id()]
    item = lambda kind, name, type_id: {kind: {"id": name, "type_id": type_id}}
    space = "\u2581"
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": space},
            {"type": "Replace", "pattern": {"String": " "}, "content": space}]},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [item("SpecialToken", bos, 0), item("Sequence", "A", 0)],
            "pair": [item("SpecialToken", bos, 0), item("Sequence", "A", 0),
                     item("SpecialToken", bos, 1), item("Sequence", "B", 1)],
            "special_tokens": {bos: {"id": bos, "ids": [sp.bos_id()], "tokens": [bos]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": space}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": pieces[sp.unk_id()],
            "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": True,
            "byte_fallback": True, "ignore_merges": False,
            "vocab": {p: i for i, p in enumerate(pieces)},
            "merges": [[c[2], c[3]] for c in cands]}}
    return json.dumps(tok, indent=2, ensure_ascii=False) + "\n"


def side_files(cfg, sp, proc=None):
    """{file name: text} of the llava-hf files beside config.json, the weights and
    tokenizer.model: preprocessor_config.json (proc, default clip_processor_config),
    processor_config.json, chat_template.json, tokenizer_config.json, special_tokens_map.json,
    generation_config.json, tokenizer.json (tokenizer_json). tokenizer_config.json says legacy: true, i.e. SentencePiece's dummy
    prefix on every text segment, <image> included (the ids prompt_ids builds). No file claims a
    transformers_version: none was written by transformers."""
    t = cfg.text
    pad = t.get("pad_token_id")  # text_config's wins over the top level's, as in the C++
    if pad is None:
        pad = cfg.raw.get("pad_token_id")
    unk, bos, eos = (sp.id_to_piece(i) for i in (sp.unk_id(), sp.bos_id(), sp.eos_id()))
    added = {str(sp.unk_id()): _added_token(unk, True), str(sp.bos_id()): _added_token(bos, True),
             str(sp.eos_id()): _added_token(eos, True),
             str(cfg.image_token_index): _added_token("<image>", True)}
    pad_text = None
    if pad is not None and pad >= 0:
        pad_text = sp.id_to_piece(pad) if pad < sp.get_piece_size() else "<pad>"
        if pad >= sp.get_piece_size():
            added[str(pad)] = _added_token(pad_text, True)
    tok = {"add_bos_token": True, "add_eos_token": False, "added_tokens_decoder": added,
           "bos_token": bos, "chat_template": LLAVA15_CHAT_TEMPLATE,
           "clean_up_tokenization_spaces": False, "eos_token": eos, "legacy": True,
           "model_max_length": t["max_position_embeddings"], "padding_side": "left",
           "processor_class": "LlavaProcessor", "sp_model_kwargs": {},
           "tokenizer_class": "LlamaTokenizer", "unk_token": unk}
    special = {"bos_token": _added_token(bos), "eos_token": _added_token(eos),
               "unk_token": _added_token(unk)}
    gen = {"_from_model_config": True, "bos_token_id": t["bos_token_id"],
           "eos_token_id": t["eos_token_id"]}
    if pad_text is not None:
        tok["pad_token"] = pad_text
        special["pad_token"] = _added_token(pad_text)
        gen["pad_token_id"] = pad
    processor = {"image_token": "<image>", "num_additional_image_tokens": 1,
                 "patch_size": cfg.vision["patch_size"], "processor_class": "LlavaProcessor",
                 "vision_feature_select_strategy": cfg.vision_feature_select_strategy}
    files = {
        "preprocessor_config.json": (clip_processor_config(cfg.vision["image_size"])
                                     if proc is None else proc),
        "processor_config.json": processor,
        "chat_template.json": {"chat_template": LLAVA15_CHAT_TEMPLATE},
        "tokenizer_config.json": tok,
        "special_tokens_map.json": special,
        "generation_config.json": gen,
    }
    out = {name: json.dumps(obj, indent=2, sort_keys=True) + "\n" for name, obj in files.items()}
    out["tokenizer.json"] = tokenizer_json(cfg, sp)
    return out


def write_side_files(model_dir, proc=None):
    """Writes side_files() of model_dir's config.json and tokenizer.model into model_dir."""
    import sentencepiece as spm
    cfg = Config.load(model_dir)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(model_dir, "tokenizer.model"))
    for name, text in side_files(cfg, sp, proc).items():
        with open(os.path.join(model_dir, name), "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    import sys
    if len(sys.argv) != 3 or sys.argv[1] != "side-files":
        sys.exit("usage: llava_model.py side-files MODEL_DIR   (re)writes the llava-hf side files "
                 "of MODEL_DIR from its config.json and tokenizer.model")
    write_side_files(sys.argv[2])
