// Decode-shaped W8A8 GEMM on the 8-bit tensor cores (int8 and e4m3).
//
// out[rows, N] = epilogue(xq [rows, K] . w [N, K]^T), written once at row stride ldc.
//
// The weight is the MMA's A operand (N on the M side, 16 weight rows a warp) and the quantized
// activations its B operand (8 tokens a tile), so at 1-16 rows every weight byte is loaded once,
// 16 bytes a thread. A CTA owns kM tiles of 16 weight rows and kTokens tokens; its kWarps warps
// split K into 128-wide chunks (warp w takes chunks w, w + kWarps, ...) and are reduced in shared
// memory in warp order. The split depends on nothing but K, so a row's arithmetic is the same at
// every row count (bitwise row invariance); the schedule parameters (kM, chunks in flight,
// pipelining, occupancy) and the tiled kernel for many rows further down do the same arithmetic
// and are chosen by shape (gdn_kernels/_build.py gemm_config). From 64 rows warpgroup MMAs run:
// for int8, whose outputs are exact int32 dot products scaled, in any K order; for fp8, f16 MMAs
// doing exactly what the e4m3 mma.sync does on sm_90 (the last kernel of the file).
//
// Operand layout: mma.m16n8k32 wants thread (g = lane / 4, t = lane % 4) to hold A row g (and
// g + 8) at k = 4t..4t+3 and 16+4t..16+4t+3, and B column g at the same k. Any permutation of k
// applied to both operands leaves the dot product unchanged, so each thread loads 16 contiguous
// bytes at 16t of a 64-byte half-chunk and feeds bytes 0-7 to one MMA and 8-15 to the next: the
// same mapping for the weight rows and the token columns.
#include "gdn/convert.cuh"
#include "gdn/ptx.cuh"
#include "gdn/vec.cuh"

namespace {

constexpr int kInt8 = 0;        // int8 weight, per-channel fp32 scale, per-token activation scale
constexpr int kFp8Channel = 1;  // e4m3 weight, per-channel fp32 scale, per-token activation scale
constexpr int kFp8Block = 2;    // e4m3 weight, 128x128 block scales, per-(token, 128) activations

template <int kFmt>
struct AccOf {
  using type = float;
};
template <>
struct AccOf<kInt8> {
  using type = int;
};

__device__ __forceinline__ float to_float(float v) { return v; }

// Shared-memory rows of 128 bytes with the 16-byte unit u of row r at u ^ 4 (r & 1).
__device__ __forceinline__ int swz(int r, int u) { return r * 128 + ((u ^ ((r & 1) << 2)) << 4); }
__device__ __forceinline__ void cp_async_row(uint8_t* base, int r, int u, const uint8_t* src_row) {
  gdn::cp_async16(base + swz(r, u), src_row + u * 16);
}
__device__ __forceinline__ uint4 lds_row(const uint8_t* base, int r, int u) {
  return *reinterpret_cast<const uint4*>(base + swz(r, u));
}
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// Chunk c of the 128 weight rows n0.. (rows past N clamped) into a shared tile of 128-byte rows,
// (row r, 16-byte unit u) at byte place(r, u): 4 cp.async copies of 16 bytes a thread of 256.
// kPacked: from the tile-major layout, where the CTA's 8 tiles of chunk c are 8 contiguous
// 2048-byte blocks and thread id copies 16 bytes at 16 o of block b, so a warp reads 512
// contiguous bytes; that unit is piece j = o / 32, lane l = o % 32 of the block: row 16 b + l / 4 +
// 8 (j % 2), unit 4 (j / 2) + l % 4. Else from the row-major layout, 8 threads a row.
template <int kPacked, typename Place>
__device__ __forceinline__ void copy_weight_rows(uint8_t* a, Place place, const uint8_t* __restrict__ w, int n0,
                                                 int N, int K, int c) {
#pragma unroll
  for (int q = 0; q < 128 * 8 / 256; ++q) {
    const int id = threadIdx.x + 256 * q;
    if constexpr (kPacked) {
      const int b = id >> 7, o = id & 127, j = o >> 5, l = o & 31;
      const long long tile = min((n0 >> 4) + b, (N - 1) >> 4);
      gdn::cp_async16(a + place(16 * b + (l >> 2) + 8 * (j & 1), 4 * (j >> 1) + (l & 3)),
                      w + tile * 16 * K + (long long)c * 2048 + 16 * o);
    } else {
      const int r = id >> 3, u = id & 7;
      const uint8_t* src_row = w + (long long)min(n0 + r, N - 1) * K + (long long)c * 128;
      gdn::cp_async16(a + place(r, u), src_row + 16 * u);
    }
  }
}

template <int kFmt, typename Acc>
__device__ __forceinline__ void mma_chunk(Acc (&d)[4], const uint32_t (&a)[4],
                                          const uint32_t (&b)[2]) {
  if constexpr (kFmt == kInt8) {
    gdn::mma_s8_16832(d, a, b);
  } else {
    gdn::mma_e4m3_16832(d, a, b);
  }
}

// Adds the finished sums of decode warp v (acc) into the total as w8a8_gemm_kernel's reduction
// does (the first taken as it is, then add_rn in warp order; int8 exactly), and clears acc.
template <int kFmt, typename Acc>
__device__ __forceinline__ void fold(Acc (&sum)[2][4][4], Acc (&acc)[2][4][4], int v) {
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        if constexpr (kFmt == kInt8) {
          sum[m][j][r] += acc[m][j][r];
        } else {
          sum[m][j][r] = v == 0 ? acc[m][j][r] : gdn::add_rn(sum[m][j][r], acc[m][j][r]);
        }
        acc[m][j][r] = Acc(0);
      }
}

// Chunk i of a CTA's sequence in the decode kernel's warp order: the kSplit = 8 decode warps' chunks
// (warp w takes w, w + 8, ...), warp 0's first, for the kernels that keep that order at many rows.
__device__ __forceinline__ int decode_order_chunk(int i, int chunks) {
  constexpr int kSplit = 8;
  const int per = chunks / kSplit, extra = chunks % kSplit;  // chunks of w: per + (w < extra)
  int v = 0;
  for (; v < kSplit; ++v) {
    const int cnt = per + (v < extra);
    if (i < cnt) break;
    i -= cnt;
  }
  return v + i * kSplit;
}

// decode_order_chunk's sequence walked a position a step (the chunk at the current position, then
// next()), for loops that would otherwise search the decode warps for each chunk anew.
struct DecodeWalk {
  int v, r, per, extra;  // position: chunk r of decode warp v
  __device__ __forceinline__ DecodeWalk(int i, int chunks) : v(0), r(i), per(chunks / 8), extra(chunks % 8) {
    for (; v < 8; ++v) {
      const int cnt = per + (v < extra);
      if (r < cnt) break;
      r -= cnt;
    }
  }
  __device__ __forceinline__ int chunk() const { return v + 8 * r; }
  // Past the last position the walk is undefined (empty decode warps are not skipped there).
  __device__ __forceinline__ void next() {
    if (++r == per + (v < extra)) {
      r = 0;
      ++v;
    }
  }
};

}  // namespace

// The operands of one round: kUnroll chunks of kM weight tiles and kTiles token tiles.
template <int kFmt, int kM, int kTiles, int kUnroll>
struct Round {
  // w[u][m]: row g half 0, row g+8 half 0, row g half 1, row g+8 half 1 of chunk u, tile m.
  uint4 w[kUnroll][kM][4];
  uint4 x[kUnroll][kTiles][2];
  float sx[kUnroll][kTiles][2];  // block scales only
  float sw[kUnroll][kM];         // block scales only
};

// kFmt: one of the formats above.  kWarps: K-split ways (warps a CTA).  kTiles: 8-token tiles a
// CTA.  kM: 16-row weight tiles a CTA (every warp takes its K chunks of all of them, so a token
// fragment loaded once feeds kM MMAs).  kUnroll: chunks a warp loads a round.  kPipe: 1 loads
// round r + 1 before computing round r (twice the registers, loads always in flight); 2 streams
// every chunk through the kPre shared-memory slots below as a ring (each slot refilled by cp.async
// once its chunk is computed; no register rounds, kUnroll unused).
// kMinBlocks: CTAs a multiprocessor should hold (register cap for ptxas).  kPacked: the weight's
// layout, 0 row-major, 1 tile-major (below).  kPre: chunks of each warp's weight (all kM tiles)
// copied into dynamic shared memory (kWarps * kPre * kM * 2048 bytes) before the wait on the
// quantizer, so that with programmatic dependent launch the weight streams while the quantizer
// runs, beyond what the registers of one round hold.  OutT: bf16 or fp16 output.  SwT: the
// weight scale's type (fp32, or bf16 for block scales stored so).
// None of kM, kUnroll, kPipe, kMinBlocks, kPacked, kPre changes any output bit: a row's products,
// their chunk partials and the order they are summed in depend on kWarps and K alone.
// w: [N, K] 1-byte weight, row-major, or tile-major: N padded to a multiple of 16 with zero rows,
// then for each 16-row tile T and 128-wide chunk c the 2048 bytes of rows 16T..16T+15 ordered
// [h][row group][row][16-byte unit] (h the 64-byte half of the chunk, row group 0 the tile's first
// 8 rows): what a warp's four loads of (T, c) read, each 512 contiguous bytes.  sw: [N] (per channel) or [ceil(N/128), K/128] (block) scales.
// xq: [rows, K] quantized activations, row stride K.  sx: [rows] or [rows, K/128] scales.
// out: [rows, N] at row stride ldc (elements).
template <int kFmt, int kWarps, int kTiles, int kM, int kUnroll, int kPipe, int kMinBlocks,
          int kPacked, int kPre, typename OutT, typename SwT>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
w8a8_gemm_kernel(const uint8_t* __restrict__ w, const SwT* __restrict__ sw,
                 const uint8_t* __restrict__ xq, const float* __restrict__ sx,
                 OutT* __restrict__ out, long long ldc, int N, int K, int rows) {
  GDN_TRACE_CTA(1);
  // The next kernel of the stream (the next projection's quantizer) may start launching once
  // every CTA of this grid has started: it fills the multiprocessors this grid's tail leaves idle
  // and waits for this kernel before touching memory (gdn::pdl_chain).
  gdn::pdl_launch_dependents();
  using Acc = typename AccOf<kFmt>::type;
  using R = Round<kFmt, kM, kTiles, kUnroll>;
  constexpr int kTokens = 8 * kTiles;
  constexpr int kStep = kWarps * kUnroll;  // chunks between a warp's rounds
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int tok0 = blockIdx.x * kTokens;
  const int n0 = blockIdx.y * (16 * kM);
  const int chunks = K >> 7;

  // Rows past N or rows are clamped for loading (valid memory) and never stored.
  // Tile-major: the 2048 bytes of tile T, chunk c start at (T * chunks + c) * 2048, and piece j of
  // them (row g, row g + 8, then the same rows' second half) holds lane l's 16 bytes at
  // 512 j + 16 l. The same bytes reach the same registers as from the row-major layout.
  const uint8_t* p_w[kM][2];
  int i_nb[kM];
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    if constexpr (kPacked) {
      const long long tile = min((n0 >> 4) + m, (N - 1) >> 4);
      p_w[m][0] = p_w[m][1] = w + tile * 16 * K + lane * 16;
    } else {
      p_w[m][0] = w + (long long)min(n0 + 16 * m + g, N - 1) * K + t * 16;
      p_w[m][1] = w + (long long)min(n0 + 16 * m + g + 8, N - 1) * K + t * 16;
    }
    i_nb[m] = min(n0 + 16 * m, N - 1) >> 7;
  }
  const uint8_t* p_x[kTiles];
  int i_tok[kTiles][2];
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    p_x[j] = xq + (long long)min(tok0 + j * 8 + g, rows - 1) * K + t * 16;
    i_tok[j][0] = min(tok0 + j * 8 + 2 * t, rows - 1);
    i_tok[j][1] = min(tok0 + j * 8 + 2 * t + 1, rows - 1);
  }

  // Piece j of weight tile m, chunk c for this lane: row g half 0, row g+8 half 0, row g half 1,
  // row g+8 half 1 (16 bytes).
  auto w_piece = [&](int m, int c, int j) -> const uint8_t* {
    if constexpr (kPacked) {
      return p_w[m][0] + (long long)c * 2048 + 512 * j;
    } else {
      return p_w[m][j & 1] + (long long)c * 128 + 64 * (j >> 1);
    }
  };
  auto load_sw = [&](auto& b, int u, int m, int c) {
    if constexpr (kFmt == kFp8Block) b.sw[u][m] = to_float(sw[(long long)i_nb[m] * chunks + c]);
  };
  // The weight part of a round: independent of the kernel before this one (early: the round
  // requested before the quantizer wait, by loads ptxas keeps there).
  auto load_w = [&](R& b, int c0, bool early = false) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kWarps;
      if (c < chunks) {
#pragma unroll
        for (int m = 0; m < kM; ++m) {
#pragma unroll
          for (int j = 0; j < 4; ++j) b.w[u][m][j] = gdn::ld_weight_v4(w_piece(m, c, j), early);
          load_sw(b, u, m, c);
        }
      }
    }
  };
  // The activation part: written by the quantizer, read only after pdl_wait.
  auto load_x = [&](auto& b, int c0) {
    constexpr int kU = sizeof(b.w) / sizeof(b.w[0]);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int c = c0 + u * kWarps;
      if (c < chunks) {
        const long long off = (long long)c * 128;
#pragma unroll
        for (int j = 0; j < kTiles; ++j) {
          b.x[u][j][0] = gdn::ld_dep_v4(p_x[j] + off);
          b.x[u][j][1] = gdn::ld_dep_v4(p_x[j] + off + 64);
          if constexpr (kFmt == kFp8Block) {
            b.sx[u][j][0] = gdn::ld_dep(sx + (long long)i_tok[j][0] * chunks + c);
            b.sx[u][j][1] = gdn::ld_dep(sx + (long long)i_tok[j][1] * chunks + c);
          }
        }
      }
    }
  };

  Acc acc[kM][kTiles][4];
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[m][j][r] = Acc(0);

  auto compute = [&](const auto& b, int c0) {
    constexpr int kU = sizeof(b.w) / sizeof(b.w[0]);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (c0 + u * kWarps < chunks) {
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          Acc part[kTiles][4];
#pragma unroll
          for (int j = 0; j < kTiles; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) part[j][r] = Acc(0);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const uint4 ra = b.w[u][m][2 * h], rb = b.w[u][m][2 * h + 1];
            const uint32_t a0[4] = {ra.x, rb.x, ra.y, rb.y};
            const uint32_t a1[4] = {ra.z, rb.z, ra.w, rb.w};
#pragma unroll
            for (int j = 0; j < kTiles; ++j) {
              const uint4 xb = b.x[u][j][h];
              const uint32_t x0[2] = {xb.x, xb.y};
              const uint32_t x1[2] = {xb.z, xb.w};
              if constexpr (kFmt == kInt8) {
                mma_chunk<kFmt>(acc[m][j], a0, x0);
                mma_chunk<kFmt>(acc[m][j], a1, x1);
              } else {
                mma_chunk<kFmt>(part[j], a0, x0);
                mma_chunk<kFmt>(part[j], a1, x1);
              }
            }
          }
          // Each 128-wide chunk's partial (four MMAs from zero) is promoted to an fp32 register
          // accumulator (scaled by sx[token, kb] * sw[nb, kb] for block scales), in chunk order:
          // the arithmetic every fp8 kernel of this file keeps.
          if constexpr (kFmt == kFp8Block) {
#pragma unroll
            for (int j = 0; j < kTiles; ++j)
#pragma unroll
              for (int r = 0; r < 4; ++r)
                acc[m][j][r] = gdn::fma_rn(part[j][r], gdn::mul_rn(b.sx[u][j][r & 1], b.sw[u][m]),
                                           acc[m][j][r]);
          } else if constexpr (kFmt == kFp8Channel) {
#pragma unroll
            for (int j = 0; j < kTiles; ++j)
#pragma unroll
              for (int r = 0; r < 4; ++r) acc[m][j][r] = gdn::add_rn(acc[m][j][r], part[j][r]);
          }
        }
      }
    }
  };

  // The epilogue's scales (per channel and per token formats) copied into shared memory by
  // cp.async, which holds no registers and stays where it is written: the weight's 16 kM before
  // the quantizer wait, the activations' 8 kTiles right after it, so that the epilogue waits on no
  // load from memory. Rows past N and tokens past rows are clamped (never stored). Not for block
  // scales (applied a chunk), 2-byte scales (below cp.async's 4), nor fp8 per channel with four
  // accumulator tiles and staging, where the copies' registers made ptxas spill.
  constexpr int kFrags = kM * kTiles * 4;
  constexpr bool kEarlyScales = kFmt != kFp8Block && sizeof(SwT) == 4 &&
                                !(kFmt == kFp8Channel && kM * kTiles >= 4 && kPre > 0);
  __shared__ float s_w[kEarlyScales ? 16 * kM : 1], s_x[kEarlyScales ? 8 * kTiles : 1];
  if constexpr (kEarlyScales) {
    if (threadIdx.x < 16 * kM) gdn::cp_async4(&s_w[threadIdx.x], sw + min(n0 + (int)threadIdx.x, N - 1));
    gdn::cp_async_commit();
  }
  // (The ring, kPipe 2, commits the activations' copy with its next slot's: each of its waits then
  // counts slot groups alone.)
  auto load_scales = [&]() {
    if constexpr (kEarlyScales) {
      if (threadIdx.x < 8 * kTiles) gdn::cp_async4(&s_x[threadIdx.x], sx + min(tok0 + (int)threadIdx.x, rows - 1));
      if constexpr (kPipe != 2) gdn::cp_async_commit();
    }
  };

  // Shared-memory staging (kPre > 0): piece j of tile m of the warp's i-th chunk, lane l, at
  // ((((warp * kPre + i) * kM + m) * 4 + j) * 32 + l) * 16. Each lane reads back only the bytes it
  // copied, so its own cp.async wait orders them.
  extern __shared__ __align__(128) uint8_t smem[];
  auto pre_slot = [&](int i, int m, int j) {
    return smem + ((((warp * kPre + i) * kM + m) * 4 + j) * 32 + lane) * 16;
  };
  static_assert(kPipe != 2 || kPre > 0, "the ring needs slots");
  // Slot i's copy of chunk c (all kM tiles; nothing past the stream's end).
  auto stage = [&](int i, int c) {
    if (c < chunks) {
#pragma unroll
      for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int j = 0; j < 4; ++j) gdn::cp_async16(pre_slot(i, m, j), w_piece(m, c, j));
    }
  };
  if constexpr (kPre > 0) {
#pragma unroll
    for (int i = 0; i < kPre; ++i) {
      stage(i, warp + i * kWarps);
      if constexpr (kPipe == 2) gdn::cp_async_commit();  // the ring: one group a slot
    }
    if constexpr (kPipe != 2) gdn::cp_async_commit();
  }
  // The staged chunks come first in the warp's chunk order; the register rounds follow.
  const int c_reg = warp + kPre * kWarps;

  // Slot i's chunk c (landed) read back into b's registers, with its block scales.
  auto read_slot = [&](auto& b, int i, int c) {
#pragma unroll
    for (int m = 0; m < kM; ++m) {
#pragma unroll
      for (int j = 0; j < 4; ++j) b.w[0][m][j] = *reinterpret_cast<const uint4*>(pre_slot(i, m, j));
      load_sw(b, 0, m, c);
    }
  };
  auto compute_staged = [&]() {
    if constexpr (kPre > 0) {
      gdn::cp_async_wait<0>();
#pragma unroll
      for (int i = 0; i < kPre; ++i) {
        const int c = warp + i * kWarps;
        Round<kFmt, kM, kTiles, 1> b;
        if (c < chunks) read_slot(b, i, c);
        load_x(b, c);
        compute(b, c);
      }
    }
  };

  // The first register round's weight (and the staged chunks) are requested before waiting on
  // the quantizer: with programmatic dependent launch (GDN_KERNELS_PDL=1) those bytes arrive while
  // it still runs. Launched plainly, the wait returns at once.
  if constexpr (kPipe == 2) {
    // The ring: the warp's i-th chunk from slot i % kPre, whose group is the (i + 1)-th committed
    // after the weight scales' (slot groups only: the activations' scale copy rides with the first
    // refill), so waiting until at most kPre - 1 groups are pending lands it.
    gdn::pdl_wait();
    load_scales();
    int i = 0;
    for (int c = warp; c < chunks; c += kWarps) {
      gdn::cp_async_wait<kPre - 1>();
      Round<kFmt, kM, kTiles, 1> b;
      read_slot(b, i, c);
      load_x(b, c);
      compute(b, c);
      // The slot's bytes are in registers and computed on: refill it.
      stage(i, c + kPre * kWarps);
      gdn::cp_async_commit();
      i = i + 1 == kPre ? 0 : i + 1;
    }
  } else if constexpr (kPipe) {
    R cur, nxt;
    load_w(cur, c_reg, true);
    gdn::pdl_wait();
    load_scales();
    compute_staged();
    load_x(cur, c_reg);
    for (int c0 = c_reg; c0 < chunks; c0 += kStep) {
      const bool more = c0 + kStep < chunks;
      if (more) {
        load_w(nxt, c0 + kStep);
        load_x(nxt, c0 + kStep);
      }
      compute(cur, c0);
      if (more) cur = nxt;
    }
  } else {
    R cur;
    load_w(cur, c_reg, true);
    gdn::pdl_wait();
    load_scales();
    compute_staged();
    for (int c0 = c_reg; c0 < chunks; c0 += kStep) {
      if (c0 != c_reg) load_w(cur, c0);
      load_x(cur, c0);
      compute(cur, c0);
    }
  }

  // Split-K reduction over warps, in warp order, then the epilogue.
  __shared__ Acc red[kWarps][kFrags][32];
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) red[warp][(m * kTiles + j) * 4 + r][lane] = acc[m][j][r];
  if constexpr (kEarlyScales) {
    if constexpr (kPipe == 2) gdn::cp_async_commit();  // the activations' scale copy, if no refill took it
    gdn::cp_async_wait<0>();                         // this thread's scale copies
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kFrags * 32; e += kWarps * 32) {
    const int f = e >> 5, l = e & 31;
    const int m = f / (kTiles * 4), j = (f >> 2) % kTiles, r = f & 3;
    const int n = n0 + 16 * m + (l >> 2) + (r >> 1) * 8;
    const int tok = tok0 + j * 8 + 2 * (l & 3) + (r & 1);
    if (n >= N || tok >= rows) continue;
    Acc sum = red[0][f][l];
#pragma unroll
    for (int v = 1; v < kWarps; ++v) {
      if constexpr (kFmt == kInt8) {
        sum += red[v][f][l];
      } else {
        sum = gdn::add_rn(sum, red[v][f][l]);
      }
    }
    float y;
    if constexpr (kFmt == kFp8Block) {
      y = sum;
    } else {
      float s_tok, s_n;
      if constexpr (kEarlyScales) {
        s_tok = s_x[tok - tok0];
        s_n = s_w[n - n0];
      } else {
        s_tok = gdn::ld_dep(sx + tok);
        s_n = to_float(sw[n]);
      }
      if constexpr (kFmt == kInt8) {
        y = gdn::mul_rn(gdn::mul_rn(__int2float_rn(sum), s_tok), s_n);
      } else {
        y = gdn::mul_rn(gdn::mul_rn(sum, s_tok), s_n);
      }
    }
    out[(long long)tok * ldc + n] = gdn::from_float<OutT>(y);
  }
}

// ---- Many rows: a tiled GEMM with the same per-row arithmetic ----
//
// From 32 rows on, w8a8_gemm_kernel re-reads every token tile once per 16 weight rows. This
// kernel stages a 128-row weight tile and a 64-token activation tile through shared memory
// (cp.async, kStages stages of one 128-wide chunk) and gives each of its 8 warps a 32 x 32 output
// tile, so each byte loaded feeds 4 to 8 MMAs. Its arithmetic is w8a8_gemm_kernel's, so a row's
// output bits do not depend on which of the two kernels ran (bitwise row invariance):
// - the same MMAs on the same bytes in the same order within a chunk (thread (g, t) feeds the
//   16 bytes at 16t of each 64-byte half of its rows to two k32 MMAs), read from shared memory;
// - the chunks taken in the decode kernel's warp order (w = 0..7, chunks w, w + 8, ...): the
//   partials of one w are promoted into a running sum as that kernel's warp w does, and the 8 sums
//   are added in w order, as its shared-memory reduction does (int8 sums are exact in any order).
// Shared rows are 128 bytes; the 16-byte unit u of row r is stored at u ^ 4 (r & 1), so the 8
// lanes of a quarter warp (rows 2p and 2p+1, units t) fall on distinct banks. kPacked: the
// weight's layout, as w8a8_gemm_kernel's.
template <int kFmt, int kStages, int kPacked, typename OutT, typename SwT>
__global__ void __launch_bounds__(256)
w8a8_tiled_kernel(const uint8_t* __restrict__ w, const SwT* __restrict__ sw,
                  const uint8_t* __restrict__ xq, const float* __restrict__ sx,
                  OutT* __restrict__ out, long long ldc, int N, int K, int rows) {
  // As w8a8_gemm_kernel: the next kernel may start launching.
  gdn::pdl_launch_dependents();
  using Acc = typename AccOf<kFmt>::type;
  constexpr int kN = 128, kT = 64;  // CTA tile: weight rows x tokens
  constexpr int kStageA = kN * 128, kStageB = kT * 128;
  constexpr int kSplit = 8;  // w8a8_gemm_kernel's K split
  extern __shared__ __align__(128) uint8_t smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wn = warp & 3, wt = warp >> 2;  // warp tile: rows 32 wn.., tokens 32 wt..
  const int n0 = blockIdx.y * kN, tok0 = blockIdx.x * kT;
  const int chunks = K >> 7;

  const int per = chunks / kSplit, extra = chunks % kSplit;  // chunks of w: per + (w < extra)
  auto chunk_at = [&](int i) { return decode_order_chunk(i, chunks); };

  auto load = [&](int stage, int c) {
    uint8_t* a = smem + stage * (kStageA + kStageB);
    uint8_t* b = a + kStageA;
    static_assert(kN == 128, "copy_weight_rows copies 128 rows");
    copy_weight_rows<kPacked>(a, [](int r, int u) { return swz(r, u); }, w, n0, N, K, c);
#pragma unroll
    for (int q = 0; q < kT * 8 / 256; ++q) {
      const int id = threadIdx.x + 256 * q, r = id >> 3, u = id & 7;
      cp_async_row(b, r, u, xq + (long long)min(tok0 + r, rows - 1) * K + (long long)c * 128);
    }
  };

  Acc acc[2][4][4], sum[2][4][4];
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[m][j][r] = sum[m][j][r] = Acc(0);

  int i_tok[4][2];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    i_tok[j][0] = min(tok0 + wt * 32 + j * 8 + 2 * t, rows - 1);
    i_tok[j][1] = min(tok0 + wt * 32 + j * 8 + 2 * t + 1, rows - 1);
  }

  gdn::pdl_wait();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < chunks) load(s, chunk_at(s));
    gdn::cp_async_commit();
  }
  int v = 0, left = per + (0 < extra);  // the decode warp whose chunks are being summed
  for (int i = 0; i < chunks; ++i) {
    if (i + kStages - 1 < chunks) load((i + kStages - 1) % kStages, chunk_at(i + kStages - 1));
    gdn::cp_async_commit();
    gdn::cp_async_wait<kStages - 1>();
    __syncthreads();
    // Empty decode warps (chunks < 8) contribute +0 to the sum, as there.
    while (left == 0) {
      fold<kFmt>(sum, acc, v);
      ++v;
      left = per + (v < extra);
    }
    const int c = v + (per + (v < extra) - left) * kSplit;
    const uint8_t* a = smem + (i % kStages) * (kStageA + kStageB);
    const uint8_t* b = a + kStageA;
    float s_w = 0.f, s_x[4][2];
    if constexpr (kFmt == kFp8Block) {
      s_w = to_float(sw[(long long)(n0 >> 7) * chunks + c]);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        s_x[j][0] = gdn::ld_dep(sx + (long long)i_tok[j][0] * chunks + c);
        s_x[j][1] = gdn::ld_dep(sx + (long long)i_tok[j][1] * chunks + c);
      }
    }
    Acc part[2][4][4];
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) part[m][j][r] = Acc(0);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint4 xb[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) xb[j] = lds_row(b, wt * 32 + j * 8 + g, h * 4 + t);
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const uint4 ra = lds_row(a, wn * 32 + m * 16 + g, h * 4 + t);
        const uint4 rb = lds_row(a, wn * 32 + m * 16 + g + 8, h * 4 + t);
        const uint32_t a0[4] = {ra.x, rb.x, ra.y, rb.y};
        const uint32_t a1[4] = {ra.z, rb.z, ra.w, rb.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint32_t x0[2] = {xb[j].x, xb[j].y};
          const uint32_t x1[2] = {xb[j].z, xb[j].w};
          if constexpr (kFmt == kInt8) {
            mma_chunk<kFmt>(acc[m][j], a0, x0);
            mma_chunk<kFmt>(acc[m][j], a1, x1);
          } else {
            mma_chunk<kFmt>(part[m][j], a0, x0);
            mma_chunk<kFmt>(part[m][j], a1, x1);
          }
        }
      }
    }
    if constexpr (kFmt == kFp8Block) {
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int r = 0; r < 4; ++r)
            acc[m][j][r] = gdn::fma_rn(part[m][j][r], gdn::mul_rn(s_x[j][r & 1], s_w), acc[m][j][r]);
    } else if constexpr (kFmt == kFp8Channel) {
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int r = 0; r < 4; ++r) acc[m][j][r] = gdn::add_rn(acc[m][j][r], part[m][j][r]);
    }
    --left;
    __syncthreads();
  }
  for (; v < kSplit; ++v) fold<kFmt>(sum, acc, v);

  // Epilogue: c0, c1 row g, tokens 2t, 2t+1; c2, c3 row g + 8. The per-channel formats' scales
  // are loaded first (clamped to valid rows), so that the loads overlap instead of each waiting
  // beside its store (ld_dep is ordered with the stores).
  float s_w[2][2] = {}, s_x[4][2] = {};
  if constexpr (kFmt != kFp8Block) {
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) s_w[m][h] = to_float(sw[min(n0 + wn * 32 + m * 16 + g + h * 8, N - 1)]);
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int q = 0; q < 2; ++q) s_x[j][q] = gdn::ld_dep(sx + min(tok0 + wt * 32 + j * 8 + 2 * t + q, rows - 1));
  }
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int n = n0 + wn * 32 + m * 16 + g + (r >> 1) * 8;
        const int tok = tok0 + wt * 32 + j * 8 + 2 * t + (r & 1);
        if (n >= N || tok >= rows) continue;
        float y;
        if constexpr (kFmt == kInt8) {
          y = gdn::mul_rn(gdn::mul_rn(__int2float_rn(sum[m][j][r]), s_x[j][r & 1]), s_w[m][r >> 1]);
        } else if constexpr (kFmt == kFp8Channel) {
          y = gdn::mul_rn(gdn::mul_rn(sum[m][j][r], s_x[j][r & 1]), s_w[m][r >> 1]);
        } else {
          y = sum[m][j][r];
        }
        out[(long long)tok * ldc + n] = gdn::from_float<OutT>(y);
      }
}

// ---- Many rows, int8: warpgroup MMAs (wgmma) ----
//
// An int8 output is its exact int32 dot product times the two scales (the epilogue above), so
// any order of K gives the same bits: this kernel, free of the decode kernels' chunk order, runs
// Hopper's warpgroup MMA from shared memory at 64-256 rows. A CTA of two warpgroups owns 128
// weight rows (64 each, the MMA's M side) and kBN tokens (its N side); both operands go through
// kStages shared-memory stages of one 128-byte chunk of K, copied by cp.async into the MMA's
// canonical K-major layout with the 128-byte swizzle (rows of 128 bytes, 8-row atoms of 1 KB,
// the 16-byte unit u of row r at u ^ (r % 8)). Each stage is four k32 MMAs a warpgroup; a stage
// is refilled two iterations after its MMAs were issued, once every warpgroup has waited them out.
namespace {

// The shared-memory matrix descriptor of a K-major operand in 128-byte swizzled atoms: start
// address, leading byte offset 1 (unused by this layout), stride 1024 bytes between 8-row atoms,
// swizzle mode 1 (128 bytes).
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t smem_addr) {
  return (uint64_t)((smem_addr & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}
// The same for 64-byte swizzled atoms (rows of 64 bytes, 8-row atoms of 512 bytes): swizzle mode 2.
__device__ __forceinline__ uint64_t wgmma_desc64(uint32_t smem_addr) {
  return (uint64_t)((smem_addr & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(512 >> 4) << 32) | (2ull << 62);
}

// D (+)= A B, A [64, 32] s8 from shared memory (descriptor a), B [32, kN] s8 (descriptor b), int32;
// accumulate 0: D = A B. Thread t of warp w (of the warpgroup) holds d[4j + r]: row 16w + t/4 +
// 8 (r / 2), column 8j + 2 (t % 4) + r % 2.
template <int kN>
struct Wgmma;
template <>
struct Wgmma<64> {
  static __device__ __forceinline__ void mma(int (&d)[32], uint64_t a, uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31])
        : "l"(a), "l"(b), "r"(accumulate));
  }
};
template <>
struct Wgmma<128> {
  static __device__ __forceinline__ void mma(int (&d)[64], uint64_t a, uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
        : "l"(a), "l"(b), "r"(accumulate));
  }
};

template <>
struct Wgmma<256> {
  static __device__ __forceinline__ void mma(int (&d)[128], uint64_t a, uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63]), "+r"(d[64]), "+r"(d[65]), "+r"(d[66]), "+r"(d[67]), "+r"(d[68]), "+r"(d[69]), "+r"(d[70]), "+r"(d[71]), "+r"(d[72]), "+r"(d[73]), "+r"(d[74]), "+r"(d[75]), "+r"(d[76]), "+r"(d[77]), "+r"(d[78]), "+r"(d[79]), "+r"(d[80]), "+r"(d[81]), "+r"(d[82]), "+r"(d[83]), "+r"(d[84]), "+r"(d[85]), "+r"(d[86]), "+r"(d[87]), "+r"(d[88]), "+r"(d[89]), "+r"(d[90]), "+r"(d[91]), "+r"(d[92]), "+r"(d[93]), "+r"(d[94]), "+r"(d[95]), "+r"(d[96]), "+r"(d[97]), "+r"(d[98]), "+r"(d[99]), "+r"(d[100]), "+r"(d[101]), "+r"(d[102]), "+r"(d[103]), "+r"(d[104]), "+r"(d[105]), "+r"(d[106]), "+r"(d[107]), "+r"(d[108]), "+r"(d[109]), "+r"(d[110]), "+r"(d[111]), "+r"(d[112]), "+r"(d[113]), "+r"(d[114]), "+r"(d[115]), "+r"(d[116]), "+r"(d[117]), "+r"(d[118]), "+r"(d[119]), "+r"(d[120]), "+r"(d[121]), "+r"(d[122]), "+r"(d[123]), "+r"(d[124]), "+r"(d[125]), "+r"(d[126]), "+r"(d[127])
        : "l"(a), "l"(b), "r"(accumulate));
  }
};

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// cp.async writes (generic proxy) made visible to the MMA's reads (async proxy).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Byte offset of (row r, 16-byte unit u) in a 128-byte swizzled operand tile.
__device__ __forceinline__ int swz128(int r, int u) { return r * 128 + ((u ^ (r & 7)) << 4); }

// Chunk c of the weight rows n0.. into shared address dst by one tensor copy of map (the box of
// gdn_kernels/_tma.py weight_map_shape), completing on barrier bar. Tile-major (kPacked): the
// weight as 5 dimensions (the 64 bytes of a half-row, row % 8, the tile's row halves, 16-row
// tiles, the chunk's halves), landing as two blocks of the box's rows of 64 bytes (64-byte
// swizzle), one a half of the chunk; row-major: rows of 128 bytes (128-byte swizzle).
template <int kPacked>
__device__ __forceinline__ void tma_weight_chunk(uint32_t dst, const gdn::TensorMap* map, uint32_t bar, int n0, int c) {
  if constexpr (kPacked) {
    gdn::tma_load_5d(dst, map, bar, 0, 0, 0, n0 >> 4, 2 * c);
  } else {
    gdn::tma_load_2d(dst, map, bar, c * 128, n0);
  }
}

}  // namespace

// The four k32 MMAs of one 128-byte chunk of K in the stage at shared address st (its 128 weight
// rows, then its kBN tokens), committed as one group: warpgroup wg's 64 weight rows by the tokens.
// kHalves: the weight landed as two blocks of 64-byte rows (a tile-major weight by tensor copies),
// k32 step s in half s / 2, 32 bytes into its rows; else as 128-byte rows.
template <int kBN, bool kHalves>
__device__ __forceinline__ void wgmma_chunk(int (&d)[kBN / 2], uint32_t st, int wg) {
  constexpr int kStageA = 128 * 128;
  const uint32_t a = st + wg * 64 * 128, b = st + kStageA, a_half = st + wg * 64 * 64;
  wgmma_fence();
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const uint64_t da = kHalves ? wgmma_desc64(a_half + (s >> 1) * (kStageA / 2) + 32 * (s & 1)) : wgmma_desc(a + 32 * s);
    Wgmma<kBN>::mma(d, da, wgmma_desc(b + 32 * s), 1);
  }
  wgmma_commit();
}

// Zeroes a warpgroup MMA's accumulators, the zeros in place before the first MMA reads them.
template <int kN>
__device__ __forceinline__ void wgmma_zero(int (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    d[i] = 0;
    asm volatile("" : "+r"(d[i])::"memory");
  }
}

// Epilogue of the int8 warpgroup kernels (w8a8_gemm_kernel's for int8): warpgroup wg's sums d of
// weight rows n0 + 64 wg.. (64) and tokens tok0.. (kBN) scaled and stored; with a K split, only the token
// groups j with j % kSplit == split (this CTA's share of the tile).
template <int kBN, int kSplit, typename OutT, typename SwT>
__device__ __forceinline__ void wgmma_epilogue(const int (&d)[kBN / 2], const SwT* __restrict__ sw,
                                               const float* __restrict__ sx, OutT* __restrict__ out, long long ldc,
                                               int N, int rows, int n0, int wg, int tok0, int split) {
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
  const int g = lane >> 2, t = lane & 3;
  // The scales first (clamped to valid rows), 64 tokens' at a time, so that their loads overlap:
  // each ld_dep is ordered with the stores, and loaded beside them every output waited out one.
  float s_w[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) s_w[h] = to_float(sw[min(n0 + wg * 64 + warp * 16 + g + h * 8, N - 1)]);
  constexpr int kGroup = 8;  // token groups of 8 a batch of scale loads
#pragma unroll
  for (int j0 = 0; j0 < kBN / 8; j0 += kGroup) {
    float s_x[kGroup][2];
#pragma unroll
    for (int j = j0; j < j0 + kGroup; ++j)
#pragma unroll
      for (int q = 0; q < 2; ++q)
        if (kSplit == 1 || j % kSplit == split) s_x[j - j0][q] = gdn::ld_dep(sx + min(tok0 + j * 8 + 2 * t + q, rows - 1));
#pragma unroll
    for (int j = j0; j < j0 + kGroup; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        if (kSplit > 1 && j % kSplit != split) continue;
        const int n = n0 + wg * 64 + warp * 16 + g + (r >> 1) * 8;
        const int tok = tok0 + j * 8 + 2 * t + (r & 1);
        if (n >= N || tok >= rows) continue;
        const float y = gdn::mul_rn(gdn::mul_rn(__int2float_rn(d[4 * j + r]), s_x[j - j0][r & 1]), s_w[r >> 1]);
        out[(long long)tok * ldc + n] = gdn::from_float<OutT>(y);
      }
  }
}

// The body of both warpgroup-MMA kernels. kStages: shared-memory stages (at least 3).  kBN: tokens
// a CTA (64, 128 or 256).  kPacked: the weight in the tile-major layout (W8a8Weight.tile_major) or
// row-major.  kTma: 0 both operands copied by cp.async; 1 the weight by tensor copies of wmap (a
// box a stage, landing swizzled as the MMA reads it: from a row-major weight 128 rows of 128
// bytes, 128-byte swizzle; from a tile-major one, whose rows are 64-byte halves, two blocks of 128
// rows of 64 bytes, 64-byte swizzle; gdn_kernels/_tma.py builds the maps), the tokens by
// cp.async; 2 both by tensor copies (xmap: the workspace as [rows, K]).  kSplit: CTAs a tile (a
// cluster along z, blockIdx.z its rank), each multiplying a contiguous 1/kSplit of the chunks;
// their int32 sums are added through distributed shared memory, exactly, so the bits do not
// depend on it.  OutT: bf16 or fp16.  SwT: the per-channel weight scales' type.  w: int8 weight.
// xq: int8 activations [rows, K].  sx: per-token scales.  out: [rows, N] at row stride ldc.
// K: a multiple of 128.
template <int kStages, int kBN, int kPacked, int kTma, int kSplit, typename OutT, typename SwT>
__device__ __forceinline__ void wgmma_gemm(const gdn::TensorMap* wmap, const gdn::TensorMap* xmap,
                                           const uint8_t* __restrict__ w, const SwT* __restrict__ sw,
                                           const uint8_t* __restrict__ xq, const float* __restrict__ sx,
                                           OutT* __restrict__ out, long long ldc, int N, int K, int rows) {
  static_assert(kStages >= 3 && (kBN == 64 || kBN == 128 || kBN == 256) && kTma >= 0 && kTma <= 2, "wgmma schedule");
  static_assert(kSplit >= 1 && kSplit <= 8, "wgmma K split: a portable cluster");
  gdn::pdl_launch_dependents();
  constexpr int kBM = 128;                                    // weight rows a CTA
  constexpr int kStageA = kBM * 128, kStageB = kBN * 128;     // bytes a stage
  // The split's exchange: every thread's kBN / 2 sums, in the stages once the MMAs are done.
  static_assert(kSplit == 1 || kBN * 512 <= kStages * (kStageA + kStageB), "split exchange fits the stages");
  constexpr uint32_t kTmaBytes = kStageA + (kTma == 2 ? kStageB : 0);
  extern __shared__ uint8_t smem_raw[];
  // The swizzle is a function of the address: atoms must sit on 1 KB boundaries.
  const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
  uint8_t* const smem = smem_raw + (((raw + 1023) & ~1023u) - raw);
  const uint32_t smem_s = (uint32_t)__cvta_generic_to_shared(smem);
  // With tensor copies, one barrier a stage after the stages: chunk c lands on barrier c % kStages
  // in its phase c / kStages.
  const uint32_t bars = smem_s + kStages * (kStageA + kStageB);
  const int wg = threadIdx.x >> 7;                            // warpgroup: weight rows 64 wg..
  const int n0 = blockIdx.y * kBM, tok0 = blockIdx.x * kBN;
  // This CTA's chunks: c0 .. c0 + chunks - 1 of K's (all of them without a split).
  const int split = kSplit > 1 ? (int)blockIdx.z : 0;
  const int c0 = (K >> 7) * split / kSplit;
  const int chunks = (K >> 7) * (split + 1) / kSplit - c0;

  // Chunk c into stage s: the CTA's 128 weight rows (load_a) and kBN token rows (load_b), 8 units
  // of 16 bytes each, by cp.async (every thread); tma_a and tma_b: the same by tensor copies
  // (one thread).
  auto load_a = [&](int s, int i) {
    copy_weight_rows<kPacked>(smem + s * (kStageA + kStageB), [](int r, int u) { return swz128(r, u); }, w, n0, N,
                              K, c0 + i);
  };
  auto load_b = [&](int s, int i) {
    const int c = c0 + i;
    uint8_t* b = smem + s * (kStageA + kStageB) + kStageA;
#pragma unroll
    for (int q = 0; q < kBN * 8 / 256; ++q) {
      const int id = threadIdx.x + 256 * q, r = id >> 3, u = id & 7;
      gdn::cp_async16(b + swz128(r, u), xq + (long long)min(tok0 + r, rows - 1) * K + (long long)c * 128 + 16 * u);
    }
  };
  auto tma_a = [&](int s, int i) {
    tma_weight_chunk<kPacked>(smem_s + s * (kStageA + kStageB), wmap, bars + 8 * s, n0, c0 + i);
  };
  auto tma_b = [&](int s, int i) {
    gdn::tma_load_2d(smem_s + s * (kStageA + kStageB) + kStageA, xmap, bars + 8 * s, (c0 + i) * 128, tok0);
  };

  int d[kBN / 2];
  wgmma_zero(d);

  if constexpr (kTma > 0) {
    if (threadIdx.x == 0) {
#pragma unroll
      for (int s = 0; s < kStages; ++s) gdn::mbar_init(bars + 8 * s, 1);
      gdn::mbar_init_fence();
    }
    __syncthreads();
  }
  // The weight does not depend on the quantizer: the first stages' weight chunks are requested
  // before the wait (by cp.async they complete with the first commit group, chunk 0's), the
  // tokens after it.
#pragma unroll
  for (int s = 0; s < kStages - 2; ++s) {
    if constexpr (kTma == 0) {
      if (s < chunks) load_a(s, s);
    } else if (threadIdx.x == 0 && s < chunks) {
      // With the tokens on the same barrier, the arrival waits until their copy is requested.
      if constexpr (kTma == 1) {
        gdn::mbar_arrive_expect_tx(bars + 8 * s, kTmaBytes);
      } else {
        gdn::mbar_expect_tx(bars + 8 * s, kStageA);
      }
      tma_a(s, s);
    }
  }
  gdn::pdl_wait();
#pragma unroll
  for (int s = 0; s < kStages - 2; ++s) {
    if constexpr (kTma < 2) {
      if (s < chunks) load_b(s, s);
      gdn::cp_async_commit();
    } else if (threadIdx.x == 0 && s < chunks) {
      gdn::mbar_arrive_expect_tx(bars + 8 * s, kStageB);
      tma_b(s, s);
    }
  }
  for (int i = 0; i < chunks; ++i) {
    if constexpr (kTma < 2) gdn::cp_async_wait<kStages - 3>();  // chunk i's cp.async copies (this thread's)
    if constexpr (kTma > 0) gdn::mbar_wait(bars + 8 * (i % kStages), (i / kStages) & 1);
    if constexpr (kTma < 2) fence_proxy_async();
    // Every copy of chunk i is in, and every warpgroup has waited out the MMAs of chunk i - 2,
    // whose stage is refilled now.
    __syncthreads();
    const int next = i + kStages - 2;
    if (next < chunks) {
      const int s = next % kStages;
      if constexpr (kTma == 0) load_a(s, next);
      if constexpr (kTma < 2) load_b(s, next);
      if constexpr (kTma > 0) {
        if (threadIdx.x == 0) {
          gdn::mbar_arrive_expect_tx(bars + 8 * s, kTmaBytes);
          tma_a(s, next);
          if constexpr (kTma == 2) tma_b(s, next);
        }
      }
    }
    if constexpr (kTma < 2) gdn::cp_async_commit();
    wgmma_chunk<kBN, kPacked && kTma>(d, smem_s + (i % kStages) * (kStageA + kStageB), wg);
    wgmma_wait<1>();
  }
  wgmma_wait<0>();

  if constexpr (kSplit > 1) {
    // Each CTA of the cluster publishes its sums (thread-major 16-byte groups: d[4 j ..] of thread
    // x at group j * 256 + x), then adds the groups j with j % kSplit == its rank from every CTA
    // and writes those outputs. The last barrier keeps its shared memory until all have read it.
    __syncthreads();  // both warpgroups' MMAs have read their last stage
    int4* red = reinterpret_cast<int4*>(smem);
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j)
      red[j * 256 + threadIdx.x] = make_int4(d[4 * j], d[4 * j + 1], d[4 * j + 2], d[4 * j + 3]);
    gdn::cluster_sync();
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      if (j % kSplit != split) continue;
      int4 sum = make_int4(0, 0, 0, 0);
#pragma unroll
      for (int r = 0; r < kSplit; ++r) {
        const int4 v = gdn::ld_cluster_v4(smem_s + (uint32_t)(j * 256 + threadIdx.x) * 16u, r);
        sum.x += v.x;
        sum.y += v.y;
        sum.z += v.z;
        sum.w += v.w;
      }
      d[4 * j] = sum.x;
      d[4 * j + 1] = sum.y;
      d[4 * j + 2] = sum.z;
      d[4 * j + 3] = sum.w;
    }
    gdn::cluster_sync();
  }

  wgmma_epilogue<kBN, kSplit>(d, sw, sx, out, ldc, N, rows, n0, wg, tok0, split);
}

// Both operands by cp.async (kernel arguments as the other W8A8 GEMMs).
template <int kStages, int kBN, int kPacked, typename OutT, typename SwT>
__global__ void __launch_bounds__(256, 1)
w8a8_wgmma_kernel(const uint8_t* __restrict__ w, const SwT* __restrict__ sw,
                  const uint8_t* __restrict__ xq, const float* __restrict__ sx,
                  OutT* __restrict__ out, long long ldc, int N, int K, int rows) {
  wgmma_gemm<kStages, kBN, kPacked, 0, 1>(nullptr, nullptr, w, sw, xq, sx, out, ldc, N, K, rows);
}

// kTma 1 or 2: tensor copies of the weight (wmap) and, with 2, of the tokens (xmap); the maps
// come first among the arguments, 64-byte aligned in the parameter bank (the launch lays the
// arguments out at the offsets the driver reports, gdn_kernels/_build.py _driver_layout).
template <int kStages, int kBN, int kPacked, int kTma, typename OutT, typename SwT>
__global__ void __launch_bounds__(256, 1)
w8a8_wgmma_tma_kernel(const __grid_constant__ gdn::TensorMap wmap, const __grid_constant__ gdn::TensorMap xmap,
                      const uint8_t* __restrict__ w, const SwT* __restrict__ sw,
                      const uint8_t* __restrict__ xq, const float* __restrict__ sx,
                      OutT* __restrict__ out, long long ldc, int N, int K, int rows) {
  wgmma_gemm<kStages, kBN, kPacked, kTma, 1>(&wmap, &xmap, w, sw, xq, sx, out, ldc, N, K, rows);
}

// w8a8_wgmma_tma_kernel with K split kSplit ways over a cluster of CTAs (grid z: kSplit), for tiles
// too few to fill the GPU.
template <int kStages, int kBN, int kPacked, int kTma, int kSplit, typename OutT, typename SwT>
__global__ void __launch_bounds__(256, 1) __cluster_dims__(1, 1, kSplit)
w8a8_wgmma_split_kernel(const __grid_constant__ gdn::TensorMap wmap, const __grid_constant__ gdn::TensorMap xmap,
                        const uint8_t* __restrict__ w, const SwT* __restrict__ sw,
                        const uint8_t* __restrict__ xq, const float* __restrict__ sx,
                        OutT* __restrict__ out, long long ldc, int N, int K, int rows) {
  wgmma_gemm<kStages, kBN, kPacked, kTma, kSplit>(&wmap, &xmap, w, sw, xq, sx, out, ldc, N, K, rows);
}

// w8a8_wgmma_tma_kernel (both operands by tensor copies, unsplit) with a producer warp: warp 8 issues
// every tensor copy, a stage's only once both warpgroups have released it (an "empty" barrier a
// stage, each warpgroup arriving once the MMAs that read it are done), so the warpgroups never wait
// for each other at a block barrier and all kStages stages can be in flight. The same MMAs on the
// same operands in the same order: the same bits. 288 threads.
//
// kMcX, kMcY (1 or 2): a cluster of kMcX x kMcY CTAs (grid x: token tiles, y: weight tiles) whose
// CTAs of one weight tile share its chunks and those of one token tile share theirs: chunk c of a
// weight tile is copied once, by the CTA of cluster x == c % kMcX, multicast into the shared memory
// of every CTA of its row, and chunk c of a token tile by the CTA of cluster y == c % kMcY into its
// column; so L2 serves each operand once a cluster instead of once a CTA. A stage is refilled once
// every warpgroup of the cluster has released it (each arrives on every CTA's empty barrier), and
// only chunks some CTA will refill are released, so that no arrival reaches a CTA that has ended.
// The sums are the unclustered kernel's: the same bits.
template <int kStages, int kBN, int kPacked, int kMcX, int kMcY, typename OutT, typename SwT>
__device__ __forceinline__ void wgmma_ws_gemm(const gdn::TensorMap* wmap, const gdn::TensorMap* xmap,
                                              const SwT* __restrict__ sw, const float* __restrict__ sx,
                                              OutT* __restrict__ out, long long ldc, int N, int K, int rows) {
  static_assert(kStages >= 2 && (kBN == 64 || kBN == 128 || kBN == 256), "wgmma schedule");
  static_assert((kMcX == 1 || kMcX == 2) && (kMcY == 1 || kMcY == 2), "multicast cluster");
  constexpr int kCluster = kMcX * kMcY;
  gdn::pdl_launch_dependents();
  constexpr int kStageA = 128 * 128, kStageB = kBN * 128;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
  const uint32_t smem_s = (raw + 1023) & ~1023u;
  // After the stages: full[s] (a stage's copies have landed), then empty[s] (every warpgroup that
  // reads the stage's copies is done with it).
  const uint32_t full = smem_s + kStages * (kStageA + kStageB), empty = full + 8 * kStages;
  const int n0 = blockIdx.y * 128, tok0 = blockIdx.x * kBN, chunks = K >> 7;
  // Cluster coordinates (x fastest in the rank), and the ranks each of this CTA's copies reaches.
  const int cx = kMcX > 1 ? (int)blockIdx.x % kMcX : 0, cy = kMcY > 1 ? (int)blockIdx.y % kMcY : 0;
  const uint16_t row_mask = (uint16_t)(((1u << kMcX) - 1u) << (cy * kMcX));
  uint16_t col_mask = 0;
#pragma unroll
  for (int y = 0; y < kMcY; ++y) col_mask |= (uint16_t)(1u << (cx + y * kMcX));
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      gdn::mbar_init(full + 8 * s, 1);
      gdn::mbar_init(empty + 8 * s, 2 * kCluster);
    }
    gdn::mbar_init_fence();
  }
  if constexpr (kCluster > 1) {
    gdn::cluster_sync();  // every CTA's barriers exist before any copy or arrival reaches them
  } else {
    __syncthreads();
  }
  auto weight = [&](uint32_t st, uint32_t bar, int c) {
    if constexpr (kMcX == 1) {
      tma_weight_chunk<kPacked>(st, wmap, bar, n0, c);
    } else if (c % kMcX == cx) {
      if constexpr (kPacked) {
        gdn::tma_load_5d_mc(st, wmap, bar, 0, 0, 0, n0 >> 4, 2 * c, row_mask);
      } else {
        gdn::tma_load_2d_mc(st, wmap, bar, c * 128, n0, row_mask);
      }
    }
  };
  auto tokens = [&](uint32_t st, uint32_t bar, int c) {
    if constexpr (kMcY == 1) {
      gdn::tma_load_2d(st, xmap, bar, c * 128, tok0);
    } else if (c % kMcY == cy) {
      gdn::tma_load_2d_mc(st, xmap, bar, c * 128, tok0, col_mask);
    }
  };
  if (threadIdx.x >= 256) {
    // One lane copies: the first stages' weight before the quantizer wait, their tokens after it,
    // then each chunk into the stage the chunk kStages before it has left.
    if (threadIdx.x == 256) {
      const int first = min(kStages, chunks);
      for (int c = 0; c < first; ++c) {
        gdn::mbar_arrive_expect_tx(full + 8 * c, kStageA + kStageB);
        weight(smem_s + c * (kStageA + kStageB), full + 8 * c, c);
      }
      gdn::pdl_wait();
      for (int c = 0; c < first; ++c) tokens(smem_s + c * (kStageA + kStageB) + kStageA, full + 8 * c, c);
      for (int c = kStages; c < chunks; ++c) {
        const int s = c % kStages;
        const uint32_t st = smem_s + s * (kStageA + kStageB);
        gdn::mbar_wait(empty + 8 * s, (c / kStages - 1) & 1);
        gdn::mbar_arrive_expect_tx(full + 8 * s, kStageA + kStageB);
        weight(st, full + 8 * s, c);
        tokens(st + kStageA, full + 8 * s, c);
      }
    }
    return;
  }
  gdn::pdl_wait();  // the epilogue reads the quantizer's scales
  const int wg = threadIdx.x >> 7;
  int d[kBN / 2];
  wgmma_zero(d);
  for (int i = 0; i < chunks; ++i) {
    gdn::mbar_wait(full + 8 * (i % kStages), (i / kStages) & 1);
    wgmma_chunk<kBN, kPacked != 0>(d, smem_s + (i % kStages) * (kStageA + kStageB), wg);
    wgmma_wait<1>();
    // This warpgroup's MMAs of chunk i - 1 are done: its stage may be refilled. Their reads of the
    // stage are complete at the wait, so the arrival needs no release fence (at cluster scope
    // ptxas makes one a MEMBAR.ALL.GPU, and the waiting producer's acquire an L1 invalidation).
    if constexpr (kCluster == 1) {
      if (i > 0 && (threadIdx.x & 127) == 0) gdn::mbar_arrive(empty + 8 * ((i - 1) % kStages));
    } else if (i > 0 && i - 1 + kStages < chunks && (threadIdx.x & 127) < kCluster) {
      gdn::mbar_arrive_cluster(empty + 8 * ((i - 1) % kStages), threadIdx.x & 127);
    }
  }
  wgmma_wait<0>();
  wgmma_epilogue<kBN, 1>(d, sw, sx, out, ldc, N, rows, n0, wg, tok0, 0);
}

template <int kStages, int kBN, int kPacked, typename OutT, typename SwT>
__global__ void __launch_bounds__(288, 1)
w8a8_wgmma_ws_kernel(const __grid_constant__ gdn::TensorMap wmap, const __grid_constant__ gdn::TensorMap xmap,
                     const uint8_t* __restrict__ w, const SwT* __restrict__ sw,
                     const uint8_t* __restrict__ xq, const float* __restrict__ sx,
                     OutT* __restrict__ out, long long ldc, int N, int K, int rows) {
  wgmma_ws_gemm<kStages, kBN, kPacked, 1, 1>(&wmap, &xmap, sw, sx, out, ldc, N, K, rows);
}

// The producer-warp kernel in clusters of kMcX x kMcY CTAs sharing their operands' copies (above).
template <int kStages, int kBN, int kPacked, int kMcX, int kMcY, typename OutT, typename SwT>
__global__ void __launch_bounds__(288, 1) __cluster_dims__(kMcX, kMcY, 1)
w8a8_wgmma_mc_kernel(const __grid_constant__ gdn::TensorMap wmap, const __grid_constant__ gdn::TensorMap xmap,
                     const uint8_t* __restrict__ w, const SwT* __restrict__ sw,
                     const uint8_t* __restrict__ xq, const float* __restrict__ sx,
                     OutT* __restrict__ out, long long ldc, int N, int K, int rows) {
  wgmma_ws_gemm<kStages, kBN, kPacked, kMcX, kMcY>(&wmap, &xmap, sw, sx, out, ldc, N, K, rows);
}

// ---- Many rows, fp8: warpgroup MMAs in f16 that keep the decode kernels' bits ----
//
// On sm_90 ptxas lowers the decode kernels' e4m3 mma.sync (m16n8k32) to two f16 MMAs (m16n8k16)
// on the operands converted exactly to f16: the first from zero, the second accumulating onto
// it, then one fp32 add of the result onto the accumulator given. The first MMA takes bytes
// 0, 1 of each 4-byte register (k 4t, 4t + 1 and 16 + 4t, 16 + 4t + 1), the second bytes 2, 3.
// The f16 warpgroup MMA (m64nNk16) does the same arithmetic as the f16 mma.sync bit for bit
// (bench/probe_fp8_wgmma.py: 12.6 million outputs, none differ; the e4m3 warpgroup MMA keeps
// fewer bits and differs almost everywhere), so this kernel runs each decode MMA as two of them
// plus the add, the chunks in the decode kernel's warp order with its promotions and
// reduction (as w8a8_tiled_kernel): a row's output bits are the decode kernel's.
//
// A CTA of kWG warpgroups (1 or 2) owns 64 kWG weight rows (64 each) and 64 tokens. Both operands
// come by tensor copies, kStages stages of one 128-byte chunk of K (the maps of
// w8a8_wgmma_tma_kernel, whose weight box is 64 kWG rows here).
// Each warp then reads its weight rows' fragments from shared memory into registers as the
// decode kernel loads them from global memory, and converts them to f16 there (the MMA's A
// operand from registers); the 64 tokens' chunk is converted by all threads into an f16 tile in
// the order the MMAs need (below), read by descriptor. Per chunk: 8 MMAs a warpgroup, each pair
// into one of two register buffers so that one pair runs while the other's result is added.
namespace {

// D (+)= A B: A [64, 16] f16 from registers (warp w of the warpgroup: rows 16w.., the fragment of
// m16n8k16), B [16, 64] f16 from shared memory (descriptor b), fp32; accumulate 0: D = A B.
__device__ __forceinline__ void wgmma_f16_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}

// Two e4m3 values (bytes 2 hi and 2 hi + 1 of v) as f16x2, exactly.
__device__ __forceinline__ uint32_t e4m3x2_f16x2(uint32_t v, int hi) {
  uint32_t r;
  const unsigned short s = (unsigned short)(hi ? v >> 16 : v);
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(s));
  return r;
}

}  // namespace

// The 8-bit A fragment of decode MMA s of a chunk (mma.m16n8k32's layout, which the warpgroup
// MMAs' register A operand shares): bytes 8 (s % 2).. of the 16 this thread holds at 16 t of half
// s / 2 of its rows g (ra) and g + 8 (rb).
__device__ __forceinline__ void decode_fragment(uint32_t (&a8)[4], const uint4 (&ra)[2], const uint4 (&rb)[2], int s) {
  const int h = s >> 1;
  a8[0] = (s & 1) ? ra[h].z : ra[h].x;
  a8[1] = (s & 1) ? rb[h].z : rb[h].x;
  a8[2] = (s & 1) ? ra[h].w : ra[h].y;
  a8[3] = (s & 1) ? rb[h].w : rb[h].y;
}

// Epilogue of the fp8 warpgroup kernels (w8a8_gemm_kernel's): this thread's sums of kGroups token
// groups, element 4 j + r weight row n0 + row + 8 (r / 2), token tok0 + 8 j + 2 t + r % 2, scaled (per
// channel) and stored; in a cluster of kCluster CTAs, only the groups j % kCluster == rank.
// Per-channel scales loaded first (clamped), as in the tiled kernel's epilogue.
template <int kFmt, int kGroups, int kCluster, typename OutT, typename SwT>
__device__ __forceinline__ void fp8_wgmma_epilogue(const float (&sum)[4 * kGroups], const SwT* __restrict__ sw,
                                                   const float* __restrict__ sx, OutT* __restrict__ out,
                                                   long long ldc, int N, int rows, int n0, int row, int tok0,
                                                   int t, int rank) {
  float s_w[2] = {}, s_x[kGroups][2] = {};
  if constexpr (kFmt == kFp8Channel) {
#pragma unroll
    for (int h = 0; h < 2; ++h) s_w[h] = to_float(sw[min(n0 + row + h * 8, N - 1)]);
#pragma unroll
    for (int j = 0; j < kGroups; ++j)
#pragma unroll
      for (int q = 0; q < 2; ++q)
        if (kCluster == 1 || j % kCluster == rank) s_x[j][q] = gdn::ld_dep(sx + min(tok0 + 8 * j + 2 * t + q, rows - 1));
  }
#pragma unroll
  for (int j = 0; j < kGroups; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      if (kCluster > 1 && j % kCluster != rank) continue;
      const int n = n0 + row + (r >> 1) * 8;
      const int tok = tok0 + 8 * j + 2 * t + (r & 1);
      if (n >= N || tok >= rows) continue;
      float y = sum[4 * j + r];
      if constexpr (kFmt == kFp8Channel) y = gdn::mul_rn(gdn::mul_rn(y, s_x[j][r & 1]), s_w[r >> 1]);
      out[(long long)tok * ldc + n] = gdn::from_float<OutT>(y);
    }
}

// kFmt: kFp8Channel or kFp8Block.  kStages: shared-memory stages (chunks in flight: kStages - 1).
// kPacked: the weight's layout (as w8a8_wgmma_tma_kernel's maps).  kWG: warpgroups a CTA; with one,
// two CTAs share a multiprocessor, so that one's MMAs run while the other converts and adds.
// kOverlap, two bits: bit 0 converts the next chunk's tokens while this chunk's first MMAs run
// (else before this chunk's MMAs); the stage of chunk i is then waited one iteration earlier, so
// kStages - 2 chunks are requested ahead of the one being converted. Bit 1 defers each chunk's
// last decode MMA sum and its promotion until the next chunk's first MMAs are issued, so that the
// chunk boundary (token conversion, block barrier, refill) runs under an MMA; three f16 token
// tiles then rotate, since a warpgroup may still be reading chunk i - 1's while the other
// converts chunk i + 1's. The same adds in the same order either way.  kCluster: CTAs a tile
// (1, 2 or 4; a cluster along z, blockIdx.z its rank), each taking 8 / kCluster of the decode
// order's 8 warps of chunks; the later CTAs keep each warp's sums apart (in shared memory slots,
// the last in registers) for the exchange after the loop. Other arguments as there.
//
// Block scales (kFp8Block): threads 0-63 load chunk i + 1's token scales, times the weight block's,
// while chunk i is multiplied and leave them in slot (i + 1) % 3 of 64 floats for its promotion.
//
// The f16 token tile (two, alternating by chunk, or three in turn with bit 1 of kOverlap): chunk
// position 16 q + p, for f16 MMA q = 4 h + 2 u + l (the decode MMA of bytes 8u.. of each thread's
// 16 in half h of the chunk, its l-th f16 MMA) and p = 8 e + 2 t + i, holds chunk byte 64 h + 16 t
// + 8 u + 4 e + 2 l + i: the byte the decode kernel's MMA has at that place. Stored as the MMA
// reads a K-major f16 operand with the 128-byte swizzle: two panels of 64 tokens x 64 f16 (128
// bytes), MMA q at 32 (q % 4) bytes of panel q / 4.
template <int kFmt, int kStages, int kPacked, int kWG, int kOverlap, int kCluster, typename OutT, typename SwT>
__device__ __forceinline__ void wgmma_fp8_gemm(const gdn::TensorMap& wmap, const gdn::TensorMap& xmap,
                                               const SwT* __restrict__ sw, const float* __restrict__ sx,
                                               OutT* __restrict__ out, long long ldc, int N, int K, int rows) {
  static_assert(kFmt != kInt8 && kStages >= 3 && (kWG == 1 || kWG == 2), "fp8 warpgroup schedule");
  gdn::pdl_launch_dependents();
  constexpr int kBM = 64 * kWG, kBN = 64;                   // weight rows, tokens a CTA
  constexpr int kStageA = kBM * 128, kStageB = kBN * 128, kStage = kStageA + kStageB;
  constexpr int kPanel = kBN * 128;                         // 64 tokens x 64 f16
  constexpr int kSplit = 8;                                 // w8a8_gemm_kernel's K split
  static_assert(kCluster == 1 || kCluster == 2 || kCluster == 4, "fp8 K split: whole decode warps a CTA");
  constexpr int kThreads = 128 * kWG;
  // With a cluster, the sums of this CTA's decode warps but its last, kept for the exchange.
  constexpr int kSlots = kCluster > 1 ? kSplit / kCluster - 1 : 0;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
  uint8_t* const smem = smem_raw + (((raw + 1023) & ~1023u) - raw);
  const uint32_t smem_s = (uint32_t)__cvta_generic_to_shared(smem);
  constexpr bool kDefer = (kOverlap & 2) != 0;
  constexpr int kTokTiles = kDefer ? 3 : 2;
  // Block scales staged in shared memory (below), but in the undeferred split kernel, whose
  // threads load their own 16 each chunk: staged, that kernel ran 4-12% slower on [5120, 17408]
  // (H100, 64 and 128 rows; not explained).
  constexpr bool kStaged = kFmt == kFp8Block && (kCluster == 1 || kDefer);
  // [kStages][weight | e4m3 tokens], the f16 token tiles, a barrier a stage, three slots of 64
  // block scales, the cluster's slots.
  uint8_t* const tiles = smem + kStages * kStage;
  const uint32_t tiles_s = smem_s + kStages * kStage;
  const uint32_t bars = tiles_s + kTokTiles * 2 * kPanel;
  float* const xsc = reinterpret_cast<float*>(tiles + kTokTiles * 2 * kPanel + ((8 * kStages + 15) & ~15));
  float4* const slots = reinterpret_cast<float4*>(xsc + 3 * kBN);
  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int n0 = blockIdx.y * kBM, tok0 = blockIdx.x * kBN;
  const int chunks = K >> 7;

  const int per = chunks / kSplit, extra = chunks % kSplit;  // chunks of w: per + (w < extra)
  // This CTA's decode warps v0 .. v1 - 1 (all 8 without a cluster): the chunks i0 .. i0 + mine - 1
  // of the decode order. Loop positions below count from i0.
  const int rank = kCluster > 1 ? (int)blockIdx.z : 0;
  const int v0 = kSplit * rank / kCluster, v1 = kSplit * (rank + 1) / kCluster;
  const int i0 = kCluster > 1 ? v0 * per + min(v0, extra) : 0;
  const int mine = kCluster > 1 ? v1 * per + min(v1, extra) - i0 : chunks;
  auto chunk_at = [&](int i) { return decode_order_chunk(i0 + i, chunks); };
  auto tma_a = [&](int s, int c) { tma_weight_chunk<kPacked>(smem_s + s * kStage, &wmap, bars + 8 * s, n0, c); };
  auto tma_b = [&](int s, int c) {
    gdn::tma_load_2d(smem_s + s * kStage + kStageA, &xmap, bars + 8 * s, c * 128, tok0);
  };

  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) gdn::mbar_init(bars + 8 * s, 1);
    gdn::mbar_init_fence();
  }
  __syncthreads();
  // The first kStages - 1 chunks: the weight before the wait on the quantizer, the tokens after.
  if (tid == 0) {
    for (int s = 0; s < kStages - 1 && s < mine; ++s) {
      gdn::mbar_expect_tx(bars + 8 * s, kStageA);
      tma_a(s, chunk_at(s));
    }
  }
  gdn::pdl_wait();
  if (tid == 0) {
    for (int s = 0; s < kStages - 1 && s < mine; ++s) {
      gdn::mbar_arrive_expect_tx(bars + 8 * s, kStageB);
      tma_b(s, chunk_at(s));
    }
  }

  // This thread's weight rows (of the CTA's kBM).
  const int row = 64 * wg + 16 * warp + g;
  auto tile_of = [](int j) { return kDefer ? j % 3 : j & 1; };
  // Block fp8's scales of chunk c as the decode kernel forms them: the weight block's, and token
  // tok's times it (tokens past the rows clamped).
  auto weight_scale = [&](int c) { return to_float(sw[(long long)(n0 >> 7) * chunks + c]); };
  auto token_scale = [&](int c, int tok, float s_w) {
    return gdn::mul_rn(gdn::ld_dep(sx + (long long)min(tok, rows - 1) * chunks + c), s_w);
  };
  // Chunk c's scale of token tok0 + tid (threads 0-63), for the shared-memory slots.
  auto block_scale = [&](int c) { return token_scale(c, tok0 + tid, weight_scale(c)); };
  if (kStaged && tid < kBN && mine > 0) xsc[tid] = block_scale(chunk_at(0));
  // The 16 bytes at 16 t of half h of weight row r of a stage (the decode kernel's load).
  auto lds_w = [&](const uint8_t* a, int r, int h) {
    if constexpr (kPacked) {  // two blocks of kBM rows of 64 bytes, 64-byte swizzle
      return *reinterpret_cast<const uint4*>(a + h * (kStageA / 2) + r * 64 + ((t ^ ((r >> 1) & 3)) << 4));
    } else {
      return *reinterpret_cast<const uint4*>(a + swz128(r, 4 * h + t));
    }
  };

  // Chunk j's tokens: wait for its stage, then convert them to f16 into token tile tile_of(j). Item
  // (token r, half h, bytes 8u.. of each 16) reads 8 bytes of each of the half's four 16-byte
  // units and writes the four 16-byte units they fill.
  auto convert_tokens = [&](int j) {
    const int st = j % kStages;
    const uint8_t* b = smem + st * kStage + kStageA;
    uint8_t* bh = tiles + tile_of(j) * 2 * kPanel;
    gdn::mbar_wait(bars + 8 * st, (j / kStages) & 1);
#pragma unroll
    for (int it = 0; it < 4 * kBN / kThreads; ++it) {
      const int item = tid + it * kThreads;
      const int r = item >> 2, h = (item >> 1) & 1, u = item & 1;
      uint2 x[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) x[q] = *reinterpret_cast<const uint2*>(b + swz128(r, 4 * h + q) + 8 * u);
#pragma unroll
      for (int e = 0; e < 2; ++e)
#pragma unroll
        for (int l = 0; l < 2; ++l) {
          uint4 o;
          o.x = e4m3x2_f16x2(e ? x[0].y : x[0].x, l);
          o.y = e4m3x2_f16x2(e ? x[1].y : x[1].x, l);
          o.z = e4m3x2_f16x2(e ? x[2].y : x[2].x, l);
          o.w = e4m3x2_f16x2(e ? x[3].y : x[3].x, l);
          *reinterpret_cast<uint4*>(bh + h * kPanel + swz128(r, 2 * (2 * u + l) + e)) = o;
        }
    }
  };
  // kOverlap bit 0: chunk 0's tokens now, chunk i + 1's while chunk i's first MMAs run.
  if constexpr ((kOverlap & 1) != 0) {
    if (mine > 0) convert_tokens(0);
  }

  float acc[32], sum[32];
#pragma unroll
  for (int e = 0; e < 32; ++e) acc[e] = sum[e] = 0.f;
  int v = v0, left = per + (v0 < extra);  // the decode warp whose chunks are being summed
  // Decode warp v's finished sums into the total, as w8a8_gemm_kernel's reduction adds them; in a
  // cluster's later CTAs, into slot v - v0 for the exchange (the total starts in the first CTA).
  auto fold_warp = [&]() {
    if (kCluster > 1 && rank > 0) {
#pragma unroll
      for (int j = 0; j < 8; ++j)
        slots[((v - v0) * 8 + j) * kThreads + tid] =
            make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]);
#pragma unroll
      for (int e = 0; e < 32; ++e) acc[e] = 0.f;
      return;
    }
#pragma unroll
    for (int e = 0; e < 32; ++e) {
      sum[e] = v == 0 ? acc[e] : gdn::add_rn(sum[e], acc[e]);
      acc[e] = 0.f;
    }
  };
  // A chunk's partial: its first decode MMA's sum, written by that MMA (the decode kernel adds it to
  // a zeroed partial: the same value, +0 for -0, and a -0 partial reaches no output, since acc
  // starts at +0 and a round-to-nearest sum is -0 only where both terms are), plus the later three
  // sums in order. Two register sets take turns as the partial (px for even chunk positions, pz
  // for odd ones); the other holds the third MMA's sum, dy the second's and fourth's.
  float px[32], pz[32], dy[32];
  float scale[8][2];  // this thread's block scales of the chunk (unstaged form)
  // The chunk at position p done: its partial (the last decode MMA's sum still in dy added here)
  // promoted as the decode kernel does (element 4 j + r: token 8 j + 2 t + r % 2), after the
  // finished decode warps are folded into the total.
  auto finish = [&](int p, float (&part)[32]) {
#pragma unroll
    for (int e = 0; e < 32; ++e) part[e] = gdn::add_rn(part[e], dy[e]);
    while (left == 0) {  // empty decode warps (chunks < 8) add +0, as there
      fold_warp();
      ++v;
      left = per + (v < extra);
    }
    --left;
    const float* xs = xsc + (p % 3) * kBN;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float2 sc = make_float2(0.f, 0.f);
      if constexpr (kStaged) {
        sc = *reinterpret_cast<const float2*>(xs + 8 * j + 2 * t);
      } else if constexpr (kFmt == kFp8Block) {
        sc = make_float2(scale[j][0], scale[j][1]);
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int e = 4 * j + r;
        if constexpr (kFmt == kFp8Block) {
          acc[e] = gdn::fma_rn(part[e], (r & 1) ? sc.y : sc.x, acc[e]);
        } else {
          acc[e] = gdn::add_rn(acc[e], part[e]);
        }
      }
    }
  };
  // The f16 token tiles' descriptors: tile 0's, plus the offset of (tile, MMA q) in 16-byte units.
  const uint64_t desc0 = wgmma_desc(tiles_s);
  // The chunks whose staged block scales (chunk i + 1's) and whose refill (chunk i + kStages - 1)
  // iteration i asks for.
  DecodeWalk at_scale(i0 + 1, chunks), at_refill(i0 + kStages - 1, chunks);
  // Chunk position i, its partial in `part`; `other` is the chunk before's (kDefer: promoted here).
  auto chunk = [&](int i, float (&part)[32], float (&other)[32]) {
    const uint8_t* a = smem + (i % kStages) * kStage;
    if constexpr ((kOverlap & 1) == 0) convert_tokens(i);
    uint4 ra[2], rb[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      ra[h] = lds_w(a, row, h);
      rb[h] = lds_w(a, row + 8, h);
    }
    float xs_next = 0.f;
    if (kStaged && tid < kBN && i + 1 < mine) xs_next = block_scale(at_scale.chunk());
    if constexpr (kFmt == kFp8Block && !kStaged) {
      const int c = chunk_at(i);  // searched: walked, this kernel ran 4-6% slower at 64 rows (H100)
      const float s_w = weight_scale(c);
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int q = 0; q < 2; ++q) scale[j][q] = token_scale(c, tok0 + 8 * j + 2 * t + q, s_w);
    }
    at_scale.next();
    fence_proxy_async();  // the f16 tokens, written by the threads, read by the MMAs
    __syncthreads();
    // Every thread is past chunk i - 1's stage: refill it with chunk i + kStages - 1.
    if (tid == 0 && i + kStages - 1 < mine) {
      const int s = (i + kStages - 1) % kStages;
      gdn::mbar_arrive_expect_tx(bars + 8 * s, kStage);
      tma_a(s, at_refill.chunk());
      tma_b(s, at_refill.chunk());
    }
    at_refill.next();

    // Chunk i - 1's last decode MMA ran under the boundary above. Waited for here, not after
    // chunk i's first MMAs: an MMA in flight across the loop's back edge makes ptxas serialize them.
    if constexpr (kDefer) wgmma_wait<0>();
    const uint64_t desc_i = desc0 + (uint32_t)(tile_of(i) * 2 * kPanel >> 4);
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      // Decode MMA s: bytes 8 (s % 2).. of this thread's 16 in half s / 2; its sum into the
      // partial (s = 0), dy (s = 1, 3) or other (s = 2; free once the chunk before is promoted).
      uint32_t a8[4];
      decode_fragment(a8, ra, rb, s);
      float(&d)[32] = s == 0 ? part : (s & 1) ? dy : other;
      wgmma_fence();
#pragma unroll
      for (int l = 0; l < 2; ++l) {
        const uint32_t a16[4] = {e4m3x2_f16x2(a8[0], l), e4m3x2_f16x2(a8[1], l), e4m3x2_f16x2(a8[2], l),
                                 e4m3x2_f16x2(a8[3], l)};
        const int q = 2 * s + l;
        wgmma_f16_rs(d, a16, desc_i + (((q >> 2) * kPanel + 32 * (q & 3)) >> 4), l);
      }
      wgmma_commit();
      if constexpr ((kOverlap & 1) != 0) {
        if (s == 1 && i + 1 < mine) convert_tokens(i + 1);
      }
      if (s == 0) {
        // Chunk i - 1's last sum and promotion, under chunk i's first MMAs.
        if (kDefer && i > 0) finish(i - 1, other);
      } else if (s > 1) {
        wgmma_wait<1>();  // MMA s - 1 done (MMA 0's sum is the partial itself)
        float(&prev)[32] = s == 2 ? dy : other;
#pragma unroll
        for (int e = 0; e < 32; ++e) part[e] = gdn::add_rn(part[e], prev[e]);
      }
    }
    if constexpr (!kDefer) {
      wgmma_wait<0>();
      finish(i, part);
    }
    // Chunk i + 1's block scales: slot (i + 1) % 3 was last read for chunk i - 2, before this
    // chunk's barrier.
    if (kStaged && tid < kBN && i + 1 < mine) xsc[((i + 1) % 3) * kBN + tid] = xs_next;
  };
  for (int i = 0; i < mine; i += 2) {
    chunk(i, px, pz);
    if (i + 1 < mine) chunk(i + 1, pz, px);
  }
  if constexpr (kDefer) {
    wgmma_wait<0>();
    if (mine > 0 && (mine & 1)) finish(mine - 1, px);
    if (mine > 0 && !(mine & 1)) finish(mine - 1, pz);
  }
  if (kCluster == 1 || rank == 0) {
    for (; v < v1; ++v) fold_warp();
  } else {
    for (; v < v1 - 1; ++v) fold_warp();  // acc: the last decode warp's sums
  }

  if constexpr (kCluster > 1) {
    // The exchange: each CTA publishes its running total (the first) or its last decode warp's
    // sums in the drained stages; CTA `rank` then adds, for the token groups j with j % kCluster ==
    // rank, the first CTA's total and every later CTA's slots and last sums in decode-warp order,
    // so the total is the one the decode kernel's reduction forms. The last barrier keeps each
    // CTA's shared memory until all have read it.
    __syncthreads();  // both warpgroups are past their last stage
    float4* fin = reinterpret_cast<float4*>(smem);
#pragma unroll
    for (int j = 0; j < 8; ++j)
      fin[j * kThreads + tid] = rank == 0 ? make_float4(sum[4 * j], sum[4 * j + 1], sum[4 * j + 2], sum[4 * j + 3])
                                          : make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]);
    gdn::cluster_sync();
    const uint32_t slots_s = (uint32_t)__cvta_generic_to_shared(slots);
    auto add4 = [](float4 a, int4 b) {
      return make_float4(gdn::add_rn(a.x, __int_as_float(b.x)), gdn::add_rn(a.y, __int_as_float(b.y)),
                         gdn::add_rn(a.z, __int_as_float(b.z)), gdn::add_rn(a.w, __int_as_float(b.w)));
    };
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (j % kCluster != rank) continue;
      const uint32_t at = (uint32_t)(j * kThreads + tid) * 16u;
      const int4 first = gdn::ld_cluster_v4(smem_s + at, 0);
      float4 tot = make_float4(__int_as_float(first.x), __int_as_float(first.y), __int_as_float(first.z),
                               __int_as_float(first.w));
#pragma unroll
      for (int r = 1; r < kCluster; ++r) {
#pragma unroll
        for (int q = 0; q < kSlots; ++q)
          tot = add4(tot, gdn::ld_cluster_v4(slots_s + (uint32_t)(q * 8 * kThreads) * 16u + at, r));
        tot = add4(tot, gdn::ld_cluster_v4(smem_s + at, r));
      }
      sum[4 * j] = tot.x;
      sum[4 * j + 1] = tot.y;
      sum[4 * j + 2] = tot.z;
      sum[4 * j + 3] = tot.w;
    }
    gdn::cluster_sync();
  }

  fp8_wgmma_epilogue<kFmt, 8, kCluster>(sum, sw, sx, out, ldc, N, rows, n0, row, tok0, t, rank);
}

template <int kFmt, int kStages, int kPacked, int kWG, int kOverlap, typename OutT, typename SwT>
__global__ void __launch_bounds__(128 * kWG, 3 - kWG)
w8a8_wgmma_fp8_kernel(const __grid_constant__ gdn::TensorMap wmap, const __grid_constant__ gdn::TensorMap xmap,
                      const uint8_t* __restrict__ w, const SwT* __restrict__ sw,
                      const uint8_t* __restrict__ xq, const float* __restrict__ sx,
                      OutT* __restrict__ out, long long ldc, int N, int K, int rows) {
  wgmma_fp8_gemm<kFmt, kStages, kPacked, kWG, kOverlap, 1>(wmap, xmap, sw, sx, out, ldc, N, K, rows);
}

// w8a8_wgmma_fp8_kernel with the decode order's 8 warps of chunks split over a cluster of kCluster
// CTAs a tile (grid z), for tiles too few to fill the GPU: the same bits (the exchange above).
template <int kFmt, int kStages, int kPacked, int kWG, int kOverlap, int kCluster, typename OutT, typename SwT>
__global__ void __launch_bounds__(128 * kWG, 3 - kWG) __cluster_dims__(1, 1, kCluster)
w8a8_wgmma_fp8_split_kernel(const __grid_constant__ gdn::TensorMap wmap, const __grid_constant__ gdn::TensorMap xmap,
                            const uint8_t* __restrict__ w, const SwT* __restrict__ sw,
                            const uint8_t* __restrict__ xq, const float* __restrict__ sx,
                            OutT* __restrict__ out, long long ldc, int N, int K, int rows) {
  wgmma_fp8_gemm<kFmt, kStages, kPacked, kWG, kOverlap, kCluster>(wmap, xmap, sw, sx, out, ldc, N, K, rows);
}

// The fp8 formats on e4m3 warpgroup MMAs (QGMMA): a prototype for the sweep, whose bits are NOT
// the fp8 formats' (bench/NOTES.md W8A8 v28). The e4m3 MMA keeps about 13 bits of each k32 step's
// sum (bench/probe_fp8_wgmma.py), against the exact f16 products of the decode kernels, so a
// chunk's partial differs from theirs; every other step is theirs: the chunk's four k32 MMAs take
// the bytes the decode kernel's four mma.sync take (thread (g, t) holds the 16 bytes at 16 t of
// each 64-byte half, bytes 0-7 feeding one MMA and 8-15 the next), each partial is promoted
// every 128 values, and the chunks run in the decode kernel's warp order with its folds. The
// probe found those MMAs' bits the same at 8 and 64 tokens and with A from shared memory or
// registers, so decode kernels on the same MMAs could share them bit for bit (not written yet).
//
// The tokens must be stored in MMA order (xq: in each 64-byte half h of a chunk, 4-byte word
// 16 h + 4 t + 2 u + e of the row-major bytes at word 16 h + 8 u + 4 e + t), so that the MMA's
// K-major tile of k32 step 2 h + u holds at position p the token byte the weight fragment holds
// there. A CTA: 128 weight rows (two consumer warpgroups of 64) x kBN tokens, a producer warp
// issuing every tensor copy (the maps of w8a8_wgmma_ws_kernel), the chunks in the decode order.
// Each consumer warp reads its weight rows' fragments from the stage into registers (the MMA's A
// operand), issues the chunk's four MMAs into a zeroed partial, waits for them, releases the
// stage and promotes the partial while the other warpgroup's MMAs run.
namespace {
template <int kN>
struct Qgmma;
template <>
struct Qgmma<8> {
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
  }
};
template <>
struct Qgmma<16> {
  static __device__ __forceinline__ void mma(float (&d)[8], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
  }
};
template <>
struct Qgmma<32> {
  static __device__ __forceinline__ void mma(float (&d)[16], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
  }
};
template <>
struct Qgmma<64> {
  static __device__ __forceinline__ void mma(float (&d)[32], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
  }
};
template <>
struct Qgmma<128> {
  static __device__ __forceinline__ void mma(float (&d)[64], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
  }
};
}  // namespace

// kFmt: kFp8Channel or kFp8Block.  kStages: shared-memory stages.  kBN: tokens a CTA (8-128).
// kPacked: the weight's layout (as w8a8_wgmma_ws_kernel's maps).  kCluster: CTAs a tile (1, 2, 4
// or 8; a cluster along z, blockIdx.z its rank), each taking 8 / kCluster of the decode order's 8
// warps of chunks (as w8a8_wgmma_fp8_split_kernel: the later CTAs keep each warp's sums apart for
// the exchange after the loop, so that the total is summed in the decode kernel's order). From 64
// tokens a producer warpgroup (one thread issues the copies) gives its registers to the two
// consumer warpgroups (setmaxnreg); below, a producer warp and two CTAs a multiprocessor.
// kDefer 1: each chunk's promotion deferred until the next chunk's MMAs are issued, so that they
// run under it: the finished partial is copied out of the MMA's registers first (ptxas waits for
// every MMA in flight before an instruction reads registers an MMA wrote, C7517, however long ago),
// and the running total waits in shared memory between decode warps (kBN / 2 floats a consumer
// thread) to free the registers. The same adds in the same order.
template <int kBN>
constexpr int qgmma_threads() { return kBN >= 64 ? 384 : 288; }

template <int kFmt, int kStages, int kBN, int kPacked, int kCluster, int kDefer, typename OutT, typename SwT>
__device__ __forceinline__ void qgmma_fp8_gemm(const gdn::TensorMap& wmap, const gdn::TensorMap& xmap,
                                               const SwT* __restrict__ sw, const float* __restrict__ sx,
                                               OutT* __restrict__ out, long long ldc, int N, int K, int rows) {
  static_assert(kFmt != kInt8 && kStages >= 2 && kBN >= 8 && kBN <= 128 && (kBN & (kBN - 1)) == 0,
                "e4m3 warpgroup schedule");
  static_assert(kCluster == 1 || kCluster == 2 || kCluster == 4 || kCluster == 8, "whole decode warps a CTA");
  gdn::pdl_launch_dependents();
  constexpr int kStageA = 128 * 128, kStageB = kBN * 128, kStage = kStageA + kStageB;
  constexpr int kAcc = kBN / 2;  // accumulators a thread
  constexpr int kSplit = 8;      // the decode kernel's K split
  constexpr int kSlots = kCluster > 1 ? kSplit / kCluster - 1 : 0;
  constexpr bool kWide = kBN >= 64;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
  const uint32_t smem_s = (raw + 1023) & ~1023u;
  uint8_t* const smem = smem_raw + (smem_s - raw);
  const uint32_t full = smem_s + kStages * kStage, empty = full + 8 * kStages;
  // After the barriers: two slots of kBN block scales a consumer warpgroup, then (in a cluster's
  // later CTAs) the sums of all but the last of the CTA's decode warps, kAcc floats a thread each.
  float* const xsc = reinterpret_cast<float*>(smem + kStages * kStage + 16 * kStages);
  float* const slots = xsc + 4 * kBN;
  const int n0 = blockIdx.y * 128, tok0 = blockIdx.x * kBN, chunks = K >> 7;
  const int per = chunks / kSplit, extra = chunks % kSplit;  // chunks of decode warp w: per + (w < extra)
  const int rank = kCluster > 1 ? (int)blockIdx.z : 0;
  const int v0 = kSplit * rank / kCluster, v1 = kSplit * (rank + 1) / kCluster;
  const int i0 = kCluster > 1 ? v0 * per + min(v0, extra) : 0;  // this CTA's decode-order positions
  const int mine = kCluster > 1 ? v1 * per + min(v1, extra) - i0 : chunks;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      gdn::mbar_init(full + 8 * s, 1);
      gdn::mbar_init(empty + 8 * s, 2);
    }
    gdn::mbar_init_fence();
  }
  __syncthreads();
  if (threadIdx.x >= 256) {
    if constexpr (kWide) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (threadIdx.x == 256) {
      const int first = min(kStages, mine);
      DecodeWalk at(i0, chunks), bt(i0, chunks);
      for (int i = 0; i < first; ++i, at.next()) {
        gdn::mbar_arrive_expect_tx(full + 8 * i, kStage);
        tma_weight_chunk<kPacked>(smem_s + i * kStage, &wmap, full + 8 * i, n0, at.chunk());
      }
      gdn::pdl_wait();
      for (int i = 0; i < first; ++i, bt.next())
        gdn::tma_load_2d(smem_s + i * kStage + kStageA, &xmap, full + 8 * i, bt.chunk() * 128, tok0);
      for (int i = kStages; i < mine; ++i, at.next()) {
        const int s = i % kStages;
        const uint32_t st = smem_s + s * kStage;
        gdn::mbar_wait(empty + 8 * s, (i / kStages - 1) & 1);
        gdn::mbar_arrive_expect_tx(full + 8 * s, kStage);
        tma_weight_chunk<kPacked>(st, &wmap, full + 8 * s, n0, at.chunk());
        gdn::tma_load_2d(st + kStageA, &xmap, full + 8 * s, at.chunk() * 128, tok0);
      }
    }
    if constexpr (kCluster > 1) gdn::cluster_sync();  // the exchange's two cluster barriers
    if constexpr (kCluster > 1) gdn::cluster_sync();
    return;
  }
  if constexpr (kWide) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
  gdn::pdl_wait();  // the scales are the quantizer's
  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int row = 64 * wg + 16 * warp + g;  // this thread's weight rows: row, row + 8 (of the CTA's)
  // The 16 bytes at 16 t of half h of weight row r of a stage (the decode kernel's load).
  auto lds_w = [&](const uint8_t* a, int r, int h) {
    if constexpr (kPacked) {  // two blocks of 128 rows of 64 bytes, 64-byte swizzle
      return *reinterpret_cast<const uint4*>(a + h * (kStageA / 2) + r * 64 + ((t ^ ((r >> 1) & 3)) << 4));
    } else {
      return *reinterpret_cast<const uint4*>(a + swz128(r, 4 * h + t));
    }
  };
  float acc[kAcc], sum[kAcc];
#pragma unroll
  for (int e = 0; e < kAcc; ++e) acc[e] = sum[e] = 0.f;
  // kDefer: the running total of the decode warps folded so far, in shared memory.
  float* const totals = slots + kSlots * kAcc * 256;
  int v = v0, left = per + (v0 < extra);  // the decode warp whose chunks are being summed
  // Decode warp v's finished sums into the total, as the decode kernel's reduction adds them; in a
  // cluster's later CTAs, into slot v - v0 for the exchange (the total starts in the first CTA).
  auto fold_warp = [&]() {
    if (kCluster > 1 && rank > 0) {
#pragma unroll
      for (int e = 0; e < kAcc; ++e) {
        slots[((v - v0) * kAcc + e) * 256 + tid] = acc[e];
        acc[e] = 0.f;
      }
      return;
    }
#pragma unroll
    for (int e = 0; e < kAcc; ++e) {
      if constexpr (kDefer) {
        float* const at_e = totals + e * 256 + tid;
        *at_e = v == 0 ? acc[e] : gdn::add_rn(*at_e, acc[e]);
      } else {
        sum[e] = v == 0 ? acc[e] : gdn::add_rn(sum[e], acc[e]);
      }
      acc[e] = 0.f;
    }
  };
  // The chunk at position i done: its partial promoted (its block scales in slot i % 2 of this
  // warpgroup), after the finished decode warps are folded into the total.
  auto promote = [&](int i, const float (&part)[kAcc]) {
    while (left == 0) {  // empty decode warps (chunks < 8) add +0, as there
      fold_warp();
      ++v;
      left = per + (v < extra);
    }
    --left;
    const float* xs = xsc + (2 * wg + (i & 1)) * kBN;
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      float2 sc = make_float2(0.f, 0.f);
      if constexpr (kFmt == kFp8Block) sc = *reinterpret_cast<const float2*>(xs + 8 * j + 2 * t);
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int e = 4 * j + r;
        if constexpr (kFmt == kFp8Block) {
          acc[e] = gdn::fma_rn(part[e], (r & 1) ? sc.y : sc.x, acc[e]);
        } else {
          acc[e] = gdn::add_rn(acc[e], part[e]);
        }
      }
    }
  };
  DecodeWalk at(i0, chunks);
  // kDefer: chunk i - 1's partial, copied out of `part` before chunk i's MMAs overwrite it.
  float part[kAcc], held[kDefer ? kAcc : 1];
  for (int i = 0; i < mine; ++i, at.next()) {
    const int s = i % kStages, c = at.chunk();
    // Block scales of chunk c: thread x of the warpgroup loads token tok0 + x's (before the MMAs),
    // times the weight block's, into slot i % 2 of its warpgroup after them.
    float my_scale = 0.f;
    if constexpr (kFmt == kFp8Block) {
      if ((tid & 127) < kBN)
        my_scale = gdn::mul_rn(gdn::ld_dep(sx + (long long)min(tok0 + (tid & 127), rows - 1) * chunks + c),
                               to_float(sw[(long long)(n0 >> 7) * chunks + c]));
    }
    gdn::mbar_wait(full + 8 * s, (i / kStages) & 1);
    const uint8_t* a = smem + s * kStage;
    uint4 ra[2], rb[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      ra[h] = lds_w(a, row, h);
      rb[h] = lds_w(a, row + 8, h);
    }
    if constexpr (kDefer) {
#pragma unroll
      for (int e = 0; e < kAcc; ++e) held[e] = part[e];
    }
    wgmma_fence();
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      uint32_t a8[4];
      decode_fragment(a8, ra, rb, q);
      Qgmma<kBN>::mma(part, a8, wgmma_desc(smem_s + s * kStage + kStageA + 32 * q), q);
    }
    wgmma_commit();
    if constexpr (kDefer) {
      if (i > 0) promote(i - 1, held);
    }
    wgmma_wait<0>();
    if ((tid & 127) == 0) gdn::mbar_arrive(empty + 8 * s);
    if constexpr (kFmt == kFp8Block) {
      // Slot i % 2 was last read for chunk i - 2, before the barrier of the chunk before.
      if ((tid & 127) < kBN) xsc[(2 * wg + (i & 1)) * kBN + (tid & 127)] = my_scale;
      asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
    }
    if constexpr (!kDefer) promote(i, part);
  }
  if (kDefer && mine > 0) promote(mine - 1, part);
  if (kCluster == 1 || rank == 0) {
    for (; v < v1; ++v) fold_warp();
    if constexpr (kDefer) {
#pragma unroll
      for (int e = 0; e < kAcc; ++e) sum[e] = totals[e * 256 + tid];
    }
  } else {
    for (; v < v1 - 1; ++v) fold_warp();  // acc: the last decode warp's sums
  }

  if constexpr (kCluster > 1) {
    // The exchange (w8a8_wgmma_fp8_split_kernel's): each CTA publishes its running total (the
    // first) or its last decode warp's sums in the stages, drained now; CTA `rank` then adds, for
    // its token groups j (j % kCluster == rank), the first CTA's total and every later CTA's slots
    // and last sums in decode-warp order. The second barrier keeps each CTA's shared memory until
    // all have read it.
    asm volatile("bar.sync 3, 256;\n" ::: "memory");  // both consumer warpgroups are past their stages
    float* fin = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int e = 0; e < kAcc; ++e) fin[e * 256 + tid] = rank == 0 ? sum[e] : acc[e];
    gdn::cluster_sync();
    const uint32_t slots_s = (uint32_t)__cvta_generic_to_shared(slots);
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      if (j % kCluster != rank) continue;
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int e = 4 * j + r;
        const uint32_t at_e = (uint32_t)(e * 256 + tid) * 4u;
        float tot = __uint_as_float(gdn::ld_cluster(smem_s + at_e, 0));
        for (int cr = 1; cr < kCluster; ++cr) {
#pragma unroll
          for (int q = 0; q < kSlots; ++q)
            tot = gdn::add_rn(tot, __uint_as_float(gdn::ld_cluster(slots_s + (uint32_t)(q * kAcc * 256) * 4u + at_e, cr)));
          tot = gdn::add_rn(tot, __uint_as_float(gdn::ld_cluster(smem_s + at_e, cr)));
        }
        sum[e] = tot;
      }
    }
    gdn::cluster_sync();
  }

  fp8_wgmma_epilogue<kFmt, kBN / 8, kCluster>(sum, sw, sx, out, ldc, N, rows, n0, row, tok0, t, rank);
}

template <int kFmt, int kStages, int kBN, int kPacked, int kDefer, typename OutT, typename SwT>
__global__ void __launch_bounds__(qgmma_threads<kBN>(), kBN >= 64 ? 1 : 2)
w8a8_qgmma_kernel(const __grid_constant__ gdn::TensorMap wmap, const __grid_constant__ gdn::TensorMap xmap,
                  const uint8_t* __restrict__ w, const SwT* __restrict__ sw,
                  const uint8_t* __restrict__ xq, const float* __restrict__ sx,
                  OutT* __restrict__ out, long long ldc, int N, int K, int rows) {
  qgmma_fp8_gemm<kFmt, kStages, kBN, kPacked, 1, kDefer>(wmap, xmap, sw, sx, out, ldc, N, K, rows);
}

// w8a8_qgmma_kernel with the decode order's 8 warps of chunks split over a cluster of kCluster CTAs
// a tile (grid z), for tiles too few to fill the GPU (at 1-32 tokens, all of them).
template <int kFmt, int kStages, int kBN, int kPacked, int kCluster, int kDefer, typename OutT, typename SwT>
__global__ void __launch_bounds__(qgmma_threads<kBN>(), kBN >= 64 ? 1 : 2) __cluster_dims__(1, 1, kCluster)
w8a8_qgmma_split_kernel(const __grid_constant__ gdn::TensorMap wmap, const __grid_constant__ gdn::TensorMap xmap,
                        const uint8_t* __restrict__ w, const SwT* __restrict__ sw,
                        const uint8_t* __restrict__ xq, const float* __restrict__ sx,
                        OutT* __restrict__ out, long long ldc, int N, int K, int rows) {
  qgmma_fp8_gemm<kFmt, kStages, kBN, kPacked, kCluster, kDefer>(wmap, xmap, sw, sx, out, ldc, N, K, rows);
}

// The e4m3 prototype's decode form (sweep only; NOTES W8A8 v28, v29): 1-16 rows on m64n8k32 /
// m64n16k32 e4m3 warpgroup MMAs with the weight loaded from global memory straight into the A
// fragments, 16 bytes a thread a half-chunk as the decode kernel loads it (v20's probe: the same
// bits as the fragments read from shared memory), so that every row count can share the many-row
// prototype's bits. A CTA owns 64 weight rows; each of its warpgroups runs kSeq of the decode
// order's 8 warps of chunks (v, v + 8, ...) in turn, a sum apiece, and a cluster of kCluster CTAs
// along z holds the 8 (kWGs = 8 / (kCluster kSeq) warpgroups a CTA). The 8 warps' sums are added
// in warp order at the end, in registers where one warpgroup holds them all, else through shared
// memory (distributed, in a cluster). Each warpgroup first copies its chunks' tokens into shared
// memory in MMA order (the 4 x 4 word transpose of each 64-byte half that _build.mma_order_words
// describes), so the quantizer's row-major workspace serves as it is.
// kMaxChunks: chunks a decode warp may have (K up to 8 x 128 x kMaxChunks); a longer K traps. The
// token tiles are sized by K at the launch (GemmCfg.decode_smem), so short rows leave room for
// more CTAs an SM. kDepth: chunks of weight a warpgroup has requested ahead of the one its MMAs
// take (1 or 2); kMinBlocks: CTAs an SM the registers are held to (1: none named, ptxas's own
// choice; naming 1 lets it take 124-128 registers against 74-80).
template <int kFmt, int kBN, int kPacked, int kCluster, int kSeq, int kDepth, int kMinBlocks, typename OutT, typename SwT>
__global__ void __launch_bounds__(128 * 8 / (kCluster * kSeq), kMinBlocks > 1 ? kMinBlocks : 0)
__cluster_dims__(1, 1, kCluster)
w8a8_qgmma_decode_kernel(const uint8_t* __restrict__ w, const SwT* __restrict__ sw,
                         const uint8_t* __restrict__ xq, const float* __restrict__ sx,
                         OutT* __restrict__ out, long long ldc, int N, int K, int rows) {
  constexpr int kWGs = 8 / (kCluster * kSeq), kAcc = kBN / 2, kMaxChunks = 24;
  static_assert(kFmt != kInt8 && (kBN == 8 || kBN == 16) && kWGs * kCluster * kSeq == 8 && kWGs <= 4 &&
                    (kDepth == 1 || kDepth == 2), "e4m3 decode schedule");
  gdn::pdl_launch_dependents();
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
  const uint32_t smem_s = (raw + 1023) & ~1023u;
  uint8_t* const smem = smem_raw + (smem_s - raw);
  const int tid = threadIdx.x, wgl = tid >> 7, x = tid & 127, warp = x >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int rank = kCluster > 1 ? (int)blockIdx.z : 0;
  const int v0 = (rank * kWGs + wgl) * kSeq;  // this warpgroup's first decode warp
  const int n0 = blockIdx.y * 64, tok0 = blockIdx.x * kBN, chunks = K >> 7;
  // Chunks of decode warp v: chunks / 8, one more below chunks % 8. Item i = kSeq p + u is chunk
  // position p of decode warp v0 + u; since the warps' counts fall by at most one, and only at
  // the last position, the items that exist are the first `items`.
  auto count = [&](int v) { return chunks / 8 + (v < chunks % 8); };
  int items = 0;
#pragma unroll
  for (int u = 0; u < kSeq; ++u) items += count(v0 + u);
  if (count(v0) > kMaxChunks) __trap();
  // [kWGs][kSeq][ceil(chunks / 8)][kBN rows of 128 bytes, 128-byte swizzle] tokens (a whole number
  // of 1 KB swizzle atoms a tile), then each decode warp's sums.
  const int tile_chunks = (chunks + 7) >> 3;
  float* const sums = reinterpret_cast<float*>(smem + 8 / kCluster * tile_chunks * kBN * 128);
  // This thread's weight rows n0 + 16 warp + g (+ 8), clamped to N for the loads.
  const int r0 = min(n0 + 16 * warp + g, N - 1), r1 = min(n0 + 16 * warp + g + 8, N - 1);
  // The 16 bytes at 16 t of half h of chunk c of weight row r (tile-major: the 2048-byte block of
  // the row's 16-row tile and chunk c, piece 2 h + (row group)).
  // early: before the quantizer wait (coherent loads, which ptxas keeps there).
  auto ldg_w = [&](int r, int c, int h, bool early) {
    const uint8_t* p = kPacked ? w + (long long)(r >> 4) * 16 * K + (long long)c * 2048 + 512 * (2 * h + ((r >> 3) & 1)) +
                                     16 * (((r & 7) << 2) + t)
                               : w + (long long)r * K + (long long)c * 128 + 64 * h + 16 * t;
    return gdn::ld_weight_v4(p, early);
  };
  auto chunk_of = [&](int i) { return v0 + i % kSeq + 8 * (i / kSeq); };
  // The first kDepth items' weight before the quantizer wait: wa / wb the item the MMAs take
  // next, fa / fb (kDepth 2) the one after it.
  uint4 wa[2], wb[2], fa[2], fb[2];
#pragma unroll
  for (int d = 0; d < kDepth; ++d) {
    if (d < items) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        (d ? fa : wa)[h] = ldg_w(r0, chunk_of(d), h, true);
        (d ? fb : wb)[h] = ldg_w(r1, chunk_of(d), h, true);
      }
    }
  }
  gdn::pdl_wait();
  // The tokens of this warpgroup's items in MMA order: entry (decode warp u, chunk position p,
  // token r, half h) reads the half's four 16-byte units and writes the four it fills (unit d of
  // the half takes word d of each source unit).
  uint8_t* const toks = smem + wgl * kSeq * tile_chunks * kBN * 128;
  for (int entry = x; entry < kSeq * tile_chunks * kBN * 2; entry += 128) {
    const int u = entry / (tile_chunks * kBN * 2), p = entry / (kBN * 2) % tile_chunks;
    const int r = (entry >> 1) % kBN, h = entry & 1;
    if (p >= count(v0 + u)) continue;
    const uint8_t* src = xq + (long long)min(tok0 + r, rows - 1) * K + (long long)(v0 + u + 8 * p) * 128 + 64 * h;
    uint4 s4[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) s4[q] = gdn::ld_dep_v4(src + 16 * q);
    uint8_t* dst = toks + (u * tile_chunks + p) * kBN * 128;
#pragma unroll
    for (int d = 0; d < 4; ++d) {
      auto word = [&](const uint4& v) { return d == 0 ? v.x : d == 1 ? v.y : d == 2 ? v.z : v.w; };
      *reinterpret_cast<uint4*>(dst + swz128(r, 4 * h + d)) =
          make_uint4(word(s4[0]), word(s4[1]), word(s4[2]), word(s4[3]));
    }
  }
  fence_proxy_async();  // the tokens, written by the threads, read by the MMAs
  asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wgl) : "memory");
  float part[kAcc], acc[kSeq][kAcc];
#pragma unroll
  for (int u = 0; u < kSeq; ++u)
#pragma unroll
    for (int e = 0; e < kAcc; ++e) acc[u][e] = 0.f;
  for (int p = 0; kSeq * p < items; ++p) {
#pragma unroll
    for (int u = 0; u < kSeq; ++u) {
      const int i = kSeq * p + u;
      if (i >= items) break;
      const int c = v0 + u + 8 * p;
      // Block scales of chunk c for this thread's tokens 8 j + 2 t + q.
      float scale[kBN / 8][2] = {};
      if constexpr (kFmt == kFp8Block) {
        const float s_w = to_float(sw[(long long)(n0 >> 7) * chunks + c]);
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
          for (int q = 0; q < 2; ++q)
            scale[j][q] = gdn::mul_rn(gdn::ld_dep(sx + (long long)min(tok0 + 8 * j + 2 * t + q, rows - 1) * chunks + c), s_w);
      }
      // Item i + kDepth's weight requested before this item's MMAs.
      uint4 na[2], nb[2];
      if (i + kDepth < items) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          na[h] = ldg_w(r0, chunk_of(i + kDepth), h, false);
          nb[h] = ldg_w(r1, chunk_of(i + kDepth), h, false);
        }
      }
      wgmma_fence();
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint32_t a8[4];
        decode_fragment(a8, wa, wb, q);
        const uint32_t b = (uint32_t)__cvta_generic_to_shared(toks + (u * tile_chunks + p) * kBN * 128) + 32 * q;
        Qgmma<kBN>::mma(part, a8, wgmma_desc(b), q);
      }
      wgmma_commit();
      wgmma_wait<0>();
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int e = 4 * j + r;
          if constexpr (kFmt == kFp8Block) {
            acc[u][e] = gdn::fma_rn(part[e], scale[j][r & 1], acc[u][e]);
          } else {
            acc[u][e] = gdn::add_rn(acc[u][e], part[e]);
          }
        }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if constexpr (kDepth == 2) {
          wa[h] = fa[h];
          wb[h] = fb[h];
          fa[h] = na[h];
          fb[h] = nb[h];
        } else {
          wa[h] = na[h];
          wb[h] = nb[h];
        }
      }
    }
  }
  // The 8 decode warps' sums added in warp order (warp 0's taken as it is): by the one warpgroup
  // that holds them all, else each warpgroup publishes its warps' sums and the CTA of rank
  // j % kCluster adds, for its token groups j, the 8 (through distributed shared memory in a
  // cluster) and stores them.
  float sum[kAcc] = {};
  if constexpr (kCluster == 1 && kWGs == 1) {
#pragma unroll
    for (int e = 0; e < kAcc; ++e) {
      sum[e] = acc[0][e];
#pragma unroll
      for (int u = 1; u < 8; ++u) sum[e] = gdn::add_rn(sum[e], acc[u][e]);
    }
  } else {
#pragma unroll
    for (int u = 0; u < kSeq; ++u)
#pragma unroll
      for (int e = 0; e < kAcc; ++e) sums[((wgl * kSeq + u) * kAcc + e) * 128 + x] = acc[u][e];
    if constexpr (kCluster > 1) {
      gdn::cluster_sync();
    } else {
      __syncthreads();
    }
    if (wgl == 0) {
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        if (kCluster > 1 && j % kCluster != rank) continue;
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int e = 4 * j + r;
          float tot = 0.f;
#pragma unroll
          for (int u = 0; u < 8; ++u) {
            // Decode warp u's sums: slot u % (kWGs kSeq) of the CTA of rank u / (kWGs kSeq).
            const int slot = ((u % (kWGs * kSeq)) * kAcc + e) * 128 + x;
            float a;
            if constexpr (kCluster > 1) {
              a = __uint_as_float(gdn::ld_cluster((uint32_t)__cvta_generic_to_shared(sums + slot), u / (kWGs * kSeq)));
            } else {
              a = sums[slot];
            }
            tot = u == 0 ? a : gdn::add_rn(tot, a);
          }
          sum[e] = tot;
        }
      }
    }
    if constexpr (kCluster > 1) gdn::cluster_sync();
  }
  if (wgl == 0)
    fp8_wgmma_epilogue<kFmt, kBN / 8, kCluster>(sum, sw, sx, out, ldc, N, rows, n0, 16 * warp + g, tok0, t, rank);
}
