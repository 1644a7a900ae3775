#!/usr/bin/env bash
# Prints the packages that own the shared libraries the binaries in BIN_DIR load, one per line:
# what the runtime stage of an image must install. Run in the build stage after cmake --install,
# so the runtime stage gets exactly the libraries the build linked (same distribution release).
# Usage: runtime-packages.sh BIN_DIR
set -euo pipefail
dir=${1:?usage: runtime-packages.sh BIN_DIR}

mapfile -t libs < <(for bin in "$dir"/*; do
  ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
done | sort -u)
[ ${#libs[@]} -gt 0 ] || { echo "runtime-packages: no shared libraries found in $dir" >&2; exit 1; }

# dpkg may know a library under /lib or /usr/lib (merged /usr), or under its real name: ask for
# every spelling in one query, then make sure each library was found under one of them.
candidates=()
for lib in "${libs[@]}"; do
  candidates+=("$lib" "$(readlink -f "$lib")" "/usr$lib" "${lib#/usr}")
done
owners=$(dpkg-query -S "${candidates[@]}" 2> /dev/null || true)
for lib in "${libs[@]}"; do
  base=$(basename "$lib")
  real=$(basename "$(readlink -f "$lib")")
  grep -q -e "/$base\$" -e "/$real\$" <<< "$owners" ||
    echo "runtime-packages: no package owns $lib" >&2
done
cut -d: -f1 <<< "$owners" | tr -d ' ' | tr ',' '\n' | sed '/^$/d' | sort -u
