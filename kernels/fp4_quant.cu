// NVFP4 quantization of rows (activations per row, or weights with one global scale).
//
// x [rows, K] (bf16/fp16/fp32, row stride ldx) -> e2m1 codes, e4m3 block scales and a global
// scale gs per row, with the arithmetic of gdn_kernels/reference.py operation for operation:
//   gs = amax(row) / 2688            (dynamic; static: gs = the given scale for every row)
//   s  = e4m3_rn((amax(block16) / 6) / gs)
//   q  = e2m1_rn(x / (s * gs))       (a block whose s * gs is 0 stores s = 0 and codes 0)
// Outputs in the checkpoint layouts (packed [rows, K/2], element 2j in the low nibble; s e4m3
// [rows, K/16]; gs fp32 [rows]) and, when xd is given, the GEMM's operand form: int8 twice the
// e2m1 value in the mma layout (see fp4_mx_gemm.cu) and the block scales as fp32; with `masked`,
// the operand as two copies a row ([rows][2][K]: copy 0 holds the even blocks of each 128-value
// chunk and zeros in place of the odd ones, copy 1 the reverse), the B operands of the tile-major
// GEMM's kMaskedB form.
#include "gdn/convert.cuh"
#include "gdn/ptx.cuh"
#include "gdn/vec.cuh"

namespace {

// Sixteen consecutive inputs as fp32 (exact).
template <typename T>
__device__ __forceinline__ void load16(const T* p, float (&f)[16]) {
  float a[8], b[8];
  gdn::unpack8<T>(__ldg(reinterpret_cast<const uint4*>(p)), a);
  gdn::unpack8<T>(__ldg(reinterpret_cast<const uint4*>(p) + 1), b);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    f[i] = a[i];
    f[8 + i] = b[i];
  }
}

template <>
__device__ __forceinline__ void load16<float>(const float* p, float (&f)[16]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float4 v = __ldg(reinterpret_cast<const float4*>(p) + i);
    f[4 * i] = v.x;
    f[4 * i + 1] = v.y;
    f[4 * i + 2] = v.z;
    f[4 * i + 3] = v.w;
  }
}

// Twice the value of a magnitude code 0..7: 0, 1, 2, 3, 4, 6, 8, 12.
__device__ __forceinline__ int twice_e2m1(uint32_t code) {
  const int m = (int)((0xC8643210u >> (4 * (code & 7u))) & 0xFu);
  return (code & 8u) ? -m : m;
}

}  // namespace

// T: bf16, fp16 or fp32 input.  kThreads: threads a CTA.  kCluster: CTAs a row, a cluster (sm_90
// thread block clusters): CTA blockIdx.x takes rank blockIdx.x % kCluster of row blockIdx.x /
// kCluster, a contiguous slice of the row's 16-blocks, a block a thread an iteration; the row's
// amax is exchanged through distributed shared memory, so the division work of a long row is
// spread over kCluster multiprocessors. Grid: (kCluster * rows).
// x: [rows, K] at row stride ldx.  static_gs > 0: use it as every row's gs (static input_scale,
// or a weight's scale2); 0: dynamic per row.
// packed: [rows, K/2] codes.  s: [rows, K/16] e4m3.  gs: [rows] fp32 (may be null).
// xd: [rows, K] int8 operand in mma layout ([rows, 2, K] when masked), sxf: [rows, K/16] fp32
// scales (both null to skip).
template <typename T, int kThreads, int kCluster>
__global__ void __launch_bounds__(kThreads) __cluster_dims__(kCluster, 1, 1)
fp4_quant_kernel(const T* __restrict__ x, uint8_t* __restrict__ packed, uint8_t* __restrict__ s,
                 float* __restrict__ gs, int8_t* __restrict__ xd, float* __restrict__ sxf,
                 float static_gs, int K, long long ldx, int masked) {
  GDN_TRACE_CTA(2);
  // Programmatic dependent launch: the GEMM that reads this output may start launching now (it
  // waits for this kernel before reading it); this kernel waits for the one before it (the
  // producer of x, or the previous GEMM still reading the workspace) before touching memory.
  gdn::pdl_chain();
  GDN_TRACE_WAITED();
  __shared__ uint32_t red[kThreads / 32];
  __shared__ uint32_t slot;
  const long long row = blockIdx.x / kCluster;
  const int rank = blockIdx.x % kCluster;
  const T* p_x = x + row * ldx;
  const int blocks = K >> 4, per = (blocks + kCluster - 1) / kCluster;
  const int b0 = rank * per + threadIdx.x, b1 = min((rank + 1) * per, blocks);
  // This thread's first block stays in registers from the amax pass to the quantizing pass.
  float first[16];
  if (b0 < b1) load16<T>(p_x + b0 * 16, first);
  float g;
  if (static_gs > 0.f) {
    g = static_gs;
  } else {
    uint32_t amax = 0u;
    if (b0 < b1) {
#pragma unroll
      for (int i = 0; i < 16; ++i) amax = max(amax, gdn::abs_bits(first[i]));
    }
    for (int b = b0 + kThreads; b < b1; b += kThreads) {
      float f[16];
      load16<T>(p_x + b * 16, f);
#pragma unroll
      for (int i = 0; i < 16; ++i) amax = max(amax, gdn::abs_bits(f[i]));
    }
    amax = gdn::block_max_bits<kThreads>(amax, red);
    if constexpr (kCluster > 1) amax = gdn::cluster_max_bits<kCluster>(amax, &slot);
    g = gdn::div_rn(__uint_as_float(amax), 2688.f);
  }
  if (rank == 0 && threadIdx.x == 0 && gs != nullptr) gs[row] = g;
  for (int b = b0; b < b1; b += kThreads) {
    float f[16];
    if (b == b0) {
#pragma unroll
      for (int i = 0; i < 16; ++i) f[i] = first[i];
    } else {
      load16<T>(p_x + b * 16, f);
    }
    uint32_t amax = 0u;
#pragma unroll
    for (int i = 0; i < 16; ++i) amax = max(amax, gdn::abs_bits(f[i]));
    uint8_t sb = 0;
    float denom = 0.f;
    // Zero tests on bits: under -ftz a float comparison would take a subnormal for zero.
    if (__float_as_uint(g) != 0u) {
      sb = gdn::e4m3_rn(gdn::div_rn(gdn::div_rn(__uint_as_float(amax), 6.f), g));
      const float2 sf = gdn::e4m3x2_to_float2(sb);
      denom = gdn::mul_rn(sf.x, g);
    }
    uint32_t codes[2] = {0u, 0u};
    if (__float_as_uint(denom) != 0u) {
#pragma unroll
      for (int i = 0; i < 16; ++i) codes[i >> 3] |= gdn::e2m1_rn(gdn::div_rn(f[i], denom)) << (4 * (i & 7));
    } else {
      sb = 0;
    }
    const long long i_blk = row * blocks + b;
    *reinterpret_cast<uint2*>(packed + i_blk * 8) = make_uint2(codes[0], codes[1]);
    s[i_blk] = sb;
    if (xd != nullptr) {
      sxf[i_blk] = gdn::e4m3x2_to_float2(sb).x;
      // mma layout: in each 128-value chunk, thread t of a quad holds k = 4t..4t+3 of each of
      // the chunk's 8 blocks at byte 32t + 4 * (block % 8).
      // Masked: the word goes to copy b % 2 and a zero to the other copy.
      int8_t* p_d = xd + row * (long long)K * (masked ? 2 : 1) + (b >> 3) * 128 + (b & 7) * 4;
      int8_t* p_z = p_d;
      if (masked) {
        p_z = p_d + (long long)K * ((b & 1) ^ 1);
        p_d += (long long)K * (b & 1);
      }
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const uint32_t c4 = (t < 2 ? codes[0] : codes[1]) >> (16 * (t & 1));
        uint32_t word = 0u;
#pragma unroll
        for (int i = 0; i < 4; ++i) word |= (uint32_t)(twice_e2m1((c4 >> (4 * i)) & 0xFu) & 0xff) << (8 * i);
        if (masked) *reinterpret_cast<uint32_t*>(p_z + 32 * t) = 0u;
        *reinterpret_cast<uint32_t*>(p_d + 32 * t) = word;
      }
    }
  }
}
