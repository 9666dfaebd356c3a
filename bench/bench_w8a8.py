"""Benchmark the W8A8 projections (int8, fp8 per channel, fp8 block) on the GDN/FFN shapes.

    PYTHONPATH=. python bench/bench_w8a8.py [--formats int8,fp8_block] [--rows 1,16] \
        [--shape 4096x4096 ...] [--out bench/results] [--name w8a8_h200]

Writes <name>.json and <name>.md under --out; prints progress and the table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.peers import torch_or_none, torch_w8a8_peer  # noqa: E402
from gdn_kernels import W8a8Ctx  # noqa: E402
from bench.plot import write_report  # noqa: E402
from gdn_kernels import bench as harness  # noqa: E402

SHAPES = harness.MODEL_SHAPES
ROWS = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def parse_shape(s: str) -> tuple[int, int]:
    n, k = s.lower().split("x")
    return int(n), int(k)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--formats", default="int8,fp8_channel,fp8_block")
    ap.add_argument("--rows", default=",".join(map(str, ROWS)))
    ap.add_argument("--shape", action="append", type=parse_shape, help="NxK (repeatable); default: the model shapes")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--name", default="w8a8")
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--layout", default="tiles16", choices=("tiles16", "rows"),
                    help="weight byte layout (W8a8Weight.tile_major, the default, or row-major)")
    args = ap.parse_args(argv)

    rows = [int(r) for r in args.rows.split(",")]
    shapes = args.shape or SHAPES
    meta, bw = harness.run_meta(args.layout)
    peers = [] if args.no_torch or torch_or_none() is None else [torch_w8a8_peer]
    ctx = W8a8Ctx(max_rows=max(256, max(rows)), max_k=max(17408, max(k for _, k in shapes)))
    records = []
    for fmt in args.formats.split(","):
        for n, k in shapes:
            print(f"[{len(records) // len(rows) + 1}/{len(shapes) * len(args.formats.split(','))}] {fmt} [{n}, {k}]", flush=True)
            recs = harness.bench_w8a8_case(ctx, fmt, n, k, rows, bw, meta["device"]["l2_bytes"], peers=peers,
                                           replays=args.replays, layout=args.layout)
            for r in recs:
                blas = r.peers["cublas_bf16_us"]
                print(f"    rows {r.rows:3d}: {r.us:7.2f} us  {r.ratio_floor:5.2f}x floor  "
                      f"{r.us / blas:5.2f}x cuBLAS bf16 ({blas:.1f} us)", flush=True)
            records.extend(recs)
    write_report(records, args.name, meta, Path(args.out), "W8A8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
