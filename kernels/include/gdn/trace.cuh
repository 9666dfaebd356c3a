// Diagnostics only: per-CTA times of the decode-path kernels (start, the end of the wait on the
// kernel before, end) from the global timer, compiled in with -DGDN_TRACE (GDN_KERNELS_TRACE=1;
// bench/timeline.py reads them). Without it the macros expand to nothing.
#pragma once

#ifdef GDN_TRACE
namespace gdn {
struct TraceRec {
  unsigned long long start, waited, end;
  unsigned int sm, tag;
};
constexpr unsigned int kTraceCap = 1u << 18;
}  // namespace gdn

// One buffer and counter a module, unmangled for the host's get_global.
extern "C" {
__device__ gdn::TraceRec gdn_trace_buf[gdn::kTraceCap];
__device__ unsigned int gdn_trace_count;
}

namespace gdn {
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  // Ordered with the memory accesses around it, so that an exit time follows the CTA's last store.
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) : : "memory");
  return t;
}
__device__ __forceinline__ unsigned int& trace_slot() {
  __shared__ unsigned int slot;
  return slot;
}
// A CTA's record, taken at the kernel's entry (slot by arrival, so the CTAs of successive launches
// of a kernel take successive slots where each launch starts after the previous one's CTAs have
// all started) and finished as its last warp leaves.
struct TraceCta {
  __device__ explicit TraceCta(unsigned int tag) {
    if (threadIdx.x == 0) {
      const unsigned int i = atomicAdd(&gdn_trace_count, 1u);
      unsigned int sm;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
      trace_slot() = i;
      if (i < kTraceCap) gdn_trace_buf[i] = {global_ns(), 0ull, 0ull, sm, tag};
    }
    __syncthreads();
  }
  __device__ ~TraceCta() {
    const unsigned int i = trace_slot();
    if (i < kTraceCap && (threadIdx.x & 31) == __ffs(__activemask()) - 1) atomicMax(&gdn_trace_buf[i].end, global_ns());
  }
};
__device__ __forceinline__ void trace_waited() {
  if (threadIdx.x == 0 && trace_slot() < kTraceCap) gdn_trace_buf[trace_slot()].waited = global_ns();
}
}  // namespace gdn
#define GDN_TRACE_CTA(tag) gdn::TraceCta gdn_trace_cta_(tag)
#define GDN_TRACE_WAITED() gdn::trace_waited()
#else
#define GDN_TRACE_CTA(tag)
#define GDN_TRACE_WAITED()
#endif
