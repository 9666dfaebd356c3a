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
            tiles, cfg = _build.gemm_schedule(_FMT[fmt], rows, n, k, layout == "tiles16")
            kern, _ = ctx._gemm[(fmt, tiles, cfg, "bfloat16", "float32")]
            grid, block, stream, args = kern.calls[-1]
            assert grid == cfg.grid(rows, n, tiles) and block == cfg.threads and stream == 7
            maps = ((("w", qweight, n, k, layout, cfg.rows_tile), ("x", 0x10000, 256, k, cfg.wg)) if cfg.tma
                    else ())
            assert args == (*maps, qweight, qweight + 0x100000, 0x10000, 0x20000, 0x30000, n + 8, n, k, rows)
            # The workspace's map is found with the schedule, once a shape; the weight's every call.
            first = qweight == 0x1000000
            assert ctx._maps.asked == ((["x", "w"] if first else ["w"]) if cfg.tma else [])


@pytest.mark.parametrize("split", [True, False])
def test_per_token_quantizer_choice(split, monkeypatch):
    """Below QUANT_ROWS_MIN rows the per-token formats run the cluster-free quantizer at K below
    QUANT_SPLIT_K_BELOW (with QUANT_SPLIT), the clustered one otherwise, both on a grid of
    QUANT_CLUSTER CTAs a row; from QUANT_ROWS_MIN rows one CTA a row."""
    monkeypatch.setattr(_build, "QUANT_SPLIT", split)
    ctx = object.__new__(W8a8Ctx)
    ctx._xq_ptr, ctx._xs_ptr = 0x10000, 0x20000
    kinds = {"_quant": "cluster", "_quant_split": "split", "_quant_rows": "rows"}
    for attr in kinds:
        setattr(ctx, attr, {(fmt, d): FakeKernel(attr) for fmt in WeightFormat for d in ("bfloat16", "float16")})
        for kern in getattr(ctx, attr).values():
            kern.launch = kern.launch_dependent  # plain launches (PDL off) recorded alike
    ctx._quant_threads = {fmt: 256 for fmt in WeightFormat}
    for fmt in (WeightFormat.INT8, WeightFormat.FP8_CHANNEL):
        for k, rows in ((2048, 1), (5120, 16), (6144, 63), (8192, 1), (17408, 8), (5120, 64)):
            for attr in kinds:
                getattr(ctx, attr)[(fmt, "bfloat16")].calls.clear()
            ctx._quant_launch(fmt, 0x40000, k, rows, k, 7, "bfloat16")
            want = ("rows" if rows >= _build.QUANT_ROWS_MIN
                    else "split" if split and k < _build.QUANT_SPLIT_K_BELOW else "cluster")
            used = [kinds[a] for a in kinds if getattr(ctx, a)[(fmt, "bfloat16")].calls]
            assert used == [want], (fmt, k, rows, used)
            grid = getattr(ctx, [a for a in kinds if kinds[a] == want][0])[(fmt, "bfloat16")].calls[0][0]
            assert grid == ((1, rows, 1) if want == "rows" else (_build.QUANT_CLUSTER, rows, 1))
