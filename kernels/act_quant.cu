// Per-token activation quantization for the W8A8 GEMMs.
//
// x [rows, K] bf16/fp16 at row stride ldx -> q [rows, K] (int8 or e4m3 bytes, row stride K) and
// fp32 scales. The arithmetic is the numpy reference's, operation for operation
// (gdn_kernels/reference.py), so q and the scales are bit-equal to it.
#include "gdn/convert.cuh"
#include "gdn/ptx.cuh"
#include "gdn/vec.cuh"

// Scales are tested for zero on their bits: under -ftz a float comparison would take a
// subnormal scale (a row of subnormal-sized values) for zero.

namespace {

// Eight values quantized with a nonzero scale, packed in 8 bytes: int8 rne(v / s) clamped to
// +-127 (kInt8), or e4m3_rn(v / s) saturating at +-448.
template <bool kInt8>
__device__ __forceinline__ uint2 quant8(const float (&f)[8], float scale) {
  uint32_t packed[2] = {0u, 0u};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    uint32_t b;
    if constexpr (kInt8) {
      b = (uint32_t)(max(-127, min(127, __float2int_rn(gdn::div_rn(f[i], scale)))) & 0xff);
    } else {
      b = (uint32_t)gdn::e4m3_rn(gdn::div_rn(f[i], scale));
    }
    packed[i >> 2] |= b << ((i & 3) * 8);
  }
  return make_uint2(packed[0], packed[1]);
}

// One token row quantized with one scale: s = amax / 127 (kInt8) or amax / 448; an all-zero row
// gives s = 0 and zeros. A cluster of kCluster CTAs a row (blockIdx.x its rank, blockIdx.y the
// row), each a contiguous slice of whole 8-value groups, 8 values a thread an iteration. The row's
// amax is exchanged through distributed shared memory, so the division work of a long row is
// spread over kCluster multiprocessors; the first kKeep iterations stay in registers between the
// amax pass and the quantizing pass.
template <bool kInt8, typename T, int kThreads, int kCluster>
__device__ __forceinline__ void quant_row(const T* __restrict__ x, uint8_t* __restrict__ q,
                                          float* __restrict__ s, int K, long long ldx) {
  constexpr int kKeep = 2;
  __shared__ uint32_t red[kThreads / 32];
  __shared__ uint32_t slot;
  const long long row = blockIdx.y;
  const int octets = K >> 3, per = (octets + kCluster - 1) / kCluster;
  const int o0 = blockIdx.x * per, o1 = min(o0 + per, octets);
  const T* p_x = x + row * ldx;
  uint8_t* p_q = q + row * (long long)K;
  uint4 keep[kKeep];
  uint32_t amax = 0u;
#pragma unroll
  for (int i = 0; i < kKeep; ++i) {
    const int o = o0 + i * kThreads + threadIdx.x;
    if (o < o1) {
      keep[i] = __ldg(reinterpret_cast<const uint4*>(p_x) + o);
      float f[8];
      gdn::unpack8<T>(keep[i], f);
#pragma unroll
      for (int e = 0; e < 8; ++e) amax = max(amax, gdn::abs_bits(f[e]));
    }
  }
  for (int o = o0 + kKeep * kThreads + threadIdx.x; o < o1; o += kThreads) {
    float f[8];
    gdn::unpack8<T>(__ldg(reinterpret_cast<const uint4*>(p_x) + o), f);
#pragma unroll
    for (int e = 0; e < 8; ++e) amax = max(amax, gdn::abs_bits(f[e]));
  }
  amax = gdn::block_max_bits<kThreads>(amax, red);
  if constexpr (kCluster > 1) amax = gdn::cluster_max_bits<kCluster>(amax, &slot);
  const float scale = gdn::div_rn(__uint_as_float(amax), kInt8 ? 127.f : 448.f);
  if (blockIdx.x == 0 && threadIdx.x == 0) s[row] = scale;
  const bool zero = __float_as_uint(scale) == 0u;
#pragma unroll
  for (int i = 0; i < kKeep; ++i) {
    const int o = o0 + i * kThreads + threadIdx.x;
    if (o < o1) {
      float f[8];
      gdn::unpack8<T>(keep[i], f);
      reinterpret_cast<uint2*>(p_q)[o] = zero ? make_uint2(0u, 0u) : quant8<kInt8>(f, scale);
    }
  }
  for (int o = o0 + kKeep * kThreads + threadIdx.x; o < o1; o += kThreads) {
    float f[8];
    gdn::unpack8<T>(__ldg(reinterpret_cast<const uint4*>(p_x) + o), f);
    reinterpret_cast<uint2*>(p_q)[o] = zero ? make_uint2(0u, 0u) : quant8<kInt8>(f, scale);
  }
}

// quant_row without the cluster: each of the kSplit CTAs of a row finds the whole row's amax
// itself (the row read kSplit times, from L2) and quantizes its own slice of whole 8-value groups,
// so no CTA waits on another. The walk of a CTA's amax pass starts at its slice and wraps around
// the row, so the slice's first kKeep iterations stay in registers for the quantizing pass. The
// same max and the same per-value steps: the same bytes and scale.
template <bool kInt8, typename T, int kThreads, int kSplit>
__device__ __forceinline__ void quant_row_split(const T* __restrict__ x, uint8_t* __restrict__ q,
                                                float* __restrict__ s, int K, long long ldx) {
  constexpr int kKeep = 2;
  __shared__ uint32_t red[kThreads / 32];
  const long long row = blockIdx.y;
  const int octets = K >> 3, per = (octets + kSplit - 1) / kSplit;
  const int o0 = min((int)blockIdx.x * per, octets), own = min(per, octets - o0);
  const uint4* p_x = reinterpret_cast<const uint4*>(x + row * ldx);
  uint8_t* p_q = q + row * (long long)K;
  auto at = [&](int i) { return o0 + i < octets ? o0 + i : o0 + i - octets; };
  uint4 keep[kKeep];
  uint32_t amax = 0u;
#pragma unroll
  for (int j = 0; j < kKeep; ++j) {
    const int i = j * kThreads + threadIdx.x;
    if (i < octets) {
      keep[j] = __ldg(p_x + at(i));
      float f[8];
      gdn::unpack8<T>(keep[j], f);
#pragma unroll
      for (int e = 0; e < 8; ++e) amax = max(amax, gdn::abs_bits(f[e]));
    }
  }
#pragma unroll 4
  for (int i = kKeep * kThreads + threadIdx.x; i < octets; i += kThreads) {
    float f[8];
    gdn::unpack8<T>(__ldg(p_x + at(i)), f);
#pragma unroll
    for (int e = 0; e < 8; ++e) amax = max(amax, gdn::abs_bits(f[e]));
  }
  amax = gdn::block_max_bits<kThreads>(amax, red);
  const float scale = gdn::div_rn(__uint_as_float(amax), kInt8 ? 127.f : 448.f);
  if (blockIdx.x == 0 && threadIdx.x == 0) s[row] = scale;
  const bool zero = __float_as_uint(scale) == 0u;
#pragma unroll
  for (int j = 0; j < kKeep; ++j) {
    const int i = j * kThreads + threadIdx.x;
    if (i < own) {
      float f[8];
      gdn::unpack8<T>(keep[j], f);
      reinterpret_cast<uint2*>(p_q)[o0 + i] = zero ? make_uint2(0u, 0u) : quant8<kInt8>(f, scale);
    }
  }
  for (int i = kKeep * kThreads + threadIdx.x; i < own; i += kThreads) {
    float f[8];
    gdn::unpack8<T>(__ldg(p_x + o0 + i), f);
    reinterpret_cast<uint2*>(p_q)[o0 + i] = zero ? make_uint2(0u, 0u) : quant8<kInt8>(f, scale);
  }
}

// The end of one (token, 128) group's e4m3 quantization, one warp a group, 4 values v[0..3] a
// lane whose |v| bits the lane's amax holds: the warp's amax, s = amax / 448 (lane 0 stores it at
// s[s_at]), and the lane's 4 bytes e4m3_rn(v / s) at q[q_at] (zeros for an all-zero group).
template <int kN>
__device__ __forceinline__ void fp8_group_store(const float (&v)[kN], uint32_t amax, float* s, long long s_at,
                                                uint8_t* q, long long q_at, int lane) {
  amax = gdn::warp_max_bits(amax);
  const float scale = gdn::div_rn(__uint_as_float(amax), 448.f);
  if (lane == 0) s[s_at] = scale;
  uint32_t packed = 0u;
  if (__float_as_uint(scale) != 0u) {
#pragma unroll
    for (int i = 0; i < 4; ++i) packed |= (uint32_t)gdn::e4m3_rn(gdn::div_rn(v[i], scale)) << (i * 8);
  }
  *reinterpret_cast<uint32_t*>(q + q_at) = packed;
}

}  // namespace

// Row quantizers run as clusters of this many CTAs a token row.
#define GDN_QUANT_CLUSTER 8

// Per token, kInt8: s = amax / 127, q = rne(x / s) clamped to +-127 (int8); else s = amax / 448,
// q = e4m3_rn(x / s) (fp8 per channel's activations). An all-zero row gives s = 0 and zeros.
// T: bf16 or fp16.  kThreads: threads a CTA.  Grid: (GDN_QUANT_CLUSTER, rows).
// x: [rows, K] at row stride ldx (elements); q: [rows, K] bytes; s: [rows] fp32.
template <bool kInt8, typename T, int kThreads>
__global__ void __launch_bounds__(kThreads) __cluster_dims__(GDN_QUANT_CLUSTER, 1, 1)
act_quant_row_kernel(const T* __restrict__ x, uint8_t* __restrict__ q, float* __restrict__ s, int K, long long ldx) {
  GDN_TRACE_CTA(0);
  // Programmatic dependent launch: the GEMM that reads this output may start launching now (it
  // waits for this kernel before reading it); this kernel waits for the one before it (the
  // producer of x, or the previous GEMM still reading the workspace) before touching memory.
  gdn::pdl_chain();
  GDN_TRACE_WAITED();
  quant_row<kInt8, T, kThreads, GDN_QUANT_CLUSTER>(x, q, s, K, ldx);
}

// act_quant_row_kernel without the cluster (quant_row_split): GDN_QUANT_CLUSTER CTAs a row, each
// the whole row's amax. The same bytes and scales. Grid: (GDN_QUANT_CLUSTER, rows).
template <bool kInt8, typename T, int kThreads>
__global__ void __launch_bounds__(kThreads)
act_quant_split_kernel(const T* __restrict__ x, uint8_t* __restrict__ q, float* __restrict__ s, int K,
                       long long ldx) {
  GDN_TRACE_CTA(0);
  gdn::pdl_chain();  // as act_quant_row_kernel
  GDN_TRACE_WAITED();
  quant_row_split<kInt8, T, kThreads, GDN_QUANT_CLUSTER>(x, q, s, K, ldx);
}

// act_quant_row_kernel for many rows: one CTA a row, no cluster (from _build.QUANT_ROWS_MIN rows
// the rows alone fill the GPU, and a cluster a row costs more to schedule than it saves). The same
// arithmetic, so the same bytes and scales. Grid: (1, rows).
template <bool kInt8, typename T, int kThreads>
__global__ void __launch_bounds__(kThreads)
act_quant_rows_kernel(const T* __restrict__ x, uint8_t* __restrict__ q, float* __restrict__ s, int K, long long ldx) {
  gdn::pdl_chain();  // as act_quant_row_kernel
  quant_row<kInt8, T, kThreads, 1>(x, q, s, K, ldx);
}

// e4m3 per (token, 128-wide K group): s = amax(group) / 448; q = e4m3_rn(x / s) saturating at
// +-448; an all-zero group gives s = 0 and zeros. One warp a group, 4 elements a lane.
// x: [rows, K] at row stride ldx; q: [rows, K] e4m3 bytes; s: [rows, K / 128] fp32.
// Grid: (ceil(K / 128 / (kThreads / 32)), rows).
template <typename T, int kThreads>
__global__ void __launch_bounds__(kThreads)
act_quant_fp8_group_kernel(const T* __restrict__ x, uint8_t* __restrict__ q,
                           float* __restrict__ s, int K, long long ldx) {
  GDN_TRACE_CTA(0);
  // Programmatic dependent launch: the GEMM that reads this output may start launching now (it
  // waits for this kernel before reading it); this kernel waits for the one before it (the
  // producer of x, or the previous GEMM still reading the workspace) before touching memory.
  gdn::pdl_chain();
  GDN_TRACE_WAITED();
  const long long row = blockIdx.y;
  const int groups = K >> 7;
  const int lane = threadIdx.x & 31;
  const int grp = blockIdx.x * (kThreads / 32) + (threadIdx.x >> 5);
  if (grp >= groups) return;
  const uint2 raw = __ldg(reinterpret_cast<const uint2*>(x + row * ldx + grp * 128 + lane * 4));
  float f[8];
  gdn::unpack8<T>(make_uint4(raw.x, raw.y, 0u, 0u), f);
  uint32_t amax = 0u;
#pragma unroll
  for (int i = 0; i < 4; ++i) amax = max(amax, gdn::abs_bits(f[i]));
  fp8_group_store(f, amax, s, row * groups + grp, q, row * (long long)K + grp * 128 + lane * 4, lane);
}

// ---- SiLU-and-multiply fused into the quantization of a dense FFN's down-projection input ----
//
// gu [rows, 2K] bf16/fp16 at row stride ldg holds the stacked [gate | up] projection (gate in
// columns 0..K-1, up in K..2K-1); h = silu(gate) * up in fp32 is quantized like the kernels above
// quantize x, straight into the W8A8 workspace, so the intermediate is never stored. The
// quantization steps are the references' (gdn_kernels/reference.py); h itself goes through
// expf, which is not bit-equal to numpy's exp, so only the quantization of a given h is exact.

namespace {

// silu(g) * u = g / (1 + exp(-g)) * u in fp32. Each step is an explicit operation, so the amax
// pass and the quantizing pass of a row get the same bits. A very negative g gives exp = inf and
// a zero, never NaN.
__device__ __forceinline__ float silu_mul(float g, float u) {
  return gdn::mul_rn(gdn::div_rn(g, gdn::add_rn(1.f, expf(-g))), u);
}

// Eight h values from 16-byte loads of gate at p_g and up at p_u (both 16-byte aligned).
template <typename T>
__device__ __forceinline__ void silu_mul8(const T* p_g, const T* p_u, float (&h)[8]) {
  float g[8], u[8];
  gdn::unpack8<T>(__ldg(reinterpret_cast<const uint4*>(p_g)), g);
  gdn::unpack8<T>(__ldg(reinterpret_cast<const uint4*>(p_u)), u);
#pragma unroll
  for (int i = 0; i < 8; ++i) h[i] = silu_mul(g[i], u[i]);
}

// One row of h quantized with one scale: s = amax / kMax; q = int8 rne (kInt8) or e4m3 rn of
// h / s. One CTA a row; gate and up are read twice (amax, then quantize), the second time from
// L1/L2.
template <bool kInt8, typename T, int kThreads>
__device__ __forceinline__ void silu_mul_quant_row(const T* __restrict__ gu, uint8_t* __restrict__ q,
                                                   float* __restrict__ s, int K, long long ldg) {
  __shared__ uint32_t red[kThreads / 32];
  const long long row = blockIdx.x;
  const T* p_g = gu + row * ldg;
  const T* p_u = p_g + K;
  uint8_t* p_q = q + row * (long long)K;
  uint32_t amax = 0u;
  for (int k = threadIdx.x * 8; k < K; k += kThreads * 8) {
    float h[8];
    silu_mul8<T>(p_g + k, p_u + k, h);
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = max(amax, gdn::abs_bits(h[i]));
  }
  amax = gdn::block_max_bits<kThreads>(amax, red);
  const float scale = gdn::div_rn(__uint_as_float(amax), kInt8 ? 127.f : 448.f);
  if (threadIdx.x == 0) s[row] = scale;
  for (int k = threadIdx.x * 8; k < K; k += kThreads * 8) {
    float h[8];
    silu_mul8<T>(p_g + k, p_u + k, h);
    *reinterpret_cast<uint2*>(p_q + k) =
        __float_as_uint(scale) == 0u ? make_uint2(0u, 0u) : quant8<kInt8>(h, scale);
  }
}

}  // namespace

// int8 per token of h = silu(gate) * up: s = amax(h row) / 127, q = rne(h / s) clamped to +-127.
// T: bf16 or fp16.  kThreads: threads a CTA.  Grid: (rows).
// gu: [rows, 2K] at row stride ldg (elements, a multiple of 8); q: [rows, K] int8; s: [rows] fp32.
template <typename T, int kThreads>
__global__ void __launch_bounds__(kThreads)
act_quant_silu_mul_int8_kernel(const T* __restrict__ gu, int8_t* __restrict__ q,
                               float* __restrict__ s, int K, long long ldg) {
  // Programmatic dependent launch: the GEMM that reads this output may start launching now (it
  // waits for this kernel before reading it); this kernel waits for the one before it (the
  // producer of x, or the previous GEMM still reading the workspace) before touching memory.
  gdn::pdl_chain();
  silu_mul_quant_row<true, T, kThreads>(gu, reinterpret_cast<uint8_t*>(q), s, K, ldg);
}

// e4m3 per token of h: s = amax(h row) / 448, q = e4m3_rn(h / s).  Grid: (rows).
// gu: [rows, 2K] at row stride ldg; q: [rows, K] e4m3 bytes; s: [rows] fp32.
template <typename T, int kThreads>
__global__ void __launch_bounds__(kThreads)
act_quant_silu_mul_fp8_row_kernel(const T* __restrict__ gu, uint8_t* __restrict__ q,
                                  float* __restrict__ s, int K, long long ldg) {
  // Programmatic dependent launch: the GEMM that reads this output may start launching now (it
  // waits for this kernel before reading it); this kernel waits for the one before it (the
  // producer of x, or the previous GEMM still reading the workspace) before touching memory.
  gdn::pdl_chain();
  silu_mul_quant_row<false, T, kThreads>(gu, q, s, K, ldg);
}

// e4m3 per (token, 128-wide group) of h: s = amax(h group) / 448, q = e4m3_rn(h / s). One warp
// a group, 4 elements a lane (8-byte loads of gate and up).
// gu: [rows, 2K] at row stride ldg; q: [rows, K] e4m3 bytes; s: [rows, K / 128] fp32.
// Grid: (ceil(K / 128 / (kThreads / 32)), rows).
template <typename T, int kThreads>
__global__ void __launch_bounds__(kThreads)
act_quant_silu_mul_fp8_group_kernel(const T* __restrict__ gu, uint8_t* __restrict__ q,
                                    float* __restrict__ s, int K, long long ldg) {
  // Programmatic dependent launch: the GEMM that reads this output may start launching now (it
  // waits for this kernel before reading it); this kernel waits for the one before it (the
  // producer of x, or the previous GEMM still reading the workspace) before touching memory.
  gdn::pdl_chain();
  const long long row = blockIdx.y;
  const int groups = K >> 7;
  const int lane = threadIdx.x & 31;
  const int grp = blockIdx.x * (kThreads / 32) + (threadIdx.x >> 5);
  if (grp >= groups) return;
  const long long off = row * ldg + grp * 128 + lane * 4;
  const uint2 rg = __ldg(reinterpret_cast<const uint2*>(gu + off));
  const uint2 ru = __ldg(reinterpret_cast<const uint2*>(gu + off + K));
  float g[8], u[8], h[4];
  gdn::unpack8<T>(make_uint4(rg.x, rg.y, 0u, 0u), g);
  gdn::unpack8<T>(make_uint4(ru.x, ru.y, 0u, 0u), u);
  uint32_t amax = 0u;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    h[i] = silu_mul(g[i], u[i]);
    amax = max(amax, gdn::abs_bits(h[i]));
  }
  fp8_group_store(h, amax, s, row * groups + grp, q, row * (long long)K + grp * 128 + lane * 4, lane);
}
