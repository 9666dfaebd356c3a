// NVFP4 W4A4 "mx" GEMM on Hopper's int8 tensor cores, row-invariant at every row count.
//
// out[m, n] = (acc[m, n] / 4) * gs[m] * scale2, acc = sum over 16-blocks b (in one fixed order) of
//   isum(m, n, b) * (sa[m, b] * sw[n, b]),   isum = sum_i (2 qa) * (2 qw)   (exact int32)
// Every e2m1 value is half an integer, so twice the codes are int8 and one m16n8k16 int8 MMA
// computes one block's sum exactly; the block's scale product is exact in fp32 (two e4m3); the
// only rounding is the fp32 accumulation over blocks, in a K order that depends on K alone.
//
// Layouts: the weight is read in the checkpoint layout (packed [N, K/2], block scales e4m3
// [N, K/16]); the activations come from fp4_quant_kernel in the operand form (int8 [rows, K] in
// mma layout, fp32 block scales [rows, K/16], gs [rows]).
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

// D = A * B + D, A [16, 16] s8 row-major, B [16, 8] s8 col-major, int32 accumulation.
__device__ __forceinline__ void mma_s8_16816(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 "
      "{%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a0), "r"(a1), "r"(b));
}

// Quad transpose: on entry thread t holds a weight row's blocks 2t (words 0, 1) and 2t+1 (words
// 2, 3); on exit v[s] holds unit t (codes 4t..4t+3) of block 2s (low half) and 2s+1 (high half).
__device__ __forceinline__ void quad_transpose(const uint4& w, uint32_t (&v)[4], int t) {
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
fp4_mx_gemm_kernel(const uint8_t* __restrict__ w, const uint8_t* __restrict__ sw, float scale2,
                   const int8_t* __restrict__ xd, const float* __restrict__ sx,
                   const float* __restrict__ gs, OutT* __restrict__ out, long long ldc, int N, int K,
                   int rows) {
  constexpr int kTokens = 8 * kTiles;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int tok0 = blockIdx.x * kTokens;
  const int n0 = blockIdx.y * 16;
  const int chunks = K >> 7;
  const int blocks = K >> 4;
  const long long half_k = K >> 1;

  const long long r0 = min(n0 + g, N - 1), r1 = min(n0 + g + 8, N - 1);
  const uint8_t* p_w0 = w + r0 * half_k + t * 16;
  const uint8_t* p_w1 = w + r1 * half_k + t * 16;
  const uint8_t* p_s0 = sw + r0 * blocks;
  const uint8_t* p_s1 = sw + r1 * blocks;
  const int8_t* p_x[kTiles];
  const float* p_sx[kTiles][2];
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    p_x[j] = xd + (long long)min(tok0 + j * 8 + g, rows - 1) * K + t * 32;
    p_sx[j][0] = sx + (long long)min(tok0 + j * 8 + 2 * t, rows - 1) * blocks;
    p_sx[j][1] = sx + (long long)min(tok0 + j * 8 + 2 * t + 1, rows - 1) * blocks;
  }

  // Programmatic dependent launch: see w8a8_gemm.cu.
  gdn::pdl_wait();

  float acc[kTiles][4];
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) acc[j][r] = 0.f;

  for (int c0 = warp; c0 < chunks; c0 += kWarps * kUnroll) {
    uint4 b_w[kUnroll][2];
    uint2 b_sw[kUnroll][2];
    uint4 b_x[kUnroll][kTiles][2];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kWarps;
      if (c < chunks) {
        b_w[u][0] = gdn::ld_stream_v4(p_w0 + (long long)c * 64);
        b_w[u][1] = gdn::ld_stream_v4(p_w1 + (long long)c * 64);
        b_sw[u][0] = __ldg(reinterpret_cast<const uint2*>(p_s0 + c * 8));
        b_sw[u][1] = __ldg(reinterpret_cast<const uint2*>(p_s1 + c * 8));
#pragma unroll
        for (int j = 0; j < kTiles; ++j) {
          b_x[u][j][0] = gdn::ld_nc_v4(p_x[j] + (long long)c * 128);
          b_x[u][j][1] = gdn::ld_nc_v4(p_x[j] + (long long)c * 128 + 16);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kWarps;
      if (c < chunks) {
        uint32_t v0[4], v1[4];
        quad_transpose(b_w[u][0], v0, t);
        quad_transpose(b_w[u][1], v1, t);
        // Weight block scales of rows g and g+8 for the chunk's 8 blocks.
        float s0[8], s1[8];
        const uint32_t sw0[2] = {b_sw[u][0].x, b_sw[u][0].y}, sw1[2] = {b_sw[u][1].x, b_sw[u][1].y};
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
          const uint32_t xw[8] = {b_x[u][j][0].x, b_x[u][j][0].y, b_x[u][j][0].z, b_x[u][j][0].w,
                                  b_x[u][j][1].x, b_x[u][j][1].y, b_x[u][j][1].z, b_x[u][j][1].w};
          const float4* p_a0 = reinterpret_cast<const float4*>(p_sx[j][0] + c * 8);
          const float4* p_a1 = reinterpret_cast<const float4*>(p_sx[j][1] + c * 8);
          const float4 sa0l = __ldg(p_a0), sa0h = __ldg(p_a0 + 1);
          const float4 sa1l = __ldg(p_a1), sa1h = __ldg(p_a1 + 1);
          const float sa0[8] = {sa0l.x, sa0l.y, sa0l.z, sa0l.w, sa0h.x, sa0h.y, sa0h.z, sa0h.w};
          const float sa1[8] = {sa1l.x, sa1l.y, sa1l.z, sa1l.w, sa1h.x, sa1h.y, sa1h.z, sa1h.w};
#pragma unroll
          for (int b = 0; b < 8; ++b) {
            const int sh = 16 * (b & 1);
            const uint32_t a0 = gdn::e2m1x4_to_s8x4((v0[b >> 1] >> sh) & 0xffffu);
            const uint32_t a1 = gdn::e2m1x4_to_s8x4((v1[b >> 1] >> sh) & 0xffffu);
            int d[4] = {0, 0, 0, 0};
            mma_s8_16816(d, a0, a1, xw[b]);
            // c0, c1: row g, tokens 2t, 2t+1; c2, c3: row g+8.
            acc[j][0] = gdn::fma_rn(__int2float_rn(d[0]), gdn::mul_rn(sa0[b], s0[b]), acc[j][0]);
            acc[j][1] = gdn::fma_rn(__int2float_rn(d[1]), gdn::mul_rn(sa1[b], s0[b]), acc[j][1]);
            acc[j][2] = gdn::fma_rn(__int2float_rn(d[2]), gdn::mul_rn(sa0[b], s1[b]), acc[j][2]);
            acc[j][3] = gdn::fma_rn(__int2float_rn(d[3]), gdn::mul_rn(sa1[b], s1[b]), acc[j][3]);
          }
        }
      }
    }
  }

  __shared__ float red[kWarps][kTiles * 4][32];
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) red[warp][j * 4 + r][lane] = acc[j][r];
  __syncthreads();
  const float s2 = gdn::mul_rn(scale2, 0.25f);
  for (int e = threadIdx.x; e < kTiles * 4 * 32; e += kWarps * 32) {
    const int jr = e >> 5, l = e & 31;
    const int j = jr >> 2, r = jr & 3;
    const int n = n0 + (l >> 2) + (r >> 1) * 8;
    const int tok = tok0 + j * 8 + 2 * (l & 3) + (r & 1);
    if (n >= N || tok >= rows) continue;
    float sum = red[0][jr][l];
#pragma unroll
    for (int v = 1; v < kWarps; ++v) sum = gdn::add_rn(sum, red[v][jr][l]);
    out[(long long)tok * ldc + n] = gdn::from_float<OutT>(gdn::mul_rn(sum, gdn::mul_rn(gs[tok], s2)));
  }
}
