"""PyTorch peers for the benchmarks, used only when torch is importable (never a dependency).

torch._int_mm (int8 x int8 -> int32, cuBLASLt; needs more than 16 rows) and torch._scaled_mm
with row-wise fp32 scales (e4m3 x e4m3 -> bf16). Each is timed as a CUDA-graph replay over
weight copies that together exceed the L2, like gdn_kernels' own cases; the activation
quantization is not included in the peers' times (theirs is the GEMM alone).
"""

from __future__ import annotations

import functools

import numpy as np


def torch_or_none():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def time_torch_graph(torch, fns, replays: int = 50) -> float:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for f in fns:
            f()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for f in fns:
            f()
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / len(fns))
    return float(np.median(times))


@functools.lru_cache(maxsize=None)
def _peer_times(n: int, k: int, rows: int, nrot: int) -> tuple[tuple[str, float], ...]:
    torch = torch_or_none()
    if torch is None:
        return ()
    out = {}
    gen = torch.Generator(device="cuda").manual_seed(n * 7 + k)
    if rows > 16:
        try:
            a = torch.randint(-127, 128, (rows, k), dtype=torch.int8, device="cuda", generator=gen)
            ws = [torch.randint(-127, 128, (n, k), dtype=torch.int8, device="cuda", generator=gen) for _ in range(nrot)]
            outs = [torch.empty((rows, n), dtype=torch.int32, device="cuda") for _ in range(nrot)]
            fns = [lambda w=w, o=o: torch._int_mm(a, w.t(), out=o) for w, o in zip(ws, outs)]
            out["torch_int_mm_us"] = time_torch_graph(torch, fns)
            del ws, outs
        except (RuntimeError, TypeError) as exc:
            print(f"  torch._int_mm [{n}, {k}] rows {rows}: not timed ({str(exc).splitlines()[0]})")
    try:
        a = torch.randn((rows, k), device="cuda", generator=gen).to(torch.float8_e4m3fn)
        ws = [torch.randn((n, k), device="cuda", generator=gen).to(torch.float8_e4m3fn) for _ in range(nrot)]
        sa = torch.rand((rows, 1), device="cuda", generator=gen) + 0.5
        sb = torch.rand((1, n), device="cuda", generator=gen) + 0.5
        fns = [lambda w=w: torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16) for w in ws]
        out["torch_scaled_mm_rowwise_us"] = time_torch_graph(torch, fns)
        del ws
    except (RuntimeError, TypeError) as exc:
        print(f"  torch._scaled_mm [{n}, {k}] rows {rows}: not timed ({str(exc).splitlines()[0]})")
    torch.cuda.empty_cache()
    return tuple(out.items())


def torch_w8a8_peer(fmt: str, n: int, k: int, rows: int, nrot: int) -> dict:
    """{name_us: microseconds} of the torch int8 and fp8 GEMMs at this shape (cached per shape)."""
    return dict(_peer_times(n, k, rows, nrot))


_DEQUANT = None


def _dequant_kernel():
    """NVFP4 [N, K] -> bf16 [N, K] (bench-only emulation of engines' dequantize-then-GEMM path)."""
    global _DEQUANT
    import cupy

    if _DEQUANT is None:
        _DEQUANT = cupy.RawKernel(r"""
#include <cuda_fp8.h>
extern "C" __global__ void nvfp4_dequant_bf16(const unsigned char* packed, const unsigned char* scale,
                                              float scale2, unsigned short* out, long long n_bytes, int k) {
  const float lut[16] = {0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, -0.f, -.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n_bytes; i += (long long)gridDim.x * blockDim.x) {
    const long long e = 2 * i;
    const long long row = e / k;
    const int col = (int)(e - row * k);
    const __half_raw hs = __nv_cvt_fp8_to_halfraw(scale[row * (k / 16) + col / 16], __NV_E4M3);
    const float s = __half2float(*reinterpret_cast<const __half*>(&hs)) * scale2;
    const unsigned char b = packed[i];
    const float v0 = lut[b & 15] * s, v1 = lut[b >> 4] * s;
    out[e] = (unsigned short)(__float_as_uint(v0) >> 16);
    out[e + 1] = (unsigned short)(__float_as_uint(v1) >> 16);
  }
}
""", "nvfp4_dequant_bf16")
    return _DEQUANT


def dequant_cublas_peer(weights, rows: int, x_ptr: int, stream, replays: int = 50) -> dict:
    """{dequant_bf16_cublas_us}: dequantize the NVFP4 weight to bf16, then cuBLAS bf16, in one
    graph, rotating over the same weight copies as gdn_kernels' own timing."""
    import cupy

    from gdn_kernels import bench as harness

    kern = _dequant_kernel()
    w0 = weights[0]
    wbf = cupy.empty((w0.n, w0.k), cupy.uint16)
    out = cupy.empty((rows, w0.n), cupy.uint16)
    blas = harness.cublas_bf16_launcher(x_ptr, wbf.data.ptr, out.data.ptr, rows, w0.n, w0.k, stream)
    n_bytes = w0.n * w0.k // 2

    def step(w):
        def f():
            kern((1056,), (256,), (np.uint64(w.packed), np.uint64(w.scale), np.float32(w.scale2),
                                   wbf, np.int64(n_bytes), np.int32(w.k)))
            blas()
        return f

    return {"dequant_bf16_cublas_us": harness.time_graph([step(w) for w in weights], stream, replays)}
