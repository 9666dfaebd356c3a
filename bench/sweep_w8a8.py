"""Schedule sweep of the W8A8 GEMM: every schedule of ``_build.sweep_cfgs`` timed alone (graph
replay, weights rotated beyond the L2) on the activations already quantized, beside the
quantizer alone and the whole projection with plain and programmatic dependent launches.

A schedule whose output differs by one bit from the shipped schedule's is reported as such and
not timed. Writes ``name``.json and ``name``.md under --out; progress on stderr.

    python bench/sweep_w8a8.py --out bench/results --name sweep_h200
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gdn_kernels.bench import MODEL_SHAPES  # noqa: E402

SHAPES = MODEL_SHAPES


def write_sweep(outdir: Path, name: str, meta: dict, records: list, caption: str, fixed: dict) -> None:
    """``name``.json (meta and records) and ``name``.md: one row a record, the ``fixed`` columns
    (header -> record key) then one column a schedule (its time in us, or why it was not timed)."""
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / f"{name}.json").write_text(json.dumps({"meta": meta, "records": records}, indent=1))
    keys = sorted({kk for r in records for kk in r["schedules"]})
    lines = [f"# {name}", "", f"device {meta['device']['name']}, commit {meta['commit']}, {meta['date']}", "",
             caption, "", "| " + " | ".join([*fixed, *keys]) + " |", "|" + "---|" * (len(fixed) + len(keys))]

    def cell(v):
        return f"{v:.2f}" if isinstance(v, float) else str(v)

    for r in records:
        cells = [cell(r.get(f, "")) for f in fixed.values()] + [cell(r["schedules"].get(kk, "")) for kk in keys]
        lines.append("| " + " | ".join(cells) + " |")
    (outdir / f"{name}.md").write_text("\n".join(lines) + "\n")


def schedule_key(cfg) -> str:
    """The column name of a schedule (see the caption)."""
    if cfg.wg:
        name = ((f"f16x{cfg.f16}_" if cfg.f16 else "") + ("qg_" if cfg.qg else "") + f"wg{cfg.wg}_s{cfg.stages}" + (f"_tma{cfg.tma}" if cfg.tma else "")
                + ("_ovl" if cfg.overlap & 1 else "") + ("_dfr" if cfg.overlap & 2 else "") + (f"_k{cfg.split}" if cfg.split > 1 else "") + ("_ws" if cfg.ws else "")
                + (f"_mc{cfg.mcx}x{cfg.mcy}" if cfg.mcx * cfg.mcy > 1 else "")
                + (f"_q{cfg.m}" if cfg.qg == 2 and cfg.m > 1 else "")
                + (f"_b{cfg.min_blocks}" if cfg.qg == 2 and cfg.min_blocks > 1 else ""))
    elif cfg.stages:
        name = f"tiled{cfg.stages}"
    else:
        name = f"m{cfg.m}_u{cfg.unroll}_p{cfg.pipe}_b{cfg.min_blocks}"
    return ("packed_" if cfg.packed else "") + name


# The e4m3 prototype's outputs against the shipped ones: the largest difference over the largest
# output (bf16 rounding alone gives up to 2^-8 of an output; the e4m3 MMA's 13-bit k32 sums about
# 3.5e-4 of a chunk's largest row sum, NOTES W8A8 v20).
QG_TOLERANCE = 2e-2


def bounded_error(out, ref) -> float:
    import cupy

    a = out.view(cupy.uint16).astype(cupy.uint32) << 16
    b = ref.view(cupy.uint16).astype(cupy.uint32) << 16
    a, b = a.view(cupy.float32), b.view(cupy.float32)
    if not bool(cupy.isfinite(a).all()):
        return float("inf")
    return float(cupy.abs(a - b).max() / cupy.maximum(cupy.abs(b).max(), 1e-30))


def pre_key(cfg) -> str:
    """The column name of a schedule in the staging sweep (--pre)."""
    return schedule_key(cfg) + f"_pre{cfg.pre}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--name", default="sweep_w8a8")
    ap.add_argument("--formats", default="int8,fp8_channel,fp8_block")
    ap.add_argument("--rows", default="1,8,16,32,64")
    ap.add_argument("--shape", action="append", default=[], help="extra N,K (repeatable)")
    ap.add_argument("--no-model-shapes", action="store_true", help="only the shapes given with --shape")
    ap.add_argument("--replays", type=int, default=30)
    ap.add_argument("--packed", action="store_true", help="also time every schedule on tile-major weights")
    ap.add_argument("--wgmma-only", action="store_true", help="time only the warpgroup-MMA schedules")
    ap.add_argument("--only", default=None, help="time only the schedules whose column name matches this regex")
    ap.add_argument("--pre", action="store_true",
                    help="instead: the shared-memory staging schedules (_build.pre_sweep_cfgs, rows 1-16) on "
                         "tile-major weights, each timed as a whole projection (quantizer + GEMM with PDL)")
    ap.add_argument("--tiles", default=None,
                    help="with --pre: 8-token tiles a CTA to time each schedule at (e.g. 1,2), in place of the row "
                         "count's own; a column of another tile count than the row count's ends in _tN")
    args = ap.parse_args()

    import cupy

    from gdn_kernels import W8a8Ctx, _build, bench
    from gdn_kernels.w8a8 import _FMT

    shapes = ([] if args.no_model_shapes else SHAPES) + [tuple(int(v) for v in s.split(",")) for s in args.shape]
    rows_list = [int(r) for r in args.rows.split(",")]
    meta, _ = bench.run_meta()
    l2 = meta["device"]["l2_bytes"]
    ctx = W8a8Ctx(max_rows=max(rows_list), max_k=max(k for _, k in shapes))
    stream = cupy.cuda.Stream(non_blocking=True)
    records = []
    t0 = time.time()
    with stream:
        for fmt in args.formats.split(","):
            for n, k in shapes:
                first = bench.random_w8a8_weight(fmt, n, k, 1)
                nrot = bench.rotation_count(first.nbytes, l2)
                weights = [first] + [bench.random_w8a8_weight(fmt, n, k, 2 + i) for i in range(nrot - 1)]
                # Tile-major copies for the packed schedules (--packed), as many as the weights.
                packed_weights = [w.tile_major() for w in weights] if args.packed or args.pre else []
                rs = cupy.random.RandomState(5)
                x = (rs.standard_normal((max(rows_list), k), dtype=cupy.float32).view(cupy.uint32) >> 16).astype(cupy.uint16)
                out = cupy.empty((max(rows_list), n), cupy.uint16)
                ref_out = cupy.empty_like(out)
                floor = first.nbytes / (meta["copy_bw_tbs"] * 1e12) * 1e6
                for rows in rows_list:
                    rec = {"format": fmt, "N": n, "K": k, "rows": rows, "floor_us": floor, "schedules": {}}

                    def proj(w):
                        return lambda: ctx.proj(w, x.data.ptr, k, rows, out.data.ptr, n, stream.ptr, dtype="bfloat16")

                    pdl = _build.PDL_ENABLED
                    _build.PDL_ENABLED = False
                    rec["proj_us"] = bench.time_graph([proj(w) for w in weights], stream, args.replays)
                    _build.PDL_ENABLED = True
                    rec["proj_pdl_us"] = bench.time_graph([proj(w) for w in weights], stream, args.replays)
                    _build.PDL_ENABLED = pdl
                    if packed_weights:
                        rec["proj_tm_us"] = bench.time_graph([proj(w) for w in packed_weights], stream, args.replays)
                    quant = [lambda w=first: ctx.quantize_activations(w, x.data.ptr, k, rows, stream.ptr)] * nrot
                    rec["quant_us"] = bench.time_graph(quant, stream, args.replays)
                    # The shipped schedule's bits, then every schedule against them.
                    ctx.proj(first, x.data.ptr, k, rows, ref_out.data.ptr, n, stream.ptr, dtype="bfloat16")
                    tiles = _build.gemm_tiles(rows)
                    key_of = pre_key if args.pre else schedule_key
                    if args.pre:
                        tile_counts = [int(t) for t in args.tiles.split(",")] if args.tiles else [tiles]
                        cfgs = [(c, t) for t in tile_counts for c in _build.pre_sweep_cfgs(t)]
                        family, x_ptr = "w8a8_gemm_pre_sweep", x.data.ptr
                    else:
                        code = _FMT[first.format]
                        cfgs = _build.sweep_cfgs(tiles) + _build.wgmma_sweep_cfgs(code, tiles)
                        if args.packed:
                            cfgs += _build.sweep_cfgs(tiles, True) + _build.wgmma_sweep_cfgs(code, tiles, True)
                        if args.wgmma_only:
                            cfgs = tuple(c for c in cfgs if c.wg)
                        family, x_ptr = "w8a8_gemm_sweep", None
                        cfgs = [(c, tiles) for c in cfgs]

                    def column(cfg, t):
                        return key_of(cfg) + (f"_t{t}" if t != tiles else "")

                    if args.only:
                        # Only the selected schedules are compiled.
                        cfgs = [(c, t) for c, t in cfgs if re.search(args.only, column(c, t))]
                        family = _build.subset_family(family, [
                            _build.gemm_instance(_FMT[first.format], t, "bfloat16", first.scale_dtype, c)
                            for c, t in cfgs])
                    # The e4m3 prototype (qg) last, held to a bound, not to the shipped bits; its
                    # tensor-copy forms read the workspace's tokens in MMA order (reordered in place
                    # before the first of them), its decode form (qg 2, after them) row-major (the
                    # workspace quantized again).
                    cfgs = sorted(cfgs, key=lambda ct: ct[0].qg)
                    mma_order = False
                    for cfg, t in cfgs:
                        key = column(cfg, t)
                        ws = packed_weights if cfg.packed else weights
                        if cfg.mma_order != mma_order:
                            if cfg.mma_order:
                                bench.tokens_to_mma_order(ctx, rows, k)
                            else:
                                ctx.quantize_activations(first, x.data.ptr, k, rows, stream.ptr)
                            mma_order = cfg.mma_order
                        if cfg.qg == 2 and cfg.decode_smem(k) > cfg.smem:
                            rec["schedules"][key] = "K TOO LONG"  # its token tiles exceed a CTA's shared memory
                            continue
                        out.fill(0xFFFF)
                        bench.w8a8_gemm_launcher(ctx, ws[0], rows, out.data.ptr, n, stream.ptr, cfg, family, x_ptr, t)()
                        if cfg.qg:
                            err = bounded_error(out[:rows], ref_out[:rows])
                            rec.setdefault("qg_error", {})[key] = err
                            if not err < QG_TOLERANCE:
                                rec["schedules"][key] = f"ERROR {err:.3g}"
                                continue
                        elif not bool((out[:rows] == ref_out[:rows]).all()):
                            rec["schedules"][key] = "DIFFERENT BITS"
                            continue
                        launches = [bench.w8a8_gemm_launcher(ctx, w, rows, out.data.ptr, n, stream.ptr, cfg, family, x_ptr, t)
                                    for w in ws]
                        rec["schedules"][key] = bench.time_graph(launches, stream, args.replays)
                    timed = {kk: v for kk, v in rec["schedules"].items() if isinstance(v, float)}
                    rec["best"] = min(timed, key=timed.get) if timed else None
                    records.append(rec)
                    print(f"[{time.time() - t0:6.0f}s] {fmt} [{n}, {k}] rows {rows}: proj {rec['proj_us']:.2f} "
                          f"pdl {rec['proj_pdl_us']:.2f} quant {rec['quant_us']:.2f} floor {floor:.2f} "
                          f"best gemm {rec['best']} {timed.get(rec['best'], float('nan')):.2f}",
                          file=sys.stderr, flush=True)
                del weights, first, packed_weights
                cupy.get_default_memory_pool().free_all_blocks()
    caption = ("GEMM alone (us) per schedule m (16-row tiles a CTA), u (chunks a round), p (pipelined), "
               "b (CTAs an SM), tiledN (the tiled kernel, N stages), wgT_sN (int8: the warpgroup-MMA kernel, T tokens a "
               "CTA, N stages; _tma1: the weight by tensor copies, _tma2: both operands), f16xW_wg64_sN_tma2 (fp8: the "
               "f16 warpgroup-MMA kernel, W warpgroups of 64 weight rows a CTA, N stages; _ovl: the next chunk's tokens converted under this chunk's MMAs; _dfr: each chunk finished under the next one's first MMAs); _kS: int8's K split over a cluster of S CTAs a tile; _ws: int8's producer-warp kernel; _mcXxY: that kernel in clusters of X token tiles x Y weight tiles multicasting their shared copies; qg_wgT_sN_tma2: fp8 on e4m3 warpgroup MMAs, a prototype whose bits are not the formats' (held to a bound: qg_error in the JSON; _kS: the decode order's warps over a cluster of S CTAs, _dfr: each chunk promoted under the next chunk's MMAs); qg_wgT_sD_kS(_qM)(_bB): its decode form, the weight loaded D chunks ahead into the MMA's registers, each warpgroup running M of the 8 decode warps in turn in clusters of S CTAs (no _kS: none), registers held to B CTAs an SM; packed_*: the same on tile-major weights "
               "(--packed); with --pre each schedule (pre: chunks a warp stages in shared memory before the "
               "quantizer wait) is timed as a whole projection, quantizer + GEMM with PDL, on tile-major weights; "
               "proj = quantizer + GEMM on row-major weights, plain and PDL; proj tile-major: the shipped "
               "projection on the tile-major weights (--packed, --pre).")
    fixed = {"format": "format", "N": "N", "K": "K", "rows": "rows", "floor": "floor_us", "quant": "quant_us",
             "proj": "proj_us", "proj PDL": "proj_pdl_us", "proj tile-major": "proj_tm_us"}
    write_sweep(Path(args.out), args.name, meta, records, caption, fixed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
