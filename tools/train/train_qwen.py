#!/usr/bin/python3
"""Trains the project's second default model: a tiny Qwen2.5-VL (tools/pytorch/qwen2_5_vl_model.py:
window-attention vision tower with 2-D rotary positions and a 2x2 patch merger, Qwen2 decoder
with GQA, QKV bias and M-RoPE) on the synthetic scene QA of tools/scenes, with the recipe and
training loop of train_llava.py, on CPU, and exports it in the Hugging Face layout.

  nohup /usr/bin/python3 tools/train/train_qwen.py > .cache/train/scenes-qwen.out 2>&1 &

Everything train_llava.py says about stages, checkpoints, resuming, --export-only and depth growth
holds here. What differs:
- The tokenizer is a byte-level BPE in Qwen2's tokenizer.json layout with Qwen2.5-VL's special
  tokens and chat template, written by `hapctl make-tiny --family qwen2.5-vl` (the engine's own
  writer, so the directory is what the engine and transformers read); --hapctl names the binary.
  tools/pytorch/bytelevel_bpe.py encodes the training text with it.
- Prompts are the chat template's: system prompt, then `<|vision_start|><|image_pad|>
  <|vision_end|>{question}`; every answer ends with <|im_end|>. The image pad stands for the
  image's (size / 28)^2 visual tokens; the decoder's positions are M-RoPE's.
- Pixels are the Qwen2-VL image processor's (tools/pytorch/qwen2vl_image.py) under the exported
  preprocessor_config.json. A 168-pixel scene is a 12 x 12 grid of 14-pixel patches and 36
  visual tokens of 2 x 2 patches.
- The stage-1 probe reads the vision blocks' output per 14-pixel patch (before the merger); the
  merger is trained with the decoder in stages 2-4, as LLaVA's projector is. The grounding loss
  marks the 28-pixel merge units a shape covers.
- At export the test split is scored by teacher-forced exact match (equal to greedy decoding's
  exact match on these one-word answers), on the exported BF16 weights and on the in-memory
  model; `hapctl eval --data` is the engine's own measurement.
"""
import json
import math
import os
import shutil
import subprocess
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import train_llava as T  # noqa: E402
from common import scenes  # noqa: E402
import bytelevel_bpe  # noqa: E402  (tools/pytorch, on the path through common)
import llava_model as L  # noqa: E402
import qwen2_5_vl_model as Q  # noqa: E402
import qwen2vl_image  # noqa: E402

SYSTEM = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
# Files of the make-tiny directory that the export takes as they are.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.json",
                   "generation_config.json")


def tokenizer_corpus(seed):
    """The BPE's training text: the scenes' questions and answers (as train_llava.py's
    SentencePiece corpus), the chat template's words, then the project's general corpus
    (data/tokenizer/corpus.txt), so the scenes' words come out whole (one token for "middle",
    "below", "purple"; the general corpus alone splits them in 3-4) and the merges never run
    out."""
    lines = [line.replace("USER: ", "").replace(" ASSISTANT: ", "\n")
             for line in scenes.corpus_lines(20000, seed)]
    lines += ["system", "You are a helpful assistant.", "user", "assistant"] * 100
    with open(os.path.join(common.ROOT, "data", "tokenizer", "corpus.txt")) as f:
        return lines + f.read().splitlines()


class Tokenizer:
    """bytelevel_bpe plus the ids the prompts need."""

    def __init__(self, directory):
        self.bpe = bytelevel_bpe.ByteLevelBpe.load(os.path.join(directory, "tokenizer.json"))
        self.im_end = self.bpe.token_id("<|im_end|>")
        self.pad = self.bpe.token_id("<|endoftext|>")
        self.image_pad = self.bpe.token_id("<|image_pad|>")

    def encode(self, text):
        return self.bpe.encode(text)


class VisionLayout:
    """What the tower needs for a square grid of n patches, computed once: the window order and
    its inverse, the window and full attention masks, and the rotary cos/sin in window order."""

    def __init__(self, v, n):
        side = math.isqrt(n)
        if side * side != n:
            raise ValueError(f"{n} patches: the trainer feeds square images only")
        grid = [(1, side, side)]
        self.unit = v["spatial_merge_size"] ** 2
        index, cu = Q.get_window_index(grid, v["window_size"], v["patch_size"],
                                       v["spatial_merge_size"])
        self.order = torch.from_numpy(index)
        self.inverse = torch.argsort(self.order)
        cu = Q.unique_consecutive(cu)
        seg = torch.zeros(n, dtype=torch.long)
        for i, (b, e) in enumerate(zip(cu[:-1], cu[1:])):
            seg[b:e] = i
        self.window_mask = seg[:, None] == seg[None, :]  # [n, n], True where attention is allowed
        head_dim = v["hidden_size"] // v["num_heads"]
        rotary = torch.from_numpy(Q.rot_pos_emb(grid, head_dim, v["spatial_merge_size"]))
        rotary = self.reorder(rotary[None])[0]
        emb = torch.cat([rotary, rotary], -1)
        self.cos, self.sin = emb.cos(), emb.sin()  # [n, head_dim]
        self.full = set(v["fullatt_block_indexes"])

    def reorder(self, x, index=None):
        """[B, n, ...] rows moved in runs of `unit` by `index` (default: into window order)."""
        b, n = x.shape[:2]
        index = self.order if index is None else index
        return x.reshape(b, n // self.unit, self.unit, *x.shape[2:])[:, index].reshape(x.shape)


_LAYOUTS = {}


def vision_layout(v, n):
    """The VisionLayout of this tower config and patch count, made once (every training batch
    has the same grid)."""
    key = (n, json.dumps(v, sort_keys=True))
    if key not in _LAYOUTS:
        _LAYOUTS[key] = VisionLayout(v, n)
    return _LAYOUTS[key]


def vision_attention(attn, x, layout, mask):
    b, n, d = x.shape
    hd = d // attn.heads
    q, k, v = attn.qkv(x).reshape(b, n, 3, attn.heads, hd).permute(2, 0, 3, 1, 4).unbind(0)
    q = q * layout.cos + Q.rotate_half(q) * layout.sin  # [B, H, n, hd]
    k = k * layout.cos + Q.rotate_half(k) * layout.sin
    scores = (q @ k.transpose(-1, -2)) * hd ** -0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    out = scores.softmax(-1, dtype=torch.float32).to(v.dtype) @ v
    return attn.proj(out.transpose(1, 2).reshape(b, n, d))


def mrope_positions(cfg, ids):
    """M-RoPE positions [3, S] of a batch whose rows share everything up to the image's end
    (the system prompt and the image); later tokens (question, answers, padding) continue
    from the largest position, so row 0's positions serve every row."""
    grid = [(1, cfg.grid_side, cfg.grid_side)]
    pos, _ = Q.get_rope_index(ids[0].tolist(), grid, cfg.vision["spatial_merge_size"],
                              cfg.image_token_id, cfg.video_token_id, cfg.vision_start_token_id)
    return pos


class QwenFamily(T.LlavaFamily):
    """Qwen2.5-VL for train_llava.py's loop."""

    script = "tools/train/train_qwen.py"

    def arguments(self, ap):
        ap.set_defaults(run_dir=os.path.join(common.ROOT, ".cache", "train", "scenes-qwen"),
                        out=os.path.join(common.ROOT, "models", "scenes-qwen2.5-vl"),
                        examples="", heads=4, kv_heads=2, vocab=512, aux_weight=0.5)
        ap.add_argument("--hapctl",
                        default=os.path.join(common.ROOT, "build", "tools", "hapctl", "hapctl"),
                        help="hapctl binary that writes the tokenizer files (make-tiny)")
        ap.add_argument("--vision-ffn", type=int, default=256,
                        help="SwiGLU width of the vision blocks")
        ap.add_argument("--window-size", type=int, default=112,
                        help="vision window side in pixels (Qwen2.5-VL's 112: 4 x 4 merge units)")
        ap.add_argument("--fullatt-blocks", default="1,3",
                        help="vision blocks with full attention; the others attend in windows")
        ap.add_argument("--rope-theta", type=float, default=10000.0,
                        help="the decoder's RoPE base (Qwen2.5-VL-7B: 1e6, for 128-wide heads)")
        ap.add_argument("--max-pixels", type=int, default=28 * 28 * 144,
                        help="preprocessor_config.json's max_pixels (the default: 144 tokens)")
        ap.add_argument("--min-pixels", type=int, default=56 * 56)

    def tokenizer(self, a, log):
        """make-tiny writes the tokenizer files (and random weights the trainer ignores) into
        RUN_DIR/tokenizer once, its BPE trained on tokenizer_corpus."""
        out = os.path.join(a.run_dir, "tokenizer")
        if not os.path.exists(os.path.join(out, "tokenizer.json")):
            if not os.access(a.hapctl, os.X_OK):
                sys.exit(f"{a.hapctl} is not an executable: build it (make build) or pass "
                         f"--hapctl; it writes the tokenizer files")
            corpus = os.path.join(a.run_dir, "corpus.txt")
            with open(corpus, "w") as f:
                f.write("\n".join(tokenizer_corpus(a.seed)) + "\n")
            cmd = [a.hapctl, "make-tiny", "--family", "qwen2.5-vl", "--out", out,
                   "--corpus", corpus, "--vocab", str(a.vocab), "--layers", "1", "--hidden", str(a.width),
                   "--heads", str(a.heads), "--kv-heads", str(a.kv_heads),
                   "--vision-layers", "1", "--vision-hidden", str(a.vision_width),
                   "--vision-heads", str(a.vision_heads), "--seed", str(a.seed)]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            log("tokenizer: " + " ".join(["hapctl"] + cmd[1:]))
        return out

    def load_tokenizer(self, path):
        return Tokenizer(path)

    def config(self, a, layers=None):
        with open(os.path.join(a.run_dir, "tokenizer", "config.json")) as f:
            raw = json.load(f)
        raw.update(num_hidden_layers=layers or a.layers, hidden_size=a.width,
                   intermediate_size=a.ffn, num_attention_heads=a.heads,
                   num_key_value_heads=a.kv_heads, rope_theta=a.rope_theta,
                   torch_dtype="bfloat16", max_position_embeddings=512)
        raw["vision_config"].update(
            depth=a.vision_layers, hidden_size=a.vision_width, num_heads=a.vision_heads,
            intermediate_size=a.vision_ffn, out_hidden_size=a.width, window_size=a.window_size,
            fullatt_block_indexes=[int(x) for x in a.fullatt_blocks.split(",") if x])
        # Not config.json keys: what the scenes and the image processor make of them.
        raw["scenes"] = dict(image_size=a.image_size, min_pixels=a.min_pixels,
                             max_pixels=a.max_pixels)
        return self.config_of(raw)

    def config_of(self, raw):
        cfg = Q.Config(raw)
        s = raw["scenes"]
        cfg.image_size = s["image_size"]
        cfg.preprocessor = Q.preprocessor_config(cfg.vision, s["min_pixels"], s["max_pixels"])
        unit = cfg.vision["patch_size"] * cfg.vision["spatial_merge_size"]
        h, w = qwen2vl_image.resized_size(cfg.image_size, cfg.image_size, cfg.preprocessor)
        if h != w or h % unit:
            raise ValueError(f"{cfg.image_size}-pixel scenes resize to {h}x{w}")
        cfg.grid_side = h // cfg.vision["patch_size"]
        return cfg

    def new_model(self, cfg):
        return Q.Qwen25VL(cfg)

    def init_weights(self, model, seed):
        """As train_llava.init_weights: N(0, 1/fan_in) matrices (token embeddings N(0, 1)),
        residual-branch outputs scaled by 1/sqrt(2 x blocks), zero biases, unit norms."""
        g = torch.Generator().manual_seed(seed)
        n_text, n_vis = len(model.model.layers), len(model.visual.blocks)
        out = {id(l.self_attn.o_proj.weight): n_text for l in model.model.layers}
        out.update({id(l.mlp.down_proj.weight): n_text for l in model.model.layers})
        out.update({id(b.attn.proj.weight): n_vis for b in model.visual.blocks})
        out.update({id(b.mlp.down_proj.weight): n_vis for b in model.visual.blocks})
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() >= 2:
                    std = 1.0 if name.endswith("embed_tokens.weight") else p[0].numel() ** -0.5
                    if id(p) in out:
                        std /= math.sqrt(2 * out[id(p)])
                    p.copy_(torch.randn(p.shape, generator=g) * std)
                elif name.endswith("bias"):
                    p.zero_()

    def visual_tokens(self, cfg):
        return (cfg.grid_side // cfg.vision["spatial_merge_size"]) ** 2

    def image_size(self, cfg):
        return cfg.image_size

    def new_probe(self, cfg):
        """Two linear probes: one on the vision blocks' patches, one on the merger's tokens."""
        return torch.nn.ModuleList([torch.nn.Linear(cfg.vision["hidden_size"], T.N_PROBE),
                                    torch.nn.Linear(cfg.vision["out_hidden_size"], T.N_PROBE)])

    def probe(self, model, aux_head, feats, labels):
        """train_llava's probe loss on each 14-pixel patch and on each merged token (labels:
        probe_labels' patches, then its merged tokens); the accuracy is the merged tokens'.
        The second part trains the merger in stage 1 too, so the decoder starts from tokens
        that already say what they hold."""
        n = feats.shape[1]
        merged = model.visual.merger(feats).view(feats.shape[0], -1, model.cfg.vision["out_hidden_size"])
        patch_loss, _ = T.probe_loss(aux_head[0], feats, labels[:, :n])
        token_loss, acc = T.probe_loss(aux_head[1], merged, labels[:, n:])
        return patch_loss + token_loss, acc

    def token_patch(self, cfg):
        return cfg.image_size * cfg.vision["spatial_merge_size"] // cfg.grid_side

    def pixels(self, img, cfg):
        px, grid = qwen2vl_image.preprocess(img, cfg.preprocessor)
        assert grid == (1, cfg.grid_side, cfg.grid_side), grid
        return torch.from_numpy(px)

    def probe_labels(self, scene, cfg):
        """train_llava's per-patch labels in pixel_values' merge-grouped row order, then the
        same labels for the merged tokens (row-major, the merger's output order)."""
        side = cfg.grid_side
        rc = Q.rot_pos_ids([(1, side, side)], cfg.vision["spatial_merge_size"])
        patch = cfg.image_size // side
        patches = T.probe_labels(scene, patch)[rc[:, 0] * side + rc[:, 1]]
        return np.concatenate([patches, T.probe_labels(scene, self.token_patch(cfg))])

    def encode_conversation(self, tok, cfg, qas):
        """Qwen2.5-VL chat: the system prompt, turn 1 `<|im_start|>user\\n<|vision_start|>
        <|image_pad|><|vision_end|>{q1}<|im_end|>\\n<|im_start|>assistant\\n` (exactly what the
        engine renders for one question), `{a1}<|im_end|>` supervised, then `\\n<|im_start|>user
        \\n{q2}<|im_end|>\\n<|im_start|>assistant\\n{a2}<|im_end|>` per later turn. The one image
        pad becomes the image's visual tokens. -> (ids, targets) as common.encode_conversation."""
        toks, is_tgt = [], []
        for k, (q, a) in enumerate(qas):
            if k == 0:
                prompt = (SYSTEM + "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>"
                          + q + "<|im_end|>\n<|im_start|>assistant\n")
            else:
                prompt = "\n<|im_start|>user\n" + q + "<|im_end|>\n<|im_start|>assistant\n"
            p = tok.encode(prompt)
            if k == 0:
                at = p.index(tok.image_pad)
                p[at:at + 1] = [tok.image_pad] * self.visual_tokens(cfg)
            ans = tok.encode(a) + [tok.im_end]
            toks += p + ans
            is_tgt += [False] * len(p) + [True] * len(ans)
        return toks[:-1], [t if m else -100 for t, m in zip(toks[1:], is_tgt[1:])]

    def probe_trains_in_stage2(self, a):
        """The merger trains with the decoder, so the merged-token probe keeps it saying where
        each token is: without it (--aux-weight 0) the merger's cell information, read by
        the stage-1 probe, fell from 100% to 22% in 1,300 steps of stage 2 while the kinds
        stayed at 99%, and the decoder never learned the questions that name a cell or a
        relation."""
        return True

    def pad_id(self, cfg):
        return cfg.text["bos_token_id"]  # <|endoftext|>

    def image_token(self, cfg):
        return cfg.image_token_id

    def vision_features(self, model, px):
        """px [B, n, C*T*P*P] -> the last block's output [B, n, Dv] in pixel_values' order."""
        visual = model.visual
        b, n, k = px.shape
        layout = vision_layout(visual.v, n)
        x = visual.patch_embed(px.reshape(b * n, k)).view(b, n, -1)
        x = layout.reorder(x)
        for i, blk in enumerate(visual.blocks):
            mask = None if i in layout.full else layout.window_mask
            x = x + vision_attention(blk.attn, blk.norm1(x), layout, mask)
            x = x + blk.mlp(blk.norm2(x))
        return layout.reorder(x, layout.inverse)

    def decode(self, model, feats, ids, want_probs):
        cfg = model.cfg
        t = cfg.text
        b, s = ids.shape
        merged = model.visual.merger(feats).view(b, -1, t["hidden_size"])  # [B, V, D]
        x = model.model.embed_tokens(ids)
        x = x.masked_scatter((ids == cfg.image_token_id)[..., None], merged.to(x.dtype))
        cos, sin = Q.mrope_cos_sin(mrope_positions(cfg, ids), t["head_dim"], t["rope_theta"],
                                   t["mrope_section"])
        causal = torch.triu(torch.full((s, s), float("-inf")), diagonal=1)
        probs = []
        for layer in model.model.layers:
            a = layer.self_attn
            h = layer.input_layernorm(x)
            q = a.q_proj(h).view(b, s, a.h, a.hd).transpose(1, 2)
            k = a.k_proj(h).view(b, s, a.kvh, a.hd).transpose(1, 2)
            v = a.v_proj(h).view(b, s, a.kvh, a.hd).transpose(1, 2)
            q = q * cos + Q.rotate_half(q) * sin
            k = k * cos + Q.rotate_half(k) * sin
            rep = a.h // a.kvh  # query head j reads kv head j // rep
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
            p = ((q @ k.transpose(-1, -2)) * a.hd ** -0.5 + causal).softmax(-1, dtype=torch.float32)
            if want_probs:
                probs.append(p)
            o = (p.to(v.dtype) @ v).transpose(1, 2).reshape(b, s, a.h * a.hd)
            x = x + a.o_proj(o)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return model.model.norm(x), probs

    def grow(self, small, big, r):
        T.grow_decoder(small, big, r, prefix="model.layers.",
                       residual=("self_attn.o_proj.weight", "mlp.down_proj.weight"))

    def export(self, model, a, cfg, tok_path, history, command, log, finished, wall):
        out = a.out
        os.makedirs(out, exist_ok=True)
        cfg.torch_dtype = "bfloat16"
        with open(os.path.join(out, "config.json"), "w") as f:
            f.write(cfg.to_json())
        L.write_safetensors(os.path.join(out, "model.safetensors"), model.hf_state_dict(), "BF16")
        with open(os.path.join(out, "preprocessor_config.json"), "w") as f:
            f.write(json.dumps(cfg.preprocessor, indent=2, sort_keys=True) + "\n")
        for name in TOKENIZER_FILES:
            if os.path.exists(os.path.join(tok_path, name)):
                shutil.copyfile(os.path.join(tok_path, name), os.path.join(out, name))
        size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
        log(f"exported to {out} ({size / 1e6:.1f} MB)")
        result_text, agree_text = "(no test data)", ""
        if os.path.exists(os.path.join(a.test_data, "questions.jsonl")):
            loaded = Q.load_qwen25vl(out)
            loaded.cfg = self.config_of(dict(loaded.cfg.raw, scenes=cfg.raw["scenes"]))
            tok = Tokenizer(tok_path)
            t0 = time.time()
            res = self.test_eval(loaded, tok, a)
            log(f"test eval of the export: {len(res)} questions in {time.time() - t0:.0f}s")
            result_text = summary(res)
            for line in result_text.splitlines():
                log("test " + line)
            with open(os.path.join(a.run_dir, "test_predictions.jsonl"), "w") as f:
                for r in res:
                    f.write(json.dumps(r) + "\n")
            model.eval()
            mem = self.test_eval(model, tok, a, limit=min(200, len(res)))
            model.train()
            same = sum(x["right"] == y["right"] for x, y in zip(mem, res))
            agree_text = (f"Teacher-forced exact match of the exported BF16 model vs the in-memory "
                          f"F32 training model on the first {len(mem)} test questions: the same "
                          f"verdict on {same}/{len(mem)}.")
            log(agree_text)
        write_readme(out, a, cfg, history, command, result_text, agree_text, size, wall)

    @torch.no_grad()
    def test_eval(self, model, tok, a, limit=None, bs=50):
        """Teacher-forced exact match per data/scenes-test question (F32)."""
        from PIL import Image
        with open(os.path.join(a.test_data, "questions.jsonl")) as f:
            qs = [json.loads(line) for line in f if line.strip()]
        qs = qs[:limit or a.test_limit or None]
        res = []
        for i in range(0, len(qs), bs):
            exs = []
            for q in qs[i:i + bs]:
                img = Image.open(os.path.join(a.test_data, q["image"])).convert("RGB")
                ids, tgt = self.encode_conversation(tok, model.cfg, [(q["question"], q["answer"])])
                exs.append(dict(px=self.pixels(img, model.cfg), ids=ids, tgt=tgt, type=q["type"]))
            ids, tgt = common.collate([(e["ids"], e["tgt"]) for e in exs], self.pad_id(model.cfg))
            feats = self.vision_features(model, torch.stack([e["px"] for e in exs]))
            h, _ = self.decode(model, feats, ids, want_probs=False)
            sel = tgt != -100
            hit = torch.zeros_like(sel)
            hit[sel] = model.logits(h[sel]).argmax(-1) == tgt[sel]
            for q, right in zip(qs[i:i + bs], (hit | ~sel).all(1).tolist()):
                res.append(dict(id=q["id"], type=q["type"], right=bool(right)))
        return res


def summary(res):
    lines = [f"overall {pct(res)}"]
    for t in sorted({r["type"] for r in res}):
        lines.append(f"  {t:<8} {pct([r for r in res if r['type'] == t])}")
    return "\n".join(lines)


def pct(rs):
    n = sum(r["right"] for r in rs)
    return f"{100 * n / len(rs):.1f}% ({n}/{len(rs)})"


def write_readme(out, a, cfg, history, command, result_text, agree_text, size, wall):
    v, t = cfg.vision, cfg.text
    rows = []
    for h in history:
        if h["kind"] in ("val", "grown"):
            pt = " ".join(f"{k} {100 * x:.0f}" for k, x in h["per_type"].items())
            rows.append(f"| {h['step']}{' (grown)' if h['kind'] == 'grown' else ''} | "
                        f"{h.get('layers', '')} | {T.fmt_time(h['elapsed'])} | "
                        f"{format(h['train_loss'], '.3f') if 'train_loss' in h else ''} | "
                        f"{h['loss']:.3f} | "
                        f"{100 * h['acc']:.1f} | {pt} |")
    vis = [h for h in history if h["kind"] == "vision_val"]
    vision_acc = f"{100 * vis[-1]['kind_acc']:.1f}%" if vis else "n/a"
    init_text = ("" if not a.init_from else
                 f"\n\nStage 1 came from {os.path.relpath(a.init_from, common.ROOT)} (the "
                 f"stage-1 checkpoint of an earlier run at this seed and config, with another "
                 f"tokenizer corpus and without the stage-2 probe loss; stage 1 reads neither), "
                 f"so the times above include that run's stage 1. The command without "
                 f"--init-from trains stage 1 itself.")
    text = f"""# scenes-qwen2.5-vl: tiny Qwen2.5-VL trained on synthetic scene QA

The project's second default model: the scenes task of models/scenes-llava (one-word answers
about images of coloured shapes, tools/scenes) learned by a Qwen2.5-VL, in every architectural
detail a Qwen2.5-VL (Hugging Face layout, `Qwen2_5_VLForConditionalGeneration`), only tiny.

| part | config |
|---|---|
| vision | {v['depth']} blocks, width {v['hidden_size']}, {v['num_heads']} heads, SwiGLU {v['intermediate_size']}, patch {v['patch_size']} (x{v['temporal_patch_size']} frames), window {v['window_size']} px, full attention in blocks {v['fullatt_block_indexes']}, 2-D rotary, RMSNorm |
| merger | 2 x 2 patches -> RMSNorm, linear {4 * v['hidden_size']}, GELU, linear -> {v['out_hidden_size']} |
| image processor | min_pixels {cfg.preprocessor['min_pixels']}, max_pixels {cfg.preprocessor['max_pixels']}: a {cfg.image_size}-px scene is {cfg.grid_side} x {cfg.grid_side} patches, {(cfg.grid_side // 2) ** 2} visual tokens |
| language model | Qwen2, {t['num_hidden_layers']} layers, width {t['hidden_size']}, {t['num_attention_heads']} heads / {t['num_key_value_heads']} KV heads (head_dim {t['head_dim']}), QKV bias, SwiGLU {t['intermediate_size']}, M-RoPE sections {t['mrope_section']}, theta {t['rope_theta']:g} |
| vocabulary | byte-level BPE (tokenizer.json, Qwen2 layout) of {a.vocab} tokens, trained on the scenes' questions and answers then data/tokenizer/corpus.txt (train_qwen.tokenizer_corpus), + Qwen2.5-VL's 14 special tokens, vocab_size {t['vocab_size']}; chat template of Qwen2.5-VL-Instruct |
| weights | model.safetensors, BF16; {size / 1e6:.1f} MB with tokenizer and configs |

## How it was made

```
{command}
```

Seed {a.seed}; bf16 autocast on CPU, {a.threads} threads. The stages, losses and schedule are
train_llava.py's (see models/scenes-llava/README.md for what each is for), with the
Qwen2.5-VL specifics of tools/train/train_qwen.py's docstring:

1. Vision: {a.vision_steps} steps of batch {a.vision_batch} train the patch embedding, the
   vision blocks and the merger with two linear probes (kind, colour, 3x3 cell, shape centre),
   one on each 14-px patch and one on each merged token. Final kind accuracy on val shape
   tokens: {vision_acc}.
2. All but the vision blocks: {a.steps} steps of batch {a.batch}, {a.turns} questions per image
   as a multi-turn chat, answer loss plus {a.ground_weight:g} x the grounding loss on heads 0
   and 1 of decoder layers {a.ground_layers} (of the {a.grow_from or t['num_hidden_layers']}-layer decoder), over the merge units of the named shapes,
   plus {a.aux_weight:g} x the merged-token probe loss, which keeps the merger saying where each
   token is (see QwenFamily.probe_trains_in_stage2).
3. Focus: {a.focus_steps} steps on the mix `{a.focus_qtypes}`.
4. Depth growth: {"each of the " + str(a.grow_from) + " layers repeated " + str(t['num_hidden_layers'] // a.grow_from) + " times, " + str(a.grow_steps) + " steps at full depth" if a.grow_from and a.grow_from != t['num_hidden_layers'] else "none"}.

Training took {T.fmt_time(history[-1]['elapsed']) if history else 'n/a'} of step time,
{T.fmt_time(wall)} with validation and checkpoints.{init_text}

Validation during training ({a.val_size} balanced val questions, 3-6 shapes, teacher-forced
exact match):

| step | decoder layers | elapsed | train loss | val loss | val acc % | per type % |
|---|---|---|---|---|---|---|
""" + "\n".join(rows) + "\n\n" + T.test_section("teacher-forced exact match",
                                                result_text, agree_text)
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    T.main(fam=QwenFamily())
