// Fixed-width integer types under both NVRTC (no C library headers) and nvcc.
#pragma once
#if defined(__CUDACC_RTC__)
#include <cuda/std/cstdint>
using cuda::std::int8_t;
using cuda::std::uint8_t;
using cuda::std::uint16_t;
using cuda::std::uint32_t;
using cuda::std::uint64_t;
#else
#include <cstdint>
#endif
