#!/usr/bin/env python3
"""Summarizes benches/paired.sh's outputs: for every line a bench printed (its numbers taken out,
so the same line of every run is one row), the median of each number over the runs of each tree,
the range, and the median of the per-round after/before ratios.

    python3 benches/paired_summary.py OUT [BENCH]
"""

import collections
import os
import re
import statistics
import sys

NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def runs(out, only):
    """{(bench, tree): {round: [lines]}} from OUT/BENCH.TREE.ROUND files."""
    found = collections.defaultdict(dict)
    for name in os.listdir(out):
        parts = name.split(".")
        if len(parts) != 3 or parts[1] not in ("before", "after") or not parts[2].isdigit():
            continue
        bench, tree, round_ = parts[0], parts[1], int(parts[2])
        if only and bench != only:
            continue
        with open(os.path.join(out, name), encoding="utf-8", errors="replace") as f:
            found[(bench, tree)][round_] = f.read().splitlines()
    return found


def rows(lines):
    """(shape, numbers) for each line with a number; the n-th line of a shape keeps its place."""
    seen = collections.Counter()
    for line in lines:
        numbers = [float(n) for n in NUMBER.findall(line)]
        if not numbers:
            continue
        shape = NUMBER.sub("\0", line.strip())
        seen[shape] += 1
        yield (shape, seen[shape]), numbers


def fmt(x):
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: paired_summary.py OUT [BENCH]")
    found = runs(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
    for bench in sorted({b for b, _ in found}):
        before, after = found.get((bench, "before"), {}), found.get((bench, "after"), {})
        values = collections.defaultdict(lambda: {"before": {}, "after": {}})
        order = []
        for tree, by_round in (("before", before), ("after", after)):
            for round_, lines in by_round.items():
                for key, numbers in rows(lines):
                    if key not in values:
                        order.append(key)
                    values[key][tree][round_] = numbers
        print(f"## {bench}: {len(before)} runs before, {len(after)} after")
        for key in order:
            b, a = values[key]["before"], values[key]["after"]
            if not b or not a:
                continue
            width = min(len(v) for v in list(b.values()) + list(a.values()))
            cells = []
            label = key[0]
            for i in range(width):
                bs = [v[i] for v in b.values()]
                as_ = [v[i] for v in a.values()]
                if len(set(bs + as_)) == 1:
                    # A constant (a count, a size): part of the row's name, not a measurement.
                    label = label.replace("\0", fmt(bs[0]), 1)
                    continue
                label = label.replace("\0", f"#{i + 1}", 1)
                ratios = [a[r][i] / b[r][i] for r in a if r in b and b[r][i]]
                ratio = f", ratio {statistics.median(ratios):.2f}" if ratios else ""
                cells.append(
                    f"#{i + 1}: {fmt(statistics.median(bs))} ({fmt(min(bs))}-{fmt(max(bs))})"
                    f" -> {fmt(statistics.median(as_))} ({fmt(min(as_))}-{fmt(max(as_))}){ratio}"
                )
            if cells:
                print(f"- {label.replace(chr(0), '#')[:160]}")
                for cell in cells:
                    print(f"    {cell}")


if __name__ == "__main__":
    main()
