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
