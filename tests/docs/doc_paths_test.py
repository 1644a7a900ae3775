"""docs/design.md is the map of the tree: every file or folder it names in backquotes must exist.

A name counts as a path when it starts with one of the project's top-level folders. A binary named
by its build path (`bench/runtime/decode_attention_bench`) counts when its source exists beside
it under the same stem. Fails listing every name that points nowhere, with its line.
"""
import argparse
import glob
import os
import re
import sys

TOP = ("base/", "bench/", "cmake/", "data/", "deploy/", "docs/", "examples/", "helm/", "kernels/",
       "models/", "proto/", "rpc/", "runtime/", "sdk/", "services/", "telemetry/", "tests/",
       "tools/")


def exists(root, name):
    path = os.path.join(root, name)
    if os.path.exists(path):
        return True
    return bool(glob.glob(glob.escape(path) + ".*"))


def missing_paths(root, doc):
    missing = []
    with open(os.path.join(root, doc), encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            for token in re.findall(r"`([^`\s]+)`", line):
                name = token.rstrip(".,;:")
                if name.startswith(TOP) and not exists(root, name):
                    missing.append(f"{doc}:{number}: {name}")
    return missing


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("docs", nargs="+")
    args = parser.parse_args()
    missing = [m for doc in args.docs for m in missing_paths(args.root, doc)]
    if missing:
        print("paths named in the docs that do not exist:")
        print("\n".join(missing))
        return 1
    print(f"every path named in {', '.join(args.docs)} exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
