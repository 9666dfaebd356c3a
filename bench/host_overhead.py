"""Host-side cost of one eager projection call (Python dispatch and launch), and its parts.

    PYTHONPATH=. python bench/host_overhead.py

Times, per call (the median over bursts of calls, the GPU drained between bursts: host time, not
the GPU's throughput), with a small weight: the whole
``proj`` (raw-pointer arguments), the argument checks and ``supports`` alone, and the launches
alone (``launch``: packing arguments and two driver launches), and each launch alone (the
quantizer; the GEMM with programmatic dependent launch, the default, and plainly); NVFP4 in both
weight layouts; and the sustained rate of back-to-back proj calls (host or GPU bound). Prints a
table.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def per_call_us(fn, n: int = 3000, sync=None, burst: int = 25) -> float:
    """Median host time of one call, over bursts of ``burst`` calls. The GPU is drained (``sync``,
    untimed) between bursts, so the launch queue never fills and a call's time is the host's
    alone, not the GPU's throughput."""
    for _ in range(200):
        fn()
    if sync:
        sync()
    samples = []
    for _ in range(n // burst):
        t0 = time.perf_counter()
        for _ in range(burst):
            fn()
        samples.append((time.perf_counter() - t0) / burst)
        if sync:
            sync()
    return statistics.median(samples) * 1e6


def sustained_us(fn, sync, n: int = 3000) -> float:
    """Mean time of one call over n back-to-back calls (drained every 500): the host's cost or the
    GPU's, whichever is larger."""
    for _ in range(200):
        fn()
    sync()
    t0 = time.perf_counter()
    for i in range(n):
        fn()
        if i % 500 == 499:
            sync()
    sync()
    return (time.perf_counter() - t0) / n * 1e6


def main() -> int:
    import cupy

    from gdn_kernels import Nvfp4Ctx, W8a8Ctx
    from gdn_kernels.bench import random_nvfp4_weight, random_w8a8_weight
    from gdn_kernels.nvfp4 import check_nvfp4_args
    from gdn_kernels.w8a8 import check_proj_args

    n, k, rows = 256, 512, 1
    stream = cupy.cuda.Stream(non_blocking=True)
    x = cupy.asarray(np.random.default_rng(0).standard_normal((rows, k)).astype(np.float16))
    out = cupy.empty((rows, n), cupy.float16)
    xp, op, sp = x.data.ptr, out.data.ptr, stream.ptr
    wctx, fctx = W8a8Ctx(max_rows=16, max_k=1024), Nvfp4Ctx(max_rows=16, max_k=1024)
    from gdn_kernels import _build

    print(f"{'path':12s} {'proj us':>8s} {'checks us':>9s} {'launch us':>9s} {'quant us':>9s} "
          f"{'gemm us':>8s} {'gemm plain us':>13s} {'sustained proj us':>17s}")
    for fmt in ("int8", "fp8_block", "nvfp4", "nvfp4_tiles"):
        if fmt.startswith("nvfp4"):
            w, ctx, check = random_nvfp4_weight(n, k, 1), fctx, check_nvfp4_args
            if fmt == "nvfp4_tiles":
                w = w.tile_major()
        else:
            w, ctx, check = random_w8a8_weight(fmt, n, k, 1), wctx, check_proj_args
        full = per_call_us(lambda: ctx.proj(w, xp, k, rows, op, n, sp, dtype="float16"), sync=stream.synchronize)
        checks = per_call_us(lambda: (check(w, xp, k, rows, op, n, "float16"), ctx.supports(w, rows, "float16")))
        launch = per_call_us(lambda: ctx.launch(w, xp, k, rows, op, n, sp, "float16"), sync=stream.synchronize)
        quant = gemm = plain = float("nan")
        if fmt.startswith("nvfp4"):
            quant = per_call_us(lambda: ctx._quant_launch(xp, k, rows, k, sp, "float16", 0.0), sync=stream.synchronize)
            gemm = per_call_us(lambda: ctx._gemm_launch(w, rows, op, n, sp, "float16"), sync=stream.synchronize)
            plain = per_call_us(lambda: ctx._gemm_launch(w, rows, op, n, sp, "float16", dependent=False),
                                sync=stream.synchronize)
        else:
            quant = per_call_us(lambda: ctx._quant_launch(w.format, xp, k, rows, k, sp, "float16"),
                                sync=stream.synchronize)
            gemm = per_call_us(lambda: ctx.gemm_on_workspace(w, rows, op, n, sp, "float16"), sync=stream.synchronize)
            pdl, _build.PDL_ENABLED = _build.PDL_ENABLED, False
            plain = per_call_us(lambda: ctx.gemm_on_workspace(w, rows, op, n, sp, "float16"), sync=stream.synchronize)
            _build.PDL_ENABLED = pdl
        sustained = sustained_us(lambda: ctx.proj(w, xp, k, rows, op, n, sp, dtype="float16"), stream.synchronize)
        print(f"{fmt:12s} {full:8.2f} {checks:9.2f} {launch:9.2f} {quant:9.2f} {gemm:8.2f} {plain:13.2f} "
              f"{sustained:17.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
