"""The W8A8 GEMM launch on the CPU: what W8a8Ctx.gemm_on_workspace hands the driver, with fake
kernels and tensor maps in place of the device (GPU tests check what the kernels then compute)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gdn_kernels import _build
from gdn_kernels.w8a8 import _FMT, W8a8Ctx
from gdn_kernels.weights import WeightFormat


class FakeKernel:
    def __init__(self, cfg):
        self.cfg, self.calls = cfg, []

    def launch_dependent(self, grid, block, stream, *args):
        self.calls.append((grid, block, stream, args))


class FakeMaps:
    """Tensor maps as tuples of what they describe, counting how often each is asked for."""

    def __init__(self):
        self.asked = []

    def weight(self, ptr, n, k, layout, rows):
        self.asked.append("w")
        return ("w", ptr, n, k, layout, rows)

    def activations(self, ptr, max_rows, k, tokens):
        self.asked.append("x")
        return ("x", ptr, max_rows, k, tokens)


def cpu_ctx(max_rows: int = 256):
    """A W8a8Ctx without its device set-up: every shipped schedule a fake kernel."""
    ctx = object.__new__(W8a8Ctx)
    ctx.max_rows, ctx._xq_ptr, ctx._xs_ptr = max_rows, 0x10000, 0x20000
    ctx._gemm_by_shape, ctx._maps = {}, FakeMaps()
    ctx._gemm = {}
    for fmt, code in _FMT.items():
        for tiles in _build.GEMM_TILES:
            for cfg in _build.gemm_configs(code, tiles):
                for out in ("bfloat16", "float16"):
                    for scale in ("float32", "bfloat16"):
                        ctx._gemm[(fmt, tiles, cfg, out, scale)] = (FakeKernel(cfg), cfg)
    return ctx


@pytest.mark.parametrize("fmt", list(WeightFormat))
@pytest.mark.parametrize("layout", ["rows", "tiles16"])
@pytest.mark.parametrize("n,k", [(5120, 17408), (16384, 5120), (2048, 4096), (300, 1280)])
def test_gemm_launch_carries_the_schedule_grid_and_maps(fmt, layout, n, k):
    """Each row count launches the schedule gemm_config picks, with its grid and threads, the two
    tensor maps first where it takes tensor copies (the weight's by its address, the workspace's),
    then the kernel arguments in order; a second call with another weight of the same shape
    launches the same way, asking only for the new weight's map."""
    ctx = cpu_ctx()
    for rows in (1, 16, 40, 64, 100, 256):
        for qweight in (0x1000000, 0x2000000):
            w = SimpleNamespace(format=fmt, n=n, k=k, scale_dtype="float32", layout=layout, qweight=qweight,
                                scale=qweight + 0x100000)
            ctx._maps.asked.clear()
            ctx.gemm_on_workspace(w, rows, 0x30000, n + 8, 7, "bfloat16")
            cfg = _build.gemm_config(_FMT[fmt], rows, n, k, layout == "tiles16")
            kern, _ = ctx._gemm[(fmt, _build.gemm_tiles(rows), cfg, "bfloat16", "float32")]
            grid, block, stream, args = kern.calls[-1]
            assert grid == cfg.grid(rows, n, _build.gemm_tiles(rows)) and block == cfg.threads and stream == 7
            maps = ((("w", qweight, n, k, layout, cfg.rows_tile), ("x", 0x10000, 256, k, cfg.wg)) if cfg.tma
                    else ())
            assert args == (*maps, qweight, qweight + 0x100000, 0x10000, 0x20000, 0x30000, n + 8, n, k, rows)
            # The workspace's map is found with the schedule, once a shape; the weight's every call.
            first = qweight == 0x1000000
            assert ctx._maps.asked == ((["x", "w"] if first else ["w"]) if cfg.tma else [])
