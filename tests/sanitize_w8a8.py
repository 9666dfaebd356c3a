"""Small W8A8 workload for compute-sanitizer (memcheck, racecheck): every format (or those named), ragged N,
strides, rows 1..40, both weight layouts, and every GEMM schedule of the sweeps (the staging ones and the warpgroup-MMA ones included, at up to 64 rows). CuPy's memory pool is switched off so that an access past any buffer hits
unallocated memory and is reported.

    python tests/sanitize_w8a8.py [FORMAT ...]   (default: int8 fp8_channel fp8_block)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(formats: list[str]) -> int:
    import cupy

    cupy.cuda.set_allocator(None)
    from gdn_kernels import W8a8Ctx, _build
    from gdn_kernels.bench import random_w8a8_weight, w8a8_gemm_launcher
    from gdn_kernels.w8a8 import _FMT

    ctx = W8a8Ctx(max_rows=64, max_k=1152)
    rng = np.random.default_rng(0)
    for fmt in formats:
        for n, k in ((16, 128), (200, 384), (129, 1024)):
            w = random_w8a8_weight(fmt, n, k, int(rng.integers(1 << 30)))
            for rows in (1, 7, 9, 17, 40):
                ldx, ldc = k + 8, n + 3
                x = cupy.asarray(rng.standard_normal((rows, ldx)).astype(np.float16))
                out = cupy.empty((rows, ldc), cupy.float16)
                assert ctx.proj(w, x, ldx, rows, out, ldc)
                assert ctx.proj(w.tile_major(), x, ldx, rows, out, ldc)
    # Every GEMM schedule (the shipped ones are chosen by shape, so small weights alone would not
    # reach them all), on a ragged N and a K whose chunks do not divide among the warps.
    for fmt in formats:
        w = random_w8a8_weight(fmt, 200, 1152, int(rng.integers(1 << 30)))
        for rows in (3, 12, 40, 64):
            x = cupy.asarray(rng.standard_normal((rows, 1152)).astype(np.float16))
            ctx.quantize_activations(w, x.data.ptr, 1152, rows, 0, dtype="float16")
            out = cupy.empty((rows, 203), cupy.uint16)
            packed = w.tile_major()
            tiles = _build.gemm_tiles(rows)
            code = _FMT[w.format]
            cfgs = _build.sweep_cfgs(tiles) + _build.sweep_cfgs(tiles, True)
            cfgs += _build.wgmma_sweep_cfgs(code, tiles) + _build.wgmma_sweep_cfgs(code, tiles, True)
            for cfg in cfgs:
                w8a8_gemm_launcher(ctx, packed if cfg.packed else w, rows, out.data.ptr, 203, 0, cfg)()
            # The schedules that stage chunks in shared memory before the quantizer wait, also with
            # the rows spread over more CTAs (fewer token tiles a CTA).
            for t in (1, 2):
                for cfg in _build.pre_sweep_cfgs(t) if t <= tiles else ():
                    w8a8_gemm_launcher(ctx, packed, rows, out.data.ptr, 203, 0, cfg, "w8a8_gemm_pre_sweep", None, t)()
    cupy.cuda.runtime.deviceSynchronize()
    print("sanitize workload done")
    return 0


if __name__ == "__main__":
    FORMATS = ("int8", "fp8_channel", "fp8_block")
    wanted = sys.argv[1:] or list(FORMATS)
    unknown = set(wanted) - set(FORMATS)
    if unknown:
        sys.exit(f"unknown formats {sorted(unknown)}; choose from {FORMATS}")
    sys.exit(main(wanted))
