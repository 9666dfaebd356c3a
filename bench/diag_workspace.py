"""Does the NVFP4 context's workspace layout move a projection's time?

    PYTHONPATH=. python bench/diag_workspace.py

Times the whole projection (graph replays over weight copies beyond the L2) on [12288, 2048] and
[5120, 6144] at 4 and 8 rows, three times over four contexts: the masked-operand workspace sized
for 4 or 16 rows (``_build.fp4_masked_rows``, 16 since 8d43dbc) and with or without a device
allocation made before the context (shifting its workspace). Prints, a context a line, the
workspace offsets and the four times in microseconds. Written for the 8-row gap between
0b6c449 and f4435c8 on [12288, 2048] in ``bench_nvfp4.py`` A/B runs (bench/NOTES.md, NVFP4 v9).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    import cupy

    from gdn_kernels import Nvfp4Ctx, _build
    from gdn_kernels import bench as h

    shipped_masked_rows = _build.fp4_masked_rows
    try:
        l2 = cupy.cuda.runtime.getDeviceProperties(0)["l2CacheSize"]
        stream = cupy.cuda.Stream(non_blocking=True)
        cases = {}
        with stream:
            for n, k in ((12288, 2048), (5120, 6144)):
                first = h.random_nvfp4_weight(n, k, 0)
                nrot = h.rotation_count(first.nbytes, l2)
                ws = [first] + [h.random_nvfp4_weight(n, k, 1 + i) for i in range(nrot - 1)]
                x, out, _, _, _ = h._case_buffers(n, k, 16, l2, 0)
                cases[(n, k)] = ([w.tile_major() for w in ws], x, out)
        stream.synchronize()
        for rep in range(3):
            for m, pad in ((4, 0), (16, 0), (4, 12 * 17408), (16, 1 << 20)):
                _build.fp4_masked_rows = lambda m=m: m
                p = cupy.empty(pad + 1, cupy.int8) if pad else None
                ctx = Nvfp4Ctx(max_rows=512, max_k=17408)
                res = []
                for (n, k), (timed, x, out) in cases.items():
                    for rows in (4, 8):
                        launches = [(lambda w=w: ctx.proj(w, x.data.ptr, k, rows, out.data.ptr, n, stream.ptr, dtype="bfloat16"))
                                    for w in timed]
                        res.append(f"{h.time_graph(launches, stream, 30):6.2f}")
                xd, sxf = ctx._ws[3], ctx._ws[4]
                print(f"rep {rep} masked {m:2d} pad {pad:8d} xd%64K {xd % 65536:6d} sxf%64K {sxf % 65536:6d} sxf-xd {sxf - xd:9d} | "
                      "[12288,2048] r4 r8 / [5120,6144] r4 r8: " + " ".join(res), flush=True)
                del ctx, p
                cupy.get_default_memory_pool().free_all_blocks()
    finally:
        _build.fp4_masked_rows = shipped_masked_rows
    return 0


if __name__ == "__main__":
    sys.exit(main())
