"""Schedule sweep of the tile-major NVFP4 GEMM: every schedule of ``_build.FP4_TILED_SWEEP``
(chunks in flight a warp, arithmetic form, register bound) timed inside the whole projection
(quantizer + GEMM with PDL, graph replay, weights rotated beyond the L2), beside the plain-layout
kernels on the same weights and the shipped schedule's GEMM alone (the quantizer not rerun).

A schedule whose output differs by one bit from the plain layout's is reported as such and not
timed. Writes ``name``.json and ``name``.md under --out; progress on stderr.

    python bench/sweep_nvfp4.py --out bench/results --name sweep_nvfp4_h200
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.sweep_w8a8 import SHAPES, write_sweep  # noqa: E402  (the same model shapes)
from gdn_kernels import _build  # noqa: E402


def _key(schedule) -> str:
    unroll, arith, min_blocks = schedule
    return (f"u{unroll}_b{min_blocks}" + ("", "_cf", "_ms")[arith & 3] + ("_im" if arith & _build.FP4_ARITH_IMAD else "")
            + ("_pin" if arith & _build.FP4_ARITH_PIN else "") + ("_pf" if arith & _build.FP4_ARITH_PREFETCH else "")
            + ("_early" if arith & _build.FP4_ARITH_EARLY else "") + ("_mb" if arith & _build.FP4_ARITH_MASKED else "")
            + ("_l2" if arith & _build.FP4_ARITH_L2_FIRST else "") + ("_ring" if arith & _build.FP4_ARITH_RING else "")
            + ("_m2" if arith & _build.FP4_ARITH_TWO_TILES else "")
            + (f"_t{_build.fp4_schedule_tokens(schedule)}" if _build.fp4_schedule_tokens(schedule) else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--name", default="sweep_nvfp4")
    ap.add_argument("--rows", default="1,2,4,8,16,64")
    ap.add_argument("--replays", type=int, default=20)
    args = ap.parse_args()

    import cupy

    from gdn_kernels import Nvfp4Ctx, bench

    rows_list = [int(r) for r in args.rows.split(",")]
    meta, _ = bench.run_meta()
    l2 = meta["device"]["l2_bytes"]
    ctx = Nvfp4Ctx(max_rows=max(rows_list), max_k=max(k for _, k in SHAPES))
    stream = cupy.cuda.Stream(non_blocking=True)
    records = []
    t0 = time.time()
    with stream:
        for n, k in SHAPES:
            plain = [bench.random_nvfp4_weight(n, k, 1)]
            nbytes = plain[0].nbytes
            plain += [bench.random_nvfp4_weight(n, k, 2 + i) for i in range(bench.rotation_count(nbytes, l2) - 1)]
            tiled = [w.tile_major() for w in plain]
            rs = cupy.random.RandomState(5)
            x = (rs.standard_normal((max(rows_list), k), dtype=cupy.float32).view(cupy.uint32) >> 16).astype(cupy.uint16)
            out = cupy.empty((max(rows_list), n), cupy.uint16)
            ref_out = cupy.empty_like(out)
            floor = nbytes / (meta["copy_bw_tbs"] * 1e12) * 1e6

            def timed(weights, rows):
                launches = [(lambda w=w: ctx.proj(w, x.data.ptr, k, rows, out.data.ptr, n, stream.ptr,
                                                  dtype="bfloat16")) for w in weights]
                return bench.time_graph(launches, stream, args.replays)

            for rows in rows_list:
                groups = _build.fp4_groups(rows)
                rec = {"format": "nvfp4", "N": n, "K": k, "rows": rows, "floor_us": floor,
                       "shipped": _key(_build.fp4_slice_schedule(rows, _build.fp4_tiled_size(n, k))),
                       "schedules": {}}
                ctx._set_tiled(groups, "bfloat16")
                ctx.proj(plain[0], x.data.ptr, k, rows, ref_out.data.ptr, n, stream.ptr, dtype="bfloat16")
                rec["schedules"]["plain"] = timed(plain, rows)
                # The shipped tile-major GEMM alone, on the activations quantized just now.
                ctx.proj(tiled[0], x.data.ptr, k, rows, out.data.ptr, n, stream.ptr, dtype="bfloat16")
                rec["gemm_alone"] = bench.time_graph(
                    [(lambda w=w: ctx._gemm_launch(w, rows, out.data.ptr, n, stream.ptr, "bfloat16", dependent=False))
                     for w in tiled], stream, args.replays)
                for sched in _build.FP4_TILED_SWEEP[groups] + _build.FP4_TILED_FEW_SWEEP.get(rows, ()):
                    ctx._set_tiled(groups, "bfloat16", sched)
                    out.fill(0xFFFF)
                    ctx.proj(tiled[0], x.data.ptr, k, rows, out.data.ptr, n, stream.ptr, dtype="bfloat16")
                    if not bool((out[:rows] == ref_out[:rows]).all()):
                        rec["schedules"][_key(sched)] = "DIFFERENT BITS"
                        continue
                    rec["schedules"][_key(sched)] = timed(tiled, rows)
                    # The same GEMM alone (no quantizer before it), on the activations quantized above.
                    rec["schedules"][_key(sched) + " alone"] = bench.time_graph(
                        [(lambda w=w: ctx._gemm_launch(w, rows, out.data.ptr, n, stream.ptr, "bfloat16",
                                                       dependent=False)) for w in tiled], stream, args.replays)
                ctx._set_tiled(groups, "bfloat16")
                times = {kk: v for kk, v in rec["schedules"].items() if isinstance(v, float) and not kk.endswith(" alone")}
                rec["best"] = min(times, key=times.get) if times else None
                records.append(rec)
                print(f"[{time.time() - t0:6.0f}s] nvfp4 [{n}, {k}] rows {rows}: floor {floor:.2f} "
                      + f"gemm_alone {rec['gemm_alone']:.2f} "
                      + " ".join(f"{kk} {v:.2f}" for kk, v in times.items()), file=sys.stderr, flush=True)
            del plain, tiled
            cupy.get_default_memory_pool().free_all_blocks()
    caption = ("Whole NVFP4 projection (us: quantizer + GEMM, PDL): `plain` the checkpoint layout's kernels, "
               "then each tile-major schedule: u (chunks in flight a warp), b (CTAs a multiprocessor the registers "
               "must allow); the arithmetic direct, or cf (conversion-free), ms (magic block sums); im (shifts and "
               "masks as IMADs), pin (decode tables held in registers), pf (next chunks loaded before the current ones are "
               "computed), early (first round's weight loaded before the quantizer wait), mb (B operands read pre-masked "
               "from the quantizer's masked form), l2 (the first wave's CTAs prefetch their tiles into L2 before the "
               "quantizer wait), ring (the next u chunks of weight a warp in flight in a shared-memory ring, by cp.async), "
               "m2 (two 16-row weight tiles a CTA, the activation operands shared), "
               "t1 / t2 (the few-token form for slices of 1 / 2 rows): _build.FP4_ARITH. A column ending in 'alone' is that "
               "schedule's GEMM without the quantizer.")
    write_sweep(Path(args.out), args.name, meta, records, caption,
                {"N": "N", "K": "K", "rows": "rows", "floor": "floor_us", "shipped": "shipped",
                 "shipped GEMM alone": "gemm_alone"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
