#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets: tests/fuzz/corpus/<target>/ (small valid inputs).

Run with Debian's /usr/bin/python3 (python3-protobuf, python3-pil) from anywhere:

    /usr/bin/python3 tests/fuzz/make_corpus.py [--hapctl build/tools/hapctl/hapctl]

The make-tiny files (config_fuzz/make_tiny.json, safetensors_index_fuzz/make_tiny_index.json)
need a built hapctl; without one they are left as they are. The seeds are committed; rerun this
only to change them. Crash inputs that became regression seeds (named regress-*) are kept.
"""

import argparse
import base64
import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")
MODEL = os.path.join(ROOT, "models", "scenes-llava")
MAX_SEED_BYTES = 64 << 10


def write(target, name, data):
    if isinstance(data, str):
        data = data.encode()
    assert len(data) < MAX_SEED_BYTES, (target, name, len(data))
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def clear(target):
    """Removes a target's generated seeds, keeping the regress-* crash inputs."""
    d = os.path.join(CORPUS, target)
    if os.path.isdir(d):
        for name in os.listdir(d):
            if not name.startswith("regress-"):
                os.remove(os.path.join(d, name))


def read(path):
    with open(path, "rb") as f:
        return f.read()


# --- protobuf ---------------------------------------------------------------------------------


def load_protos(tmp):
    """hap.v1 Python modules generated from proto/ with protoc into `tmp`."""
    protos = [os.path.join("hap", "v1", p) for p in ("common.proto", "generate.proto",
                                                     "encoder.proto", "decode.proto")]
    subprocess.run(["protoc", "--proto_path", os.path.join(ROOT, "proto"), "--python_out", tmp]
                   + protos, check=True)
    sys.path.insert(0, tmp)
    from hap.v1 import common_pb2, decode_pb2, encoder_pb2, generate_pb2  # noqa: E402
    return common_pb2, generate_pb2, encoder_pb2, decode_pb2


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def stream(messages):
    """The wire form of `message Stream { repeated Msg msg = 1; }` (fuzz_util.h SplitStream)."""
    return b"".join(b"\x0a" + varint(len(m)) + m for m in
                    (m.SerializeToString() for m in messages))


def _crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc_table()


def crc32c(crc, data):
    """base/crc32c.h Crc32c: extends `crc` (0 to start) over `data`."""
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = _CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def floats(values):
    return struct.pack("<%df" % len(values), *values)


# --- images -----------------------------------------------------------------------------------


def raw_png(width, height, depth, colour, rows, chunks=()):
    """A PNG written by hand (filter 0 on every row), for what PIL does not write."""
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    ihdr = struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, 0)
    idat = zlib.compress(b"".join(b"\x00" + r for r in rows))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) +
            b"".join(chunk(k, d) for k, d in chunks) + chunk(b"IDAT", idat) + chunk(b"IEND", b""))


def images():
    from PIL import Image
    out = {}
    scene = Image.open(os.path.join(ROOT, "examples", "scene1.png")).convert("RGB")
    small = scene.resize((24, 16), Image.BICUBIC)

    def save(name, img, fmt, **kw):
        buf = io.BytesIO()
        img.save(buf, fmt, **kw)
        out[name] = buf.getvalue()

    save("scene_rgb.png", small, "PNG")
    save("scene_rgba.png", small.convert("RGBA"), "PNG")
    save("scene_grey.png", small.convert("L"), "PNG")
    save("scene_grey_alpha.png", small.convert("LA"), "PNG")
    save("scene_palette.png", small.convert("P", palette=Image.ADAPTIVE, colors=16), "PNG")
    save("scene_1bit.png", small.convert("1"), "PNG")
    # Depths and chunks PIL does not write: 16-bit colour, 2-bit grey, tRNS, gAMA.
    rgb = small.tobytes()
    rows16 = [b"".join(struct.pack(">H", v * 257) for v in rgb[y * 72:(y + 1) * 72])
              for y in range(16)]
    out["scene_rgb16.png"] = raw_png(24, 16, 16, 2, rows16, [(b"gAMA", struct.pack(">I", 45455))])
    rgba16 = [b"".join(r[i:i + 6] + b"\x80\x00" for i in range(0, len(r), 6)) for r in rows16]
    out["scene_rgba16.png"] = raw_png(24, 16, 16, 6, rgba16)
    out["grey2_trns.png"] = raw_png(8, 4, 2, 0, [bytes([0x1B, 0xE4])] * 4,
                                    [(b"tRNS", struct.pack(">H", 3))])
    save("scene_interlaced.png", small, "PNG", interlace=1)
    tall = Image.new("RGB", (1, 40), (200, 30, 60))
    save("tall_1x40.png", tall, "PNG")
    save("scene.jpg", small, "JPEG", quality=80)
    save("scene_progressive.jpg", small, "JPEG", quality=70, progressive=True)
    save("scene_grey.jpg", small.convert("L"), "JPEG", quality=80)
    save("scene_cmyk.jpg", small.convert("CMYK"), "JPEG", quality=80)
    save("scene_444.jpg", small, "JPEG", quality=90, subsampling=0)
    save("wide_40x1.jpg", Image.new("RGB", (40, 1), (10, 250, 90)), "JPEG")
    return out


# --- seeds per target -------------------------------------------------------------------------


def safetensors_file(tensors, metadata=None, pad=True):
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    data = b""
    for name, dtype, shape, payload in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def seed_safetensors():
    t = "safetensors_fuzz"
    clear(t)
    write(t, "f32_2x3.safetensors",
          safetensors_file([("w", "F32", [2, 3], floats([1, 2, 3, 4, 5, 6]))]))
    write(t, "mixed_metadata.safetensors", safetensors_file(
        [("a.weight", "BF16", [2, 2], b"\x80\x3f" * 4), ("b.bias", "F16", [3], b"\x00\x3c" * 3),
         ("empty", "F32", [0, 4], b""), ("scalar", "F32", [], floats([0.5]))],
        metadata={"format": "pt"}))
    write(t, "unpadded.safetensors",
          safetensors_file([("x", "F32", [1], floats([7]))], pad=False))
    write(t, "empty_header.safetensors", safetensors_file([]))


def make_tiny(hapctl, tmp):
    """config.json and model.safetensors.index.json of a 2-shard make-tiny checkpoint."""
    out = os.path.join(tmp, "tiny")
    subprocess.run([hapctl, "make-tiny", "--out", out, "--layers", "2", "--hidden", "16",
                    "--heads", "2", "--intermediate", "32", "--image-size", "28",
                    "--vision-layers", "2", "--vision-hidden", "16", "--vision-heads", "2",
                    "--vocab", "400", "--shards", "2", "--dtype", "f32", "--seed", "0"],
                   check=True, stdout=subprocess.DEVNULL)
    return out


def seed_checkpoint_json(tiny):
    t = "config_fuzz"
    for name in os.listdir(os.path.join(CORPUS, t)) if os.path.isdir(os.path.join(CORPUS, t)) \
            else []:
        if not name.startswith("regress-") and (tiny or name != "make_tiny.json"):
            os.remove(os.path.join(CORPUS, t, name))
    write(t, "scenes_llava.json", read(os.path.join(MODEL, "config.json")))
    write(t, "minimal.json", '{"model_type": "llava"}')
    write(t, "rope_parameters.json", json.dumps({
        "model_type": "llava", "tie_word_embeddings": True, "image_seq_length": 576,
        "vision_feature_select_strategy": "full", "vision_feature_layer": 3,
        "text_config": {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                        "num_key_value_heads": 2, "head_dim": 16, "eos_token_id": [2, 7],
                        "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0},
                        "vocab_size": 100, "pad_token_id": None},
        "vision_config": {"model_type": "clip_vision_model", "hidden_size": 32,
                          "num_attention_heads": 2, "num_hidden_layers": 4, "image_size": 28,
                          "patch_size": 14, "hidden_act": "gelu"},
        "dtype": "bfloat16"}, indent=1))
    i = "safetensors_index_fuzz"
    if tiny:
        write(t, "make_tiny.json", read(os.path.join(tiny, "config.json")))
        clear(i)
        index = read(os.path.join(tiny, "model.safetensors.index.json"))
        write(i, "make_tiny_index.json", index)
        doc = json.loads(index)
        names = sorted(doc["weight_map"])
        # The same tensors all named for one shard (the loader must find the others missing).
        one = {"metadata": doc.get("metadata", {}),
               "weight_map": {n: "model-00001-of-00002.safetensors" for n in names}}
        write(i, "one_shard.json", json.dumps(one))
        write(i, "bad_shard_name.json", json.dumps({"weight_map": {names[0]: "../x"}}))

    p = "preprocessor_config_fuzz"
    clear(p)
    write(p, "scenes_llava.json", read(os.path.join(MODEL, "preprocessor_config.json")))
    write(p, "clip_224_ints.json", json.dumps({"size": 224, "crop_size": 224, "resample": 3,
                                               "do_center_crop": True}))
    write(p, "exact_resize_336.json", json.dumps({
        "do_resize": True, "size": {"height": 336, "width": 336}, "do_center_crop": False,
        "resample": 2, "do_rescale": True, "rescale_factor": 0.00392156862745098,
        "do_normalize": True, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}))
    write(p, "crop_without_resize_224.json", json.dumps({
        "do_resize": False, "crop_size": {"height": 224, "width": 224}, "resample": 2}))
    write(p, "no_rescale_168.json", json.dumps({
        "size": {"shortest_edge": 200}, "crop_size": {"height": 168, "width": 168},
        "do_rescale": False, "do_normalize": False, "do_convert_rgb": False}))


def seed_images():
    t = "image_fuzz"
    clear(t)
    for name, data in images().items():
        write(t, name, data)


def seed_tokenizer():
    t = "tokenizer_fuzz"
    clear(t)
    texts = {
        "prompt.txt": "USER: <image>\nWhat is in the picture? ASSISTANT:",
        "unicode.txt": "caf\u00e9 \u4e2d\u6587 \U0001F600 tab\tnewline\n  spaces",
        "empty.txt": "",
        "bytes.txt": "\x00\x01\x7f",
    }
    for name, text in texts.items():
        write(t, name, b"\x00" + text.encode("utf-8", "surrogatepass"))
    write(t, "invalid_utf8.txt", b"\x00" + b"ok \xe2\x82 \xff\xfe \xc0\xaf end")
    # Ids mode: 2 bytes an id (see tokenizer_fuzz.cc IdFrom): BOS, pieces, byte pieces, EOS,
    # and the out-of-vocabulary markers.
    ids = [2, 3, 10, 50, 100, 200, 0xFFFD, 0xFFFB, 5, 6, 7, 0xFFFF, 300, 3]
    write(t, "ids.bin", b"\x01" + b"".join(struct.pack("<H", i) for i in ids))


LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}"
    "{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    "{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content | trim + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + content | trim + ' ' + eos_token }}"
    "{% endif %}{% endfor %}")

CHATML_TEMPLATE = (
    "{%- set ns = namespace(images=0) -%}\n"
    "{%- for message in messages -%}\n"
    "<|im_start|>{{ message.role }}\n"
    "{%- if message.content is string %}{{ message.content }}{% else %}"
    "{%- for part in message.content -%}"
    "{%- if part.type == 'image' %}{% set ns.images = ns.images + 1 %}<image>"
    "{%- elif part.type == 'text' %}{{ part.text | replace('\\n', ' ') }}{% endif -%}"
    "{%- endfor %}{% endif %}<|im_end|>\n"
    "{% endfor -%}\n"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif -%}\n"
    "{# {{ ns.images }} images #}")

EXPRESSIONS_TEMPLATE = (
    "{% set xs = [1, 2.5, 'a', none, true, {'k': [3, 4]}] %}"
    "{% for x in xs if x is not none %}{{ loop.index }}:{{ x | string | upper }}"
    "{{ ',' if not loop.last else '' }}{% else %}empty{% endfor %}\n"
    "{{ xs | length }} {{ xs[1:3] | tojson }} {{ xs[::-1][0] }} {{ (7 // 2) ** 2 % 5 }}\n"
    "{{ 'abc'.startswith('a') and 'x' in 'xyz' }} {{ range(3) | list | join('-') }}\n"
    "{% set d = dict(a=1, b='two') %}{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}\n"
    "{% set captured %}{{ messages | selectattr('role', 'eq', 'user') | list | length }}"
    "{% endset %}{{ captured | int + 1 }} {{ strftime_now('%Y') | length }}\n"
    "{% for m in messages %}{% if m.role == 'assistant' %}{% break %}{% endif %}"
    "{{ m.role | title }}{% endfor %}{{ missing.attr | default('dflt') }}")


def seed_chat_templates():
    t = "chat_template_fuzz"
    clear(t)
    write(t, "scenes_llava.jinja",
          json.loads(read(os.path.join(MODEL, "chat_template.json")))["chat_template"])
    write(t, "llama2.jinja", LLAMA2_TEMPLATE)
    write(t, "chatml.jinja", CHATML_TEMPLATE)
    write(t, "expressions.jinja", EXPRESSIONS_TEMPLATE)
    write(t, "whitespace.jinja", "Hello {{ bos_token }}{# comment #}\n  {%- if true -%} x {%+ endif %}\n"
          "{{- messages[-1]['content'] if messages else '' }}  \n")


def tiny_png():
    from PIL import Image
    buf = io.BytesIO()
    Image.new("RGB", (4, 3), (120, 40, 200)).save(buf, "PNG")
    return buf.getvalue()


def seed_chat_requests():
    t = "chat_request_fuzz"
    clear(t)
    uri = "data:image/png;base64," + base64.b64encode(tiny_png()).decode()
    image_part = {"type": "image_url", "image_url": {"url": uri}}
    bodies = {
        "basic.json": {"model": "scenes-llava", "messages": [
            {"role": "user", "content": [image_part, {"type": "text", "text": "What is this?"}]}]},
        "streamed.json": {"messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Look:"}, image_part]},
            {"role": "assistant", "content": "A shape."},
            {"role": "user", "content": "Which colour?"}],
            "stream": True, "stream_options": {"include_usage": True}, "max_tokens": 8,
            "temperature": 0.7, "top_p": 0.9, "top_k": 20, "seed": 5, "stop": ["\n", "."],
            "hap": {"method": "hap", "retain": 64, "seed": 3, "timeout_ms": 30000}},
        "flops.json": {"model": "scenes-llava", "max_completion_tokens": 4, "n": 1,
                       "presence_penalty": 0, "frequency_penalty": 0, "logprobs": False,
                       "tools": [], "response_format": {"type": "text"}, "stop": "END",
                       "messages": [{"role": "developer", "content": "x"},
                                    {"role": "user", "content": [
                                        {"type": "image_url", "image_url": uri}]}],
                       "hap": {"method": "fastv", "flops": 0.25}},
    }
    for name, body in bodies.items():
        write(t, name, json.dumps(body))


def seed_generate_requests(common_pb2, generate_pb2):
    t = "generate_request_fuzz"
    clear(t)
    png = tiny_png()

    def req(name, **kw):
        r = generate_pb2.GenerateRequest(image=png, **kw)
        write(t, name, r.SerializeToString())

    req("prompt.bin", prompt="What is in the picture?")
    req("retain_tokens.bin", request_id="req-1", prompt="Describe it.",
        pruning=common_pb2.Pruning(method="hap", retain="64", seed=7),
        sampling=common_pb2.Sampling(temperature=0.8, top_p=0.95, top_k=40, seed=1),
        max_new_tokens=16, stop=["\n", "END"])
    req("retain_percent.bin", prompt="Colour?", pruning=common_pb2.Pruning(retain="11.1%"))
    req("flops.bin", prompt="Shapes?", pruning=common_pb2.Pruning(method="sparsevlm", flops=0.3))
    req("visionzip.bin", prompt="Count them.",
        pruning=common_pb2.Pruning(method="visionzip", retain="32"))
    req("none.bin", prompt="Hi", pruning=common_pb2.Pruning(method="none"))
    req("raw_prompt.bin", raw_prompt="USER: <image>\nWhat is this? ASSISTANT:",
        pruning=common_pb2.Pruning(method="random", retain="50%"))
    for method in ("fastv", "pdrop", "uniform", "hap-flat"):
        req("method_%s.bin" % method, prompt="Which is larger?",
            pruning=common_pb2.Pruning(method=method, retain="48"))


def bf16s(values):
    """BF16 bit patterns of values exactly representable in BF16 (the upper half of the F32)."""
    return b"".join(struct.pack("<H", struct.unpack("<I", struct.pack("<f", x))[0] >> 16)
                    for x in values)


def kv_stream(common_pb2, decode_pb2, dtype):
    """A valid 2-layer KV transfer with rows of `dtype` (DTYPE_F32 or DTYPE_BF16)."""
    kv_dim = 4
    layer_rows = [5, 3]
    next_position = 6
    positions = [[0, 1, 2, 4, 5], [1, 3, 5]]
    plan = [(0, 0, 3), (0, 3, 2), (1, 0, 3)]  # (layer, row_offset, n_rows)
    pack = bf16s if dtype == common_pb2.DTYPE_BF16 else floats
    header = decode_pb2.KvHeader(
        request_id="req-kv", n_layers=2, kv_dim=kv_dim, d_model=8, vocab_size=32,
        dtype=dtype, layer_rows=layer_rows, next_position=next_position,
        first_token=3, sampling=common_pb2.Sampling(temperature=0.5, top_p=0.9, seed=2),
        samples_drawn=1, max_new_tokens=4, stop=["x"], n_chunks=len(plan))
    messages = [decode_pb2.DecodeRequest(header=header)]
    kv_bytes = 0
    for index, (layer, offset, n) in enumerate(plan):
        k = pack([0.25 * (layer + 1) * (offset + i) for i in range(n * kv_dim)])
        v = pack([-0.5 * (layer + 1) * (offset + i) for i in range(n * kv_dim)])
        pos = positions[layer][offset:offset + n]
        crc = crc32c(crc32c(crc32c(0, k), v), struct.pack("<%di" % n, *pos))
        messages.append(decode_pb2.DecodeRequest(chunk=decode_pb2.KvChunk(
            chunk_index=index, layer=layer, row_offset=offset, n_rows=n,
            dtype=dtype, positions=pos, k=k, v=v, crc32c=crc)))
        kv_bytes += len(k) + len(v)
    messages.append(decode_pb2.DecodeRequest(trailer=decode_pb2.KvTrailer(
        n_chunks=len(plan), kv_bytes=kv_bytes, total_rows=sum(layer_rows))))
    return messages


def seed_kv_streams(common_pb2, decode_pb2):
    """First byte: bit 0 fix CRCs, bit 1 into a block pool, bit 2 the pool is BF16."""
    t = "kv_stream_fuzz"
    clear(t)
    messages = kv_stream(common_pb2, decode_pb2, common_pb2.DTYPE_F32)
    whole = stream(messages)
    write(t, "host.bin", b"\x00" + whole)
    write(t, "pool.bin", b"\x02" + whole)
    write(t, "fix_crc_pool.bin", b"\x03" + whole)
    write(t, "header_only.bin", b"\x00" + stream(messages[:1]))
    write(t, "f32_into_bf16_pool.bin", b"\x06" + whole)
    bf16 = stream(kv_stream(common_pb2, decode_pb2, common_pb2.DTYPE_BF16))
    write(t, "bf16_host.bin", b"\x00" + bf16)
    write(t, "bf16_pool.bin", b"\x06" + bf16)
    write(t, "bf16_into_f32_pool.bin", b"\x03" + bf16)


def seed_embed_streams(encoder_pb2):
    t = "embed_stream_fuzz"
    clear(t)
    hidden, rows = 8, 5
    values = [0.125 * i for i in range(rows * hidden)]
    header = encoder_pb2.EmbeddingHeader(request_id="req-e", n_tokens=rows, hidden=hidden,
                                         dtype=1, n_chunks=2, image_width=4, image_height=3)
    messages = [encoder_pb2.EncodeResponse(header=header)]
    for index, (offset, n) in enumerate([(0, 3), (3, 2)]):
        data = floats(values[offset * hidden:(offset + n) * hidden])
        messages.append(encoder_pb2.EncodeResponse(chunk=encoder_pb2.EmbeddingChunk(
            chunk_index=index, row_offset=offset, n_rows=n, data=data, crc32c=crc32c(0, data))))
    write(t, "two_chunks.bin", b"\x00" + stream(messages))
    write(t, "fix_crc.bin", b"\x01" + stream(messages))


def seed_trace_context():
    t = "trace_context_fuzz"
    clear(t)
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    write(t, "traceparent.txt", parent)
    write(t, "with_state.txt", parent + "\ncongo=t61rcWkgMzE,rojo=00f067aa0ba902b7\n"
          "tenant@vendor=opaque value, ,x=1")
    write(t, "future_version.txt", "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-extra")
    write(t, "padded.txt", " \t" + parent.replace("-01", "-00") + "\t ")
    write(t, "two_parents.txt", parent + "\n" + parent)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_hapctl = os.path.join(ROOT, "build", "tools", "hapctl", "hapctl")
    parser.add_argument("--hapctl", default=default_hapctl,
                        help="hapctl for the make-tiny seeds (default: %(default)s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tiny = None
        if os.path.exists(args.hapctl):
            tiny = make_tiny(args.hapctl, tmp)
        else:
            print("make_corpus: no hapctl at %s; make-tiny seeds left as they are" % args.hapctl,
                  file=sys.stderr)
        common_pb2, generate_pb2, encoder_pb2, decode_pb2 = load_protos(tmp)
        seed_safetensors()
        seed_checkpoint_json(tiny)
        seed_images()
        seed_tokenizer()
        seed_chat_templates()
        seed_chat_requests()
        seed_generate_requests(common_pb2, generate_pb2)
        seed_kv_streams(common_pb2, decode_pb2)
        seed_embed_streams(encoder_pb2)
        seed_trace_context()
    for target in sorted(os.listdir(CORPUS)):
        d = os.path.join(CORPUS, target)
        sizes = [os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)]
        print("%-26s %3d seeds, %6d bytes" % (target, len(sizes), sum(sizes)))


if __name__ == "__main__":
    main()
