"""Schedule sweep of the NVFP4 GEMM: every schedule of ``_build.FP4_SWEEP_SCHEDULES`` (chunks in
flight a warp, CTAs a multiprocessor) timed inside the whole projection (quantizer + GEMM with
PDL, graph replay, weights rotated beyond the L2), beside the shipped one.

A schedule whose output differs by one bit from the shipped schedule's is reported as such and
not timed. Writes ``name``.json and ``name``.md under --out; progress on stderr.

    python bench/sweep_nvfp4.py --out bench/results --name sweep_nvfp4_h200
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.sweep_w8a8 import SHAPES, write_sweep  # noqa: E402  (the same model shapes)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--name", default="sweep_nvfp4")
    ap.add_argument("--rows", default="1,8,16,32,64")
    ap.add_argument("--replays", type=int, default=20)
    args = ap.parse_args()

    import cupy

    from gdn_kernels import Nvfp4Ctx, _build, bench

    rows_list = [int(r) for r in args.rows.split(",")]
    meta = bench.base_meta()
    meta["copy_bw_tbs"] = bench.copy_bandwidth() / 1e12
    l2 = meta["device"]["l2_bytes"]
    ctx = Nvfp4Ctx(max_rows=max(rows_list), max_k=max(k for _, k in SHAPES))
    shipped = dict(ctx._gemm)
    stream = cupy.cuda.Stream(non_blocking=True)
    records = []
    t0 = time.time()
    with stream:
        for n, k in SHAPES:
            first = bench.random_nvfp4_weight(n, k, 1)
            nbytes = n * k // 2 + n * k // 16
            nrot = bench.rotation_count(nbytes, l2)
            weights = [first] + [bench.random_nvfp4_weight(n, k, 2 + i) for i in range(nrot - 1)]
            rs = cupy.random.RandomState(5)
            x = (rs.standard_normal((max(rows_list), k), dtype=cupy.float32).view(cupy.uint32) >> 16).astype(cupy.uint16)
            out = cupy.empty((max(rows_list), n), cupy.uint16)
            ref_out = cupy.empty_like(out)
            floor = nbytes / (meta["copy_bw_tbs"] * 1e12) * 1e6
            for rows in rows_list:
                tiles = _build.gemm_tiles(rows)
                rec = {"format": "nvfp4", "N": n, "K": k, "rows": rows, "floor_us": floor, "schedules": {},
                       "shipped": "u{}_b{}".format(*_build.FP4_SCHEDULE[tiles])}
                ctx._gemm.update(shipped)
                ctx.proj(first, x.data.ptr, k, rows, ref_out.data.ptr, n, stream.ptr, dtype="bfloat16")
                for sched in _build.FP4_SWEEP_SCHEDULES[tiles]:
                    key = "u{}_b{}".format(*sched)
                    name = _build.fp4_gemm_instance(tiles, "bfloat16", sched)
                    ctx._gemm[(tiles, "bfloat16")] = ctx.modules.kernel("fp4_mx_gemm_sweep", name, "PPfPPPPqiii")
                    out.fill(0xFFFF)
                    ctx.proj(first, x.data.ptr, k, rows, out.data.ptr, n, stream.ptr, dtype="bfloat16")
                    if not bool((out[:rows] == ref_out[:rows]).all()):
                        rec["schedules"][key] = "DIFFERENT BITS"
                        continue
                    launches = [(lambda w=w: ctx.proj(w, x.data.ptr, k, rows, out.data.ptr, n, stream.ptr,
                                                      dtype="bfloat16")) for w in weights]
                    rec["schedules"][key] = bench.time_graph(launches, stream, args.replays)
                ctx._gemm.update(shipped)
                timed = {kk: v for kk, v in rec["schedules"].items() if isinstance(v, float)}
                rec["best"] = min(timed, key=timed.get) if timed else None
                records.append(rec)
                print(f"[{time.time() - t0:6.0f}s] nvfp4 [{n}, {k}] rows {rows}: floor {floor:.2f} "
                      + " ".join(f"{kk} {v:.2f}" for kk, v in timed.items()), file=sys.stderr, flush=True)
            del weights, first
            cupy.get_default_memory_pool().free_all_blocks()
    caption = ("Whole NVFP4 projection (us: quantizer + GEMM, PDL) per GEMM schedule u (chunks in flight a warp), "
               "b (CTAs a multiprocessor, the register cap); empty where the schedule is not one of that row "
               "count's tile count.")
    write_sweep(Path(args.out), args.name, meta, records, caption,
                {"N": "N", "K": "K", "rows": "rows", "floor": "floor_us", "shipped": "shipped"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
