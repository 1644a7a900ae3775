#!/usr/bin/python3
"""Generates runtime/text/unicode_tables.inc from Python's unicodedata (stdlib only).

  /usr/bin/python3 tools/unicode/gen_unicode_tables.py             # rewrite the .inc
  /usr/bin/python3 tools/unicode/gen_unicode_tables.py --verify    # fail if the .inc is stale
  /usr/bin/python3 tools/unicode/gen_unicode_tables.py --check-cases OUT   # cases for the tests

The tables are the Unicode version this Python ships (unicodedata.unidata_version), so the
committed .inc changes only when someone regenerates it with a newer Python.

--check-cases writes what Python itself computes, for tests/text/unicode_test.cc to compare
runtime/text/unicode.cc against, one case a line (code points in hex, '.'-separated):
  V <unidata_version>
  G <first> <last> <category>     every code point, as runs of one category
  F <cp> <fold>                   every code point whose simple fold is not itself
  N1 <cp> <nfc>                   every code point whose NFC is not itself
  N <input> <nfc>                 pairs, triples and longer mixes of the interesting ones
  U|L|T <cp> <mapped>             every code point whose str.upper() / lower() / title() is not
                                  itself (full mappings: several code points where Python has)
"""
import argparse
import itertools
import os
import random
import sys
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INC_PATH = os.path.join(ROOT, "runtime", "text", "unicode_tables.inc")
MAX_CP = 0x10FFFF

# hap::unicode::Category's order; unicode.cc checks it against kCategoryOrder at compile time.
CATEGORIES = ("Lu Ll Lt Lm Lo Mn Mc Me Nd Nl No Pc Pd Ps Pe Pi Pf Po Sm Sc Sk So "
              "Zs Zl Zp Cc Cf Cs Co Cn").split()
CATEGORY_INDEX = {name: i for i, name in enumerate(CATEGORIES)}

HANGUL_FIRST, HANGUL_LAST = 0xAC00, 0xD7A3


def property_runs(prop):
    """[(first, last, prop(chr(c)))] covering 0..MAX_CP, one entry per run of equal values."""
    runs = []
    values = (prop(chr(c)) for c in range(MAX_CP + 1))
    start = 0
    for value, group in itertools.groupby(values):
        n = sum(1 for _ in group)
        runs.append((start, start + n - 1, value))
        start += n
    return runs


def category_runs():
    """[(first, last, category name)] covering 0..MAX_CP."""
    return property_runs(unicodedata.category)


def ccc_runs():
    """[(first, canonical combining class)]: where each run of equal classes starts."""
    return [(first, ccc) for first, _, ccc in property_runs(unicodedata.combining)]


def simple_fold(c):
    """CaseFolding.txt's C+S mapping of c, derived from str.casefold (which is C+F):

    - casefold(c) is one code point: that is c's C mapping (S entries exist only beside F ones).
    - casefold(c) is several code points (an F entry): the S mapping, where one exists, is
      lower(c) when that is one other code point folding to the same string (U+1E9E -> U+00DF,
      U+1F88 -> U+1F80, U+1FBC -> U+1FB3, ...); otherwise c has no simple fold (U+0130, U+00DF).
    """
    ch = chr(c)
    folded = ch.casefold()
    if len(folded) == 1:
        return ord(folded)
    lower = ch.lower()
    if len(lower) == 1 and lower != ch and lower.casefold() == folded:
        return ord(lower)
    return c


def fold_pairs():
    return [(c, f) for c in range(MAX_CP + 1) for f in [simple_fold(c)] if f != c]


def canonical_decompositions():
    """[(cp, a, b)]: UnicodeData's untagged (canonical) mappings; b is 0 for singletons."""
    out = []
    for c in range(MAX_CP + 1):
        if HANGUL_FIRST <= c <= HANGUL_LAST:
            continue  # algorithmic, in unicode.cc
        d = unicodedata.decomposition(chr(c))
        if not d or d.startswith("<"):
            continue
        parts = [int(x, 16) for x in d.split()]
        if len(parts) > 2:
            sys.exit("U+%04X: canonical decomposition longer than 2: %s" % (c, d))
        out.append((c, parts[0], parts[1] if len(parts) == 2 else 0))
    return out


def compositions(decomps):
    """[(a, b, composite)] sorted by (a, b): the 2-code-point canonical mappings that NFC
    recomposes; the NFC check drops the composition exclusions (CompositionExclusions.txt,
    singletons are already 1 code point, and non-starter decompositions)."""
    out = []
    for c, a, b in decomps:
        if b and unicodedata.normalize("NFC", chr(a) + chr(b)) == chr(c):
            out.append((a, b, c))
    out.sort()
    return out


def case_maps():
    """{'upper'|'lower'|'title': [(cp, mapped string)]} for every code point whose str.upper(),
    str.lower() or str.title() of it alone is not itself (Python's full mappings, SpecialCasing
    included; the context-dependent final sigma is left to the code)."""
    maps = {"upper": [], "lower": [], "title": []}
    for c in range(MAX_CP + 1):
        if 0xD800 <= c <= 0xDFFF:
            continue
        ch = chr(c)
        for kind in maps:
            mapped = getattr(ch, kind)()
            if mapped != ch:
                maps[kind].append((c, mapped))
    return maps


def cased_ranges():
    """[(first, last)] of the Cased code points (Python's notion: c.islower(), c.isupper() or
    c.istitle() of the character alone)."""
    out = []
    for c in range(MAX_CP + 1):
        ch = chr(c)
        if 0xD800 <= c <= 0xDFFF or not (ch.islower() or ch.isupper() or ch.istitle()):
            continue
        if out and out[-1][1] == c - 1:
            out[-1] = (out[-1][0], c)
        else:
            out.append((c, c))
    return out


def hex_list(values, per_line, fmt):
    lines = []
    for i in range(0, len(values), per_line):
        lines.append("    " + " ".join(fmt(v) + "," for v in values[i:i + per_line]))
    return "\n".join(lines)


def generate():
    cat_runs = category_runs()
    ccc = ccc_runs()
    folds = fold_pairs()
    decomps = canonical_decompositions()
    comps = compositions(decomps)
    cases = case_maps()
    cased = cased_ranges()
    version = unicodedata.unidata_version
    parts = []
    parts.append(f"""\
// GENERATED FILE, DO NOT EDIT: made by tools/unicode/gen_unicode_tables.py from Python's
// unicodedata, Unicode {version} (unicodedata.unidata_version). Regenerate with
//   /usr/bin/python3 tools/unicode/gen_unicode_tables.py
// and check with its --verify. Included by runtime/text/unicode.cc only.
//
// Rules the generator applies:
// - categories: unicodedata.category of every code point, as runs (first << 5 | category).
// - simple case folding (CaseFolding.txt C+S): c -> casefold(c) where that is one code point;
//   where casefold(c) is several (an F entry), c -> lower(c) if that is one other code point
//   with the same casefold (the S entries), else no mapping.
// - canonical decompositions: unicodedata.decomposition entries without a <tag>, except the
//   Hangul syllables (unicode.cc decomposes and composes those algorithmically).
// - combining classes: unicodedata.combining as runs (first << 8 | class).
// - compositions: the 2-code-point canonical mappings (a, b) -> c for which
//   normalize('NFC', a + b) == c; that leaves out the composition exclusions.
// - case mappings: str.upper(), lower() and title() of each code point alone where that is not
//   itself, as {{code point, offset, length}} into kCasePool (full mappings: 'ß' upper is "SS");
//   Cased code points as ranges.
#pragma once

#include <cstdint>

namespace hap::unicode {{
namespace {{

constexpr char kUnicodeVersion[] = "{version}";
// Category's enumerators, in order, as two letters each.
constexpr char kCategoryOrder[] = "{''.join(CATEGORIES)}";

struct CodePointPair {{
  char32_t from;
  char32_t to;
}};
struct CodePointTriple {{
  char32_t first;
  char32_t second;
  char32_t third;
}};
struct CaseMapping {{
  char32_t from;
  uint16_t offset;  // into kCasePool
  uint16_t length;
}};
""")
    parts.append(f"// {len(cat_runs)} runs: first code point << 5 | Category.\n"
                 "constexpr uint32_t kCategoryRuns[] = {\n" +
                 hex_list([(s << 5) | CATEGORY_INDEX[cat] for s, _, cat in cat_runs], 8,
                          lambda v: "0x%x" % v) + "\n};\n")
    parts.append(f"// {len(ccc)} runs: first code point << 8 | canonical combining class.\n"
                 "constexpr uint32_t kCombiningClassRuns[] = {\n" +
                 hex_list([(s << 8) | k for s, k in ccc], 8, lambda v: "0x%x" % v) + "\n};\n")
    parts.append(f"// {len(folds)} simple case foldings {{code point, folded}}, sorted.\n"
                 "constexpr CodePointPair kSimpleFolds[] = {\n" +
                 hex_list(folds, 6, lambda p: "{0x%x, 0x%x}" % p) + "\n};\n")
    parts.append(f"// {len(decomps)} canonical decompositions {{code point, first, second or 0}}, "
                 "sorted.\n"
                 "constexpr CodePointTriple kDecompositions[] = {\n" +
                 hex_list(decomps, 4, lambda t: "{0x%x, 0x%x, 0x%x}" % t) + "\n};\n")
    parts.append(f"// {len(comps)} canonical compositions {{first, second, composite}}, sorted by "
                 "(first, second).\n"
                 "constexpr CodePointTriple kCompositions[] = {\n" +
                 hex_list(comps, 4, lambda t: "{0x%x, 0x%x, 0x%x}" % t) + "\n};\n")
    pool = []
    tables = {}
    for kind in ("upper", "lower", "title"):
        entries = []
        for c, mapped in cases[kind]:
            entries.append((c, len(pool), len(mapped)))
            pool.extend(ord(ch) for ch in mapped)
        tables[kind] = entries
    assert len(pool) < 1 << 16
    parts.append(f"// {len(cased)} ranges {{first, last}} of Cased code points (str.islower(), "
                 "isupper() or istitle()), sorted.\n"
                 "constexpr CodePointPair kCasedRanges[] = {\n" +
                 hex_list(cased, 6, lambda p: "{0x%x, 0x%x}" % p) + "\n};\n")
    parts.append(f"// {len(pool)} code points the case mappings below point into.\n"
                 "constexpr char32_t kCasePool[] = {\n" +
                 hex_list(pool, 10, lambda v: "0x%x" % v) + "\n};\n")
    for kind, name in (("upper", "kUpperMap"), ("lower", "kLowerMap"), ("title", "kTitleMap")):
        parts.append(f"// {len(tables[kind])} str.{kind}() mappings, sorted.\n"
                     f"constexpr CaseMapping {name}[] = {{\n" +
                     hex_list(tables[kind], 5, lambda t: "{0x%x, %d, %d}" % t) + "\n};\n")
    parts.append("}  // namespace\n}  // namespace hap::unicode\n")
    return "\n".join(parts)


def hexseq(s):
    return ".".join("%x" % ord(ch) for ch in s)


def write_cases(path):
    rng = random.Random(20240601)
    with open(path, "w", encoding="ascii") as out:
        out.write("V %s\n" % unicodedata.unidata_version)
        for first, last, cat in category_runs():
            out.write("G %x %x %s\n" % (first, last, cat))
        for c, f in fold_pairs():
            out.write("F %x %x\n" % (c, f))
        for c in range(MAX_CP + 1):
            if 0xD800 <= c <= 0xDFFF:
                continue  # not in a std::u32string that came from UTF-8; NFC leaves them alone
            nfc = unicodedata.normalize("NFC", chr(c))
            if nfc != chr(c):
                out.write("N1 %x %s\n" % (c, hexseq(nfc)))

        # Sequences: every composition pair, alone and with a mark between (blocked or not),
        # plus random mixes of starters, marks of many classes, decomposables and jamo.
        decomps = canonical_decompositions()
        comps = compositions(decomps)
        marks = [c for c in range(MAX_CP + 1) if unicodedata.combining(chr(c))]
        decomposable = [c for c, _, _ in decomps] + [0xAC00, 0xAC01, 0xD7A3, 0xB098]
        firsts = sorted({a for a, _, _ in comps})
        seconds = sorted({b for _, b, _ in comps})
        jamo = (list(range(0x1100, 0x1113)) + list(range(0x1161, 0x1176)) +
                list(range(0x11A7, 0x11C3)) + [0xAC00, 0xAC1C, 0xD788, 0xD7A3, 0x1160, 0x11C3])
        ascii_ = [ord(ch) for ch in "aeiouAEIOU zZ"]
        pool = [marks, decomposable, firsts, seconds, jamo, ascii_]
        seqs = []
        for a, b, _ in comps:
            seqs.append(chr(a) + chr(b))
            seqs.append(chr(a) + chr(rng.choice(marks)) + chr(b))
        for n in range(6000):
            length = 2 + n % 4
            seqs.append("".join(chr(rng.choice(rng.choice(pool))) for _ in range(length)))
        for s in seqs:
            out.write("N %s %s\n" % (hexseq(s), hexseq(unicodedata.normalize("NFC", s))))
        for kind, mapping in case_maps().items():
            for c, mapped in mapping:
                out.write("%s %x %s\n" % (kind[0].upper(), c, hexseq(mapped)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verify", action="store_true",
                        help="exit 1 if %s differs from what this would write" % INC_PATH)
    parser.add_argument("--check-cases", metavar="OUT", help="write test cases to OUT")
    args = parser.parse_args()
    if args.check_cases:
        write_cases(args.check_cases)
        return 0
    text = generate()
    if args.verify:
        try:
            with open(INC_PATH, encoding="utf-8") as f:
                committed = f.read()
        except FileNotFoundError:
            committed = ""
        if committed != text:
            print("%s is stale (or was made from another Unicode version than this Python's %s);"
                  " regenerate it with %s" % (INC_PATH, unicodedata.unidata_version, sys.argv[0]),
                  file=sys.stderr)
            return 1
        print("%s is up to date (Unicode %s)" % (INC_PATH, unicodedata.unidata_version))
        return 0
    with open(INC_PATH, "w", encoding="utf-8") as f:
        f.write(text)
    print("wrote %s (%d bytes, Unicode %s)" % (INC_PATH, len(text), unicodedata.unidata_version))
    return 0


if __name__ == "__main__":
    sys.exit(main())
