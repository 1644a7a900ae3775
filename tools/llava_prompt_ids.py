#!/usr/bin/python3
"""Prompt ids as LLaVA's own training code computes them, for pinning the C++ prompt builder.

  /usr/bin/python3 tools/llava_prompt_ids.py [--model models/scenes-llava/tokenizer.model] \
      [--image-token 512] [--n-vis 3] [PROMPT ...]

Independent of the project's tokenizer code and of tools/pytorch/llava_model.py: only Debian's
python3-sentencepiece and LLaVA's algorithm (llava/mm_utils.py, tokenizer_image_token):

    prompt_chunks = [tokenizer(chunk).input_ids for chunk in prompt.split('<image>')]
    keep the first chunk's BOS, drop the BOS of every chunk, join the chunks with the image id

where tokenizer(chunk) is the LLaMA SentencePiece model with BOS and its dummy-prefix space on
every chunk (the slow LlamaTokenizer LLaVA trained with encodes a chunk as sp.encode(chunk)).
Each <image> expands to N_VIS image ids here, as llava-hf's processor expands it.
Prints one C++ initializer list per prompt, for tests/text/tokenizer_test.cc.
"""
import argparse
import os

import sentencepiece as spm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_PROMPTS = [
    "USER: <image>\nWhat colour is the circle? ASSISTANT:",
    "USER: <image>\nHow many red shapes are there? ASSISTANT:",
    "Be brief. USER: <image>\nHi ASSISTANT: Hello USER: Why? ASSISTANT:",
    "<image>\nDescribe.",
]


def tokenizer_image_token(sp, prompt, image_token_index, n_vis):
    """llava/mm_utils.py tokenizer_image_token with a SentencePiece LLaMA tokenizer."""
    chunks = [[sp.bos_id()] + sp.encode(chunk) for chunk in prompt.split("<image>")]
    ids = [chunks[0][0]]  # the first chunk starts with BOS: keep one, strip it from each chunk
    for k, chunk in enumerate(chunks):
        if k > 0:
            ids += [image_token_index] * n_vis
        ids += chunk[1:]
    return ids


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "scenes-llava",
                                                    "tokenizer.model"))
    ap.add_argument("--image-token", type=int, default=512)
    ap.add_argument("--n-vis", type=int, default=3)
    ap.add_argument("prompts", nargs="*")
    a = ap.parse_args()
    sp = spm.SentencePieceProcessor(model_file=a.model)
    for prompt in a.prompts or DEFAULT_PROMPTS:
        ids = tokenizer_image_token(sp, prompt, a.image_token, a.n_vis)
        print(f"// {prompt!r}")
        print("{" + ", ".join(map(str, ids)) + "}")


if __name__ == "__main__":
    main()
