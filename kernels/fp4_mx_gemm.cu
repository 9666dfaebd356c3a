// NVFP4 W4A4 "mx" GEMM on Hopper's int8 tensor cores, row-invariant at every row count.
//
// out[m, n] = (acc[m, n] / 4) * gs[m] * scale2, acc = sum over 16-blocks b (in one fixed order) of
//   isum(m, n, b) * (sa[m, b] * sw[n, b]),   isum = sum_i (2 qa) * (2 qw)   (exact int32)
// Every e2m1 value is half an integer, so twice the codes are int8 and one m16n8k16 int8 MMA
// computes one block's sum exactly; the block's scale product is exact in fp32 (two e4m3); the
// only rounding is the fp32 accumulation over blocks, in a K order that depends on K alone.
//
// Two kernels compute this with the same bits: fp4_mx_gemm_int_kernel (end of the file, one
// token tile) converts each block sum and scale; fp4_mx_gemm_kernel (2 or 4 token tiles, where
// conversions limit it) runs no conversion instruction in its main loop (sm_90 issues those at
// 1/8 of the fp32 rate):
// - the MMA accumulates onto the bits of M = 1.5 * 2^119, whose ulp is 2^96, so its result read
//   as fp32 is X = M + isum * 2^96 exactly (|isum| <= 16 * 12 * 12 < 2^22);
// - a weight scale becomes T = sw * 2^-120 by placing its bits (e4m3 subnormals become fp32
//   subnormals, which the non-ftz wrappers of convert.cuh keep);
// - fma(X, T, -M * T) = isum * sw * 2^-24 exactly, and acc' = fma(that, sa, acc') is acc =
//   fma(isum, sa * sw, acc) scaled by 2^-24, rounding for rounding: sa and sw are e4m3 values
//   (multiples of 2^-9), so sa * sw is exact and every term and partial sum is a multiple of
//   2^-18, zero or at least 2^-18 in magnitude (2^-42 once scaled): normal, where rounding
//   commutes with powers of two. The epilogue scales the sum back by 2^24, exactly.
//
// Layouts: the weight is read in the checkpoint layout (packed [N, K/2], block scales e4m3
// [N, K/16]); the activations come from fp4_quant_kernel in the operand form (int8 [rows, K] in
// mma layout, fp32 block scales [rows, K/16] holding e4m3 values, gs [rows]).
//
// Tiling, as in w8a8_gemm.cu: a warp owns 16 weight rows (the MMA's M side) and the CTA's tokens
// (8 a tile); the CTA's warps split K into 128-value chunks (warp w: chunks w, w + kWarps, ...)
// and are reduced in shared memory in warp order.
//
// Per chunk, thread (g, t) loads 16 bytes of weight rows g and g+8 at byte 16t: blocks 2t and 2t+1
// whole. The MMA wants it to hold k = 4t..4t+3 of every block instead, so the quad transposes its
// 16-bit units (4 codes each) with two rounds of shuffles.
#include "gdn/convert.cuh"
#include "gdn/ptx.cuh"
#include "gdn/vec.cuh"

namespace {

// The accumulator bits the int32 block sums are read against: M = 1.5 * 2^119 (see the header);
// -M as fp32.
constexpr int kMagic = 0x7B400000;
constexpr float kNegMagic = -0x1.8p119f;

// D = A * B + C, A [16, 16] s8 row-major, B [16, 8] s8 col-major, int32 accumulation, with C
// = kMagic as the MMA's accumulator input: x = D read as fp32, X = M + isum * 2^96.
__device__ __forceinline__ void mma_s8_16816(float (&x)[4], uint32_t a0, uint32_t a1, uint32_t b) {
  int d[4];
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 "
      "{%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %7, %7, %7};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a0), "r"(a1), "r"(b), "r"(kMagic));
#pragma unroll
  for (int r = 0; r < 4; ++r) x[r] = __int_as_float(d[r]);
}

// Quad transpose: on entry thread t holds a weight row's blocks 2t (words x, y: units 0, 1 and
// 2, 3) and 2t+1 (words z, w); on exit v[j] holds unit t (codes 4t..4t+3) of block j (low half)
// and of block j+4 (high half). q, p: bits 1 and 0 of t; keep, send: quad_selector(q, p) and
// quad_selector(q, !p). 12 lane-local instructions against 16 for the pairing (2s, 2s+1).
__device__ __forceinline__ void quad_transpose(const uint4& w, uint32_t (&v)[4], bool q, bool p,
                                               uint32_t keep, uint32_t send) {
  // Round 1, lanes t and t^2: keep units 2q, 2q+1 of both blocks, trade the other two.
  const uint32_t kx = q ? w.y : w.x, kz = q ? w.w : w.z;
  const uint32_t rx = __shfl_xor_sync(0xffffffffu, q ? w.x : w.y, 2);
  const uint32_t rz = __shfl_xor_sync(0xffffffffu, q ? w.z : w.w, 2);
  // Now kx, rx hold those units of blocks 2t and 2(t^2), which are blocks 2p and 2p+4, and
  // kz, rz of blocks 2p+1 and 2p+5. Round 2, lanes t and t^1: pair each block with the one 4
  // above it (the lower in the low half), keep unit t, send unit t^1.
  const uint32_t k0 = gdn::prmt(kx, rx, keep), k1 = gdn::prmt(kz, rz, keep);
  const uint32_t r0 = __shfl_xor_sync(0xffffffffu, gdn::prmt(kx, rx, send), 1);
  const uint32_t r1 = __shfl_xor_sync(0xffffffffu, gdn::prmt(kz, rz, send), 1);
  // k0, k1: blocks (2p, 2p+4), (2p+1, 2p+5); r0, r1: the same of the partner, 2(1-p) for 2p.
  v[0] = p ? r0 : k0;
  v[1] = p ? r1 : k1;
  v[2] = p ? k0 : r0;
  v[3] = p ? k1 : r1;
}

// The round-2 selectors of quad_transpose for thread t: unit u of (kx, rx) with the lower block
// (kx's for q = 0, rx's for q = 1) in the low half; keep takes unit t (u = p), send unit t^1.
__device__ __forceinline__ uint32_t quad_selector(bool q, bool u) {
  return q ? (u ? 0x3276u : 0x1054u) : (u ? 0x7632u : 0x5410u);
}

// e4m3 byte i of w -> its value times 2^-120 as fp32, exactly: sign to bit 31, the 7 magnitude
// bits to bits 20..26, so the e4m3 exponent field is the fp32 one (a bias of 7 against 127) and
// a subnormal e4m3 is the fp32 subnormal. (The NaN codes 0x7f and 0xff read as +-480.)
__device__ __forceinline__ float e4m3_bits(uint32_t w, int i) {
  return __uint_as_float((uint32_t)((int)(w << (24 - 8 * i)) >> 4) & 0x87F00000u);
}

// The kWarps warps' sums added in warp order, through shared memory: value(i) is this lane's
// i-th sum (kPer a lane); store(i, l, sum) gets the total of sum i of lane l.
template <int kWarps, int kPer, typename Value, typename Store>
__device__ __forceinline__ void add_warps_in_order(Value value, Store store) {
  __shared__ float red[kWarps][kPer][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < kPer; ++i) red[warp][i][lane] = value(i);
  __syncthreads();
  for (int e = threadIdx.x; e < kPer * 32; e += kWarps * 32) {
    const int i = e >> 5, l = e & 31;
    float sum = red[0][i][l];
#pragma unroll
    for (int v = 1; v < kWarps; ++v) sum = gdn::add_rn(sum, red[v][i][l]);
    store(i, l, sum);
  }
}

// The row-major kernels' operands of thread (g, t) in CTA (blockIdx.x, blockIdx.y): weight rows
// g and g+8 of the CTA's 16 (codes from byte 16t, block scales; rows past N clamped), and for
// each 8-token tile j the activation row of token g and the scale rows of tokens 2t and 2t+1
// (tokens past rows clamped; clamped rows and tokens are never stored).
template <int kTiles>
struct RowMajorOperands {
  int tok0, n0;  // the CTA's first token and weight row
  const uint8_t *w0, *w1, *s0, *s1;
  const int8_t* x[kTiles];
  const float* sx[kTiles][2];

  __device__ __forceinline__ RowMajorOperands(const uint8_t* w, const uint8_t* sw, const int8_t* xd,
                                              const float* sx_all, int N, int K, int rows) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    tok0 = blockIdx.x * 8 * kTiles;
    n0 = blockIdx.y * 16;
    const int blocks = K >> 4;
    const long long half_k = K >> 1;
    const long long r0 = min(n0 + g, N - 1), r1 = min(n0 + g + 8, N - 1);
    w0 = w + r0 * half_k + t * 16;
    w1 = w + r1 * half_k + t * 16;
    s0 = sw + r0 * blocks;
    s1 = sw + r1 * blocks;
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      x[j] = xd + (long long)min(tok0 + j * 8 + g, rows - 1) * K + t * 32;
      sx[j][0] = sx_all + (long long)min(tok0 + j * 8 + 2 * t, rows - 1) * blocks;
      sx[j][1] = sx_all + (long long)min(tok0 + j * 8 + 2 * t + 1, rows - 1) * blocks;
    }
  }
};

// The 8 activation block scales of chunk c of one token (its scale row p_sx).
__device__ __forceinline__ void chunk_act_scales(const float* p_sx, int c, float (&sa)[8]) {
  const float4* p = reinterpret_cast<const float4*>(p_sx + c * 8);
  const float4 lo = gdn::ld_dep_f4(p), hi = gdn::ld_dep_f4(p + 1);
  sa[0] = lo.x, sa[1] = lo.y, sa[2] = lo.z, sa[3] = lo.w;
  sa[4] = hi.x, sa[5] = hi.y, sa[6] = hi.z, sa[7] = hi.w;
}

// A round of the row-major kernels: a warp's kUnroll chunks c0, c0 + kWarps, ... (those below
// chunks): thread (g, t)'s 16 code bytes and 8 block scales of rows g and g+8, and each tile's
// 32 activation bytes (written by the quantizer: coherent loads after the wait).
template <int kWarps, int kTiles, int kUnroll>
struct RowMajorRound {
  uint4 w[kUnroll][2];
  uint2 sw[kUnroll][2];
  uint4 x[kUnroll][kTiles][2];

  __device__ __forceinline__ void load(const RowMajorOperands<kTiles>& p, int c0, int chunks) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kWarps;
      if (c < chunks) {
        w[u][0] = gdn::ld_stream_v4(p.w0 + (long long)c * 64);
        w[u][1] = gdn::ld_stream_v4(p.w1 + (long long)c * 64);
        sw[u][0] = __ldg(reinterpret_cast<const uint2*>(p.s0 + c * 8));
        sw[u][1] = __ldg(reinterpret_cast<const uint2*>(p.s1 + c * 8));
#pragma unroll
        for (int j = 0; j < kTiles; ++j) {
          x[u][j][0] = gdn::ld_dep_v4(p.x[j] + (long long)c * 128);
          x[u][j][1] = gdn::ld_dep_v4(p.x[j] + (long long)c * 128 + 16);
        }
      }
    }
  }

  // Token tile j of slot u (chunk c): its 8 B words, one a block, and the block scales of tokens
  // 2t and 2t+1.
  __device__ __forceinline__ void tile(const RowMajorOperands<kTiles>& p, int u, int j, int c, uint32_t (&xw)[8],
                                       float (&sa0)[8], float (&sa1)[8]) const {
    const uint4 lo = x[u][j][0], hi = x[u][j][1];
    xw[0] = lo.x, xw[1] = lo.y, xw[2] = lo.z, xw[3] = lo.w;
    xw[4] = hi.x, xw[5] = hi.y, xw[6] = hi.z, xw[7] = hi.w;
    chunk_act_scales(p.sx[j][0], c, sa0);
    chunk_act_scales(p.sx[j][1], c, sa1);
  }
};

// The row-major kernels' walk over K: a warp's chunks warp, warp + kWarps, ... in rounds of
// kUnroll, each round loaded whole before chunk(round, u, c) consumes its chunks in K order.
template <int kWarps, int kTiles, int kUnroll, typename Chunk>
__device__ __forceinline__ void row_major_walk(const RowMajorOperands<kTiles>& p, int chunks, Chunk&& chunk) {
  for (int c0 = threadIdx.x >> 5; c0 < chunks; c0 += kWarps * kUnroll) {
    RowMajorRound<kWarps, kTiles, kUnroll> round;
    round.load(p, c0, chunks);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kWarps;
      if (c < chunks) chunk(round, u, c);
    }
  }
}

// The row-major kernels' end: the warps' sums of every (row, token) added in warp order (with
// kUnscale24, the conversion-free form's 2^-24 undone, exactly), times gs[token] and scale2 / 4,
// stored for rows below N and tokens below rows.
template <int kWarps, int kTiles, bool kUnscale24, typename OutT>
__device__ __forceinline__ void row_major_store(const RowMajorOperands<kTiles>& p, const float (&acc)[kTiles][4],
                                                float scale2, const float* gs, OutT* out, long long ldc, int N,
                                                int rows) {
  const int tok0 = p.tok0, n0 = p.n0;
  const float s2 = gdn::mul_rn(scale2, 0.25f);
  add_warps_in_order<kWarps, kTiles * 4>([&](int i) { return acc[i >> 2][i & 3]; }, [&](int jr, int l, float sum) {
    const int j = jr >> 2, r = jr & 3;
    const int n = n0 + (l >> 2) + (r >> 1) * 8;
    const int tok = tok0 + j * 8 + 2 * (l & 3) + (r & 1);
    if (n >= N || tok >= rows) return;
    if constexpr (kUnscale24) sum = gdn::mul_rn(sum, 0x1p24f);
    out[(long long)tok * ldc + n] = gdn::from_float<OutT>(gdn::mul_rn(sum, gdn::mul_rn(gdn::ld_dep(gs + tok), s2)));
  });
}

}  // namespace

// kWarps: K-split ways.  kTiles: 8-token tiles a CTA (2 or 4).  kUnroll: chunks in flight a warp.
// OutT: bf16 or fp16.
// w: [N, K/2] packed codes.  sw: [N, K/16] e4m3.  scale2: the weight's global scale.
// xd: [rows, K] int8 operand (mma layout).  sx: [rows, K/16] fp32 (e4m3 values).  gs: [rows] fp32.
// out: [rows, N] at row stride ldc.
template <int kWarps, int kTiles, int kUnroll, typename OutT>
__global__ void __launch_bounds__(kWarps * 32)
fp4_mx_gemm_kernel(const uint8_t* __restrict__ w, const uint8_t* __restrict__ sw, float scale2,
                   const int8_t* __restrict__ xd, const float* __restrict__ sx,
                   const float* __restrict__ gs, OutT* __restrict__ out, long long ldc, int N, int K,
                   int rows) {
  GDN_TRACE_CTA(3);
  // As w8a8_gemm_kernel: the next kernel of the stream may start launching.
  gdn::pdl_launch_dependents();
  const int t = threadIdx.x & 3;
  const RowMajorOperands<kTiles> p(w, sw, xd, sx, N, K, rows);
  const bool tq = t & 2, tp = t & 1;
  const uint32_t sel_keep = quad_selector(tq, tp), sel_send = quad_selector(tq, !tp);

  // Programmatic dependent launch: see w8a8_gemm.cu.
  gdn::pdl_wait();

  // acc * 2^-24 (see the header).
  float acc[kTiles][4];
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) acc[j][r] = 0.f;

  row_major_walk<kWarps, kTiles, kUnroll>(p, K >> 7, [&](const auto& round, int u, int c) {
    uint32_t v0[4], v1[4];
    quad_transpose(round.w[u][0], v0, tq, tp, sel_keep, sel_send);
    quad_transpose(round.w[u][1], v1, tq, tp, sel_keep, sel_send);
    const uint32_t sw0[2] = {round.sw[u][0].x, round.sw[u][0].y}, sw1[2] = {round.sw[u][1].x, round.sw[u][1].y};
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      uint32_t xw[8];
      float sa0[8], sa1[8];
      round.tile(p, u, j, c, xw, sa0, sa1);
#pragma unroll
      for (int b = 0; b < 8; ++b) {
        // A operands of block b: a0 row g, a1 row g+8 (see quad_transpose for the halves).
        const int sh = 16 * (b >> 2);
        const uint32_t a0 = gdn::e2m1x4_to_s8x4((v0[b & 3] >> sh) & 0xffffu);
        const uint32_t a1 = gdn::e2m1x4_to_s8x4((v1[b & 3] >> sh) & 0xffffu);
        // Weight block scales of rows g and g+8 as T = sw * 2^-120, and -M * T (exact).
        const float t0 = e4m3_bits(sw0[b >> 2], b & 3), t1 = e4m3_bits(sw1[b >> 2], b & 3);
        const float n0 = gdn::mul_rn(t0, kNegMagic), n1 = gdn::mul_rn(t1, kNegMagic);
        float x[4];
        mma_s8_16816(x, a0, a1, xw[b]);
        // d0, d1: row g, tokens 2t, 2t+1; d2, d3: row g+8. Each term: isum * sw * 2^-24, exact.
        const float y0 = gdn::fma_rn(x[0], t0, n0);
        const float y1 = gdn::fma_rn(x[1], t0, n0);
        const float y2 = gdn::fma_rn(x[2], t1, n1);
        const float y3 = gdn::fma_rn(x[3], t1, n1);
        acc[j][0] = gdn::fma_rn(y0, sa0[b], acc[j][0]);
        acc[j][1] = gdn::fma_rn(y1, sa1[b], acc[j][1]);
        acc[j][2] = gdn::fma_rn(y2, sa0[b], acc[j][2]);
        acc[j][3] = gdn::fma_rn(y3, sa1[b], acc[j][3]);
      }
    }
  });

  row_major_store<kWarps, kTiles, true>(p, acc, scale2, gs, out, ldc, N, rows);
}

// ---- One token tile: the block sums converted to fp32 ----
//
// The same arithmetic in its direct form: each block's int32 sum converted (I2F) and multiplied
// by sa * sw (converted from e4m3). On the H200 this form is up to 25% faster than the
// conversion-free one above at 1 to 8 rows (one token tile: fewer instructions a chunk there,
// while the conversion pipe is not the limit), and up to 20% slower with 2 or 4 tiles
// (bench/results/nvfp4_h200.md against nvfp4_int_form_h200.md); both give the same bits.

namespace {

// D = A * B + D, A [16, 16] s8 row-major, B [16, 8] s8 col-major, int32 accumulation.
__device__ __forceinline__ void mma_s8_16816_int(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 "
      "{%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a0), "r"(a1), "r"(b));
}

// Quad transpose for fp4_mx_gemm_int_kernel: on entry thread t holds a weight row's blocks 2t (words 0, 1) and 2t+1 (words
// 2, 3); on exit v[s] holds unit t (codes 4t..4t+3) of block 2s (low half) and 2s+1 (high half).
__device__ __forceinline__ void quad_transpose_pairs(const uint4& w, uint32_t (&v)[4], int t) {
  v[0] = gdn::prmt(w.x, w.z, 0x5410u);
  v[1] = gdn::prmt(w.x, w.z, 0x7632u);
  v[2] = gdn::prmt(w.y, w.w, 0x5410u);
  v[3] = gdn::prmt(w.y, w.w, 0x7632u);
  // Element (source s, destination d) starts at lane s, slot d and ends at lane d, slot s: each
  // round swaps across one bit of the lane the elements whose s and d differ in that bit.
  const bool p = t & 1;
  uint32_t a = __shfl_xor_sync(0xffffffffu, p ? v[0] : v[1], 1);
  uint32_t b = __shfl_xor_sync(0xffffffffu, p ? v[2] : v[3], 1);
  if (p) {
    v[0] = a;
    v[2] = b;
  } else {
    v[1] = a;
    v[3] = b;
  }
  const bool q = t & 2;
  a = __shfl_xor_sync(0xffffffffu, q ? v[0] : v[2], 2);
  b = __shfl_xor_sync(0xffffffffu, q ? v[1] : v[3], 2);
  if (q) {
    v[0] = a;
    v[1] = b;
  } else {
    v[2] = a;
    v[3] = b;
  }
}

}  // namespace

// kWarps: K-split ways.  kTiles: 8-token tiles a CTA.  kUnroll: chunks in flight a warp.
// OutT: bf16 or fp16.
// w: [N, K/2] packed codes.  sw: [N, K/16] e4m3.  scale2: the weight's global scale.
// xd: [rows, K] int8 operand (mma layout).  sx: [rows, K/16] fp32.  gs: [rows] fp32.
// out: [rows, N] at row stride ldc.
template <int kWarps, int kTiles, int kUnroll, typename OutT>
__global__ void __launch_bounds__(kWarps * 32)
fp4_mx_gemm_int_kernel(const uint8_t* __restrict__ w, const uint8_t* __restrict__ sw, float scale2,
                   const int8_t* __restrict__ xd, const float* __restrict__ sx,
                   const float* __restrict__ gs, OutT* __restrict__ out, long long ldc, int N, int K,
                   int rows) {
  GDN_TRACE_CTA(3);
  // As w8a8_gemm_kernel: the next kernel of the stream may start launching.
  gdn::pdl_launch_dependents();
  const int t = threadIdx.x & 3;
  const RowMajorOperands<kTiles> p(w, sw, xd, sx, N, K, rows);

  // Programmatic dependent launch: see w8a8_gemm.cu.
  gdn::pdl_wait();

  float acc[kTiles][4];
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) acc[j][r] = 0.f;

  row_major_walk<kWarps, kTiles, kUnroll>(p, K >> 7, [&](const auto& round, int u, int c) {
    uint32_t v0[4], v1[4];
    quad_transpose_pairs(round.w[u][0], v0, t);
    quad_transpose_pairs(round.w[u][1], v1, t);
    // Weight block scales of rows g and g+8 for the chunk's 8 blocks.
    float s0[8], s1[8];
    const uint32_t sw0[2] = {round.sw[u][0].x, round.sw[u][0].y}, sw1[2] = {round.sw[u][1].x, round.sw[u][1].y};
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      const float2 a = gdn::e4m3x2_to_float2(sw0[h >> 1] >> (16 * (h & 1)));
      const float2 b = gdn::e4m3x2_to_float2(sw1[h >> 1] >> (16 * (h & 1)));
      s0[2 * h] = a.x;
      s0[2 * h + 1] = a.y;
      s1[2 * h] = b.x;
      s1[2 * h + 1] = b.y;
    }
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      uint32_t xw[8];
      float sa0[8], sa1[8];
      round.tile(p, u, j, c, xw, sa0, sa1);
#pragma unroll
      for (int b = 0; b < 8; ++b) {
        const int sh = 16 * (b & 1);
        const uint32_t a0 = gdn::e2m1x4_to_s8x4((v0[b >> 1] >> sh) & 0xffffu);
        const uint32_t a1 = gdn::e2m1x4_to_s8x4((v1[b >> 1] >> sh) & 0xffffu);
        int d[4] = {0, 0, 0, 0};
        mma_s8_16816_int(d, a0, a1, xw[b]);
        // c0, c1: row g, tokens 2t, 2t+1; c2, c3: row g+8.
        acc[j][0] = gdn::fma_rn(__int2float_rn(d[0]), gdn::mul_rn(sa0[b], s0[b]), acc[j][0]);
        acc[j][1] = gdn::fma_rn(__int2float_rn(d[1]), gdn::mul_rn(sa1[b], s0[b]), acc[j][1]);
        acc[j][2] = gdn::fma_rn(__int2float_rn(d[2]), gdn::mul_rn(sa0[b], s1[b]), acc[j][2]);
        acc[j][3] = gdn::fma_rn(__int2float_rn(d[3]), gdn::mul_rn(sa1[b], s1[b]), acc[j][3]);
      }
    }
  });

  row_major_store<kWarps, kTiles, false>(p, acc, scale2, gs, out, ldc, N, rows);
}

// ---- Tile-major weights: re-encoded codes, two blocks an MMA ----
//
// Nvfp4Weight.tile_major() stores each 16-row tile's 128-value chunk as the 1 KB one warp loads
// (two 16-byte loads a thread, 512 contiguous bytes each) with every code already where the
// m16n8k32 int8 MMA wants it, in an encoding that two prmt lookups and an xor decode (no
// shuffle, no transpose). Thread (g, t)'s 32 bytes are the words (p, r), p = 0..3, r = 0..1, in
// that order: row g + 8r, codes 4t..4t+3 of block 2p (low half) and of block 2p+1 (high half).
// Its weight scales are 16 bytes, rows g and g+8, blocks 0..7 of the chunk.
//
// One m16n8k32 MMA sums two blocks for up to four tokens: column n of B is token n/2's codes in
// the half of K that holds block 2p + n%2 and zeros in the other, so D's column n is one block's
// exact sum. Each (row, token) is then accumulated block by block in the same K order with the
// same fma as in the kernels above, so the outputs are theirs bit for bit.

namespace {

// Tile-major code nibble (m, i), m its bit 3 and i the low three -> twice the e2m1 value as int8:
// P = prmt(kDecP, nibble) and Q = prmt(kDecQ, nibble ^ 8), whose sign-replicate mode (bit 3)
// gives 0 or 0xff; P's bytes are all non-negative, so m = 1 gives Q's byte i and m = 0 gives
// P's byte i, complemented where Q's byte i is negative. Slots 0-3: (P, Q) = (0, 1), (2, 3),
// (4, 6), (8, 12); slots 4-7: (~0, -2) = (-1, -2), (-3, -4), (-6, -8), (-12, -12).
// (_quantize.NVFP4_TILE_CODE is the encoder; tests/test_nvfp4.py checks every code.)
constexpr uint32_t kDecP0 = 0x08040200u, kDecP1 = 0x0B050200u;
constexpr uint32_t kDecQ0 = 0x0C060301u, kDecQ1 = 0xF4F8FCFEu;

// x >> 16 as the high word of x * 2^16: an IMAD on the FMA pipe instead of a shift on the ALU.
__device__ __forceinline__ uint32_t hi16_imad(uint32_t x) {
  uint32_t r;
  asm("mul.hi.u32 %0, %1, 65536;" : "=r"(r) : "r"(x));
  return r;
}

// The tables' register words: constants, which ptxas copies into a fresh register before every
// prmt (about 30 IMADs a chunk), or pinned (kPin; gdn::pinned), two registers for the kernel.
struct TileTables {
  uint32_t p0, q0;
};
template <bool kPin>
__device__ __forceinline__ TileTables tile_tables(int lane) {
  if constexpr (kPin)
    return {gdn::pinned(kDecP0, lane), gdn::pinned(kDecQ0, lane)};
  else
    return {kDecP0, kDecQ0};
}

// Eight tile-major codes -> the int8 operands of their two halves (kImad: the high halves'
// shifts on the FMA pipe).
template <bool kImad>
__device__ __forceinline__ void decode_tile_word(uint32_t w, const TileTables& tab, uint32_t& lo, uint32_t& hi) {
  const uint32_t m = w ^ 0x88888888u;
  lo = gdn::prmt(tab.p0, kDecP1, w) ^ gdn::prmt(tab.q0, kDecQ1, m);
  const uint32_t wh = kImad ? hi16_imad(w) : w >> 16, mh = kImad ? hi16_imad(m) : m >> 16;
  hi = gdn::prmt(tab.p0, kDecP1, wh) ^ gdn::prmt(tab.q0, kDecQ1, mh);
}

// D = A * B + C, A [16, 32] s8 row-major, B [32, 8] s8 col-major, int32; C = c in every lane.
__device__ __forceinline__ void mma_s8_16832(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                             int c) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %10, %10, %10};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c));
}

}  // namespace

// The arithmetic forms of fp4_tiled_gemm_kernel (kArith), all giving the same bits:
// kDirect: the block sum converted by I2F, the scales by cvt (fp4_mx_gemm_int_kernel's form);
// kConvFree: fp4_mx_gemm_kernel's form, no conversion instruction, accumulation scaled by 2^-24;
// kMagicSum: the MMA accumulates onto the bits of 1.5 * 2^23, so one fp32 subtraction gives the
//   block sum exactly (|isum| < 2^22 keeps it in [2^23, 2^24), where the ulp is 1), scales by cvt.
// Each then accumulates fma(isum, sa * sw, acc) (kConvFree: that times 2^-24, rounding for rounding).
// kArith + kImad: the same, with the decode's high-half shifts and the B operands' masks done by
// integer multiplies (FMA pipe) instead of ALU instructions; + kPinTables: the decode tables held
// in registers (tile_tables); + kPrefetch: each warp's next chunks loaded before the current
// ones are computed; + kEarly: each warp's first chunks of weight requested before the quantizer
// wait (fp4_tiled_gemm_kernel's main loop; not with kPrefetch); + kMaskedB: the activations in
// the quantizer's masked operand form ([rows][2][K]: copy 0 keeps the even blocks of each chunk
// and zeros the odd ones, copy 1 the reverse), so a thread loads its B operands already masked
// (copy g % 2) instead of masking them; + kL2First: each CTA of the first wave (the first
// kMinBlocks CTAs a multiprocessor in launch order) asks L2 for its whole tile (one bulk
// prefetch of codes and one of scales) before the quantizer wait, so the weight streams while
// the quantizer runs; + kTok1 or kTok2: the few-token form (few_token_stream) for slices of at most
// one or two rows (with kEarly: its first round's weight codes requested before the wait);
// + kRing: each warp keeps its next kUnroll chunks of weight (codes and scales) in flight in a ring
// of shared memory, copied by cp.async (no registers held), the first kUnroll requested before the
// quantizer wait; each chunk's copy is issued once the chunk before it in that slot is computed;
// + kTwoTiles: two 16-row weight tiles a CTA (tiles 2y and 2y + 1 of grid row y), each warp's
// activation operands loaded once for both (the register rounds only: not with the few-token
// form, the ring or the L2 prefetch).
constexpr int kDirect = 0, kConvFree = 1, kMagicSum = 2, kImad = 4, kPinTables = 8, kPrefetch = 16, kEarly = 32,
              kMaskedB = 64, kL2First = 128, kTok1 = 256, kTok2 = 512, kRing = 1024, kTwoTiles = 2048;
constexpr int kSumMagic = 0x4B400000;  // 1.5 * 2^23
constexpr float kSumMagicF = 0x1.8p23f;

// One chunk of one warp: decode the weight words (w0, w1: the thread's two 16-byte pieces), convert
// its scales (sb), and accumulate every token group's two rows into acc. xv: each group's 32
// activation bytes; p_sx: each group's activation-scale row (token 4j + t).
template <int kGroups, int kArithImad>
__device__ __forceinline__ void tiled_chunk(const uint4& w0, const uint4& w1, const uint4& sb4,
                                            const uint4 (&xv)[kGroups][2], const float* const (&p_sx)[kGroups],
                                            int c, uint32_t odd, const TileTables& tab,
                                            float (&acc)[kGroups][2]) {
  constexpr int kArith = kArithImad & 3;
  constexpr bool kMul = kArithImad & kImad;
  constexpr bool kPreMasked = kArithImad & kMaskedB;
  // A operands of the four block pairs: a[p] = {row g, row g+8} x {block 2p, 2p+1}.
  const uint32_t words[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
  uint32_t a[4][4];
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    decode_tile_word<kMul>(words[2 * p], tab, a[p][0], a[p][2]);
    decode_tile_word<kMul>(words[2 * p + 1], tab, a[p][1], a[p][3]);
  }
  // B masks: even columns keep the low block of a pair, odd ones the high (as 0/1 factors for kMul).
  const uint32_t keep_lo = kMul ? (odd & 1u) ^ 1u : ~odd, keep_hi = kMul ? odd & 1u : odd;
  // Weight scales of rows g (s[0]) and g+8 (s[1]) for the chunk's 8 blocks (kConvFree: as
  // T = sw * 2^-120, and m = -M * T).
  const uint32_t sb[2][2] = {{sb4.x, sb4.y}, {sb4.z, sb4.w}};
  float s[2][8], m[2][8];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int b = 0; b < 8; ++b) {
      if constexpr (kArith == kConvFree) {
        s[r][b] = e4m3_bits(sb[r][b >> 2], b & 3);
        m[r][b] = gdn::mul_rn(s[r][b], kNegMagic);
      } else if ((b & 1) == 0) {
        const float2 v = gdn::e4m3x2_to_float2(sb[r][b >> 2] >> (8 * (b & 3)));
        s[r][b] = v.x;
        s[r][b + 1] = v.y;
      }
    }
  constexpr int kC = kArith == kConvFree ? kMagic : kArith == kDirect ? 0 : kSumMagic;
#pragma unroll
  for (int j = 0; j < kGroups; ++j) {
    const uint32_t xw[8] = {xv[j][0].x, xv[j][0].y, xv[j][0].z, xv[j][0].w,
                            xv[j][1].x, xv[j][1].y, xv[j][1].z, xv[j][1].w};
    const float4* p_a = reinterpret_cast<const float4*>(p_sx[j] + c * 8);
    const float4 sal = gdn::ld_dep_f4(p_a), sah = gdn::ld_dep_f4(p_a + 1);
    const float sa[8] = {sal.x, sal.y, sal.z, sal.w, sah.x, sah.y, sah.z, sah.w};
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      int d[4];
      const uint32_t b0 = kPreMasked ? xw[2 * p] : kMul ? xw[2 * p] * keep_lo : xw[2 * p] & keep_lo;
      const uint32_t b1 = kPreMasked ? xw[2 * p + 1] : kMul ? xw[2 * p + 1] * keep_hi : xw[2 * p + 1] & keep_hi;
      mma_s8_16832(d, a[p], b0, b1, kC);
      // d[0], d[1]: row g, blocks 2p, 2p+1 of token 4j + t; d[2], d[3]: row g+8.
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1, b = 2 * p + (e & 1);
        if constexpr (kArith == kConvFree) {
          const float y = gdn::fma_rn(__int_as_float(d[e]), s[r][b], m[r][b]);
          acc[j][r] = gdn::fma_rn(y, sa[b], acc[j][r]);
        } else {
          const float isum = kArith == kDirect ? __int2float_rn(d[e])
                                               : gdn::add_rn(__int_as_float(d[e]), -kSumMagicF);
          acc[j][r] = gdn::fma_rn(isum, gdn::mul_rn(sa[b], s[r][b]), acc[j][r]);
        }
      }
    }
  }
}

// D = A * B + D, A [16, 32] s8 row-major, B [32, 8] s8 col-major, int32.
__device__ __forceinline__ void mma_s8_16832_acc(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The few-token form: one warp's chunk stream for a slice of at most kTok (1 or 2) tokens.
//
// With 4 tokens the MMA's 8 columns are (token, block parity) and thread t of a quad holds
// token t; with fewer, tokens t >= kTok would repeat token 0's sums, and every thread would
// convert and scale all 16 block sums of every chunk for one useful quarter (or half). Here the
// columns carry kSlots = 4 / kTok consecutive chunks of the warp's stream instead: column n is
// (slot n / 2 / kTok, token n / 2 % kTok, parity n % 2). For each block pair p one chain of MMAs
// runs over the slots, slot s's MMA with chunk s's weights and B zero outside slot s's columns,
// so thread t ends with every block sum of its own slot t / kTok, token t % kTok: it converts
// and scales only those. The fp32 accumulation per (row, token) still runs block by block in
// stream order: in round s the quad's threads of slot s add their chunk's 8 blocks (the others'
// results are discarded), then every thread of the token takes that sum from them (a shuffle).
// Each term is fma(isum * sw, sa, acc), the same rounding as fma(isum, sa * sw, acc) of the
// other forms (both products are exact: |isum| < 2^12 and sa, sw are e4m3 values), so the
// outputs are theirs bit for bit. Magic sums only.
//
// p_w, p_s: this thread's code and scale bytes of chunk 0 (as fp4_tiled_gemm_kernel);
// p_xb: its B column's activation operand row (token (g / 2) % kTok), at byte t * 32;
// p_sa: the activation block scales of its token t % kTok. acc: rows g and g + 8 of that token.
// One round: the kValid chunks c0, c0 + kWarps, ... (slots 0 .. kValid - 1) of the stream.
// The round's weight codes (wv: its kValid chunks).
// kEarly: the round requested before the quantizer wait, by loads ptxas keeps there (gdn::ld_early_v4).
template <int kWarps, int kValid, bool kEarly = false>
__device__ __forceinline__ void few_token_weights(uint4 (&wv)[kValid][2], const uint8_t* p_w, int c0) {
#pragma unroll
  for (int s = 0; s < kValid; ++s) {
    const uint8_t* p = p_w + (long long)(c0 + s * kWarps) * 1024;
    wv[s][0] = kEarly ? gdn::ld_early_v4(p) : gdn::ld_stream_v4(p);
    wv[s][1] = kEarly ? gdn::ld_early_v4(p + 512) : gdn::ld_stream_v4(p + 512);
  }
}

// The rest of the round, once its weight codes are requested.
template <int kWarps, int kTok, int kArith, int kValid>
__device__ __forceinline__ void few_token_round(const uint4 (&wv)[kValid][2], const uint8_t* p_s,
                                                const int8_t* p_xb, const float* p_sa, int c0, int slot_b,
                                                int slot, int src0, uint32_t keep_lo, const TileTables& tab,
                                                float (&acc)[2]) {
  constexpr bool kPreMasked = (kArith & kMaskedB) != 0;
  uint4 xv0 = make_uint4(0, 0, 0, 0), xv1 = xv0, sb4 = xv0;
  float4 sal = make_float4(0.f, 0.f, 0.f, 0.f), sah = sal;
  if (slot_b < kValid) {
    const int8_t* p = p_xb + (long long)(c0 + slot_b * kWarps) * 128;
    xv0 = gdn::ld_dep_v4(p);
    xv1 = gdn::ld_dep_v4(p + 16);
  }
  if (slot < kValid) {
    const int c = c0 + slot * kWarps;
    sb4 = __ldg(reinterpret_cast<const uint4*>(p_s + (long long)c * 128));
    const float4* p_a = reinterpret_cast<const float4*>(p_sa + c * 8);
    sal = gdn::ld_dep_f4(p_a);
    sah = gdn::ld_dep_f4(p_a + 1);
  }
  uint32_t xw[8] = {xv0.x, xv0.y, xv0.z, xv0.w, xv1.x, xv1.y, xv1.z, xv1.w};
  if constexpr (!kPreMasked) {
#pragma unroll
    for (int i = 0; i < 8; ++i) xw[i] &= (i & 1) ? ~keep_lo : keep_lo;
  }
  // The chains: d[p] = magic + the block sums of pair p, each column from its own slot.
  int d[4][4];
#pragma unroll
  for (int s = 0; s < kValid; ++s) {
    const uint32_t words[8] = {wv[s][0].x, wv[s][0].y, wv[s][0].z, wv[s][0].w,
                               wv[s][1].x, wv[s][1].y, wv[s][1].z, wv[s][1].w};
    const bool mine = slot_b == s;
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      uint32_t a[4];
      decode_tile_word<false>(words[2 * p], tab, a[0], a[2]);
      decode_tile_word<false>(words[2 * p + 1], tab, a[1], a[3]);
      const uint32_t b0 = mine ? xw[2 * p] : 0u, b1 = mine ? xw[2 * p + 1] : 0u;
      if (s == 0)
        mma_s8_16832(d[p], a, b0, b1, kSumMagic);
      else
        mma_s8_16832_acc(d[p], a, b0, b1);
    }
  }
  // This thread's chunk: y = isum * sw (exact) for rows g (r = 0) and g + 8, blocks 0..7.
  const uint32_t sb[2][2] = {{sb4.x, sb4.y}, {sb4.z, sb4.w}};
  float y[2][8];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int b = 0; b < 8; b += 2) {
      const float2 v = gdn::e4m3x2_to_float2(sb[r][b >> 2] >> (8 * (b & 3)));
      y[r][b] = gdn::mul_rn(gdn::add_rn(__int_as_float(d[b >> 1][2 * r]), -kSumMagicF), v.x);
      y[r][b + 1] = gdn::mul_rn(gdn::add_rn(__int_as_float(d[b >> 1][2 * r + 1]), -kSumMagicF), v.y);
    }
  const float sa[8] = {sal.x, sal.y, sal.z, sal.w, sah.x, sah.y, sah.z, sah.w};
  // The rounds of the fp32 sums, in stream order.
#pragma unroll
  for (int s = 0; s < kValid; ++s) {
    float a0 = acc[0], a1 = acc[1];
#pragma unroll
    for (int b = 0; b < 8; ++b) {
      a0 = gdn::fma_rn(y[0][b], sa[b], a0);
      a1 = gdn::fma_rn(y[1][b], sa[b], a1);
    }
    acc[0] = __shfl_sync(0xffffffffu, a0, src0 + s * kTok);
    acc[1] = __shfl_sync(0xffffffffu, a1, src0 + s * kTok);
  }
}

// One whole step of the stream: a round of kValid chunks from c0, its weight codes loaded, then run.
template <int kWarps, int kTok, int kArith, int kValid>
__device__ __forceinline__ void few_token_step(const uint8_t* p_w, const uint8_t* p_s, const int8_t* p_xb,
                                               const float* p_sa, int c0, int slot_b, int slot, int src0,
                                               uint32_t keep_lo, const TileTables& tab, float (&acc)[2]) {
  uint4 wv[kValid][2];
  few_token_weights<kWarps, kValid>(wv, p_w, c0);
  few_token_round<kWarps, kTok, kArith, kValid>(wv, p_s, p_xb, p_sa, c0, slot_b, slot, src0, keep_lo, tab, acc);
}

// kEarly: the first round's weight codes are requested before the quantizer wait.
template <int kWarps, int kTok, int kArith>
__device__ __forceinline__ void few_token_stream(const uint8_t* p_w, const uint8_t* p_s, const int8_t* p_xb,
                                                 const float* p_sa, int chunks, int warp, int lane,
                                                 const TileTables& tab, float (&acc)[2]) {
  static_assert((kArith & 3) == kMagicSum && (kArith & (kImad | kPrefetch)) == 0,
                "the few-token form runs the magic sums, without the IMAD and prefetch forms");
  constexpr int kSlots = 4 / kTok;
  const int g = lane >> 2, t = lane & 3;
  const int slot_b = (g >> 1) / kTok;  // the slot of this thread's B column
  const int slot = t / kTok;           // the slot of this thread's D columns
  const int src0 = (lane & ~3) | (t % kTok);  // the quad's lane of this token and slot 0
  const uint32_t keep_lo = (g & 1) ? 0u : 0xffffffffu;
  auto whole = [&](int c0) { return c0 + (kSlots - 1) * kWarps < chunks; };
  int c0 = warp;
  if constexpr ((kArith & kEarly) != 0) {
    if (whole(c0)) {
      uint4 wv[kSlots][2];
      few_token_weights<kWarps, kSlots, true>(wv, p_w, c0);
      gdn::pdl_wait();  // programmatic dependent launch: see w8a8_gemm.cu
      few_token_round<kWarps, kTok, kArith, kSlots>(wv, p_s, p_xb, p_sa, c0, slot_b, slot, src0, keep_lo, tab, acc);
      c0 += kWarps * kSlots;
    } else {
      gdn::pdl_wait();
    }
  } else {
    gdn::pdl_wait();
  }
  for (; whole(c0); c0 += kWarps * kSlots)
    few_token_step<kWarps, kTok, kArith, kSlots>(p_w, p_s, p_xb, p_sa, c0, slot_b, slot, src0, keep_lo, tab, acc);
  // The stream's last chunks (fewer than kSlots; a warp-uniform count).
  const int left = c0 < chunks ? (chunks - c0 + kWarps - 1) / kWarps : 0;
  if constexpr (kSlots > 2) {
    if (left == 3) few_token_step<kWarps, kTok, kArith, 3>(p_w, p_s, p_xb, p_sa, c0, slot_b, slot, src0, keep_lo, tab, acc);
    if (left == 2) few_token_step<kWarps, kTok, kArith, 2>(p_w, p_s, p_xb, p_sa, c0, slot_b, slot, src0, keep_lo, tab, acc);
  }
  if (left == 1) few_token_step<kWarps, kTok, kArith, 1>(p_w, p_s, p_xb, p_sa, c0, slot_b, slot, src0, keep_lo, tab, acc);
}

// kWarps: K-split ways (FP4_WARPS, as above).  kGroups: 4-token groups a CTA.  kUnroll: chunks
// in flight a warp (in registers; with kRing, the depth of its shared-memory ring).  kArith: the
// arithmetic's form (kDirect, kConvFree or kMagicSum, plus kImad, kPinTables, kPrefetch, kEarly and
// kRing; the same bits).  kMinBlocks: CTAs a multiprocessor the registers must allow
// (launch bounds; 0 leaves the register count to ptxas).
// OutT: bf16 or fp16.
// w: tile-major codes, [ceil(N/16)][K/128] 1 KB chunks.  sw: tile-major e4m3 scales,
// [ceil(N/16)][K/128][8 row groups][16].  The rest as fp4_mx_gemm_kernel.
template <int kWarps, int kGroups, int kUnroll, int kArith, int kMinBlocks, typename OutT>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
fp4_tiled_gemm_kernel(const uint8_t* __restrict__ w, const uint8_t* __restrict__ sw, float scale2,
                      const int8_t* __restrict__ xd, const float* __restrict__ sx,
                      const float* __restrict__ gs, OutT* __restrict__ out, long long ldc, int N, int K,
                      int rows) {
  GDN_TRACE_CTA(3);
  // As w8a8_gemm_kernel: the next kernel of the stream may start launching.
  gdn::pdl_launch_dependents();
  constexpr int kTokens = 4 * kGroups;
  constexpr int kM = (kArith & kTwoTiles) != 0 ? 2 : 1;
  static_assert(kM == 1 || (kArith & (kTok1 | kTok2 | kRing | kL2First)) == 0,
                "two weight tiles a CTA run the register rounds only");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int tok0 = blockIdx.x * kTokens;
  const int n0 = blockIdx.y * 16 * kM;
  const int chunks = K >> 7;
  const int blocks = K >> 4;

  // B column g: token g/2 of a group, in the half of K of block parity g%2.
  const uint32_t odd = (g & 1) ? 0xffffffffu : 0u;
  const TileTables tab = tile_tables<(kArith & kPinTables) != 0>(lane);
  const int8_t* p_x[kGroups];
  const float* p_sx[kGroups];
#pragma unroll
  for (int j = 0; j < kGroups; ++j) {
    if constexpr ((kArith & kMaskedB) != 0)
      p_x[j] = xd + (long long)min(tok0 + 4 * j + (g >> 1), rows - 1) * (2 * K) + (g & 1) * K + t * 32;
    else
      p_x[j] = xd + (long long)min(tok0 + 4 * j + (g >> 1), rows - 1) * K + t * 32;
    p_sx[j] = sx + (long long)min(tok0 + 4 * j + t, rows - 1) * blocks;
  }
  // This thread's code and scale bytes of chunk c of the CTA's weight tile m: p_wm[m] + c * 1024
  // (+ 512), p_sm[m] + c * 128 (a tile past N clamped to the last: read, never stored).
  const uint8_t* p_w = w + (long long)blockIdx.y * chunks * 1024 + lane * 16;
  const uint8_t* p_s = sw + (long long)blockIdx.y * chunks * 128 + g * 16;
  const uint8_t* p_wm[kM];
  const uint8_t* p_sm[kM];
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    if constexpr (kM == 1) {
      p_wm[m] = p_w;
      p_sm[m] = p_s;
    } else {
      const long long tile = min((int)blockIdx.y * kM + m, (N - 1) >> 4);
      p_wm[m] = w + tile * chunks * 1024 + lane * 16;
      p_sm[m] = sw + tile * chunks * 128 + g * 16;
    }
  }

  // acc[m][j][r]: row g + 8r of tile m, token 4j + t (scaled by 2^-24 in the conversion-free form).
  float acc[kM][kGroups][2];
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int j = 0; j < kGroups; ++j) acc[m][j][0] = acc[m][j][1] = 0.f;

  // A round: this warp's kUnroll chunks c0, c0 + kWarps, ..., in registers.
  struct Round {
    uint4 w[kUnroll][kM][2];
    uint4 s[kUnroll][kM];
    uint4 x[kUnroll][kGroups][2];
  };
  // The weight's part of a round (codes, scales), then the activations' (written by the quantizer).
  auto load_w = [&](Round& r, int c0, bool early = false) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kWarps;
      if (c < chunks) {
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          const uint8_t* p = p_wm[m] + (long long)c * 1024;
          r.w[u][m][0] = gdn::ld_weight_v4(p, early);
          r.w[u][m][1] = gdn::ld_weight_v4(p + 512, early);
          r.s[u][m] = __ldg(reinterpret_cast<const uint4*>(p_sm[m] + (long long)c * 128));
        }
      }
    }
  };
  auto load_x = [&](Round& r, int c0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kWarps;
      if (c < chunks) {
#pragma unroll
        for (int j = 0; j < kGroups; ++j) {
          r.x[u][j][0] = gdn::ld_dep_v4(p_x[j] + (long long)c * 128);
          r.x[u][j][1] = gdn::ld_dep_v4(p_x[j] + (long long)c * 128 + 16);
        }
      }
    }
  };
  auto load = [&](Round& r, int c0) {
    load_w(r, c0);
    load_x(r, c0);
  };
  auto compute = [&](const Round& r, int c0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kWarps;
      if (c < chunks) {
#pragma unroll
        for (int m = 0; m < kM; ++m)
          tiled_chunk<kGroups, kArith>(r.w[u][m][0], r.w[u][m][1], r.s[u][m], r.x[u], p_sx, c, odd, tab, acc[m]);
      }
    }
  };
  constexpr int kStep = kWarps * kUnroll;

  if constexpr ((kArith & kL2First) != 0) {
    uint32_t n_sm;
    asm("mov.u32 %0, %%nsmid;" : "=r"(n_sm));
    const uint32_t block = blockIdx.y * gridDim.x + blockIdx.x;
    if (threadIdx.x == 0 && block < n_sm * (kMinBlocks > 0 ? kMinBlocks : 1)) {
      gdn::prefetch_l2_bulk(w + (long long)blockIdx.y * chunks * 1024, chunks * 1024);
      gdn::prefetch_l2_bulk(sw + (long long)blockIdx.y * chunks * 128, chunks * 128);
    }
  }
  if constexpr ((kArith & (kTok1 | kTok2)) != 0) {
    static_assert(kGroups == 1 && kUnroll == 1, "the few-token form takes one group, one chunk a slot");
    constexpr int kTok = (kArith & kTok1) ? 1 : 2;
    // B column g: token (g / 2) % kTok; D columns of thread t: token t % kTok.
    const long long tok_b = min(tok0 + (g >> 1) % kTok, rows - 1);
    const int8_t* p_xb = (kArith & kMaskedB) != 0 ? xd + tok_b * (2 * K) + (g & 1) * K + t * 32
                                                  : xd + tok_b * K + t * 32;
    const float* p_sa = sx + (long long)min(tok0 + t % kTok, rows - 1) * blocks;
    few_token_stream<kWarps, kTok, kArith>(p_w, p_s, p_xb, p_sa, chunks, warp, lane, tab, acc[0][0]);
  } else if constexpr ((kArith & kRing) != 0) {
    static_assert((kArith & (kEarly | kPrefetch)) == 0, "the ring requests its first chunks early itself");
    // Slot i of this warp's ring: the chunk's two code pieces and its scale piece, 16 bytes a lane
    // each, at ring[((warp * kUnroll + i) * 3 + piece) * 32 + lane] (dynamic shared memory,
    // _build.fp4_tiled_smem). Each lane copies and reads back only its own bytes, so its own
    // cp.async wait orders them, and it refills a slot only after computing on what it read.
    extern __shared__ uint4 ring[];
    uint4* mine = ring + warp * kUnroll * 96 + lane;
    auto issue = [&](int i, int c) {
      if (c < chunks) {
        const uint8_t* p = p_w + (long long)c * 1024;
        gdn::cp_async16(mine + i * 96, p);
        gdn::cp_async16(mine + i * 96 + 32, p + 512);
        gdn::cp_async16(mine + i * 96 + 64, p_s + (long long)c * 128);
      }
      gdn::cp_async_commit();  // one group a slot, empty past the stream's end, so the counts hold
    };
#pragma unroll
    for (int i = 0; i < kUnroll; ++i) issue(i, warp + i * kWarps);
    // Programmatic dependent launch: see w8a8_gemm.cu (cp.async stays before the wait).
    gdn::pdl_wait();
    int i = 0;
    for (int c = warp; c < chunks; c += kWarps) {
      gdn::cp_async_wait<kUnroll - 1>();  // this slot's group (the oldest) has landed
      const uint4 w0 = mine[i * 96], w1 = mine[i * 96 + 32], sb = mine[i * 96 + 64];
      uint4 xv[kGroups][2];
#pragma unroll
      for (int j = 0; j < kGroups; ++j) {
        xv[j][0] = gdn::ld_dep_v4(p_x[j] + (long long)c * 128);
        xv[j][1] = gdn::ld_dep_v4(p_x[j] + (long long)c * 128 + 16);
      }
      tiled_chunk<kGroups, kArith>(w0, w1, sb, xv, p_sx, c, odd, tab, acc[0]);
      issue(i, c + kUnroll * kWarps);
      i = i + 1 == kUnroll ? 0 : i + 1;
    }
  } else if constexpr ((kArith & kEarly) != 0) {
    // The first round's weight bytes are requested before the quantizer wait, the rest after.
    Round r;
    load_w(r, warp, true);
    // Programmatic dependent launch: see w8a8_gemm.cu.
    gdn::pdl_wait();
    load_x(r, warp);
    compute(r, warp);
    for (int c0 = warp + kStep; c0 < chunks; c0 += kStep) {
      load(r, c0);
      compute(r, c0);
    }
  } else if constexpr ((kArith & kPrefetch) != 0) {
    gdn::pdl_wait();
    // The next round's loads are issued before the current round is computed (two rounds of
    // registers, alternating, so that no copy is needed).
    Round r0, r1;
    load(r0, warp);
    for (int c0 = warp; c0 < chunks; c0 += 2 * kStep) {
      load(r1, c0 + kStep);
      compute(r0, c0);
      if (c0 + kStep >= chunks) break;
      load(r0, c0 + 2 * kStep);
      compute(r1, c0 + kStep);
    }
  } else {
    gdn::pdl_wait();
    for (int c0 = warp; c0 < chunks; c0 += kStep) {
      Round r;
      load(r, c0);
      compute(r, c0);
    }
  }

  // Add the warps' sums in warp order and write the outputs.
  const float s2 = gdn::mul_rn(scale2, 0.25f);
  constexpr int kPer = kGroups * 2;  // sums a thread of one weight tile
  add_warps_in_order<kWarps, kM * kPer>([&](int i) { return acc[i / kPer][(i % kPer) >> 1][i & 1]; },
                                        [&](int mjr, int l, float sum) {
    const int m = kM == 1 ? 0 : mjr / kPer, jr = kM == 1 ? mjr : mjr % kPer;
    const int n = n0 + 16 * m + (l >> 2) + (jr & 1) * 8;
    const int tok = tok0 + (jr >> 1) * 4 + (l & 3);
    if (n >= N || tok >= rows) return;
    if constexpr ((kArith & 3) == kConvFree) sum = gdn::mul_rn(sum, 0x1p24f);
    out[(long long)tok * ldc + n] = gdn::from_float<OutT>(gdn::mul_rn(sum, gdn::mul_rn(gdn::ld_dep(gs + tok), s2)));
  });
}
