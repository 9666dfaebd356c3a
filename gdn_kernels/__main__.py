"""``python -m gdn_kernels``: build the kernels, check and time the projections on default shapes.

Runs the W8A8 int8 projection on the GDN layer shapes of Qwen3.5/3.6-27B (in_proj [16384, 5120],
out_proj [5120, 6144]) and Qwen3-Next-80B-A3B (in_proj [12288, 2048], out_proj [2048, 4096]) with
random weights, checks sampled outputs against the numpy reference and prints one table row a
case. Exits non-zero without a GPU or when a check fails.
"""

from __future__ import annotations

import argparse
import sys

DEFAULT_SHAPES = [("27B in_proj_qkvz", 16384, 5120), ("27B out_proj", 5120, 6144),
                  ("Next in_proj_qkvz", 12288, 2048), ("Next out_proj", 2048, 4096)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gdn_kernels", description=__doc__)
    ap.add_argument("--rows", default="1,4,16,64", help="comma-separated row counts")
    ap.add_argument("--formats", default="int8", help="int8, fp8_channel, fp8_block (comma-separated)")
    args = ap.parse_args(argv)
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no CuPy, no driver: all mean "no GPU"
        print(f"gdn_kernels: no CUDA GPU available ({type(exc).__name__}: {exc}); nothing to run.", file=sys.stderr)
        return 2
    if count == 0:
        print("gdn_kernels: no CUDA GPU available (0 devices); nothing to run.", file=sys.stderr)
        return 2

    from gdn_kernels import W8a8Ctx
    from gdn_kernels import bench as harness

    rows = [int(r) for r in args.rows.split(",")]
    info = harness.device_info()
    bw = harness.copy_bandwidth()
    print(f"{info['name']}: {info['sm_count']} SMs, L2 {info['l2_bytes'] >> 20} MiB, copy bandwidth {bw / 1e12:.2f} TB/s")
    print("building kernels ...", flush=True)
    ctx = W8a8Ctx(max_rows=max(256, max(rows)))
    print(f"{'format':11s} {'shape':>22s} {'[N, K]':>14s} {'rows':>4s} {'max err':>10s} {'us':>8s} {'GB/s':>6s} "
          f"{'x floor':>7s} {'x cuBLAS':>8s}")
    failed = 0
    for fmt in args.formats.split(","):
        for label, n, k in DEFAULT_SHAPES:
            try:
                recs = harness.bench_w8a8_case(ctx, fmt, n, k, rows, bw, info["l2_bytes"])
            except AssertionError as exc:
                print(f"{fmt:11s} {label:>22s} CHECK FAILED: {exc}")
                failed += 1
                continue
            for r in recs:
                err = f"{r.max_ulp:.0f} ulp" if r.max_ulp is not None else f"{r.max_rel_err:.1e}"
                blas = r.peers["cublas_bf16_us"]
                print(f"{fmt:11s} {label:>22s} {f'[{n}, {k}]':>14s} {r.rows:4d} {err:>10s} {r.us:8.2f} "
                      f"{r.gbps:6.0f} {r.ratio_floor:7.2f} {r.us / blas:8.2f}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
