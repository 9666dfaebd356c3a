"""How fast a kernel that only reads reaches DRAM in the NVFP4 GEMM's access pattern (a diagnostic).

Each CTA of 8 warps stands for one 16-row weight tile of the tile-major NVFP4 GEMM: warp w reads
the tile's 1 KB chunks w, w + 8, ... (two 16-byte loads a lane), ``inflight`` chunks a round, and
folds them with xor (nothing else: no decode, no MMA). Three placements of the same bytes:

- ``tile``: the tile-major copy (Nvfp4Weight.tile_major): a tile's chunks contiguous, tiles one
  after the other, so the CTAs resident at one time read as many distant streams;
- ``interleaved``: chunk c of tile b at (c * tiles + b) KB, so CTAs launched together read
  neighbouring kilobytes;
- ``linear``: the warps of the whole grid read consecutive kilobytes in launch order (a copy
  kernel's pattern).

Timed as graph replays over buffers that together exceed 4x the L2, beside the measured copy
bandwidth; prints a table (us, GB/s, x floor).

    PYTHONPATH=. python bench/read_pattern.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

_SOURCE = r"""
template <int kInflight, int kMode>
__global__ void __launch_bounds__(256, 4) read_tiles(const char* __restrict__ base, int chunks, int tiles,
                                                     unsigned* out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long b = blockIdx.x;
  unsigned x = 0;
  for (int c0 = warp; c0 < chunks; c0 += 8 * kInflight) {
    uint4 v[kInflight][2];
#pragma unroll
    for (int u = 0; u < kInflight; ++u) {
      const int c = c0 + 8 * u;
      if (c < chunks) {
        long long off;
        if (kMode == 0) off = (b * chunks + c) * 1024;
        else if (kMode == 1) off = ((long long)c * tiles + b) * 1024;
        else off = (((long long)(c >> 3) * tiles + b) * 8 + (c & 7)) * 1024;
        const char* p = base + off + lane * 16;
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v[u][0].x), "=r"(v[u][0].y), "=r"(v[u][0].z), "=r"(v[u][0].w) : "l"(p));
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v[u][1].x), "=r"(v[u][1].y), "=r"(v[u][1].z), "=r"(v[u][1].w) : "l"(p + 512));
      } else {
        v[u][0] = v[u][1] = make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < kInflight; ++u)
      x ^= v[u][0].x ^ v[u][0].y ^ v[u][0].z ^ v[u][0].w ^ v[u][1].x ^ v[u][1].y ^ v[u][1].z ^ v[u][1].w;
  }
  if (x == 0x9e3779b9u) out[blockIdx.x] = x;
}
"""
_MODES = {"tile": 0, "interleaved": 1, "linear": 2}
_SHAPES = ((34816, 5120), (16384, 5120), (5120, 17408), (5120, 6144))


def main() -> int:
    import cupy

    from gdn_kernels import bench

    bw = bench.copy_bandwidth()
    l2 = cupy.cuda.runtime.getDeviceProperties(0)["l2CacheSize"]
    names = [f"read_tiles<{u}, {m}>" for u in (1, 4) for m in _MODES.values()]
    mod = cupy.RawModule(code=_SOURCE, options=("-std=c++17",), name_expressions=names)
    stream = cupy.cuda.Stream(non_blocking=True)
    out = cupy.zeros(1 << 16, cupy.uint32)
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s")
    print("| [N, K] | MB | pattern | chunks in flight a warp | us | GB/s | x floor |")
    print("|---|---|---|---|---|---|---|")
    for n, k in _SHAPES:
        tiles, chunks = n // 16, k // 128
        nbytes = tiles * chunks * 1024
        bufs = [cupy.random.randint(0, 1 << 30, nbytes // 4, dtype=cupy.int32)
                for _ in range(bench.rotation_count(nbytes, l2))]
        floor = nbytes / bw * 1e6
        for u in (1, 4):
            for pattern, mode in _MODES.items():
                kern = mod.get_function(f"read_tiles<{u}, {mode}>")
                launches = [(lambda b=b: kern((tiles,), (256,), (b, chunks, tiles, out), stream=stream)) for b in bufs]
                us = bench.time_graph(launches, stream, 30)
                print(f"| [{n}, {k}] | {nbytes / 1e6:.1f} | {pattern} | {u} | {us:.2f} | {nbytes / us / 1e3:.0f} | "
                      f"{us / floor:.2f} |", flush=True)
        del bufs
        cupy.get_default_memory_pool().free_all_blocks()
    return 0


if __name__ == "__main__":
    sys.exit(main())
