// Vector helpers: 16-byte packs of bf16/fp16, conversions to fp32, block reductions.
#pragma once
#include "gdn/ptx.cuh"
#include "gdn/types.cuh"
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace gdn {

// Eight 16-bit activations unpacked to fp32 (exact for both bf16 and fp16).
template <typename T>
__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]);

template <>
__device__ __forceinline__ void unpack8<__nv_bfloat16>(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

template <>
__device__ __forceinline__ void unpack8<__half>(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __half2 h = *reinterpret_cast<const __half2*>(&w[i]);
    float2 p = __half22float2(h);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

// fp32 -> 16-bit output, round to nearest even.
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}

// Max over the warp of non-negative ordered bits (see abs_bits); every lane gets it.
__device__ __forceinline__ uint32_t warp_max_bits(uint32_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Max over the block; every thread gets it. red: kThreads / 32 words of shared memory.
template <int kThreads>
__device__ __forceinline__ uint32_t block_max_bits(uint32_t v, uint32_t* red) {
  v = warp_max_bits(v);
  const int warp = threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0) red[warp] = v;
  __syncthreads();
  uint32_t r = red[0];
#pragma unroll
  for (int i = 1; i < kThreads / 32; ++i) r = max(r, red[i]);
  __syncthreads();
  return r;
}

// Cluster-wide max of one value a CTA (sm_90 thread block clusters): each CTA publishes its value
// in shared memory, every thread reads all of them through distributed shared memory. The second
// barrier keeps each CTA's shared memory alive until every CTA of the cluster has read it.
template <int kCluster>
__device__ __forceinline__ uint32_t cluster_max_bits(uint32_t v, uint32_t* slot) {
  if (threadIdx.x == 0) *slot = v;
  cluster_sync();
  const uint32_t local = (uint32_t)__cvta_generic_to_shared(slot);
  uint32_t m = 0u;
#pragma unroll
  for (int r = 0; r < kCluster; ++r) m = max(m, ld_cluster(local, r));
  cluster_sync();
  return m;
}

}  // namespace gdn
