"""Can Hopper's warpgroup MMA (wgmma) give an fp8 chunk the same bits as the decode kernels' mma.sync?

The fp8 formats' bits are fixed by the decode kernels (kernels/w8a8_gemm.cu): a 128-wide chunk of
K is four m16n8k32 e4m3 MMAs into a zeroed fp32 partial, thread (g, t) feeding the 16 bytes at 16t
of each 64-byte half to two MMAs (bytes 0-7 to one, 8-15 to the next). A warpgroup kernel may
only replace them if its MMAs produce the same partial. This probe runs one chunk of a 64 x 64
tile several ways on the same bytes and counts the differing bits:

- ``sync``: the decode kernels' four mma.sync. On sm_90 ptxas lowers each m16n8k32 e4m3 mma.sync
  to two f16 MMAs (F2FP.F16.E4M3.UNPACK_B, HMMA.16816.F32): the first from zero, the second
  accumulating, then one fp32 add into the accumulator given;
- ``qgmma``: four e4m3 wgmma m64n64k32 (weight from registers, the tokens from shared memory
  permuted so that MMA position p holds the byte mma.sync has at p, see ``permute``);
- ``hmma``: that lowering written out: f16 mma.sync on converted bytes and explicit fp32 adds;
- ``hgmma``: the same with f16 wgmma m64n64k16 (weight converted in registers, the tokens as
  f16 in shared memory in the emulation's order, see ``permute_f16``);
- ``qgmma_n8``: ``qgmma`` as eight m64n8k32 e4m3 wgmma a k step, one an 8-token group (the shape a
  decode kernel of 1-8 tokens would run);
- ``qgmma_ss``: ``qgmma`` with the weight from shared memory too (permuted as the tokens).

The last two are compared with ``qgmma`` as well: the e4m3 warpgroup MMA can serve every row count
only if an output's bits depend neither on N nor on where A comes from.

Each against a float64 reference of the decoded bytes too (a wrong fragment layout shows there).
Three kinds of data: random e4m3 bytes over the whole range, scaled normals, and rows that
cancel. Prints one line a kind and variant.

    PYTHONPATH=. python bench/probe_fp8_wgmma.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

_SOURCE = r"""
#include "gdn/ptx.cuh"

__device__ __forceinline__ uint64_t desc128(uint32_t a) {
  return (uint64_t)((a & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}
#define D32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define OUT32(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
// e4m3 wgmma, A from registers.
__device__ __forceinline__ void qg_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t b, int acc) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " D32 ", {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
               : OUT32(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(acc));
}
// e4m3 wgmma m64n8k32, A from registers.
__device__ __forceinline__ void qg8_rs(float (&d)[4], const uint32_t (&a)[4], uint64_t b, int acc) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(acc));
}
// e4m3 wgmma m64n64k32, A from shared memory.
__device__ __forceinline__ void qg_ss(float (&d)[32], uint64_t a, uint64_t b, int acc) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " D32 ", %32, %33, p, 1, 1;\n}\n"
               : OUT32(d) : "l"(a), "l"(b), "r"(acc));
}
// f16 wgmma k16, A from registers.
__device__ __forceinline__ void hg_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t b, int acc) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " D32 ", {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
               : OUT32(d) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(acc));
}
__device__ __forceinline__ uint32_t f16x2(uint32_t v, int hi) {  // two e4m3 (bytes 2 hi, 2 hi + 1) as f16x2
  uint32_t r;
  const unsigned short s = hi ? (unsigned short)(v >> 16) : (unsigned short)v;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(s));
  return r;
}

// One 64 x 64 tile, one chunk of 128 bytes of K a trial. Bp: the tokens permuted for the e4m3
// wgmma ([64][128] bytes), Ap: the weight so permuted; Bh: the tokens as f16 in the order of the f16
// emulation ([64][128] f16). out: [6 variants][trials][64 rows][64 tokens].
extern "C" __global__ void __launch_bounds__(128) probe(const uint8_t* A, const uint8_t* B, const uint8_t* Bp,
                                                        const uint16_t* Bh, const uint8_t* Ap, float* out, int trials) {
  const long long tr = blockIdx.x;
  A += tr * 8192; B += tr * 8192; Bp += tr * 8192; Bh += tr * 8192; Ap += tr * 8192;
  __shared__ __align__(1024) uint8_t sb[64 * 128];
  __shared__ __align__(1024) uint8_t sa[64 * 128];
  __shared__ __align__(1024) uint8_t sh[2][64 * 128];  // two panels of 64 f16 of K
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  for (int id = tid; id < 64 * 8; id += 128) {
    const int r = id >> 3, u = id & 7, o = r * 128 + ((u ^ (r & 7)) << 4);
    *reinterpret_cast<uint4*>(sb + o) = *reinterpret_cast<const uint4*>(Bp + r * 128 + u * 16);
    *reinterpret_cast<uint4*>(sa + o) = *reinterpret_cast<const uint4*>(Ap + r * 128 + u * 16);
    for (int p = 0; p < 2; ++p)
      *reinterpret_cast<uint4*>(sh[p] + o) = *reinterpret_cast<const uint4*>(Bh + r * 128 + p * 64 + u * 8);
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  uint4 ra[2], rb[2];
  for (int h = 0; h < 2; ++h) {
    ra[h] = *reinterpret_cast<const uint4*>(A + (16 * warp + g) * 128 + 64 * h + 16 * t);
    rb[h] = *reinterpret_cast<const uint4*>(A + (16 * warp + g + 8) * 128 + 64 * h + 16 * t);
  }
  auto store = [&](int v, int j, int r, float y) {
    out[((long long)v * trials + tr) * 4096 + (16 * warp + g + 8 * (r >> 1)) * 64 + 8 * j + 2 * t + (r & 1)] = y;
  };
  // The decode kernels' MMA s (half s / 2, bytes 8 (s % 2) of each thread's 16): its A registers.
  auto a_of = [&](int s, uint32_t (&a)[4]) {
    const int h = s >> 1;
    a[0] = (s & 1) ? ra[h].z : ra[h].x; a[1] = (s & 1) ? rb[h].z : rb[h].x;
    a[2] = (s & 1) ? ra[h].w : ra[h].y; a[3] = (s & 1) ? rb[h].w : rb[h].y;
  };
  {  // 0 sync: the decode kernels' arithmetic; 2 hmma: the same as f16 mma.sync and fp32 adds
    float part[8][4] = {}, emu[8][4] = {};
    for (int s = 0; s < 4; ++s) {
      uint32_t a[4];
      a_of(s, a);
      for (int j = 0; j < 8; ++j) {
        const uint4 xb = *reinterpret_cast<const uint4*>(B + (8 * j + g) * 128 + 64 * (s >> 1) + 16 * t);
        const uint32_t x[2] = {(s & 1) ? xb.z : xb.x, (s & 1) ? xb.w : xb.y};
        gdn::mma_e4m3_16832(part[j], a, x);
        float p[4] = {0.f, 0.f, 0.f, 0.f};
        for (int hi = 0; hi < 2; ++hi) {
          const uint32_t ah[4] = {f16x2(a[0], hi), f16x2(a[1], hi), f16x2(a[2], hi), f16x2(a[3], hi)};
          const uint32_t xh[2] = {f16x2(x[0], hi), f16x2(x[1], hi)};
          gdn::mma_f16_16816(p, ah, xh);
        }
        for (int r = 0; r < 4; ++r) emu[j][r] = __fadd_rn(emu[j][r], p[r]);
      }
    }
    for (int j = 0; j < 8; ++j)
      for (int r = 0; r < 4; ++r) { store(0, j, r, part[j][r]); store(2, j, r, emu[j][r]); }
  }
  const uint32_t sb_s = (uint32_t)__cvta_generic_to_shared(sb), sh_s = (uint32_t)__cvta_generic_to_shared(sh);
  {  // 1 qgmma: four e4m3 wgmma
    float d[32];
    for (int i = 0; i < 32; ++i) d[i] = 0.f;
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    for (int s = 0; s < 4; ++s) {
      uint32_t a[4];
      a_of(s, a);
      qg_rs(d, a, desc128(sb_s + 32 * s), s > 0);
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    for (int j = 0; j < 8; ++j)
      for (int r = 0; r < 4; ++r) store(1, j, r, d[4 * j + r]);
  }
  {  // 3 hgmma: each decode MMA as two f16 wgmma k16 from zero, then an fp32 add
    float part[32];
    for (int i = 0; i < 32; ++i) part[i] = 0.f;
    for (int s = 0; s < 4; ++s) {
      uint32_t a[4];
      a_of(s, a);
      float d[32];
      for (int i = 0; i < 32; ++i) d[i] = 0.f;
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
      for (int hi = 0; hi < 2; ++hi) {
        const uint32_t ah[4] = {f16x2(a[0], hi), f16x2(a[1], hi), f16x2(a[2], hi), f16x2(a[3], hi)};
        const int q = 2 * s + hi;  // f16 step: panel q / 4, 32 bytes at 32 (q % 4)
        hg_rs(d, ah, desc128(sh_s + (q >> 2) * 8192 + 32 * (q & 3)), hi);
      }
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
      for (int i = 0; i < 32; ++i) part[i] = __fadd_rn(part[i], d[i]);
    }
    for (int j = 0; j < 8; ++j)
      for (int r = 0; r < 4; ++r) store(3, j, r, part[4 * j + r]);
  }
  {  // 4 qgmma_n8: the four k steps of each 8-token group as m64n8k32 (tokens 8 j.. of sb: one atom)
    float d[8][4];
    for (int j = 0; j < 8; ++j)
      for (int r = 0; r < 4; ++r) d[j][r] = 0.f;
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    for (int s = 0; s < 4; ++s) {
      uint32_t a[4];
      a_of(s, a);
      for (int j = 0; j < 8; ++j) qg8_rs(d[j], a, desc128(sb_s + 1024 * j + 32 * s), s > 0);
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    for (int j = 0; j < 8; ++j)
      for (int r = 0; r < 4; ++r) store(4, j, r, d[j][r]);
  }
  {  // 5 qgmma_ss: as qgmma, the weight from shared memory
    const uint32_t sa_s = (uint32_t)__cvta_generic_to_shared(sa);
    float d[32];
    for (int i = 0; i < 32; ++i) d[i] = 0.f;
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    for (int s = 0; s < 4; ++s) qg_ss(d, desc128(sa_s + 32 * s), desc128(sb_s + 32 * s), s > 0);
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    for (int j = 0; j < 8; ++j)
      for (int r = 0; r < 4; ++r) store(5, j, r, d[4 * j + r]);
  }
}
"""
_VARIANTS = ("sync", "qgmma", "hmma", "hgmma", "qgmma_n8", "qgmma_ss")


def permute(rows):
    """Bytes of [.., 128]-byte chunk rows at the positions the decode kernels' MMAs see them: word w
    (4 bytes) of a 64-byte half moves to 8 (w % 4 // 2) + 4 (w % 2) + w // 4."""
    import numpy as np

    words = rows.reshape(*rows.shape[:-1], 2, 16, 4)
    out = np.empty_like(words)
    for w in range(16):
        out[..., 8 * ((w & 3) >> 1) + 4 * (w & 1) + (w >> 2), :] = words[..., w, :]
    return out.reshape(rows.shape)


def permute_f16(rows):
    """The same bytes as f16 (exact) at the positions of the f16 emulation: step q = 4 h + 2 w + l
    (half h, the decode MMA's bytes 8 w.., its l-th f16 MMA), position p = 2 t + i (+ 8) of the step
    holds byte 64 h + 16 t + 8 w + 2 l + i (+ 4)."""
    import ml_dtypes
    import numpy as np

    vals = rows.view(ml_dtypes.float8_e4m3fn).astype(np.float16).view(np.uint16)
    out = np.empty_like(vals)
    for q in range(8):
        h, w, l = q >> 2, (q >> 1) & 1, q & 1
        for p in range(16):
            t, i, up = (p & 7) >> 1, p & 1, p >> 3
            out[..., 16 * q + p] = vals[..., 64 * h + 16 * t + 8 * w + 4 * up + 2 * l + i]
    return out


def _data(kind: str, trials: int, rng):
    import ml_dtypes
    import numpy as np

    def e4m3(x):
        return x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)

    if kind == "bytes":
        a = rng.integers(0, 255, (trials, 64, 128), dtype=np.uint8)
        b = rng.integers(0, 255, (trials, 64, 128), dtype=np.uint8)
        a[(a & 0x7F) == 0x7F] = 0x3F  # no NaN
        b[(b & 0x7F) == 0x7F] = 0x3F
        return a, b
    if kind == "normal":
        a = rng.standard_normal((trials, 64, 128)) * 2.0 ** rng.integers(-6, 6, (trials, 64, 1))
        b = rng.standard_normal((trials, 64, 128)) * 2.0 ** rng.integers(-6, 6, (trials, 64, 1))
        return e4m3(np.clip(a, -448, 448)), e4m3(np.clip(b, -448, 448))
    # cancel: a token equal to a weight row with every other sign flipped, plus small noise
    a = rng.standard_normal((trials, 64, 128)) * 16
    b = a[:, rng.permutation(64), :] * np.where(np.arange(128) % 2, -1.0, 1.0)
    b = b + rng.standard_normal(b.shape) * 0.05
    return e4m3(np.clip(a, -448, 448)), e4m3(np.clip(b, -448, 448))


def main() -> int:
    import cupy
    import ml_dtypes
    import numpy as np

    from gdn_kernels import _build

    mod = cupy.RawModule(code=_SOURCE, options=_build.compile_options(_build.arch_for(90)))
    kern = mod.get_function("probe")
    rng = np.random.default_rng(7)
    trials = 1024
    print(cupy.cuda.runtime.getDeviceProperties(0)["name"].decode())
    print("| data | variant | outputs | bits differ from sync | bits differ from qgmma | max abs err / max |row| sum, vs float64 |")
    print("|---|---|---|---|---|---|")
    worst = worst_q = 0
    for kind in ("bytes", "normal", "cancel"):
        a, b = _data(kind, trials, rng)
        out = cupy.full((len(_VARIANTS), trials, 64, 64), np.nan, np.float32)
        args = [cupy.asarray(x) for x in (a, b, permute(b), permute_f16(b), permute(a))]
        kern((trials,), (128,), (*args, out, np.int32(trials)))
        got = out.get()
        fa = a.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
        fb = b.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
        ref = np.einsum("tnk,tmk->tnm", fa, fb)
        scale = np.einsum("tnk,tmk->tnm", np.abs(fa), np.abs(fb)).max()
        for v, name in enumerate(_VARIANTS):
            diff = int((got[v].view(np.uint32) != got[0].view(np.uint32)).sum())
            diff_q = int((got[v].view(np.uint32) != got[1].view(np.uint32)).sum())
            err = float(np.nanmax(np.abs(got[v] - ref))) / scale
            if name == "hgmma":
                worst = max(worst, diff)
            if name.startswith("qgmma_"):
                worst_q = max(worst_q, diff_q)
            print(f"| {kind} | {name} | {got[v].size} | {diff} | {diff_q} | {err:.2e} |", flush=True)
    print("f16 wgmma emulation matches mma.sync bit for bit" if worst == 0 else f"f16 wgmma emulation differs: {worst} outputs")
    print("e4m3 wgmma: the same bits at N = 8 and with A from shared memory" if worst_q == 0
          else f"e4m3 wgmma: N = 8 or A from shared memory changes {worst_q} outputs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
