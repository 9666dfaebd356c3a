// Per-token activation quantization for the W8A8 GEMMs.
//
// x [rows, K] bf16/fp16 at row stride ldx -> q [rows, K] (int8 or e4m3 bytes, row stride K) and
// fp32 scales. The arithmetic is the numpy reference's, operation for operation
// (gdn_kernels/reference.py), so q and the scales are bit-equal to it.
#include "gdn/convert.cuh"
#include "gdn/vec.cuh"

// Scales are tested for zero on their bits: under -ftz a float comparison would take a
// subnormal scale (a row of subnormal-sized values) for zero.

// int8 per token: s = amax / 127; q = rne(x / s) clamped to +-127; an all-zero row gives s = 0
// and zeros. One CTA a row; the row is read twice (amax, then quantize), the second time from
// L1/L2.
// T: bf16 or fp16.  kThreads: threads a CTA.
// x: [rows, K] at row stride ldx (elements); q: [rows, K] int8; s: [rows] fp32.
template <typename T, int kThreads>
__global__ void __launch_bounds__(kThreads)
act_quant_int8_kernel(const T* __restrict__ x, int8_t* __restrict__ q, float* __restrict__ s,
                      int K, long long ldx) {
  __shared__ uint32_t red[kThreads / 32];
  const long long row = blockIdx.x;
  const T* p_x = x + row * ldx;
  int8_t* p_q = q + row * (long long)K;
  uint32_t amax = 0u;
  for (int k = threadIdx.x * 8; k < K; k += kThreads * 8) {
    float f[8];
    gdn::unpack8<T>(__ldg(reinterpret_cast<const uint4*>(p_x + k)), f);
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = max(amax, gdn::abs_bits(f[i]));
  }
  amax = gdn::block_max_bits<kThreads>(amax, red);
  const float scale = gdn::div_rn(__uint_as_float(amax), 127.f);
  if (threadIdx.x == 0) s[row] = scale;
  for (int k = threadIdx.x * 8; k < K; k += kThreads * 8) {
    float f[8];
    gdn::unpack8<T>(__ldg(reinterpret_cast<const uint4*>(p_x + k)), f);
    uint32_t packed[2] = {0u, 0u};
    if (__float_as_uint(scale) != 0u) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int v = max(-127, min(127, __float2int_rn(gdn::div_rn(f[i], scale))));
        packed[i >> 2] |= (uint32_t)(v & 0xff) << ((i & 3) * 8);
      }
    }
    *reinterpret_cast<uint2*>(p_q + k) = make_uint2(packed[0], packed[1]);
  }
}

// e4m3 per (token, 128-wide K group): s = amax(group) / 448; q = e4m3_rn(x / s) saturating at
// +-448; an all-zero group gives s = 0 and zeros. One warp a group, 4 elements a lane.
// x: [rows, K] at row stride ldx; q: [rows, K] e4m3 bytes; s: [rows, K / 128] fp32.
// Grid: (ceil(K / 128 / (kThreads / 32)), rows).
template <typename T, int kThreads>
__global__ void __launch_bounds__(kThreads)
act_quant_fp8_group_kernel(const T* __restrict__ x, uint8_t* __restrict__ q,
                           float* __restrict__ s, int K, long long ldx) {
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
  amax = gdn::warp_max_bits(amax);
  const float scale = gdn::div_rn(__uint_as_float(amax), 448.f);
  if (lane == 0) s[row * groups + grp] = scale;
  uint32_t packed = 0u;
  if (__float_as_uint(scale) != 0u) {
#pragma unroll
    for (int i = 0; i < 4; ++i) packed |= (uint32_t)gdn::e4m3_rn(gdn::div_rn(f[i], scale)) << (i * 8);
  }
  *reinterpret_cast<uint32_t*>(q + row * (long long)K + grp * 128 + lane * 4) = packed;
}

// e4m3 per token: s = amax(row) / 448; q = e4m3_rn(x / s); as act_quant_int8_kernel otherwise.
// x: [rows, K] at row stride ldx; q: [rows, K] e4m3 bytes; s: [rows] fp32.
template <typename T, int kThreads>
__global__ void __launch_bounds__(kThreads)
act_quant_fp8_row_kernel(const T* __restrict__ x, uint8_t* __restrict__ q, float* __restrict__ s,
                         int K, long long ldx) {
  __shared__ uint32_t red[kThreads / 32];
  const long long row = blockIdx.x;
  const T* p_x = x + row * ldx;
  uint8_t* p_q = q + row * (long long)K;
  uint32_t amax = 0u;
  for (int k = threadIdx.x * 8; k < K; k += kThreads * 8) {
    float f[8];
    gdn::unpack8<T>(__ldg(reinterpret_cast<const uint4*>(p_x + k)), f);
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = max(amax, gdn::abs_bits(f[i]));
  }
  amax = gdn::block_max_bits<kThreads>(amax, red);
  const float scale = gdn::div_rn(__uint_as_float(amax), 448.f);
  if (threadIdx.x == 0) s[row] = scale;
  for (int k = threadIdx.x * 8; k < K; k += kThreads * 8) {
    float f[8];
    gdn::unpack8<T>(__ldg(reinterpret_cast<const uint4*>(p_x + k)), f);
    uint32_t packed[2] = {0u, 0u};
    if (__float_as_uint(scale) != 0u) {
#pragma unroll
      for (int i = 0; i < 8; ++i)
        packed[i >> 2] |= (uint32_t)gdn::e4m3_rn(gdn::div_rn(f[i], scale)) << ((i & 3) * 8);
    }
    *reinterpret_cast<uint2*>(p_q + k) = make_uint2(packed[0], packed[1]);
  }
}
