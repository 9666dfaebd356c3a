// Exact fp32 arithmetic and format conversions for the quantizers and epilogues.
//
// CuPy compiles every module with -ftz=true, which would flush subnormal fp32 operands and
// results of plain C++ arithmetic. The quantizers are specified bit for bit against IEEE fp32
// (the numpy references), so the operations that decide a stored bit go through these wrappers,
// whose PTX carries no .ftz.
#pragma once
#include "gdn/types.cuh"
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
