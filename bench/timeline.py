"""Per-CTA timeline of the benchmark's chain of decode projections (kernels built with -DGDN_TRACE).

    PYTHONPATH=. python bench/timeline.py [--formats int8,fp8_channel,fp8_block,nvfp4] [--rows 1,16] \
        [--shape NxK ...] [--nvfp4-pdl-quant 0,1] [--replays 5] [--out bench/results] [--name timeline]

Each case is what bench_w8a8.py / bench_nvfp4.py time: one graph launching the projection once per
rotated copy of a tile-major weight (copies beyond 4x the L2), replayed. Here the quantizer and the
GEMM record per CTA the global timer (nanoseconds) at entry, after the quantizer's wait on the
kernel before it, and when the CTA's last warp leaves (kernels/include/gdn/trace.cuh; the shipped
build has none of it). Per projection i after the first of a replay, with g_end[i - 1] the previous
GEMM's last CTA exit, the report gives, in microseconds (means over those projections):

- period: g_end[i] - g_end[i - 1], the time a projection adds to the chain;
- q start / q waited: the quantizer's first CTA entry and its first CTA's return from the wait on
  the previous GEMM, both relative to g_end[i - 1];
- q work: from that return to the quantizer's last exit;
- g start: the GEMM's first CTA entry relative to g_end[i - 1] (negative: it started during the
  previous GEMM), and the share of its CTAs that entered before the quantizer's last exit;
- g after q: the GEMM's last exit after the quantizer's last exit (the GEMM's own critical path
  once its input exists);
- g tail: the last exit after the 90th percentile of the GEMM's CTA exits (the last CTAs alone);
- floor: weight bytes over the measured copy bandwidth.
The per-call time of the traced build (graph replay) is printed beside the untraced build's, so the
records' own cost shows. Writes <name>.json (the summary and one replay's raw records a case) and
<name>.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gdn_kernels.bench import MODEL_SHAPES  # noqa: E402

SHAPES = MODEL_SHAPES
# Records a module's trace buffer holds (gdn::kTraceCap), 32 bytes each.
TRACE_CAP = 1 << 18
# Kernel families that may hold each path's quantizer and GEMM (NVFP4's few-token schedules may
# come from the sweep family).
FAMILIES = {"w8a8": (("act_quant",), ("w8a8_gemm",)),
            "nvfp4": (("fp4_quant",), ("fp4_mx_gemm", "fp4_mx_gemm_sweep"))}


def trace_views(modules, family: str):
    """(records [cap, 4] uint64, count [1] uint32) of a family's trace buffer, as CuPy arrays."""
    import cupy

    mod = modules.module(family)
    buf, cnt = mod.get_global("gdn_trace_buf"), mod.get_global("gdn_trace_count")
    recs = cupy.ndarray((TRACE_CAP, 4), cupy.uint64, memptr=buf)
    return recs, cupy.ndarray((1,), cupy.uint32, memptr=cnt)


def per_launch(recs: np.ndarray, launches: int) -> list[np.ndarray]:
    """The records split into ``launches`` equal runs of slots (the CTAs of one launch each)."""
    if len(recs) % launches:
        raise RuntimeError(f"{len(recs)} records do not split into {launches} launches")
    return np.split(recs, launches)


def summarize(q_recs: np.ndarray, g_recs: np.ndarray, calls: int) -> dict:
    """The report's quantities (see the module docstring) for one replay's records."""
    qs, gs = per_launch(q_recs, calls), per_launch(g_recs, calls)
    rows = []
    for i in range(1, calls):
        q, g, g_prev = qs[i], gs[i], gs[i - 1]
        t0 = float(g_prev[:, 2].max())
        q_end = float(q[:, 2].max())
        g_end = g[:, 2].astype(np.float64)
        rows.append({
            "period": float(g_end.max()) - t0,
            "q_start": float(q[:, 0].min()) - t0,
            "q_waited": float(q[:, 1].min()) - t0,
            "q_work": q_end - float(q[:, 1].min()),
            "g_start": float(g[:, 0].min()) - t0,
            "g_early_share": float((g[:, 0] < q_end).mean()),
            "g_after_q": float(g_end.max()) - q_end,
            "g_tail": float(g_end.max() - np.percentile(g_end, 90)),
        })
    # Times in microseconds; the share stays a fraction.
    return {k: float(np.mean([r[k] for r in rows])) / (1.0 if k == "g_early_share" else 1e3) for k in rows[0]}


def run_case(ctx, path: str, w_list, x, out, rows: int, stream, replays: int) -> tuple[dict, dict, float]:
    """Traced replays of one case: (mean summary, one replay's raw records, traced us a call)."""
    from gdn_kernels import bench

    n, k = w_list[0].n, w_list[0].k
    launches = [(lambda w=w: ctx.proj(w, x.data.ptr, k, rows, out.data.ptr, n, stream.ptr, dtype="bfloat16"))
                for w in w_list]
    us = bench.time_graph(launches, stream, 10)  # also the warm-up
    # Each role's family: the loaded one that recorded CTAs in the warm-up.
    views = []
    for fams in FAMILIES[path]:
        found = [v for v in (trace_views(ctx.modules, f) for f in fams if ctx.modules.is_loaded(f)) if int(v[1].get()[0])]
        if len(found) != 1:
            raise RuntimeError(f"{len(found)} of the families {fams} recorded CTAs")
        views.append(found[0])
    stream.begin_capture()
    for f in launches:
        f()
    graph = stream.end_capture()
    graph.upload(stream)
    sums, raw = [], {}
    for r in range(replays):
        for recs, cnt in views:
            recs.data.memset_async(0, recs.nbytes, stream)
            cnt.data.memset_async(0, 4, stream)
        graph.launch(stream)
        stream.synchronize()
        got = []
        for recs, cnt in views:
            c = int(cnt.get()[0])
            if c > len(recs):
                raise RuntimeError(f"{c} CTAs overflow the trace buffer of {len(recs)}")
            got.append(recs[:c].get())
        sums.append(summarize(got[0], got[1], len(w_list)))
        if r == 0:
            raw = {"quant": got[0].tolist(), "gemm": got[1].tolist()}
    mean = {key: float(np.mean([s[key] for s in sums])) for key in sums[0]}
    return mean, raw, us


def main(argv=None) -> int:
    os.environ["GDN_KERNELS_TRACE"] = "1"  # before any module is compiled
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--formats", default="int8,fp8_channel,fp8_block,nvfp4")
    ap.add_argument("--rows", default="1,16")
    ap.add_argument("--shape", action="append", default=[], help="NxK (repeatable); default: the model shapes")
    ap.add_argument("--nvfp4-pdl-quant", default="0,1",
                    help="NVFP4's quantizer launched plainly (0) and programmatically dependent (1)")
    ap.add_argument("--replays", type=int, default=5)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--name", default="timeline")
    args = ap.parse_args(argv)

    import cupy

    from gdn_kernels import Nvfp4Ctx, W8a8Ctx, _build, bench

    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shape] or SHAPES
    rows_list = [int(r) for r in args.rows.split(",")]
    meta, bw = bench.run_meta()
    l2 = meta["device"]["l2_bytes"]
    max_k = max(k for _, k in shapes)
    w8 = W8a8Ctx(max_rows=max(rows_list), max_k=max_k)
    f4 = Nvfp4Ctx(max_rows=max(rows_list), max_k=max_k) if "nvfp4" in args.formats else None
    stream = cupy.cuda.Stream(non_blocking=True)
    results = []
    pdl_quant = _build.PDL_QUANT_NVFP4
    with stream:
        for fmt in args.formats.split(","):
            for n, k in shapes:
                if fmt == "nvfp4":
                    first = bench.random_nvfp4_weight(n, k, 1)
                    nrot = bench.rotation_count(first.nbytes, l2)
                    ws = [w.tile_major() for w in [first] + [bench.random_nvfp4_weight(n, k, 2 + i) for i in range(nrot - 1)]]
                    ctx, path, variants = f4, "nvfp4", [int(v) for v in args.nvfp4_pdl_quant.split(",")]
                else:
                    first = bench.random_w8a8_weight(fmt, n, k, 1, "tiles16")
                    nrot = bench.rotation_count(first.nbytes, l2)
                    ws = [first] + [bench.random_w8a8_weight(fmt, n, k, 2 + i, "tiles16") for i in range(nrot - 1)]
                    ctx, path, variants = w8, "w8a8", [None]
                rs = cupy.random.RandomState(5)
                x = (rs.standard_normal((max(rows_list), k), dtype=cupy.float32).view(cupy.uint32) >> 16).astype(cupy.uint16)
                out = cupy.empty((max(rows_list), n), cupy.uint16)
                floor = first.nbytes / bw * 1e6
                for rows in rows_list:
                    for v in variants:
                        if v is not None:
                            _build.PDL_QUANT_NVFP4 = bool(v) and _build.PDL_ENABLED
                        mean, raw, us = run_case(ctx, path, ws, x, out, rows, stream, args.replays)
                        rec = {"format": fmt, "N": n, "K": k, "rows": rows, "calls": nrot, "floor_us": floor,
                               "traced_us": us, **mean}
                        if v is not None:
                            rec["pdl_quant"] = v
                        results.append({"summary": rec, "raw": raw})
                        print(f"{fmt} [{n}, {k}] rows {rows}" + (f" pdl_quant {v}" if v is not None else "") + ": "
                              + ", ".join(f"{kk} {vv:.2f}" for kk, vv in rec.items() if isinstance(vv, float)),
                              file=sys.stderr, flush=True)
                del ws, first
                cupy.get_default_memory_pool().free_all_blocks()
    _build.PDL_QUANT_NVFP4 = pdl_quant
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{args.name}.json").write_text(json.dumps({"meta": meta, "cases": results}))
    cols = ["format", "N", "K", "rows", "pdl_quant", "floor_us", "traced_us", "period", "q_start", "q_waited", "q_work",
            "g_start", "g_early_share", "g_after_q", "g_tail"]
    lines = [f"# {args.name}", "", f"device {meta['device']['name']}, commit {meta['commit']}, {meta['date']}, "
             f"copy bandwidth {bw / 1e12:.2f} TB/s", "", (__doc__ or "").split("\n\n")[2].replace("\n", " "), "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in results:
        s = r["summary"]
        lines.append("| " + " | ".join(f"{s[c]:.2f}" if isinstance(s.get(c), float) else str(s.get(c, "")) for c in cols)
                     + " |")
    (out_dir / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
