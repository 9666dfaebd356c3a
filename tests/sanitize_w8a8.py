"""Small W8A8 workload for compute-sanitizer (memcheck, racecheck): every format, ragged N,
strides, rows 1..40. CuPy's memory pool is switched off so that an access past any buffer hits
unallocated memory and is reported."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    import cupy

    cupy.cuda.set_allocator(None)
    from gdn_kernels import W8a8Ctx
    from gdn_kernels.bench import random_w8a8_weight

    ctx = W8a8Ctx(max_rows=64, max_k=1024)
    rng = np.random.default_rng(0)
    for fmt in ("int8", "fp8_channel", "fp8_block"):
        for n, k in ((16, 128), (200, 384), (129, 1024)):
            w = random_w8a8_weight(fmt, n, k, int(rng.integers(1 << 30)))
            for rows in (1, 7, 9, 17, 40):
                ldx, ldc = k + 8, n + 3
                x = cupy.asarray(rng.standard_normal((rows, ldx)).astype(np.float16))
                out = cupy.empty((rows, ldc), cupy.float16)
                assert ctx.proj(w, x, ldx, rows, out, ldc)
    cupy.cuda.runtime.deviceSynchronize()
    print("sanitize workload done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
