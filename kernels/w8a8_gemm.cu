// Decode-shaped W8A8 GEMM on the 8-bit tensor cores (int8 and e4m3).
//
// out[rows, N] = epilogue(xq [rows, K] . w [N, K]^T), written once at row stride ldc.
//
// The weight is the MMA's A operand (N on the M side, 16 weight rows a warp) and the quantized
// activations its B operand (8 tokens a tile), so at 1-16 rows every weight byte is loaded once,
// 16 bytes a thread. A CTA owns 16 weight rows and kTokens tokens; its kWarps warps split K into
// 128-wide chunks (warp w takes chunks w, w + kWarps, ...) and are reduced in shared memory in
// warp order. The split depends on nothing but K, so a row's arithmetic is the same at every row
// count (bitwise row invariance).
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
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <int kFmt, typename Acc>
__device__ __forceinline__ void mma_chunk(Acc (&d)[4], const uint32_t (&a)[4],
                                          const uint32_t (&b)[2]) {
  if constexpr (kFmt == kInt8) {
    gdn::mma_s8_16832(d, a, b);
  } else {
    gdn::mma_e4m3_16832(d, a, b);
  }
}

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
// round r + 1 before computing round r (twice the registers, loads always in flight).
// kMinBlocks: CTAs a multiprocessor should hold (register cap for ptxas).  OutT: bf16 or fp16
// output.  SwT: the weight scale's type (fp32, or bf16 for block scales stored so).
// None of kM, kUnroll, kPipe, kMinBlocks changes any output bit: a row's products, their chunk
// partials and the order they are summed in depend on kWarps and K alone.
// w: [N, K] 1-byte weight.  sw: [N] (per channel) or [ceil(N/128), K/128] (block) scales.
// xq: [rows, K] quantized activations, row stride K.  sx: [rows] or [rows, K/128] scales.
// out: [rows, N] at row stride ldc (elements).
template <int kFmt, int kWarps, int kTiles, int kM, int kUnroll, int kPipe, int kMinBlocks,
          typename OutT, typename SwT>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
w8a8_gemm_kernel(const uint8_t* __restrict__ w, const SwT* __restrict__ sw,
                 const uint8_t* __restrict__ xq, const float* __restrict__ sx,
                 OutT* __restrict__ out, long long ldc, int N, int K, int rows) {
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
  const uint8_t* p_w[kM][2];
  int i_nb[kM];
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    p_w[m][0] = w + (long long)min(n0 + 16 * m + g, N - 1) * K + t * 16;
    p_w[m][1] = w + (long long)min(n0 + 16 * m + g + 8, N - 1) * K + t * 16;
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

  // The weight part of a round: independent of the kernel before this one.
  auto load_w = [&](R& b, int c0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kWarps;
      if (c < chunks) {
        const long long off = (long long)c * 128;
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          b.w[u][m][0] = gdn::ld_stream_v4(p_w[m][0] + off);
          b.w[u][m][1] = gdn::ld_stream_v4(p_w[m][1] + off);
          b.w[u][m][2] = gdn::ld_stream_v4(p_w[m][0] + off + 64);
          b.w[u][m][3] = gdn::ld_stream_v4(p_w[m][1] + off + 64);
          if constexpr (kFmt == kFp8Block) b.sw[u][m] = to_float(sw[(long long)i_nb[m] * chunks + c]);
        }
      }
    }
  };
  // The activation part: written by the quantizer, read only after pdl_wait.
  auto load_x = [&](R& b, int c0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kWarps;
      if (c < chunks) {
        const long long off = (long long)c * 128;
#pragma unroll
        for (int j = 0; j < kTiles; ++j) {
          b.x[u][j][0] = gdn::ld_nc_v4(p_x[j] + off);
          b.x[u][j][1] = gdn::ld_nc_v4(p_x[j] + off + 64);
          if constexpr (kFmt == kFp8Block) {
            b.sx[u][j][0] = __ldg(sx + (long long)i_tok[j][0] * chunks + c);
            b.sx[u][j][1] = __ldg(sx + (long long)i_tok[j][1] * chunks + c);
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

  auto compute = [&](const R& b, int c0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
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
          // The fp8 tensor cores keep only about 13 bits of a running sum, so each 128-wide
          // chunk's partial is promoted to an fp32 register accumulator (scaled by
          // sx[token, kb] * sw[nb, kb] for block scales), in chunk order.
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

  // The first round's weight is requested before waiting on the quantizer: with programmatic
  // dependent launch (GDN_KERNELS_PDL=1) those bytes arrive while it still runs. Launched
  // plainly, the wait returns at once.
  if constexpr (kPipe) {
    R cur, nxt;
    load_w(cur, warp);
    gdn::pdl_wait();
    load_x(cur, warp);
    for (int c0 = warp; c0 < chunks; c0 += kStep) {
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
    load_w(cur, warp);
    gdn::pdl_wait();
    for (int c0 = warp; c0 < chunks; c0 += kStep) {
      if (c0 != warp) load_w(cur, c0);
      load_x(cur, c0);
      compute(cur, c0);
    }
  }

  // Split-K reduction over warps, in warp order, then the epilogue.
  constexpr int kFrags = kM * kTiles * 4;
  __shared__ Acc red[kWarps][kFrags][32];
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) red[warp][(m * kTiles + j) * 4 + r][lane] = acc[m][j][r];
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
    if constexpr (kFmt == kInt8) {
      y = gdn::mul_rn(gdn::mul_rn(__int2float_rn(sum), sx[tok]), to_float(sw[n]));
    } else if constexpr (kFmt == kFp8Channel) {
      y = gdn::mul_rn(gdn::mul_rn(sum, sx[tok]), to_float(sw[n]));
    } else {
      y = sum;
    }
    out[(long long)tok * ldc + n] = gdn::from_float<OutT>(y);
  }
}
