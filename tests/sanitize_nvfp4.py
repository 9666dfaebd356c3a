"""Small NVFP4 workload for compute-sanitizer (memcheck, racecheck), CuPy's pool off: ragged N,
strides, rows 1..70 (with a context of 32 rows, so the sliced path runs too), both weight layouts
(every token-group count of the tile-major kernel), each weight-size class's schedules forced on
the same weights (_build.FP4_TILED_BY_SIZE: the L2 prefetch, the masked operand form; and
FP4_TILED_FEW_BY_SIZE at 1 and 2 rows, with K long enough for whole rounds and each tail)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    import cupy

    cupy.cuda.set_allocator(None)
    from gdn_kernels import Nvfp4Ctx, _build
    from gdn_kernels.bench import random_nvfp4_weight

    ctx = Nvfp4Ctx(max_rows=32, max_k=4480)
    rng = np.random.default_rng(0)
    # Each size class of tile-major schedules in turn (the weights here are small: the thresholds move).
    # small, base, wide, large, long:
    for small_max, large_min, long_k, wide_n in ((1 << 40, 1 << 41, 0, 0), (0, 1 << 41, 0, 1 << 30), (0, 1 << 41, 0, 0),
                                                 (0, 1, 1 << 30, 0), (0, 1, 0, 0)):
        _build.FP4_TILED_SMALL_MAX, _build.FP4_TILED_LARGE_MIN, _build.FP4_TILED_LONG_K = small_max, large_min, long_k
        _build.FP4_TILED_WIDE_N = wide_n
        ctx._plans.clear()
        for n, k in ((16, 128), (200, 384), (129, 1024), (40, 3456), (24, 4480)):
            w = random_nvfp4_weight(n, k, int(rng.integers(1 << 30)))
            for weight in (w, w.tile_major()):
                for rows in (1, 2, 3, 7, 9, 17, 70):
                    ldx, ldc = k + 8, n + 3
                    x = cupy.asarray(rng.standard_normal((rows, ldx)).astype(np.float16))
                    out = cupy.empty((rows, ldc), cupy.float16)
                    assert ctx.proj(weight, x, ldx, rows, out, ldc)
    cupy.cuda.runtime.deviceSynchronize()
    print("sanitize workload done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
