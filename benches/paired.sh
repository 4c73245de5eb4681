#!/usr/bin/env bash
# Runs the same benchmarks of two checkouts alternately (before, after, then after, before...),
# so both meet the same load on a shared machine: a before/after comparison for BENCHMARKS.md.
#
#   benches/paired.sh BEFORE AFTER ROUNDS OUT BENCH...
#
# BEFORE and AFTER are checkouts (a `git worktree add` each), ROUNDS the runs of each tree per
# bench, OUT a folder for the outputs (OUT/BENCH.before.N, OUT/BENCH.after.N), BENCH the names of
# `cargo bench` targets both trees have. Each tree's bench is built once (`cargo bench --no-run`),
# then its binary is run from that tree. The environment passes through (AGENT_NVIM_TEST_NVIM for
# the Neovim benches, AGENT_NVIM_BENCH_ONLY...).
set -euo pipefail
if [ "$#" -lt 5 ]; then
  echo "usage: $0 BEFORE AFTER ROUNDS OUT BENCH..." >&2
  exit 2
fi
before=$(cd "$1" && pwd)
after=$(cd "$2" && pwd)
rounds=$3
out=$4
shift 4
mkdir -p "$out"

# The path of bench $2's binary in checkout $1, built if it is not.
binary() {
  (cd "$1" && cargo bench --locked --no-run --bench "$2" --message-format=json 2>/dev/null) |
    python3 -c '
import json, sys
found = [m["executable"] for m in map(json.loads, sys.stdin)
         if m.get("reason") == "compiler-artifact" and m.get("executable")
         and "bench" in m["target"]["kind"]]
print(found[-1] if found else "")'
}

for bench in "$@"; do
  before_bin=$(binary "$before" "$bench")
  after_bin=$(binary "$after" "$bench")
  if [ -z "$before_bin" ] || [ -z "$after_bin" ]; then
    echo "paired: no bench named $bench in both trees" >&2
    exit 1
  fi
  for round in $(seq 1 "$rounds"); do
    order="before after"
    if [ $((round % 2)) = 0 ]; then
      order="after before"
    fi
    for tree in $order; do
      if [ "$tree" = before ]; then dir=$before bin=$before_bin; else dir=$after bin=$after_bin; fi
      echo "paired: $bench $tree $round ($(cut -d' ' -f1 /proc/loadavg) load)" >&2
      (cd "$dir" && "$bin" --bench) >"$out/$bench.$tree.$round" 2>&1 ||
        echo "paired: $bench $tree $round failed; see $out/$bench.$tree.$round" >&2
    done
  done
done
