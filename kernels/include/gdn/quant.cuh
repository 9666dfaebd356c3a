// Activation quantization steps shared by the quantizer kernels (act_quant.cu) and the GEMM that
// quantizes its own activations (w8a8_gemm.cu): one definition, so both give the same bytes.
#pragma once
#include "gdn/convert.cuh"
#include "gdn/types.cuh"

namespace gdn {

// Eight values quantized with a nonzero scale, packed in 8 bytes: int8 rne(v / s) clamped to
// +-127 (kInt8), or e4m3_rn(v / s) saturating at +-448.
template <bool kInt8>
__device__ __forceinline__ uint2 quant8(const float (&f)[8], float scale) {
  uint32_t packed[2] = {0u, 0u};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    uint32_t b;
    if constexpr (kInt8) {
      b = (uint32_t)(max(-127, min(127, __float2int_rn(div_rn(f[i], scale)))) & 0xff);
    } else {
      b = (uint32_t)e4m3_rn(div_rn(f[i], scale));
    }
    packed[i >> 2] |= b << ((i & 3) * 8);
  }
  return make_uint2(packed[0], packed[1]);
}

// The same with the scale tested for zero on its bits (an all-zero row or group gives zeros):
// under -ftz a float comparison would take a subnormal scale for zero.
template <bool kInt8>
__device__ __forceinline__ uint2 quant8_or_zero(const float (&f)[8], float scale) {
  return __float_as_uint(scale) == 0u ? make_uint2(0u, 0u) : quant8<kInt8>(f, scale);
}

}  // namespace gdn
