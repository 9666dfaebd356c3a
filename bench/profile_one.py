"""A few projections inside the library's NVTX ranges, for Nsight Compute / Systems.

    GDN_KERNELS_NVTX=1 ncu --nvtx --nvtx-include "regex:gdn_kernels\\.int8\\.proj.*/" \
        --clock-control none python bench/profile_one.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    import argparse

    import cupy
    import numpy as np

    from gdn_kernels import Nvfp4Ctx, W8a8Ctx
    from gdn_kernels.bench import random_nvfp4_weight, random_w8a8_weight

    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--formats", default="int8,fp8_block,nvfp4",
                    help="comma list of int8, fp8_channel, fp8_block, nvfp4, and any of them with _tiles"
                         " (the tile-major layout)")
    ap.add_argument("--torch", action="store_true",
                    help="also run torch._scaled_mm (fp8 e4m3, row-wise scales) on the same shape once, inside an "
                         "NVTX range named torch_scaled_mm, as the peer to profile beside the library's GEMM")
    args = ap.parse_args()
    n, k, rows = args.n, args.k, args.rows
    x = cupy.asarray(np.random.default_rng(0).standard_normal((rows, k)).astype(np.float16))
    out = cupy.empty((rows, n), cupy.float16)
    wctx, fctx = W8a8Ctx(max_rows=max(16, rows), max_k=k), Nvfp4Ctx(max_rows=max(16, rows), max_k=k)
    for fmt in args.formats.split(","):
        if fmt in ("nvfp4", "nvfp4_tiles"):
            w = random_nvfp4_weight(n, k, 3)
            assert fctx.proj(w.tile_major() if fmt == "nvfp4_tiles" else w, x, k, rows, out, n)
        else:
            w = random_w8a8_weight(fmt.removesuffix("_tiles"), n, k, 3)
            assert wctx.proj(w.tile_major() if fmt.endswith("_tiles") else w, x, k, rows, out, n)
    if args.torch:
        import torch

        a = torch.randn(rows, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
        sa = torch.rand(rows, 1, device="cuda") + 0.5
        sb = torch.rand(1, n, device="cuda") + 0.5
        torch.cuda.synchronize()
        cupy.cuda.nvtx.RangePush("torch_scaled_mm")
        torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
        torch.cuda.synchronize()
        cupy.cuda.nvtx.RangePop()
    cupy.cuda.runtime.deviceSynchronize()
    print("profiled projections done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
