// PTX wrappers for the tensor-core and memory instructions the GEMMs use.
#pragma once
#include "gdn/trace.cuh"
#include "gdn/types.cuh"

namespace gdn {

// D = A * B + D on the int8 tensor cores: A [16, 32] s8 row-major, B [32, 8] s8 col-major,
// int32 accumulation (exact for the sums this library forms).
__device__ __forceinline__ void mma_s8_16832(int (&d)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// D = A * B + D on the fp8 tensor cores: e4m3 operands, fp32 accumulation.
__device__ __forceinline__ void mma_e4m3_16832(float (&d)[4], const uint32_t (&a)[4],
                                               const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// D = A * B + D on the fp16 tensor cores: A [16, 16] f16 row-major, B [16, 8] f16 col-major,
// fp32 accumulation.
__device__ __forceinline__ void mma_f16_16816(float (&d)[4], const uint32_t (&a)[4],
                                              const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// 16-byte global load for data read once (the weight): skips L1; asks L2 for the whole 256-byte
// sector group, which the neighbouring warps of the CTA read next.
__device__ __forceinline__ uint4 ld_stream_v4(const void* p) {
  uint4 r;
  asm volatile(
      "ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

// The weight loads a kernel issues before griddepcontrol.wait: ld_stream_v4's, but coherent (no
// .nc). ptxas moves non-coherent loads across the wait as it likes, and sinks them below it where
// registers are tight (it did in every fp8 decode schedule of three CTAs a multiprocessor and in
// NVFP4's early forms), which leaves none of them in flight while the quantizer runs; a coherent
// load stays before it. The weight is not written while the kernel runs, so both read the same
// bytes. bench/wait_order.py counts them in the SASS.
__device__ __forceinline__ uint4 ld_early_v4(const void* p) {
  uint4 r;
  asm volatile(
      "ld.global.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

// A weight load: early (issued before griddepcontrol.wait) by ld_early_v4, else ld_stream_v4.
__device__ __forceinline__ uint4 ld_weight_v4(const void* p, bool early) {
  return early ? ld_early_v4(p) : ld_stream_v4(p);
}

// Loads of what the preceding kernel of the stream wrote (the quantized activations and their
// scales), after pdl_wait(): plain coherent global loads, kept after the wait. A non-coherent
// load (ld.global.nc: __ldg, or what the compiler makes of a const __restrict__ pointer) promises
// that the data does not change while the kernel runs, which a programmatically dependent launch
// breaks: ptxas may then issue it before griddepcontrol.wait, and did (the fp8 per-channel
// decode kernel read its first activations before its quantizer had written them; found by the
// back-to-back test, bench/diag_back_to_back.py).
__device__ __forceinline__ uint4 ld_dep_v4(const void* p) {
  uint4 r;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p)
               : "memory");
  return r;
}
__device__ __forceinline__ float ld_dep(const float* p) {
  float r;
  asm volatile("ld.global.f32 %0, [%1];\n" : "=f"(r) : "l"(p) : "memory");
  return r;
}
__device__ __forceinline__ float4 ld_dep_f4(const float4* p) {
  const uint4 r = ld_dep_v4(p);
  return make_float4(__uint_as_float(r.x), __uint_as_float(r.y), __uint_as_float(r.z), __uint_as_float(r.w));
}

}  // namespace gdn

namespace gdn {

// Programmatic dependent launch (sm_90). A kernel launched with the programmatic-serialization
// attribute may start while the preceding kernel of its stream still runs; pdl_wait() blocks
// until that kernel has completed and its writes are visible (a no-op without the attribute).
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

// Lets the next kernel of the stream, if launched with the attribute, start launching now. That
// kernel must pdl_wait() before it reads or writes anything this kernel reads or writes.
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// The entry of a kernel that touches memory only after the previous kernel has completed (an
// activation quantizer: it reads that kernel's output and overwrites the workspace the previous
// GEMM read): lets the next kernel start launching, then waits.
__device__ __forceinline__ void pdl_chain() {
  pdl_launch_dependents();
  pdl_wait();
}

}  // namespace gdn

namespace gdn {

// 16-byte asynchronous copy global -> shared (L2 only), and its group fences.
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"((uint32_t)__cvta_generic_to_shared(dst)),
               "l"(src)
               : "memory");
}
// 4-byte asynchronous copy global -> shared (through L1: the size .cg does not take).
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"((uint32_t)__cvta_generic_to_shared(dst)),
               "l"(src)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace gdn

namespace gdn {

// Asks L2 to fetch `bytes` (a multiple of 16) from global p (16-byte aligned) in the background:
// one bulk prefetch (sm_90), no registers or shared memory touched.
__device__ __forceinline__ void prefetch_l2_bulk(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
}

// Thread block clusters (sm_90): a barrier of every thread of the cluster, whose shared-memory
// writes before it are visible to the cluster's reads after it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// 4 bytes at this CTA's shared address `local` in the shared memory of the cluster's CTA `rank`.
__device__ __forceinline__ uint32_t ld_cluster(uint32_t local, int rank) {
  uint32_t remote, x;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(x) : "r"(remote) : "memory");
  return x;
}
// The same for 16 bytes.
__device__ __forceinline__ int4 ld_cluster_v4(uint32_t local, int rank) {
  uint32_t remote;
  int4 v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  asm volatile("ld.shared::cluster.v4.s32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(remote) : "memory");
  return v;
}

}  // namespace gdn

namespace gdn {

// A tensor map (CUtensorMap, built on the host by cuTensorMapEncodeTiled): 128 opaque bytes,
// passed by value as a __grid_constant__ kernel parameter.
struct alignas(64) TensorMap {
  unsigned long long bits[16];
};

// Shared-memory barriers (mbarrier) for the tensor memory accelerator's copies: a barrier
// initialised for `count` arrivals completes its phase when they have arrived and the bytes they
// announced (expect_tx) have landed.
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initialisations visible to the async proxy (the copies) before any copy uses them.
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// Announces `bytes` more to land on the barrier, without arriving.
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Arrives, announcing `bytes` more to land.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Arrives once (no bytes announced).
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Waits until the phase of parity `parity` of the barrier has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// Tensor copies global -> shared of one box of `map` at the given coordinates (innermost
// first), completing on barrier `bar`; dst: a shared address aligned as the map's swizzle needs.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const TensorMap* map, uint32_t bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n"
      ::"r"(dst), "l"(map), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}
__device__ __forceinline__ void tma_load_5d(uint32_t dst, const TensorMap* map, uint32_t bar, int c0, int c1, int c2,
                                            int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6, "
      "%7}], [%2];\n" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}

// Multicast forms (sm_90 clusters): the box lands at dst, and its bytes complete on bar, in the
// shared memory of every CTA of the cluster whose rank is a bit of `mask`.
__device__ __forceinline__ void tma_load_2d_mc(uint32_t dst, const TensorMap* map, uint32_t bar, int c0, int c1,
                                               uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, "
      "{%3, %4}], [%2], %5;\n" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "h"(mask)
      : "memory");
}
__device__ __forceinline__ void tma_load_5d_mc(uint32_t dst, const TensorMap* map, uint32_t bar, int c0, int c1,
                                               int c2, int c3, int c4, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, "
      "{%3, %4, %5, %6, %7}], [%2], %8;\n" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "h"(mask)
      : "memory");
}
// Arrives once on the barrier at this CTA's shared address `bar` in the cluster's CTA `rank`.
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, int rank) {
  asm volatile(
      "{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
      "r"(rank)
      : "memory");
}

}  // namespace gdn
