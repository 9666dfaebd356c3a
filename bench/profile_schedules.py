"""Launch chosen W8A8 GEMM schedules of the sweep once each, GEMM alone, for Nsight Compute.

Each schedule (named as in bench/sweep_w8a8.py's columns, picked by --only) is first checked
against the shipped projection's bits on the same weight and tokens, then launched once more
inside an NVTX range "profile:<schedule> <N>x<K> rows <rows>", so that ncu can take exactly the
launches to profile and label them:

    GDN_KERNELS_NVTX=1 ncu --nvtx --nvtx-include "regex:profile:.*/" --section SpeedOfLight \\
        --section MemoryWorkloadAnalysis_Tables python bench/profile_schedules.py --formats int8 \\
        --shape 5120,17408 --rows 256 --packed --only '^packed_wg(128_s6_tma2|256_s4_tma2_k2)$'

A schedule whose bits differ is reported and not profiled. Prints one line a schedule, with its
grid and, for a clustered one, how many of its clusters the driver can hold at once
(cuOccupancyMaxActiveClusters): fewer than the grid's means more than one wave.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def max_active_clusters(kern, grid, block: int, smem: int):
    """The driver's count of this kernel's clusters (its compile-time cluster shape) resident at
    once with this launch shape, or a string saying why there is none."""
    import ctypes

    from gdn_kernels import _build

    try:
        fn = _build.driver_fn("cuOccupancyMaxActiveClusters", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
    except (OSError, AttributeError) as exc:
        return f"unavailable ({exc})"
    cfg = _build._LaunchConfig()
    cfg.grid[0], cfg.grid[1], cfg.grid[2] = grid
    cfg.block[0], cfg.block[1], cfg.block[2] = block, 1, 1
    cfg.shared_mem = smem
    count = ctypes.c_int(0)
    err = fn(ctypes.addressof(count), ctypes.c_void_p(kern.ptr), ctypes.addressof(cfg))
    return count.value if err == 0 else f"CUresult {err}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--formats", default="int8")
    ap.add_argument("--shape", action="append", required=True, help="N,K (repeatable)")
    ap.add_argument("--rows", default="256", help="comma list")
    ap.add_argument("--packed", action="store_true", help="the tile-major schedules too")
    ap.add_argument("--only", required=True, help="regex over the sweep's schedule names")
    args = ap.parse_args()

    import cupy

    from bench.sweep_w8a8 import schedule_key
    from gdn_kernels import W8a8Ctx, _build, bench
    from gdn_kernels.w8a8 import _FMT

    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shape]
    rows_list = [int(r) for r in args.rows.split(",")]
    ctx = W8a8Ctx(max_rows=max(rows_list), max_k=max(k for _, k in shapes))
    stream = cupy.cuda.Stream(non_blocking=True)
    bad = 0
    with stream:
        for fmt in args.formats.split(","):
            for n, k in shapes:
                w = bench.random_w8a8_weight(fmt, n, k, 1)
                packed = w.tile_major() if args.packed else None
                rs = cupy.random.RandomState(5)
                x = (rs.standard_normal((max(rows_list), k), dtype=cupy.float32).view(cupy.uint32) >> 16).astype(cupy.uint16)
                out = cupy.empty((max(rows_list), n), cupy.uint16)
                ref = cupy.empty_like(out)
                for rows in rows_list:
                    ctx.proj(w, x.data.ptr, k, rows, ref.data.ptr, n, stream.ptr, dtype="bfloat16")
                    tiles = _build.gemm_tiles(rows)
                    code = _FMT[fmt]
                    cfgs = _build.wgmma_sweep_cfgs(code, tiles) + _build.sweep_cfgs(tiles)
                    if args.packed:
                        cfgs += _build.wgmma_sweep_cfgs(code, tiles, True) + _build.sweep_cfgs(tiles, True)
                    cfgs = [c for c in cfgs if re.search(args.only, schedule_key(c)) and not c.qg]
                    if not cfgs:
                        print(f"no schedule matches {args.only!r} at {rows} rows", file=sys.stderr)
                        return 2
                    names = [_build.gemm_instance(code, tiles, "bfloat16", w.scale_dtype, c) for c in cfgs]
                    family = _build.subset_family("w8a8_gemm_sweep", names)
                    for cfg, name in zip(cfgs, names):
                        key = schedule_key(cfg)
                        ws = packed if cfg.packed else w
                        launch = bench.w8a8_gemm_launcher(ctx, ws, rows, out.data.ptr, n, stream.ptr, cfg, family)
                        out.fill(0xFFFF)
                        launch()
                        if not bool((out[:rows] == ref[:rows]).all()):
                            print(f"{fmt} [{n}, {k}] rows {rows} {key}: DIFFERENT BITS, not profiled")
                            bad += 1
                            continue
                        label = f"profile:{key} {n}x{k} rows {rows}"
                        cupy.cuda.nvtx.RangePush(label)
                        launch()
                        cupy.cuda.nvtx.RangePop()
                        stream.synchronize()
                        grid = cfg.grid(rows, n, tiles)
                        size = cfg.split * cfg.mcx * cfg.mcy
                        fit = ""
                        if size > 1:
                            kern = ctx.modules.kernel(family, name, cfg.args, cfg.smem)
                            fit = (f", clusters of {size}: {grid[0] * grid[1] * grid[2] // size} in the grid, "
                                   f"{max_active_clusters(kern, grid, cfg.threads, cfg.smem)} resident at once")
                        print(f"{fmt} [{n}, {k}] rows {rows} {key}: grid {grid}{fit}; launched as '{label}'", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
