#!/usr/bin/env python3
"""transformers' LlavaForConditionalGeneration (BF16, sdpa, plain PyTorch) on the checkpoint and
GPU gpu_bench ran on, beside gpu_bench's figures (its --json output), with the ratios.

Times, each with CUDA events around the call, the median of --requests after --warmup more:
  encode       get_image_features (vision tower + projector) on one 336 px image;
  prefill      the decoder over the prompt with the image features spliced in, the LM head on
               the last row and its argmax (what gpu_bench's prefill covers);
  first token  the whole forward from input ids and pixels, and the argmax.
The prompt has gpu_bench's length (its image tokens, then text ids); the weights are random, so
which ids does not change the work.

  transformers_prefill.py --model DIR --ours gpu_bench.json [--requests N] [--warmup N] [--json OUT]
Prints gpu_bench's table alone (and says why) where torch, transformers or a GPU is missing.
"""
import argparse
import datetime
import json
import statistics
import sys


def time_ms(torch, fn, warmup, n):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(n):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def measure(args, n_prompt):
    import torch
    import transformers
    from transformers import LlavaForConditionalGeneration

    if not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA GPU")
    cfg = json.load(open(f"{args.model}/config.json"))
    image_token = cfg["image_token_index"]
    n_image = cfg.get("image_seq_length", 576)
    size = cfg["vision_config"]["image_size"]
    model, errors = None, []
    # Straight onto the GPU where this transformers can (device_map), else through host memory;
    # `dtype` is the newer spelling of `torch_dtype`.
    for kwargs in ({"dtype": torch.bfloat16, "device_map": "cuda"},
                   {"dtype": torch.bfloat16}, {"torch_dtype": torch.bfloat16}):
        try:
            model = LlavaForConditionalGeneration.from_pretrained(
                args.model, attn_implementation="sdpa", **kwargs)
            break
        except Exception as e:
            errors.append(f"{sorted(kwargs)}: {type(e).__name__}: {e}")
    if model is None:
        raise RuntimeError("cannot load the checkpoint: " + "; ".join(errors))
    model = model.to("cuda").eval()
    n_text = n_prompt - n_image - 1
    ids = torch.tensor([[1] + [image_token] * n_image + [100 + i % 300 for i in range(n_text)]],
                       device="cuda")
    pixels = torch.randn(1, 3, size, size, device="cuda", dtype=torch.bfloat16)
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "transformers": transformers.__version__, "prompt_tokens": ids.shape[1]}

    def as_tensor(f):
        if isinstance(f, torch.Tensor):
            return f
        for key in ("pooler_output", "image_features", "image_embeds"):  # output objects
            v = getattr(f, key, None)
            if v is not None:
                return as_tensor(v)
        if isinstance(f, (list, tuple)):
            return torch.cat([as_tensor(x).reshape(-1, as_tensor(x).shape[-1]) for x in f])
        raise TypeError(f"get_image_features returned a {type(f).__name__}")

    def features():
        return as_tensor(model.get_image_features(pixel_values=pixels)).reshape(
            -1, model.config.text_config.hidden_size)

    def first_token():
        out = model(input_ids=ids, pixel_values=pixels, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1].argmax(-1)

    def timed(key, fn):
        try:
            result[key] = time_ms(torch, fn, args.warmup, args.requests)
        except Exception as e:  # an API this script does not know: the others still run
            result[key] = None
            result[key + "_error"] = f"{type(e).__name__}: {e}"
            print(f"transformers {key}: {result[key + '_error']}")

    with torch.inference_mode():
        timed("first_token_ms", first_token)
        timed("encode_ms", features)
        try:
            feats = features()
            embeds = model.get_input_embeddings()(ids)
            embeds[ids == image_token] = feats.to(embeds.dtype)
            language_model = model.model.language_model

            def prefill():
                h = language_model(inputs_embeds=embeds, use_cache=True).last_hidden_state
                return model.lm_head(h[:, -1:]).argmax(-1)

            timed("prefill_ms", prefill)
        except Exception as e:
            result["prefill_ms"] = None
            result["prefill_ms_error"] = f"{type(e).__name__}: {e}"
            print(f"transformers prefill_ms: {result['prefill_ms_error']}")
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--ours", required=True, help="gpu_bench --json output")
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", help="write both sets of figures here")
    args = ap.parse_args()
    ours = json.load(open(args.ours))
    base = ours["requests"][0]
    try:
        theirs = measure(args, base["prompt_tokens"])
    except Exception as e:  # ImportError, no GPU, an API this script does not know
        print(f"transformers comparison skipped: {type(e).__name__}: {e}")
        theirs = None

    print(f"\n{ours['gpu']}, driver {ours['cuda_driver']}, {ours['date']}; "
          f"prompt {base['prompt_tokens']} tokens" +
          (f"; torch {theirs['torch']}, transformers {theirs['transformers']}" if theirs else ""))
    print("\n| stage | HAP serve ms | transformers ms | HAP serve / transformers |")
    print("|---|---|---|---|")
    def theirs_ms(key):
        return theirs.get(key) if theirs else None

    for key, name in (("encode_ms", "encode"), ("prefill_ms", "prefill"),
                      ("first_token_ms", "first token")):
        t = theirs_ms(key)
        cell = f"{t:.2f} | {base[key] / t:.2f}x" if t else "— | —"
        print(f"| {name}, unpruned | {base[key]:.2f} | {cell} |")
    t = theirs_ms("prefill_ms")
    for r in ours["requests"][1:]:
        cell = f"{t:.2f} (unpruned) | {r['prefill_ms'] / t:.2f}x" if t else "— | —"
        print(f"| prefill, {r['config']} | {r['prefill_ms']:.2f} | {cell} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"hap_serve": ours, "transformers": theirs,
                       "written": datetime.date.today().isoformat()}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
