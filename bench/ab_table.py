"""A/B table of benchmark runs: "new" runs against "old" runs of the same cases, in percent.

    python bench/ab_table.py --new 'results/x_new*.json' --old 'results/x_old*.json' [--floor-rows 1,2,4,8,16]

Each argument is a glob of bench_w8a8.py / bench_nvfp4.py JSON files (alternated runs of one device
call). Per (format, N, K, rows): the mean time of the new runs against the mean of the old ones,
in percent (negative: new is faster); ``spread``: the largest difference between two old runs of a
case, in percent, over a shape's rows (what the runs' own noise is); ``new x floor``: the new runs'
mean time over the floor at the rows given by --floor-rows. Markdown on stdout.
"""

from __future__ import annotations

import argparse
import glob
import json
from collections import defaultdict


def load(pattern: str) -> list[dict]:
    files = sorted(glob.glob(pattern))
    if not files:
        raise SystemExit(f"no file matches {pattern}")
    return [json.load(open(f)) for f in files]


def times(runs: list[dict]) -> dict[tuple, list[tuple[float, float]]]:
    """(format, N, K, rows) -> [(us, floor_us) of each run]."""
    out = defaultdict(list)
    for run in runs:
        for r in run["records"]:
            out[(r["format"], r["N"], r["K"], r["rows"])].append((r["us"], r["floor_us"]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--new", required=True)
    ap.add_argument("--old", required=True)
    ap.add_argument("--floor-rows", default="1,2,4,8,16")
    args = ap.parse_args()
    new, old = times(load(args.new)), times(load(args.old))
    cases = sorted(set(new) & set(old), key=lambda c: (c[0], c[1] * c[2], c[1], c[3]))
    rows = sorted({c[3] for c in cases})
    floor_rows = [int(r) for r in args.floor_rows.split(",")]
    print("| format | [N, K] | " + " | ".join(f"{r} rows" for r in rows) + " | new x floor | spread % |")
    print("|---|---|" + "---|" * len(rows) + "---|---|")
    shapes = sorted({c[:3] for c in cases}, key=lambda s: (s[0], s[1] * s[2], s[1]))
    for fmt, n, k in shapes:
        cells, ratios, spread = [], [], 0.0
        for r in rows:
            key = (fmt, n, k, r)
            if key not in new or key not in old:
                cells.append("")
                continue
            t_new = sum(t for t, _ in new[key]) / len(new[key])
            t_old = [t for t, _ in old[key]]
            cells.append(f"{100 * (t_new / (sum(t_old) / len(t_old)) - 1):+.1f}")
            spread = max(spread, 100 * (max(t_old) - min(t_old)) / min(t_old))
            if r in floor_rows:
                ratios.append(f"{t_new / new[key][0][1]:.2f}")
        print(f"| {fmt} | [{n}, {k}] | " + " | ".join(cells) + f" | {'/'.join(ratios)} | {spread:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
