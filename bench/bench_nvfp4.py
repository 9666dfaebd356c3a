"""Benchmark the NVFP4 W4A4 projection on the GDN/FFN shapes.

    PYTHONPATH=. python bench/bench_nvfp4.py [--rows 1,16] [--shape 4096x4096 ...] \
        [--layout tiles16|rows] [--out bench/results] [--name nvfp4_h200]

Beside it in the same run: cuBLAS bf16 on a bf16 weight and a dequantize-to-bf16-then-cuBLAS
emulation of engines' NVFP4 fallback. Writes <name>.json and <name>.md under --out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_w8a8 import ROWS, SHAPES, parse_shape  # noqa: E402
from bench.peers import dequant_cublas_peer  # noqa: E402
from gdn_kernels import Nvfp4Ctx  # noqa: E402
from bench.plot import write_report  # noqa: E402
from gdn_kernels import bench as harness  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default=",".join(map(str, ROWS)))
    ap.add_argument("--shape", action="append", type=parse_shape, help="NxK (repeatable); default: the model shapes")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--name", default="nvfp4")
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--layout", default="tiles16", choices=("rows", "tiles16"),
                    help="weight layout timed (default: tile-major, Nvfp4Weight.tile_major)")
    args = ap.parse_args(argv)

    rows = [int(r) for r in args.rows.split(",")]
    shapes = args.shape or SHAPES
    meta, bw = harness.run_meta(args.layout)
    ctx = Nvfp4Ctx(max_rows=max(512, max(rows)), max_k=max(17408, max(k for _, k in shapes)))
    records = []
    for i, (n, k) in enumerate(shapes):
        print(f"[{i + 1}/{len(shapes)}] nvfp4 [{n}, {k}]", flush=True)
        recs = harness.bench_nvfp4_case(ctx, n, k, rows, bw, meta["device"]["l2_bytes"],
                                        peers=[dequant_cublas_peer], replays=args.replays, layout=args.layout)
        for r in recs:
            blas = r.peers["cublas_bf16_us"]
            print(f"    rows {r.rows:3d}: {r.us:7.2f} us  {r.ratio_floor:5.2f}x floor  {r.us / blas:5.2f}x cuBLAS bf16 "
                  f"({blas:.1f} us), dequant+cuBLAS {r.peers['dequant_bf16_cublas_us']:.1f} us", flush=True)
        records.extend(recs)
    write_report(records, args.name, meta, Path(args.out), "NVFP4")
    return 0


if __name__ == "__main__":
    sys.exit(main())
