"""One launch each, for Nsight Compute: the shipped block-fp8 projection (quantizer and GEMM) and
the e4m3 prototype's decode forms (clusters of 4, one chunk ahead), on a tile-major weight [N, K]
at the given row counts (NOTES W8A8 v29).

    ncu --kernel-name "regex:w8a8_(gemm|qgmma_decode)_kernel" --section SpeedOfLight ... \\
        python bench/profile_qgd.py 16384 5120 1,16
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str]) -> int:
    import cupy

    from gdn_kernels import W8a8Ctx, _build, bench
    from gdn_kernels.w8a8 import _FMT

    n, k = int(argv[0]), int(argv[1])
    rows_list = [int(r) for r in argv[2].split(",")]
    ctx = W8a8Ctx(max_rows=max(rows_list), max_k=k)
    w = bench.random_w8a8_weight("fp8_block", n, k, 1).tile_major()
    rs = cupy.random.RandomState(5)
    x = (rs.standard_normal((max(rows_list), k), dtype=cupy.float32).view(cupy.uint32) >> 16).astype(cupy.uint16)
    out = cupy.empty((max(rows_list), n), cupy.uint16)
    code = _FMT["fp8_block"]
    for rows in rows_list:
        tiles = _build.gemm_tiles(rows)
        cfgs = [c for c in _build.wgmma_sweep_cfgs(code, tiles, True)
                if c.qg == 2 and c.split == 4 and c.m == 1 and c.stages == 1]
        family = _build.subset_family("w8a8_gemm_sweep", [
            _build.gemm_instance(code, tiles, "bfloat16", w.scale_dtype, c) for c in cfgs])
        launchers = [bench.w8a8_gemm_launcher(ctx, w, rows, out.data.ptr, n, 0, c, family) for c in cfgs]
        cupy.cuda.runtime.deviceSynchronize()
        # The quantizer and the shipped GEMM, then the decode forms on the quantized tokens.
        ctx.proj(w, x.data.ptr, k, rows, out.data.ptr, n, 0, dtype="bfloat16")
        for launch in launchers:
            launch()
        cupy.cuda.runtime.deviceSynchronize()
    print("profiled launches done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
