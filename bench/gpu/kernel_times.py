"""Sums Nsight Compute's per-kernel durations (ncu --csv --metrics gpu__time_duration.sum
--print-units base) by kernel: count, total and mean microseconds, and the share of the whole,
largest first; and gpu_bench's line giving the profiled window's wall time.

    python3 kernel_times.py kernels_32.csv
"""
import collections
import csv
import sys

# The pruning methods' scoring and selection kernels (gpu_bench's IsPruningKernel).
PRUNING_KERNELS = {
    "TextVisualAttentionKernel", "PaqKernel", "PaqSoftmaxKernel", "PaqSoftmaxSumKernel",
    "PaqSoftmaxSumScoresTopKKernel",
    "WeightedSumKernel", "TokenScoresKernel", "TokenScoresTopKKernel", "StableTopKKernel",
    "StableTopKByRankKernel"}


def base_name(name):
    """A kernel's function name without its namespaces, template arguments and parameters."""
    name = name.replace("(anonymous namespace)", "").split("(")[0]
    depth, out = 0, ""
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out += ch
    return out.split("::")[-1].split(" ")[-1].strip()


def main(path):
    totals = collections.defaultdict(float)
    counts = collections.Counter()
    wall = None
    rows = []
    with open(path, newline="") as f:
        for line in f:
            if line.startswith("profiled window:"):
                wall = line.strip()
            elif line.startswith('"'):
                rows.append(line)
    for record in csv.DictReader(rows):
        if record.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = record["Metric Value"].replace(",", "")
        unit = record.get("Metric Unit", "ns")
        scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3,
                 "msecond": 1e3}.get(unit, 1e-3)
        name = record["Kernel Name"]
        totals[name] += float(value) * scale
        counts[name] += 1
    if not counts:
        print(f"{path}: no kernel durations (did the window run under ncu?)")
        return 1
    whole = sum(totals.values())
    pruning = sum(us for name, us in totals.items() if base_name(name) in PRUNING_KERNELS)
    if wall:
        print(wall)
    print(f"{sum(counts.values())} kernels, {whole / 1e3:.3f} ms of device time in all; "
          f"the pruning kernels {pruning / 1e3:.3f} ms ({100 * pruning / whole:.1f}%)")
    print("| kernel | count | total µs | mean µs | share |")
    print("|---|---|---|---|---|")
    for name, us in sorted(totals.items(), key=lambda kv: -kv[1]):
        short = name if len(name) <= 90 else name[:87] + "..."
        print(f"| {short} | {counts[name]} | {us:.1f} | {us / counts[name]:.2f} | "
              f"{100 * us / whole:.1f}% |")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
