// Exact fp32 arithmetic and format conversions for the quantizers and epilogues.
//
// CuPy compiles every module with -ftz=true, which would flush subnormal fp32 operands and
// results of plain C++ arithmetic. The quantizers are specified bit for bit against IEEE fp32
// (the numpy references), so the operations that decide a stored bit go through these wrappers,
// whose PTX carries no .ftz.
#pragma once
#include "gdn/types.cuh"
#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace gdn {

// a / b, IEEE round to nearest even, subnormals kept.
__device__ __forceinline__ float div_rn(float a, float b) {
  float r;
  asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// a * b, IEEE round to nearest even, subnormals kept, never fused with a neighbouring add.
__device__ __forceinline__ float mul_rn(float a, float b) {
  float r;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// a * b + c with one rounding, subnormals kept.
__device__ __forceinline__ float fma_rn(float a, float b, float c) {
  float r;
  asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(a), "f"(b), "f"(c));
  return r;
}

// a + b, subnormals kept.
__device__ __forceinline__ float add_rn(float a, float b) {
  float r;
  asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// |v| as ordered bits: for non-negative floats the unsigned order of the bits is the numeric
// order, so amax reductions run on integers and never flush subnormals.
__device__ __forceinline__ uint32_t abs_bits(float v) { return __float_as_uint(v) & 0x7fffffffu; }

// fp32 -> e4m3 (fn), round to nearest even, saturating at +-448.
__device__ __forceinline__ uint8_t e4m3_rn(float v) {
  return (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}

}  // namespace gdn

namespace gdn {

// PTX prmt (default mode): byte i of the result is byte sel[4i+2:4i] of {b, a}, or, when
// sel bit 4i+3 is set, that byte's sign bit replicated.
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

// The constant k in a register that ptxas keeps for the whole kernel (lane: the caller's lane
// index; every lane gets the value of lane threadIdx.y, 0 in the one-dimensional CTAs that call
// it: k). A prmt table word that is a plain constant is copied into a fresh register before every
// prmt that uses it, an IMAD each time; a value read from another lane is not recomputed that
// way. Read from lane 0, ptxas may know it to be warp-uniform and hold it in a uniform register,
// which prmt cannot take, and the copies come back (seen in a sweep form at 707bdbf); the lane
// threadIdx.y it cannot know to be the same in every lane.
__device__ __forceinline__ uint32_t pinned(uint32_t k, int lane) {
  return __shfl_sync(0xffffffffu, k + lane, threadIdx.y);
}

// Four e2m1 codes (bits 4i..4i+3 of u, u < 2^16) -> four int8 holding twice their value
// (0, +-1, +-2, +-3, +-4, +-6, +-8, +-12), code i in byte i. Twice the value is an integer, so
// the int8 tensor cores can multiply e2m1 operands exactly.
__device__ __forceinline__ uint32_t e2m1x4_to_s8x4(uint32_t u) {
  const uint32_t sel = u & 0x7777u;
  const uint32_t pos = prmt(0x03020100u, 0x0C080604u, sel);
  const uint32_t neg = prmt(0xFDFEFF00u, 0xF4F8FAFCu, sel);
  // Code i's sign bit lands on bit 7 of byte (2, 0, 3, 1)[i] of w; prmt's sign-replicate mode
  // turns those bits into byte masks in order.
  const uint32_t w = u | (u << 20);
  const uint32_t mask = prmt(w, 0u, 0x9B8Au);
  return (neg & mask) | (pos & ~mask);
}

// fp32 -> e2m1 code, round to nearest even, saturating at +-6; the sign bit is v's (so -0.0
// and tiny negatives give code 8). Magnitude codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6.
__device__ __forceinline__ uint32_t e2m1_rn(float v) {
  const float a = __uint_as_float(__float_as_uint(v) & 0x7fffffffu);
  const uint32_t m = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                     (a >= 3.5f) + (a > 5.f);
  return m | ((__float_as_uint(v) >> 28) & 8u);
}

// Two e4m3 bytes (low 16 bits of v) -> fp32, exact.
__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t v) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(v & 0xffffu), __NV_E4M3);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

}  // namespace gdn
