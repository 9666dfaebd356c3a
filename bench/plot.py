"""Plot benchmark results: latency against rows, one panel a shape, the floor drawn.

    python bench/plot.py bench/results/w8a8_h200.json [more.json ...] -o bench/results/w8a8_h200.png

Each format of each file is a line; cuBLAS bf16 (and every other peer found in the records) is a
dashed line; the W8A8 or NVFP4 floor (weight bytes over the run's copy bandwidth) is a dotted one.
Needs matplotlib (not a dependency of the library).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path


def load(paths):
    recs = []
    for p in paths:
        data = json.loads(Path(p).read_text())
        recs.extend(data["records"])
    return recs


def plot(records, out: Path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = sorted({(r["N"], r["K"]) for r in records}, key=lambda s: s[0] * s[1])
    cols = 3
    rows_n = -(-len(shapes) // cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(5 * cols, 3.8 * rows_n), squeeze=False)
    for ax, (n, k) in zip(axes.flat, shapes):
        lines = defaultdict(list)
        peers = defaultdict(dict)
        floors = {}
        for r in records:
            if (r["N"], r["K"]) != (n, k):
                continue
            lines[r["format"]].append((r["rows"], r["us"]))
            floors[r["format"]] = r["floor_us"]
            for key, v in r.items():
                if key.endswith("_us") and key not in ("us", "floor_us") and v is not None:
                    peers[key.removesuffix("_us")][r["rows"]] = v
        for fmt, pts in sorted(lines.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=fmt)
        for name, pts in sorted(peers.items()):
            xs = sorted(pts)
            ax.plot(xs, [pts[x] for x in xs], linestyle="--", label=name)
        for fmt, f in sorted(floors.items()):
            ax.axhline(f, linestyle=":", color="gray")
            ax.annotate(f"{fmt} floor", (1, f), fontsize=7, color="gray", va="bottom")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"[{n}, {k}]")
        ax.set_xlabel("rows")
        ax.set_ylabel("us")
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[len(shapes):]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=8)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    fig.savefig(out, dpi=110)


def write_report(records, name: str, meta: dict, outdir: Path, title: str) -> None:
    """Write <name>.json and <name>.md (gdn_kernels.bench.write_results), print the table, and
    draw <name>.png when matplotlib is importable."""
    from gdn_kernels import bench as harness

    js, md = harness.write_results(records, name, meta, outdir)
    print(md.read_text())
    print(f"wrote {js} and {md}")
    try:
        plot([r.flat() for r in records], js.with_suffix(".png"), f"{title}, {meta['device']['name']}, {meta['commit']}")
        print(f"wrote {js.with_suffix('.png')}")
    except ImportError as exc:
        print(f"no plot: {exc}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--title", default="")
    args = ap.parse_args(argv)
    plot(load(args.json), Path(args.out), args.title)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
