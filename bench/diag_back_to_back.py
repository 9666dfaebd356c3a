"""Back-to-back W8A8 calls on one stream against the same calls one at a time (a diagnostic).

The GPU test ``test_back_to_back_calls_on_a_stream`` makes twenty calls of mixed row counts on a
non-default stream, each GEMM launched programmatically dependent on its quantizer, and compares
every output with the same call made alone. This script repeats that sequence over several seeds,
with and without programmatic dependent launch and with and without the warpgroup kernels, and
prints, for each call that differs, its row count, the calls before it, how many of its rows
differ and whether whole rows (a row's scale) or blocks of outputs (a CTA's operands) differ.

    PYTHONPATH=. python bench/diag_back_to_back.py [--formats fp8_channel,fp8_block,int8] [--seeds 4]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    import cupy
    import numpy as np

    from gdn_kernels import W8a8Ctx, _build, bench

    ap = argparse.ArgumentParser()
    ap.add_argument("--formats", default="fp8_channel,fp8_block,int8")
    ap.add_argument("--seeds", type=int, default=4)
    args = ap.parse_args()
    n, k = 2048, 4096
    ctx = W8a8Ctx(max_rows=256, max_k=k)
    stream = cupy.cuda.Stream(non_blocking=True)
    wgmma, wgmma_fp8, fp8_unsplit = _build.wgmma_config, _build.WGMMA_FP8, _build.wgmma_fp8_unsplit
    print("| format | PDL | warpgroup kernels | seed | calls differing | details |")
    print("|---|---|---|---|---|---|")
    for fmt in args.formats.split(","):
        w = bench.random_w8a8_weight(fmt, n, k, 3).tile_major()
        for pdl in (True, False):
            for wg in (True, False):
                _build.PDL_ENABLED = pdl
                _build.wgmma_config = wgmma if wg else (lambda *a: None)
                _build.WGMMA_FP8 = wgmma_fp8 if wg else _build.GemmCfg(stages=4)  # the tiled kernel
                _build.wgmma_fp8_unsplit = fp8_unsplit if wg else (lambda fmt, packed: _build.WGMMA_FP8)
                ctx._gemm_by_shape.clear()
                for seed in range(args.seeds):
                    rng = np.random.default_rng(43 + seed)
                    counts = rng.permutation(np.concatenate([rng.integers(1, 40, 14), [64, 128, 130, 200, 255, 256]]))
                    xs = [cupy.asarray((rng.standard_normal((int(r), k)).astype(np.float32).view(np.uint32) >> 16)
                                       .astype(np.uint16)) for r in counts]
                    outs = [cupy.full((x.shape[0], n), 0xFFFF, cupy.uint16) for x in xs]
                    cupy.cuda.runtime.deviceSynchronize()
                    for x, out in zip(xs, outs):
                        assert ctx.proj(w, x.data.ptr, k, x.shape[0], out.data.ptr, n, stream.ptr, dtype="bfloat16")
                    stream.synchronize()
                    bad = []
                    for i, (x, out) in enumerate(zip(xs, outs)):
                        alone = cupy.full_like(out, 0xFFFF)
                        ctx.proj(w, x.data.ptr, k, x.shape[0], alone.data.ptr, n, 0, dtype="bfloat16")
                        cupy.cuda.runtime.deviceSynchronize()
                        d = (out != alone).get()
                        if d.any():
                            rows_bad = int(d.any(1).sum())
                            whole = int(d.all(1).sum())
                            blocks = sorted({int(c) // 128 for c in np.argwhere(d)[:, 1]})
                            bad.append(f"call {i} ({counts[i]} rows, after {counts[max(0, i - 2):i].tolist()}): "
                                       f"{int(d.sum())} outputs, {rows_bad} rows ({whole} whole), n-blocks {blocks[:8]}")
                    print(f"| {fmt} | {int(pdl)} | {int(wg)} | {seed} | {len(bad)} | {'; '.join(bad)[:600]} |", flush=True)
    _build.wgmma_config, _build.WGMMA_FP8, _build.wgmma_fp8_unsplit = wgmma, wgmma_fp8, fp8_unsplit
    return 0


if __name__ == "__main__":
    sys.exit(main())
