"""Synthetic visual-QA scenes: coloured shapes on a textured background, with one-word questions
whose answer depends on a small region of the image. Deterministic by (split, seed, index).

A scene is a 3x3 grid of cells; each occupied cell holds one shape whose centre is jittered
inside the cell, so "the shape in the top left" and "left of" / "above" are unambiguous while
sizes and positions still vary continuously. Question types (answers in brackets):

  color   What color is the star?                      [red green blue yellow purple orange black]
  shape   What shape is in the top left?                [circle square triangle star cross]
  count   How many red shapes are there?                [0 1 2 3]
  exist   Is there a blue triangle?                     [yes no]
  relpos  Where is the red circle relative to the star? [left right above below]

Only numpy and PIL are needed.
"""
import io
import math
import random

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

SHAPES = ["circle", "square", "triangle", "star", "cross"]
COLORS = {
    "red": (215, 40, 40),
    "green": (35, 155, 60),
    "blue": (40, 80, 215),
    "yellow": (235, 205, 35),
    "purple": (135, 55, 185),
    "orange": (245, 135, 25),
    "black": (30, 30, 30),
}
COLOR_NAMES = list(COLORS)
ROWS = ["top", "middle", "bottom"]
COLS = ["left", "center", "right"]
QTYPES = ["color", "shape", "count", "exist", "relpos"]
ANSWERS = {
    "color": COLOR_NAMES,
    "shape": SHAPES,
    "count": ["0", "1", "2", "3"],
    "exist": ["yes", "no"],
    "relpos": ["left", "right", "above", "below"],
}
MAX_PER_COLOR = 3

TEMPLATES = {
    "color": ["What color is the {ref}?", "Which color does the {ref} have?"],
    "shape": ["What shape is in the {pos}?", "Which shape is at the {pos}?"],
    "count": ["How many {color} shapes are there?", "How many shapes are {color}?"],
    "exist": ["Is there {article} {color} {shape}?",
              "Is there {article} {color} {shape} in the image?"],
    "relpos": ["Where is the {ref1} relative to the {ref2}?",
               "Is the {ref1} left, right, above or below the {ref2}?"],
}

PROMPT_WORDS = "USER: <image>\n{question} ASSISTANT:"


def cell_name(row, col):
    if row == 1 and col == 1:
        return "center"
    if row == 1:
        return "middle " + COLS[col]
    return ROWS[row] + " " + COLS[col]


def split_rng(split, seed, index):
    """Independent, reproducible stream per (split, seed, index); str seeds hash with SHA-512."""
    return random.Random(f"hap-scenes:{split}:{seed}:{index}")


# ----------------------------------------------------------------------------------------------
# scene specs (no pixels): cheap to sample, so questions are balanced by rejection sampling


def random_scene(rng, size=168, n_min=3, n_max=6):
    n = rng.randint(n_min, n_max)
    cells = rng.sample(range(9), n)
    # A small per-scene palette makes repeated colours (count answers 2 and 3) common.
    palette = rng.sample(COLOR_NAMES, rng.randint(min(2, n), min(n, 5)))
    objs = []
    cell = size / 3.0
    counts = {}
    for c in cells:
        row, col = divmod(c, 3)
        choices = [x for x in palette if counts.get(x, 0) < MAX_PER_COLOR] or \
            [x for x in COLOR_NAMES if counts.get(x, 0) < MAX_PER_COLOR]
        color = rng.choice(choices)
        counts[color] = counts.get(color, 0) + 1
        r = rng.uniform(0.26, 0.42) * cell  # 14.6 .. 23.5 px at 168: 2-3.4 patches across
        slack = cell / 2 - r - 1.5
        objs.append(dict(kind=rng.choice(SHAPES), color=color, row=row, col=col,
                         cx=(col + 0.5) * cell + rng.uniform(-slack, slack),
                         cy=(row + 0.5) * cell + rng.uniform(-slack, slack),
                         r=r, rot=rng.uniform(-15, 15)))
    return dict(size=size, objects=objs, render_seed=rng.getrandbits(32))


def _ref(objs, o, rng):
    """Referring expression for o, or None when it is not unique in the scene."""
    same_kind = [x for x in objs if x["kind"] == o["kind"]]
    if len(same_kind) == 1:
        return o["kind"] if rng.random() < 0.5 else o["color"] + " " + o["kind"]
    same = [x for x in same_kind if x["color"] == o["color"]]
    return o["color"] + " " + o["kind"] if len(same) == 1 else None


def make_question(scene, qtype, rng, target=None, info=None):
    """Returns (question, answer) about the scene, or None when it cannot ask this one
    (with `target`, only questions whose answer is `target`). With a dict `info`, also records
    the question type (info["qtype"]) and the indices of the objects the answer is read from:
    info["refs"] (the named shape, the shape in the cell, the shapes of the colour, the matching
    shape when the answer is yes, the first shape of a relation) and info["refs2"] (the second
    shape of a relation). The rng draws do not depend on `info`."""
    objs = scene["objects"]
    tmpl = rng.choice(TEMPLATES[qtype])
    if info is not None:
        info["qtype"], info["refs"], info["refs2"] = qtype, [], []

    def note(refs, refs2=()):
        if info is not None:
            info["refs"] = [i for i, x in enumerate(objs) if any(x is r for r in refs)]
            info["refs2"] = [i for i, x in enumerate(objs) if any(x is r for r in refs2)]
    if qtype == "color":
        cands = [o for o in objs if sum(x["kind"] == o["kind"] for x in objs) == 1
                 and (target is None or o["color"] == target)]
        if not cands:
            return None
        o = rng.choice(cands)
        note([o])
        return tmpl.format(ref=o["kind"]), o["color"]
    if qtype == "shape":
        cands = [o for o in objs if target is None or o["kind"] == target]
        if not cands:
            return None
        o = rng.choice(cands)
        note([o])
        return tmpl.format(pos=cell_name(o["row"], o["col"])), o["kind"]
    if qtype == "count":
        cnt = {c: sum(o["color"] == c for o in objs) for c in COLOR_NAMES}
        cands = [c for c in COLOR_NAMES if target is None or str(cnt[c]) == target]
        if not cands:
            return None
        c = rng.choice(cands)
        note([o for o in objs if o["color"] == c])
        return tmpl.format(color=c), str(cnt[c])
    if qtype == "exist":
        present = {(o["color"], o["kind"]) for o in objs}
        want_yes = (rng.random() < 0.5) if target is None else target == "yes"
        if want_yes:
            color, kind = rng.choice(sorted(present))
        else:
            # Hard negatives: the colour or the kind is in the scene, just not together.
            colors = sorted({o["color"] for o in objs})
            kinds = sorted({o["kind"] for o in objs})
            absent = [(c, k) for c in COLOR_NAMES for k in SHAPES if (c, k) not in present]
            hard = [(c, k) for c, k in absent if c in colors or k in kinds]
            pool = hard if (hard and rng.random() < 0.8) else absent
            color, kind = rng.choice(pool)
        article = "an" if color[0] in "aeiou" else "a"
        note([o for o in objs if (o["color"], o["kind"]) == (color, kind)])
        return tmpl.format(article=article, color=color, shape=kind), "yes" if want_yes else "no"
    if qtype == "relpos":
        pairs = []
        for a in objs:
            for b in objs:
                if a is b:
                    continue
                if a["row"] == b["row"]:
                    rel = "left" if a["col"] < b["col"] else "right"
                elif a["col"] == b["col"]:
                    rel = "above" if a["row"] < b["row"] else "below"
                else:
                    continue
                if target is None or rel == target:
                    pairs.append((a, b, rel))
        rng.shuffle(pairs)
        for a, b, rel in pairs:
            ra, rb = _ref(objs, a, rng), _ref(objs, b, rng)
            if ra and rb:
                note([a], [b])
                return tmpl.format(ref1=ra, ref2=rb), rel
        return None
    raise ValueError(qtype)


def sample_example(rng, qtype=None, n_min=3, n_max=6, size=168, info=None):
    """One balanced training example: type uniform, then answer uniform within the type."""
    qtype = qtype or rng.choice(QTYPES)
    target = rng.choice(ANSWERS[qtype])
    for attempt in range(2000):
        scene = random_scene(rng, size, n_min, n_max)
        qa = make_question(scene, qtype, rng, target if attempt < 1000 else None, info)
        if qa:
            return scene, qa[0], qa[1], qtype
    raise RuntimeError("could not sample a question")


# ----------------------------------------------------------------------------------------------
# rendering


def _shape_points(kind, cx, cy, r, rot):
    if kind == "square":
        h = 0.82 * r
        pts = [(-h, -h), (h, -h), (h, h), (-h, h)]
    elif kind == "triangle":
        pts = [(r * math.cos(a), r * math.sin(a) + 0.18 * r)
               for a in (-math.pi / 2, math.pi / 6, 5 * math.pi / 6)]
    elif kind == "star":
        pts = []
        for i in range(10):
            rr = r if i % 2 == 0 else 0.45 * r
            a = -math.pi / 2 + i * math.pi / 5
            pts.append((rr * math.cos(a), rr * math.sin(a)))
    elif kind == "cross":
        w = 0.34 * r
        pts = [(-w, -r), (w, -r), (w, -w), (r, -w), (r, w), (w, w), (w, r), (-w, r), (-w, w),
               (-r, w), (-r, -w), (-w, -w)]
    else:
        raise ValueError(kind)
    t = math.radians(rot)
    c, s = math.cos(t), math.sin(t)
    return [(cx + x * c - y * s, cy + x * s + y * c) for x, y in pts]


def _draw_shape(draw, o, scale, fill):
    cx, cy, r = o["cx"] * scale, o["cy"] * scale, o["r"] * scale
    if o["kind"] == "circle":
        draw.ellipse([cx - 0.92 * r, cy - 0.92 * r, cx + 0.92 * r, cy + 0.92 * r], fill=fill)
    else:
        draw.polygon(_shape_points(o["kind"], cx, cy, r, o["rot"]), fill=fill)


def _background(nrng, size):
    base = nrng.uniform(165, 235) + nrng.uniform(-18, 18, size=3)
    low = nrng.normal(0, 1, size=(6, 6, 3)).astype(np.float32)
    low = np.asarray(Image.fromarray(((low * 30) + 128).clip(0, 255).astype(np.uint8))
                     .resize((size, size), Image.BICUBIC), np.float32) - 128
    img = base[None, None] + 0.5 * low + nrng.normal(0, 7, size=(size, size, 1))
    return img


def render(scene, jpeg_quality=None):
    """Scene spec -> PIL RGB image (size x size). Antialiased by drawing at 3x."""
    size = scene["size"]
    rng = random.Random(scene["render_seed"])
    nrng = np.random.default_rng(scene["render_seed"])
    bg = _background(nrng, size)
    img = Image.fromarray(bg.clip(0, 255).astype(np.uint8))
    # Distractors: thin lines and specks in muted colours, under the shapes.
    d = ImageDraw.Draw(img)
    mean = bg.mean(axis=(0, 1))
    for _ in range(rng.randint(1, 4)):
        col = tuple(int(np.clip(m + rng.uniform(-55, 25), 0, 255)) for m in mean)
        pts = [(rng.uniform(0, size), rng.uniform(0, size)) for _ in range(2)]
        d.line(pts, fill=col, width=rng.choice([1, 1, 2]))
    for _ in range(rng.randint(2, 10)):
        col = tuple(int(np.clip(m + rng.uniform(-60, 30), 0, 255)) for m in mean)
        x, y, rr = rng.uniform(0, size), rng.uniform(0, size), rng.uniform(0.8, 2.5)
        d.ellipse([x - rr, y - rr, x + rr, y + rr], fill=col)
    s = 3
    layer = Image.new("RGBA", (size * s, size * s), (0, 0, 0, 0))
    ld = ImageDraw.Draw(layer)
    for o in scene["objects"]:
        k = rng.uniform(0.88, 1.08)
        rgb = tuple(int(np.clip(v * k + rng.uniform(-15, 15), 0, 255)) for v in COLORS[o["color"]])
        _draw_shape(ld, o, s, rgb + (255,))
    layer = layer.reduce(s)  # box filter: fast antialiasing
    img = Image.alpha_composite(img.convert("RGBA"), layer).convert("RGB")
    if rng.random() < 0.3:
        img = img.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 0.7)))
    if jpeg_quality:
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=jpeg_quality)
        buf.seek(0)
        img = Image.open(buf).convert("RGB")
    return img


def patch_objects(scene, patch=14, min_cover=0.3):
    """[G*G] int array, G = size/patch: 1 + index of the object covering most of each patch, or
    0 where no object covers >= min_cover of it."""
    size = scene["size"]
    g = size // patch
    ids = Image.new("L", (size, size), 0)
    d = ImageDraw.Draw(ids)
    for i, o in enumerate(scene["objects"]):
        _draw_shape(d, o, 1, i + 1)
    a = np.asarray(ids)[:g * patch, :g * patch].reshape(g, patch, g, patch).transpose(0, 2, 1, 3)
    a = a.reshape(g * g, patch * patch)
    n_obj = len(scene["objects"])
    cover = np.stack([(a == i + 1).sum(1) for i in range(n_obj)], 1)  # [G*G, n_obj]
    best = cover.argmax(1)
    has = cover.max(1) >= min_cover * patch * patch
    return np.where(has, best + 1, 0).astype(np.int64)


def patch_labels(scene, patch=14):
    """Per-patch (shape kind, colour, cell) labels, [G*G] int arrays each, G = size/patch.
    kind/colour 0 = background (see patch_objects); cell 0..8 row-major.
    Used only as auxiliary supervision for the vision tower during training (with
    centre_patches)."""
    g = scene["size"] // patch
    obj = patch_objects(scene, patch)
    kind = np.zeros(g * g, np.int64)
    color = np.zeros(g * g, np.int64)
    for p in np.nonzero(obj)[0]:
        o = scene["objects"][obj[p] - 1]
        kind[p] = 1 + SHAPES.index(o["kind"])
        color[p] = 1 + COLOR_NAMES.index(o["color"])
    rc = (np.arange(g) * 3) // g
    cell = (rc[:, None] * 3 + rc[None, :]).reshape(-1)
    return kind, color, cell


def centre_patches(scene, patch=14):
    """Per object, the index of the patch holding its centre (row-major in the G x G grid)."""
    g = scene["size"] // patch
    return [min(g - 1, int(o["cy"] // patch)) * g + min(g - 1, int(o["cx"] // patch))
            for o in scene["objects"]]


def corpus_lines(n=20000, seed=0):
    """Text for the tokenizer: prompts with questions, and answers."""
    rng = split_rng("tokenizer", seed, 0)
    lines = []
    for i in range(n):
        scene, q, a, _ = sample_example(rng)
        lines.append(f"USER: {q} ASSISTANT: {a}")
    for t, answers in ANSWERS.items():
        lines.extend(answers)
    return lines
