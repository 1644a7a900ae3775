"""Self-checks of tools/pytorch/qwen2_5_vl_model.py without transformers: properties that a
wrong window order, rotary layout, M-RoPE section split, position delta or checkpoint layout
would break. Tiny random models; runs in well under a minute on two cores.

Tolerances are atol + rtol * |ref|, and a failure names the worst element.
"""
import json
import os
import re
import sys
import tempfile
import unittest

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "pytorch"))
import llava_model as L  # noqa: E402
import qwen2_5_vl_model as Q  # noqa: E402
import qwen2vl_image  # noqa: E402

torch.set_num_threads(1)
F32_TOL = (1e-5, 1e-5)


def as_f64(x):
    return np.asarray(x.detach() if torch.is_tensor(x) else x, dtype=np.float64)


def read_json(path):
    with open(path) as f:
        return json.load(f)


def assert_close(test, name, got, ref, atol, rtol):
    got, ref = as_f64(got), as_f64(ref)
    test.assertEqual(got.shape, ref.shape, name)
    test.assertTrue(np.isfinite(got).all() and np.isfinite(ref).all(), f"{name}: NaN/Inf")
    excess = np.abs(got - ref) - (atol + rtol * np.abs(ref))
    worst = np.unravel_index(np.argmax(excess), excess.shape) if excess.size else ()
    test.assertLessEqual(
        float(excess[worst]) if excess.size else 0.0, 0.0,
        f"{name}: worst element {worst}: got {got[worst]}, ref {ref[worst]} "
        f"(atol {atol}, rtol {rtol})")


def tiny_model(seed=0, overrides=None):
    cfg = Q.tiny_config(overrides)
    m = Q.Qwen25VL(cfg)
    m.load_hf_tensors(Q.random_tensors(m, seed))
    return m.eval()


def random_pixels(grids, vision, seed=1):
    rng = np.random.RandomState(seed)
    width = 3 * vision["temporal_patch_size"] * vision["patch_size"] ** 2
    n = sum(t * h * w for t, h, w in grids)
    return torch.from_numpy(rng.standard_normal((n, width)).astype(np.float32))


def masked_vision_forward(tower, pixel_values, grids):
    """The vision tower without any reordering: tokens stay in pixel_values' order and window
    attention is a mask "same frame and same window", the window of a patch being
    (merged row // k, merged column // k). Attention is permutation-equivariant, so this must
    equal the reorder / cu_window_seqlens / inverse-reorder formulation."""
    v = tower.v
    m = v["spatial_merge_size"]
    k = v["window_size"] // m // v["patch_size"]
    hd = v["hidden_size"] // v["num_heads"]
    pos = Q.rot_pos_ids(grids, m)  # checked against patchify in test_positions_match_patchify
    frame = np.concatenate([np.repeat(np.arange(t) + 1000 * i, h * w)
                            for i, (t, h, w) in enumerate(grids)])
    window = frame * 10 ** 6 + (pos[:, 0] // m // k) * 1000 + (pos[:, 1] // m // k)
    same_frame = torch.from_numpy(frame[:, None] == frame[None, :])
    same_window = torch.from_numpy(window[:, None] == window[None, :])
    dim = hd // 2
    inv = 1.0 / 10000.0 ** (np.arange(0, dim, 2) / dim)
    ang = np.concatenate([pos[:, :1] * inv, pos[:, 1:] * inv], axis=1)
    ang = torch.from_numpy(np.concatenate([ang, ang], axis=1).astype(np.float32))
    cos, sin = ang.cos()[:, None], ang.sin()[:, None]
    x = tower.patch_embed(pixel_values)
    n, d = x.shape
    for i, blk in enumerate(tower.blocks):
        allowed = same_frame if i in v["fullatt_block_indexes"] else same_window
        h = blk.norm1(x)
        q, kk, vv = blk.attn.qkv(h).reshape(n, 3, v["num_heads"], hd).unbind(1)
        q = q * cos + Q.rotate_half(q) * sin
        kk = kk * cos + Q.rotate_half(kk) * sin
        scores = torch.einsum("qhd,khd->hqk", q, kk) * hd ** -0.5
        scores = scores.masked_fill(~allowed[None], float("-inf"))
        o = torch.einsum("hqk,khd->qhd", scores.softmax(-1), vv).reshape(n, d)
        x = x + blk.attn.proj(o)
        x = x + blk.mlp(blk.norm2(x))
    return tower.merger(x)


class VisionTest(unittest.TestCase):
    def test_positions_match_patchify(self):
        """rot_pos_ids names, for each pixel_values row, the patch qwen2vl_image.patchify put
        there; rot_pos_emb is (row angles, column angles) over 10000^(-2i/(hd/2))."""
        p, m, hd = 14, 2, 16
        rng = np.random.RandomState(0)
        img = rng.standard_normal((1, 3, 4 * p, 6 * p)).astype(np.float32)
        rows, grid = qwen2vl_image.patchify(img, p, 2, m)
        self.assertEqual(grid, (1, 4, 6))
        pos = Q.rot_pos_ids([grid], m)
        for r, (h, w) in enumerate(pos):
            patch = rows[r].reshape(3, 2, p, p)[:, 0]
            np.testing.assert_array_equal(patch, img[0, :, h * p:(h + 1) * p, w * p:(w + 1) * p])
        self.assertEqual(sorted(map(tuple, pos)), [(h, w) for h in range(4) for w in range(6)])
        inv = 1.0 / 10000.0 ** (np.arange(0, hd // 2, 2) / (hd // 2))
        want = np.concatenate([pos[:, :1] * inv, pos[:, 1:] * inv], axis=1)
        assert_close(self, "rot_pos_emb", Q.rot_pos_emb([grid], hd, m), want, 1e-5, 1e-6)

    def test_window_index_hand_worked(self):
        # Merged grid 2 x 3, windows of 2 x 2: padded to 4 x 4 (a side that divides still gets
        # a whole window of padding). Windows: {0, 1, 3, 4}, {2, 5}, then two empty ones.
        idx, cu = Q.get_window_index([(1, 4, 6)], 56, 14, 2)
        self.assertEqual(idx.tolist(), [0, 1, 3, 4, 2, 5])
        self.assertEqual(cu, [0, 16, 24, 24, 24])
        self.assertEqual(Q.unique_consecutive(cu), [0, 16, 24])
        # Two images: the second's merged patches are numbered after the first's.
        idx, cu = Q.get_window_index([(1, 4, 6), (1, 2, 2)], 56, 14, 2)
        self.assertEqual(idx.tolist(), [0, 1, 3, 4, 2, 5, 6])
        self.assertEqual(Q.unique_consecutive(cu), [0, 16, 24, 28])

    def test_window_reorder_is_a_permutation_of_whole_windows(self):
        m, k = 2, 2
        for grids in ([(1, 4, 6)], [(1, 6, 10), (1, 4, 4)], [(1, 8, 8)], [(1, 2, 2), (1, 10, 2)],
                      [(2, 4, 4)]):
            idx, cu = Q.get_window_index(grids, 56, 14, m)
            cu = Q.unique_consecutive(cu)
            n_merged = sum(t * h * w for t, h, w in grids) // (m * m)
            self.assertEqual(sorted(idx.tolist()), list(range(n_merged)), grids)
            x = torch.randn(n_merged * m * m, 3)
            fwd = x.reshape(n_merged, m * m, 3)[torch.from_numpy(idx)].reshape(-1, 3)
            back = fwd.reshape(n_merged, m * m, 3)[torch.argsort(torch.from_numpy(idx))]
            self.assertTrue(torch.equal(back.reshape(-1, 3), x), grids)
            # Each window is a contiguous run of whole merged patches of one frame and window.
            key = []
            for i, (t, h, w) in enumerate(grids):
                for f in range(t):
                    for r in range(h // m):
                        for c in range(w // m):
                            key.append((i, f, r // k, c // k))
            self.assertEqual(cu[-1], n_merged * m * m)
            seen = set()
            for b, e in zip(cu[:-1], cu[1:]):
                self.assertEqual((b % (m * m), e % (m * m)), (0, 0))
                keys = {key[j] for j in idx[b // (m * m):e // (m * m)]}
                self.assertEqual(len(keys), 1, (grids, b, e))
                self.assertFalse(keys & seen, (grids, b, e))
                seen |= keys

    def test_window_attention_equals_masked_attention(self):
        model = tiny_model()
        grids = [(1, 6, 10), (1, 4, 4), (1, 2, 6)]
        px = random_pixels(grids, model.cfg.vision)
        trace = {}
        got = model.vision_forward(px, grids, trace)
        self.assertEqual(tuple(got.shape), ((60 + 16 + 12) // 4, 64))
        self.assertGreater(len(trace["cu_window_seqlens"]), len(trace["cu_seqlens"]))
        with torch.no_grad():
            want = masked_vision_forward(model.visual, px, grids)
        assert_close(self, "vision features", got, want, *F32_TOL)

    def test_whole_image_window_equals_full_attention(self):
        grids = [(1, 6, 10), (1, 4, 4)]
        every = list(range(4))
        full = tiny_model(0, {"vision_config": {"fullatt_block_indexes": every}})
        # window_size 14 * 2 * 8: windows of 8 x 8 merged patches cover each image whole.
        windowed = tiny_model(0, {"vision_config": {"fullatt_block_indexes": [],
                                                    "window_size": 224}})
        px = random_pixels(grids, full.cfg.vision)
        a = full.vision_forward(px, grids)
        b = windowed.vision_forward(px, grids)
        assert_close(self, "window covering the image vs full", b, a, *F32_TOL)
        # And small windows really differ from full attention (the check has teeth).
        small = tiny_model(0, {"vision_config": {"fullatt_block_indexes": []}})
        self.assertGreater(float((small.vision_forward(px, grids) - a).abs().max()), 1e-3)


class RopeTest(unittest.TestCase):
    IMG, VS, VE = (Q.TINY_CONFIG[k] for k in ("image_token_id", "vision_start_token_id",
                                                 "vision_end_token_id"))

    def rope_index(self, ids, grids):
        return Q.get_rope_index(ids, grids, 2, self.IMG, self.IMG + 1, self.VS)

    def test_hand_worked_prompt(self):
        # text, text, vision_start, a 4 x 6-patch image merged 2 x 2 (6 tokens), vision_end,
        # text, text.
        ids = [5, 6, self.VS] + [self.IMG] * 6 + [self.VE, 7, 8]
        pos, delta = self.rope_index(ids, [(1, 4, 6)])
        self.assertEqual(pos[0].tolist(), [0, 1, 2, 3, 3, 3, 3, 3, 3, 6, 7, 8])
        self.assertEqual(pos[1].tolist(), [0, 1, 2, 3, 3, 3, 4, 4, 4, 6, 7, 8])
        self.assertEqual(pos[2].tolist(), [0, 1, 2, 3, 4, 5, 3, 4, 5, 6, 7, 8])
        self.assertEqual(delta, -3)

    def test_two_images_and_text_only(self):
        # Tall image (6 x 2 merged: +6), then a wide one right after its vision_start.
        ids = [self.VS] + [self.IMG] * 12 + [self.VE, self.VS] + [self.IMG] * 4 + [self.VE]
        pos, delta = self.rope_index(ids, [(1, 12, 4), (1, 2, 8)])
        self.assertEqual(pos[:, 0].tolist(), [0, 0, 0])
        self.assertEqual(pos[:, 12].tolist(), [1, 6, 2])  # last token of image 1
        self.assertEqual(pos[:, 13].tolist(), [7, 7, 7])  # vision_end: 1 + max(6, 2)
        self.assertEqual(pos[:, 15:19].T.tolist(), [[9, 9, 9], [9, 9, 10], [9, 9, 11],
                                                    [9, 9, 12]])
        self.assertEqual(pos[:, 19].tolist(), [13, 13, 13])
        self.assertEqual(delta, 14 - 20)
        pos, delta = self.rope_index([1, 2, 3], None)
        self.assertEqual((pos.tolist(), delta), ([[0, 1, 2]] * 3, 0))

    def test_mrope_single_axis_is_1d_rope(self):
        hd, theta = 16, 1e6
        rng = np.random.RandomState(0)
        pos = rng.randint(0, 300, size=(3, 7))
        for axis, section in enumerate(([8, 0, 0], [0, 8, 0], [0, 0, 8])):
            cos, sin = Q.mrope_cos_sin(pos, hd, theta, section)
            c1, s1 = L.rope_cos_sin(torch.from_numpy(pos[axis]), hd, theta)
            assert_close(self, f"cos {section}", cos, c1, 1e-4, 0)
            assert_close(self, f"sin {section}", sin, s1, 1e-4, 0)
        # Mixed sections: rotary pair j turns with axis 0 for j < 2, 1 for j < 5, else 2.
        cos, sin = Q.mrope_cos_sin(pos, hd, theta, [2, 3, 3])
        inv = 1.0 / theta ** (np.arange(0, hd, 2) / hd)
        axis_of = np.array([0, 0, 1, 1, 1, 2, 2, 2])
        ang = pos[axis_of].T * inv  # [S, 8]
        ang = np.concatenate([ang, ang], axis=1)
        assert_close(self, "cos [2,3,3]", cos, np.cos(ang), 1e-4, 0)
        assert_close(self, "sin [2,3,3]", sin, np.sin(ang), 1e-4, 0)
        # Text only: every axis holds the same position, so any split is 1-D RoPE.
        same = np.tile(np.arange(40), (3, 1))
        c1, s1 = L.rope_cos_sin(torch.arange(40), hd, theta)
        cos, sin = Q.mrope_cos_sin(same, hd, theta, [2, 3, 3])
        assert_close(self, "text-only cos", cos, c1, 1e-4, 0)
        assert_close(self, "text-only sin", sin, s1, 1e-4, 0)

    def test_text_only_logits_do_not_depend_on_sections(self):
        ids = list(range(3, 40))
        a = tiny_model(0).forward(ids)
        b = tiny_model(0, {"rope_scaling": {"type": "mrope", "mrope_section": [8, 0, 0]}})
        assert_close(self, "text-only logits", b.forward(ids), a, *F32_TOL)


class DecodeTest(unittest.TestCase):
    def test_incremental_decode_equals_full_forward(self):
        model = tiny_model(3)
        c = model.cfg
        grids = [(1, 4, 6)]
        ids = [11, 12, c.vision_start_token_id] + [c.image_token_id] * 6 + [
            c.vision_end_token_id, 13, 14, 15]
        px = random_pixels(grids, c.vision, seed=4)
        steps = 6
        tokens, step_logits = model.generate(ids, px, grids, max_new_tokens=steps)
        self.assertEqual(len(tokens), steps)
        full = model.forward(ids + tokens, px, grids)  # positions recomputed from scratch
        rows = full[len(ids) - 1:len(ids) - 1 + steps]
        assert_close(self, "cached decode vs full forward", step_logits, rows, 1e-4, 1e-4)
        self.assertEqual(tokens, rows.argmax(-1).tolist())
        # A wrong delta (decoding from S instead of S + delta) must show.
        pos, delta = model.rope_index(ids + tokens, grids)
        self.assertEqual(pos[:, len(ids)].tolist(), [len(ids) + delta] * 3)
        self.assertNotEqual(delta, 0)

    def test_grouped_query_heads_read_kv_head_j_over_rep(self):
        """4 query heads on 2 kv heads equal 4 kv heads holding kv heads 0, 0, 1, 1
        (transformers' repeat_kv: query head j reads kv head j // (heads / kv_heads))."""
        gqa = tiny_model(2)
        mha = Q.Qwen25VL(Q.tiny_config({"num_key_value_heads": 4}))
        tensors = gqa.hf_state_dict()
        hd = gqa.cfg.text["head_dim"]
        for name in list(tensors):
            if ".k_proj." in name or ".v_proj." in name:
                rows = tensors[name]
                heads = rows.reshape(2, hd, *rows.shape[1:])
                tensors[name] = np.repeat(heads, 2, axis=0).reshape(4 * hd, *rows.shape[1:])
        mha.load_hf_tensors(tensors)
        ids = list(range(3, 30))
        assert_close(self, "GQA vs duplicated MHA", mha.eval().forward(ids), gqa.forward(ids),
                     *F32_TOL)


def cxx_writer_keys(function):
    """The JSON keys a C++ writer function in runtime/io names, or None without the source."""
    path = os.path.join(ROOT, "runtime", "io",
                        "qwen_config.cc" if "Qwen25" in function else "preprocessor_config.cc")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        src = f.read()
    body = src[src.index(f"std::string {function}("):]
    body = body[:body.index("\n}\n")]
    return set(re.findall(r'\{"(\w+)",', body)) | set(re.findall(r'root\["(\w+)"\]', body))


def json_keys(obj):
    out = set()
    for k, v in obj.items():
        out.add(k)
        if isinstance(v, dict):
            out |= json_keys(v)
    return out


class CheckpointTest(unittest.TestCase):
    def test_write_and_load(self):
        grids = [(1, 4, 6)]
        base = Q.tiny_config()
        ids = [3, base.vision_start_token_id] + [base.image_token_id] * 6 + [
            base.vision_end_token_id, 4, 5]
        px = random_pixels(grids, base.vision, seed=7)
        with tempfile.TemporaryDirectory() as tmp:
            logits = {}
            for dtype in ("F32", "BF16"):
                for shards in (1, 2):
                    d = os.path.join(tmp, f"{dtype}-{shards}")
                    drawn = Q.write_random_checkpoint(d, None, seed=5, dtype=dtype, shards=shards)
                    files = sorted(os.listdir(d))
                    if shards == 1:
                        self.assertIn("model.safetensors", files)
                    else:
                        self.assertEqual(
                            [f for f in files if f.endswith(".safetensors")],
                            ["model-00001-of-00002.safetensors",
                             "model-00002-of-00002.safetensors"])
                        index = read_json(os.path.join(d, "model.safetensors.index.json"))
                        self.assertEqual(sorted(index["weight_map"]), sorted(drawn))
                    logits[dtype, shards] = Q.load_qwen25vl(d).forward(ids, px, grids)
            ref = Q.Qwen25VL(base)
            ref.load_hf_tensors(drawn)
            want = ref.eval().forward(ids, px, grids)
            self.assertTrue(torch.equal(logits["F32", 1], want))
            self.assertTrue(torch.equal(logits["F32", 2], want))
            self.assertTrue(torch.equal(logits["BF16", 1], logits["BF16", 2]))
            # BF16 weights (8 bits of mantissa) against F32: measured worst 0.027 to 0.037 on
            # logits up to ~4 (seeds 0-3).
            assert_close(self, "BF16 logits", logits["BF16", 1], want, 0.05, 0.02)

            d = os.path.join(tmp, "F32-1")
            with open(os.path.join(d, "config.json")) as f:
                text = f.read()
            cfg = Q.Config.load(d)
            self.assertEqual(cfg.to_json(), text)
            self.assertEqual(cfg.torch_dtype, "float32")
            cxx = cxx_writer_keys("Qwen25VLConfigToJson")
            if cxx is not None:
                self.assertEqual(json_keys(json.loads(text)), cxx)
            proc = read_json(os.path.join(d, "preprocessor_config.json"))
            cxx = cxx_writer_keys("Qwen2VLPreprocessorConfigToJson")
            if cxx is not None:
                self.assertEqual(json_keys(proc), cxx)
            self.assertEqual(qwen2vl_image.resolve_config(proc)["patch_size"], 14)

            # The nested layout (text_config, rope_parameters) reads to the same config.
            flat = json.loads(text)
            nested = {k: flat[k] for k in ("architectures", "model_type", "vision_config",
                                           "image_token_id", "video_token_id",
                                           "vision_start_token_id", "vision_end_token_id")}
            text_cfg = {k: v for k, v in flat.items() if k not in nested and k != "rope_scaling"}
            text_cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": 1000000.0,
                                           "mrope_section": [2, 3, 3]}
            del text_cfg["rope_theta"]
            nested["text_config"] = text_cfg
            other = Q.Config(nested)
            self.assertEqual((other.text, other.vision), (cfg.text, cfg.vision))
            self.assertEqual(other.image_token_id, cfg.image_token_id)

            # transformers >= 4.52's tensor names load to the same model.
            renamed = {("model.language_model." + k[len("model."):]) if k.startswith("model.")
                       else ("model." + k if k.startswith("visual.") else k): v
                       for k, v in drawn.items()}
            newer = Q.Qwen25VL(base)
            newer.load_hf_tensors(renamed)
            self.assertTrue(torch.equal(newer.eval().forward(ids, px, grids), want))

            # Tied embeddings: no lm_head.weight written, logits from embed_tokens.
            d = os.path.join(tmp, "tied")
            drawn = Q.write_random_checkpoint(d, {"tie_word_embeddings": True}, seed=5)
            self.assertNotIn("lm_head.weight", drawn)
            self.assertNotIn("lm_head.weight", L.read_checkpoint_tensors(d))
            self.assertTrue(read_json(os.path.join(d, "config.json"))["tie_word_embeddings"])
            tied = Q.load_qwen25vl(d)
            h, _ = tied.decoder(tied.embed([3, 4]), np.tile(np.arange(2), (3, 1)))
            assert_close(self, "tied logits", tied.logits(h),
                         h @ torch.from_numpy(drawn["model.embed_tokens.weight"]).t(), 0, 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
