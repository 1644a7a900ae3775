#!/usr/bin/python3
"""tools/train/train_qwen.py, the recipe of the Qwen2.5-VL default model, against the engine
and the PyTorch reference:

1. Prompts: the trainer's byte-level BPE encoder (tools/pytorch/bytelevel_bpe.py) gives the
   engine's ids on the scenes corpus, and its first chat turn is exactly what the directory's
   chat template renders for one image and a question, tokenized by the engine.
2. Forward: the trainer's batched forward (window-attention tower with masks, merger, M-RoPE
   decoder over a right-padded batch of multi-turn chats) gives the reference's logits
   (tools/pytorch/qwen2_5_vl_model.py, one sequence at a time).
3. A tiny run through all four stages (growth 2 -> 4 layers) exports a directory that
   `hapctl run` loads and answers test questions with the reference's greedy tokens and
   prompt length.

  /usr/bin/python3 tests/train/qwen_train_test.py --hapctl HAPCTL --text-tool TEXT_TOOL \\
      --workdir DIR
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))

import torch  # noqa: E402
from PIL import Image  # noqa: E402

import train_qwen as TQ  # noqa: E402
from common import scenes  # noqa: E402

TINY = ["--width", "32", "--ffn", "64", "--heads", "4", "--kv-heads", "2", "--vision-width", "32",
        "--vision-layers", "2", "--vision-heads", "2", "--vision-ffn", "48", "--layers", "4",
        "--grow-from", "2", "--fullatt-blocks", "1", "--ground-layers", "1"]
TEST_DATA = os.path.join(ROOT, "data", "scenes-test")


def test_questions(n):
    with open(os.path.join(TEST_DATA, "questions.jsonl")) as f:
        return [json.loads(line) for line in f][:n]


def text_tool(tool, *args):
    out = subprocess.run([tool, *args], capture_output=True, text=True, check=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


def check_prompts(a, tok_dir, work):
    fam = TQ.QwenFamily()
    tok = TQ.Tokenizer(tok_dir)
    texts = scenes.corpus_lines(300, seed=1) + [TQ.SYSTEM, "<|im_start|>user\nIs it red?<|im_end|>"]
    path = os.path.join(work, "texts.json")
    with open(path, "w") as f:
        json.dump(texts, f)
    engine = text_tool(a.text_tool, "batch", os.path.join(tok_dir, "tokenizer.json"), path)
    bad = [t for t, e in zip(texts, engine) if tok.encode(t) != e["recognized"]]
    assert not bad, f"{len(bad)} texts encode differently from the engine, e.g. {bad[:3]}"
    for t, e in zip(texts[:20], engine):
        assert tok.bpe.decode(e["recognized"]) == t, t

    # The first turn against the chat template as the engine renders it.
    with open(os.path.join(tok_dir, "chat_template.json")) as f:
        template = json.load(f)["chat_template"]
    tpath = os.path.join(work, "template.jinja")
    with open(tpath, "w") as f:
        f.write(template)
    qs = [q["question"] for q in test_questions(5)]
    cases = [{"messages": [{"role": "user", "content": [{"type": "image"},
                                                        {"type": "text", "text": q}]}],
              "add_generation_prompt": True} for q in qs]
    cpath = os.path.join(work, "cases.json")
    with open(cpath, "w") as f:
        json.dump(cases, f)
    rendered = [r["text"] for r in text_tool(a.text_tool, "render", tpath, cpath)]
    with open(path, "w") as f:
        json.dump(rendered, f)
    engine = text_tool(a.text_tool, "batch", os.path.join(tok_dir, "tokenizer.json"), path)
    cfg = fam.config(TQ.T.parse_args(TINY + ["--run-dir", os.path.dirname(tok_dir)], fam))
    v = fam.visual_tokens(cfg)
    for q, e in zip(qs, engine):
        ids, tgt = fam.encode_conversation(tok, cfg, [(q, "red")])
        prompt = ids[:len(ids) - len(tok.encode("red"))]  # ids: the prompt, then the answer
        expanded = list(e["recognized"])
        at = expanded.index(tok.image_pad)
        expanded[at:at + 1] = [tok.image_pad] * v
        assert prompt == expanded, (q, prompt, expanded)
        n = len(prompt)
        assert all(t == -100 for t in tgt[:n - 1]) and tgt[n - 1:] == ids[n:] + [tok.im_end]
    print(f"prompts: {len(texts)} corpus texts and {len(qs)} rendered chats as the engine")


def check_forward(a, run_dir):
    fam = TQ.QwenFamily()
    args = TQ.T.parse_args(TINY + ["--run-dir", run_dir], fam)
    cfg = fam.config(args, 3)
    torch.manual_seed(0)
    model = fam.new_model(cfg)
    fam.init_weights(model, 0)
    with torch.no_grad():  # norms and biases away from their initial 1 and 0
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn(p.shape))
    model.eval()
    tok = TQ.Tokenizer(os.path.join(run_dir, "tokenizer"))
    qs = test_questions(6)
    chats = [[(qs[0]["question"], qs[0]["answer"]), (qs[1]["question"], qs[1]["answer"])],
             [(qs[2]["question"], qs[2]["answer"])],
             [(q["question"], q["answer"]) for q in qs[3:6]]]
    exs = []
    for chat, q in zip(chats, (qs[0], qs[2], qs[3])):
        img = Image.open(os.path.join(TEST_DATA, q["image"])).convert("RGB")
        ids, tgt = fam.encode_conversation(tok, cfg, chat)
        exs.append(dict(px=fam.pixels(img, cfg), ids=ids, tgt=tgt, type=q["type"]))
    ids, _ = TQ.common.collate([(e["ids"], e["tgt"]) for e in exs], fam.pad_id(cfg))
    with torch.no_grad():
        h, probs = fam.decode(model, fam.vision_features(model, torch.stack([e["px"] for e in exs])),
                              ids, want_probs=True)
        logits = model.logits(h)
        side = cfg.grid_side
        worst = 0.0
        for i, e in enumerate(exs):
            ref = model.forward(torch.tensor(e["ids"]), e["px"].numpy(), [(1, side, side)])
            n = len(e["ids"])
            worst = max(worst, float((logits[i, :n] - ref).abs().max() / ref.abs().max()))
    assert len(probs) == 3 and probs[0].shape == (3, 4, ids.shape[1], ids.shape[1])
    print(f"forward: batched training logits vs the reference, max relative error {worst:.2e}")
    assert worst < 1e-5, worst


def check_run(a, work):
    run_dir = os.path.join(work, "run")
    out = os.path.join(work, "export")
    cmd = [sys.executable, os.path.join(ROOT, "tools", "train", "train_qwen.py"), "--threads", "1",
           "--vision-steps", "3", "--vision-batch", "2", "--steps", "3", "--focus-steps", "2",
           "--grow-steps", "3", "--batch", "2", "--val-size", "10", "--val-every", "2",
           "--log-every", "1", "--test-limit", "20", "--hapctl", a.hapctl, "--run-dir", run_dir,
           "--out", out, *TINY]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"train_qwen.py failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    log = open(os.path.join(run_dir, "train.log")).read()
    assert "grew the decoder from 2 to 4 layers" in log, log
    assert "grounding layers now 2,3" in log, log
    for name in ("config.json", "model.safetensors", "preprocessor_config.json", "tokenizer.json",
                 "tokenizer_config.json", "chat_template.json", "generation_config.json",
                 "README.md"):
        assert os.path.exists(os.path.join(out, name)), name
    fam = TQ.QwenFamily()
    model = TQ.Q.load_qwen25vl(out)
    st = torch.load(os.path.join(run_dir, "ckpt.pt"))
    model.cfg = fam.config_of(dict(model.cfg.raw, scenes=st["config"]["scenes"]))
    assert model.cfg.text["num_hidden_layers"] == 4
    tok = TQ.Tokenizer(out)
    side = model.cfg.grid_side
    for q in test_questions(3):
        ids, _ = fam.encode_conversation(tok, model.cfg, [(q["question"], "x")])
        prompt = ids[:-1]  # "x" is one token
        img = Image.open(os.path.join(TEST_DATA, q["image"])).convert("RGB")
        want, _ = model.generate(prompt, fam.pixels(img, model.cfg).numpy(), [(1, side, side)],
                                 max_new_tokens=6, eos_token_id=tok.im_end)
        r = subprocess.run([a.hapctl, "run", "--model", out, "--image",
                            os.path.join(TEST_DATA, q["image"]), "--prompt", q["question"],
                            "--max-new-tokens", "6", "--json", "--threads", "1"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        assert got["pruning"]["prompt_tokens"] == len(prompt), (got["pruning"], len(prompt))
        assert got["token_ids"] == want, (q["question"], got["token_ids"], want)
    print(f"run: the export answers {len(test_questions(3))} questions in hapctl as the reference")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hapctl", required=True)
    ap.add_argument("--text-tool", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    check_run(a, a.workdir)  # writes the tokenizer files the other checks read
    run_dir = os.path.join(a.workdir, "run")
    check_prompts(a, os.path.join(run_dir, "tokenizer"), a.workdir)
    check_forward(a, run_dir)
    print("OK")


if __name__ == "__main__":
    main()
