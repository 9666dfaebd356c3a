"""NVFP4 W4A4 on the GPU: the activation quantizer bit-equal to the reference, the mx GEMM within
its bound of the float64 reference from decoded operands, bitwise row invariance at every row
count, determinism, strides and untouched memory, the weight quantizer and checkpoint loaders."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gdn_kernels import reference as ref
from tests.gpu_util import NP_DTYPE, POISON, poisoned, random_activations, region, to_device_2d, untouched_mask

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def ctx():
    from gdn_kernels import Nvfp4Ctx

    return Nvfp4Ctx(max_rows=512, max_k=17408)


class HostFp4Weight:
    """A random NVFP4 weight (all 16 codes, positive e4m3 block scales) on host and device."""

    def __init__(self, rng, n: int, k: int, scale2: float = 1e-3, input_scale: float | None = None,
                 layout: str = "rows"):
        import cupy

        from gdn_kernels import Nvfp4Weight

        self.n, self.k = n, k
        self.packed = rng.integers(0, 256, (n, k // 2), dtype=np.uint8)
        # e4m3 bytes 0x08..0x6f: normal, positive, 2^-6 .. 240.
        self.s = rng.integers(0x08, 0x70, (n, k // 16), dtype=np.uint8)
        self.scale2 = np.float32(scale2)
        self.dp, self.ds = cupy.asarray(self.packed), cupy.asarray(self.s)
        self.w = Nvfp4Weight.from_pointers(self.dp.data.ptr, self.ds.data.ptr, n, k, float(self.scale2),
                                           input_scale=input_scale, owner=(self.dp, self.ds))
        if layout == "tiles16":
            self.w = self.w.tile_major()

    def decoded(self) -> np.ndarray:
        return ref.nvfp4_decode(self.packed, self.s.view(ml_dtypes.float8_e4m3fn), self.scale2)


def run(ctx, hw, x, dtype, *, ldx_pad=0, ldc_pad=0, offset=8, static=False):
    import cupy

    rows, k = x.shape
    ldx, ldc = k + ldx_pad, hw.n + ldc_pad
    x_buf, x_ptr = to_device_2d(x, ldx, offset=offset)
    size = rows * ldc + 2 * offset
    out = poisoned(size)
    ok = ctx.proj(hw.w, x_ptr, ldx, rows, out.data.ptr + 2 * offset, ldc, 0, dtype=dtype, static_scale=static)
    cupy.cuda.runtime.deviceSynchronize()
    host = out.get()
    assert (host[untouched_mask(size, offset, rows, hw.n, ldc)] == POISON).all(), "wrote outside the output"
    return ok, region(host, offset, rows, hw.n, ldc).copy().view(NP_DTYPE[dtype])


def check(hw, x, y, dtype, static_gs=None):
    """Output within the bound of the float64 product of the decoded quantized operands.

    Block sums and scale products are exact; the fp32 accumulation over the K/16 blocks errs by
    at most K/16 * 2^-24 of the absolute sum, the two final multiplications by 2^-23, the output
    rounding by half an ulp."""
    if static_gs is None:
        xp, xs, xgs = ref.quantize_nvfp4_rows(x)
    else:
        xp, xs = ref.quantize_nvfp4_rows_static(x, static_gs)
        xgs = np.full(x.shape[0], np.float32(static_gs))
    y64 = ref.nvfp4_proj_f64(xp, xs, xgs, hw.packed, hw.s.view(ml_dtypes.float8_e4m3fn), hw.scale2)
    xd = ref.nvfp4_decode(xp, xs, xgs[:, None])
    absdot = np.abs(xd) @ np.abs(hw.decoded()).T
    half_ulp = 2.0 ** -8 if dtype == "bfloat16" else 2.0 ** -11
    bound = absdot * (hw.k / 16 + 3) * 2.0 ** -24 * (1 + half_ulp) + half_ulp * np.abs(y64) + 1e-35
    err = np.abs(y.astype(np.float64) - y64)
    assert not np.isnan(y.astype(np.float32)).any()
    assert (err <= bound).all(), f"max err/bound {np.max(err / bound):.3g}"
    rel = np.linalg.norm(err) / max(np.linalg.norm(y64), 1e-30)
    assert rel <= 2 * half_ulp


@given(
    n=st.integers(1, 300),
    kb=st.integers(1, 20),
    rows=st.integers(1, 40),
    dtype=st.sampled_from(["bfloat16", "float16"]),
    ldx_pad=st.sampled_from([0, 8, 264]),
    ldc_pad=st.sampled_from([0, 3]),
    outliers=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
@example(n=16, kb=1, rows=1, dtype="bfloat16", ldx_pad=0, ldc_pad=0, outliers=False, seed=0)
def test_proj_matches_reference(ctx, n, kb, rows, dtype, ldx_pad, ldc_pad, outliers, seed):
    rng = np.random.default_rng(seed)
    k = 128 * kb
    hw = HostFp4Weight(rng, n, k)
    x = random_activations(rng, rows, k, dtype, outliers=outliers, zero_rows=(rows // 3,))
    if k >= 256:
        x[0, 16:32] = 0  # a zero block in a live row
        x[0, 32:48] = (x[0, 32:48].astype(np.float32) * 1e-6).astype(NP_DTYPE[dtype])  # s rounds to 0
    ok, y = run(ctx, hw, x, dtype, ldx_pad=ldx_pad, ldc_pad=ldc_pad)
    assert ok
    check(hw, x, y, dtype)


@given(k=st.sampled_from([128, 1024, 4096, 5120, 6144, 17408]), rows=st.integers(1, 64),
       dtype=st.sampled_from(["bfloat16", "float16"]), static=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_quantizer_bit_equal(ctx, k, rows, dtype, static, seed):
    import cupy

    rng = np.random.default_rng(seed)
    x = random_activations(rng, rows, k, dtype, outliers=True, zero_rows=(rows // 2,))
    x[0, :16] = 0
    x[0, 16:32] = (x[0, 16:32].astype(np.float32) * 1e-5).astype(NP_DTYPE[dtype])
    x_buf, x_ptr = to_device_2d(x, k)
    gs_static = float(np.float32(0.002)) if static else 0.0
    packed, s, gs = ctx.quantize_activations(x_ptr, k, rows, k, dtype=dtype, static_gs=gs_static)
    cupy.cuda.runtime.deviceSynchronize()
    if static:
        rp, rs = ref.quantize_nvfp4_rows_static(x, np.float32(gs_static))
        rgs = np.full(rows, np.float32(gs_static))
    else:
        rp, rs, rgs = ref.quantize_nvfp4_rows(x)
    np.testing.assert_array_equal(packed.get(), rp)
    np.testing.assert_array_equal(s.get(), np.asarray(rs).view(np.uint8))
    np.testing.assert_array_equal(gs.get().view(np.uint32), np.asarray(rgs, np.float32).view(np.uint32))


def test_every_quantizer_shape_gives_the_same_bits(ctx):
    """The quantizer's threads a CTA and CTAs a row (_build.fp4_quant_shape picks them by K) change
    no bit: each width, one CTA or a cluster a row, from several blocks a thread to about one,
    gives the reference's codes, scales and gs."""
    import cupy

    from gdn_kernels import _build

    rng = np.random.default_rng(71)
    rows, k = 5, 17408
    x = random_activations(rng, rows, k, "bfloat16", outliers=True, zero_rows=(2,))
    x[0, 16:32] = 0
    x_buf, x_ptr = to_device_2d(x, k)
    rp, rs, rgs = ref.quantize_nvfp4_rows(x)
    for threads in _build.FP4_QUANT_THREADS:
        for cluster in (1, _build.FP4_QUANT_CLUSTER):
            ctx._packed.fill(0xAB)
            ctx._s.fill(0xAB)
            ctx._quant_launch(x_ptr, k, rows, k, 0, "bfloat16", 0.0, shape=(threads, cluster))
            cupy.cuda.runtime.deviceSynchronize()
            what = f"{threads} threads, {cluster} CTAs a row"
            np.testing.assert_array_equal(ctx._packed[: rows * k // 2].get().reshape(rows, k // 2), rp, err_msg=what)
            np.testing.assert_array_equal(ctx._s[: rows * k // 16].get().reshape(rows, k // 16),
                                          np.asarray(rs).view(np.uint8), err_msg=what)
            np.testing.assert_array_equal(ctx._gs[:rows].get().view(np.uint32),
                                          np.asarray(rgs, np.float32).view(np.uint32), err_msg=what)


@pytest.mark.parametrize("layout", ["rows", "tiles16"])
def test_row_invariance_every_row_count(ctx, layout):
    """Row r of batches of random sizes 1..512 (and subsets) equals row r computed alone, bit for
    bit; the same batch twice gives the same bits."""
    rng = np.random.default_rng(17)
    hw = HostFp4Weight(rng, 200, 2048, layout=layout)
    x = random_activations(rng, 512, 2048, "bfloat16", outliers=True, zero_rows=(5,))
    _, full = run(ctx, hw, x, "bfloat16")
    _, again = run(ctx, hw, x, "bfloat16")
    assert (full.view(np.uint16) == again.view(np.uint16)).all()
    alone = {}
    for r in rng.choice(512, 12, replace=False):
        _, y = run(ctx, hw, x[r:r + 1], "bfloat16")
        alone[int(r)] = y[0]
        assert (y[0].view(np.uint16) == full[r].view(np.uint16)).all()
    for rows in [int(v) for v in rng.integers(2, 513, 8)] + [4, 5, 8, 9, 16, 17, 33]:
        pick = rng.choice(512, rows, replace=False)
        _, sub = run(ctx, hw, x[pick], "bfloat16")
        assert (sub.view(np.uint16) == full[pick].view(np.uint16)).all(), f"rows={rows}"
    check(hw, x[:64], full[:64], "bfloat16")


def test_rows_beyond_the_workspace_run_in_slices():
    from gdn_kernels import Nvfp4Ctx

    small = Nvfp4Ctx(max_rows=48, max_k=1024)
    big = Nvfp4Ctx(max_rows=512, max_k=1024)
    rng = np.random.default_rng(23)
    hw = HostFp4Weight(rng, 96, 1024)
    x = random_activations(rng, 150, 1024, "float16")
    _, a = run(small, hw, x, "float16", ldc_pad=5)
    _, b = run(big, hw, x, "float16")
    assert (a.view(np.uint16) == b.view(np.uint16)).all()


def test_static_input_scale(ctx):
    rng = np.random.default_rng(29)
    hw = HostFp4Weight(rng, 128, 1024, input_scale=0.004)
    x = random_activations(rng, 9, 1024, "bfloat16", outliers=True)
    ok, y = run(ctx, hw, x, "bfloat16", static=True)
    assert ok
    check(hw, x, y, "bfloat16", static_gs=np.float32(0.004))


@pytest.mark.parametrize("layout", ["rows", "tiles16"])
@pytest.mark.parametrize("n,k", [(12288, 2048), (2048, 4096), (16384, 5120), (5120, 6144), (34816, 5120), (5120, 17408)])
def test_model_shapes(ctx, n, k, layout):
    rng = np.random.default_rng(n ^ k)
    hw = HostFp4Weight(rng, n, k, layout=layout)
    x = random_activations(rng, 3, k, "bfloat16", outliers=True)
    ok, y = run(ctx, hw, x, "bfloat16", ldx_pad=8, ldc_pad=8)
    assert ok
    check(hw, x, y, "bfloat16")


def test_declines_leave_output_untouched(ctx):
    import cupy

    rng = np.random.default_rng(31)
    hw = HostFp4Weight(rng, 64, 256)
    x_buf, x_ptr = to_device_2d(random_activations(rng, 4, 256, "bfloat16"), 256)
    out = poisoned(4 * 64)
    assert ctx.proj(hw.w, x_ptr, 256, 0, out.data.ptr, 64, 0, dtype="bfloat16") is False
    cupy.cuda.runtime.deviceSynchronize()
    assert (out.get() == POISON).all()


def test_weight_quantizer_and_checkpoint_loaders(ctx):
    import cupy

    from gdn_kernels import Nvfp4Weight

    rng = np.random.default_rng(37)
    w = (rng.standard_normal((200, 512)) * 0.03).astype(ml_dtypes.bfloat16)
    w[3, :16] = 0
    dw = cupy.asarray(w.view(np.uint16))
    from gdn_kernels._ptr import DevArray

    qw = Nvfp4Weight.quantize(DevArray(dw.data.ptr, (200, 512), (512, 1), "bfloat16", dw))
    rp, rs, r2 = ref.quantize_nvfp4_weight(w)
    packed, scale = qw.owner
    np.testing.assert_array_equal(packed.get(), rp)
    np.testing.assert_array_equal(scale.get(), np.asarray(rs).view(np.uint8))
    assert np.float32(qw.scale2) == np.float32(r2)
    # ModelOpt and compressed-tensors tensors of the same weight load to the same thing.
    mo = Nvfp4Weight.from_modelopt(packed, scale, cupy.asarray(np.float32(r2)), input_scale=0.01)
    ct = Nvfp4Weight.from_compressed_tensors(packed, scale, cupy.asarray(np.float32(1 / r2)), np.float32(100.0))
    assert (mo.n, mo.k, mo.packed, mo.scale) == (200, 512, packed.data.ptr, scale.data.ptr)
    assert ct.scale2 == pytest.approx(mo.scale2, rel=1e-6) and ct.input_scale == pytest.approx(0.01)
    x = random_activations(rng, 5, 512, "bfloat16")
    x_buf, x_ptr = to_device_2d(x, 512)
    out = cupy.zeros((5, 200), cupy.uint16)
    assert ctx.proj(mo, x_ptr, 512, 5, out.data.ptr, 200, 0, dtype="bfloat16")
    hw = HostFp4Weight.__new__(HostFp4Weight)
    hw.n, hw.k, hw.packed, hw.s, hw.scale2 = 200, 512, rp, np.asarray(rs).view(np.uint8), np.float32(r2)
    check(hw, x, out.get().view(ml_dtypes.bfloat16), "bfloat16")


def test_fixed_nvfp4_proj_runs_only_when_pinned(ctx):
    import cupy

    from gdn_kernels import ActQuantConfig, GpuCtx, fixed_nvfp4_proj

    rng = np.random.default_rng(41)
    hw = HostFp4Weight(rng, 128, 512)
    x = random_activations(rng, 6, 512, "bfloat16")
    x_buf, x_ptr = to_device_2d(x, 512)
    out = poisoned(6 * 130)
    gpu = GpuCtx(ActQuantConfig.parse("ffn=nvfp4"), nvfp4=ctx)
    assert fixed_nvfp4_proj(gpu, "gdn", hw.w, x_ptr, out.data.ptr, 6, 130, 512, 0, dtype="bfloat16") is False
    cupy.cuda.runtime.deviceSynchronize()
    assert (out.get() == POISON).all()
    gpu = GpuCtx(ActQuantConfig.parse("gdn=nvfp4"), nvfp4=ctx)
    assert fixed_nvfp4_proj(gpu, "gdn", hw.w, x_ptr, out.data.ptr, 6, 130, 512, 0, dtype="bfloat16") is True
    cupy.cuda.runtime.deviceSynchronize()
    host = out.get()
    y = region(host, 0, 6, 128, 130).copy().view(ml_dtypes.bfloat16)
    check(hw, x, y, "bfloat16")
    assert (host[untouched_mask(host.size, 0, 6, 128, 130)] == POISON).all()


@pytest.mark.parametrize("layout", ["rows", "tiles16"])
def test_back_to_back_calls_on_a_stream(ctx, layout):
    """As for W8A8: twenty calls in a row on a non-default stream, the bits of the same calls
    made one at a time, in both weight layouts."""
    import cupy

    rng = np.random.default_rng(47)
    hw = HostFp4Weight(rng, 2048, 4096, layout=layout)
    xs = [random_activations(rng, int(r), 4096, "bfloat16") for r in rng.integers(1, 40, 20)]
    stream = cupy.cuda.Stream(non_blocking=True)
    bufs = [to_device_2d(x, 4096) for x in xs]
    outs = [cupy.full((x.shape[0], 2048), 0xFFFF, cupy.uint16) for x in xs]
    cupy.cuda.runtime.deviceSynchronize()
    for (x_buf, x_ptr), x, out in zip(bufs, xs, outs):
        assert ctx.proj(hw.w, x_ptr, 4096, x.shape[0], out.data.ptr, 2048, stream.ptr, dtype="bfloat16")
    stream.synchronize()
    for x, out in zip(xs, outs):
        _, alone = run(ctx, hw, x, "bfloat16")
        assert (out.get() == alone.view(np.uint16)).all()


@given(
    n=st.integers(1, 300),
    kb=st.integers(1, 20),
    rows=st.integers(1, 70),
    dtype=st.sampled_from(["bfloat16", "float16"]),
    ldx_pad=st.sampled_from([0, 8]),
    ldc_pad=st.sampled_from([0, 3]),
    seed=st.integers(0, 2**31 - 1),
)
@example(n=16, kb=1, rows=1, dtype="bfloat16", ldx_pad=0, ldc_pad=0, seed=0)
@example(n=17, kb=9, rows=33, dtype="float16", ldx_pad=8, ldc_pad=3, seed=1)
def test_tile_major_gives_the_plain_layouts_bits(ctx, n, kb, rows, dtype, ldx_pad, ldc_pad, seed):
    """The tile-major weight (its own kernel, 1 to 8 token groups a CTA) gives the plain layout's
    bits at every row count, ragged N and K whose chunks do not divide among the warps, and
    writes nothing outside the output."""
    rng = np.random.default_rng(seed)
    k = 128 * kb
    hw = HostFp4Weight(rng, n, k)
    x = random_activations(rng, rows, k, dtype, outliers=True, zero_rows=(rows // 3,))
    ok, plain = run(ctx, hw, x, dtype, ldx_pad=ldx_pad, ldc_pad=ldc_pad)
    hw.w = hw.w.tile_major()
    ok_t, tiled = run(ctx, hw, x, dtype, ldx_pad=ldx_pad, ldc_pad=ldc_pad)
    assert ok and ok_t
    assert (tiled.view(np.uint16) == plain.view(np.uint16)).all()
    check(hw, x, tiled, dtype)


@pytest.mark.parametrize("size", ["small", "base", "wide", "large", "long"])
def test_size_class_schedules_give_the_plain_layouts_bits(ctx, monkeypatch, size):
    """Each weight-size class's schedules (_build.FP4_TILED_BY_SIZE: the first wave's L2 prefetch,
    the masked operand form; FP4_TILED_FEW_BY_SIZE: the few-token form at 1 row), forced on small ragged weights by moving the size thresholds, give
    the plain layout's bits at 1 to 17 rows and write nothing outside the output."""
    from gdn_kernels import _build

    monkeypatch.setattr(_build, "FP4_TILED_SMALL_MAX", 1 << 40 if size == "small" else 0)
    monkeypatch.setattr(_build, "FP4_TILED_LARGE_MIN", 1 if size in ("large", "long") else 1 << 41)
    monkeypatch.setattr(_build, "FP4_TILED_LONG_K", 0 if size == "long" else 1 << 30)
    monkeypatch.setattr(_build, "FP4_TILED_WIDE_N", 0 if size == "wide" else 1 << 30)
    ctx._plans.clear()
    try:
        rng = np.random.default_rng(61)
        for n, k in ((37, 384), (300, 1280), (16, 128)):
            hw = HostFp4Weight(rng, n, k)
            tiled = hw.w.tile_major()
            assert _build.fp4_tiled_size(n, k) == size
            for rows in (1, 2, 3, 4, 5, 9, 17):
                x = random_activations(rng, rows, k, "bfloat16", outliers=True)
                ok, plain = run(ctx, hw, x, "bfloat16", ldx_pad=8, ldc_pad=3)
                sched = _build.fp4_slice_schedule(rows, size)
                assert ctx._plan(tiled, rows, "bfloat16")[3] == int(bool(sched[1] & _build.FP4_ARITH_MASKED))
                plain_w, hw.w = hw.w, tiled
                ok_t, got = run(ctx, hw, x, "bfloat16", ldx_pad=8, ldc_pad=3)
                hw.w = plain_w
                assert ok and ok_t
                assert (got.view(np.uint16) == plain.view(np.uint16)).all(), (n, k, rows)
    finally:
        ctx._plans.clear()


def test_every_tile_major_schedule_gives_the_same_bits(ctx):
    """Each schedule of the tile-major sweep (chunks in flight, arithmetic forms, register bounds;
    _build.FP4_TILED_SWEEP) gives ctx.proj's bits, run as whole projections."""
    from gdn_kernels import _build

    rng = np.random.default_rng(53)
    hw = HostFp4Weight(rng, 300, 1280, layout="tiles16")
    x = random_activations(rng, 40, 1280, "bfloat16", outliers=True)
    try:
        for groups in _build.FP4_TILED_GROUPS:
            rows = 4 * groups + (groups == 8) * 5  # every token of a CTA live, and a second CTA at 8 groups
            _, want = run(ctx, hw, x[:rows], "bfloat16")
            for schedule in _build.FP4_TILED_SWEEP[groups]:
                ctx._set_tiled(groups, "bfloat16", schedule)
                _, got = run(ctx, hw, x[:rows], "bfloat16")
                assert (got.view(np.uint16) == want.view(np.uint16)).all(), schedule
            ctx._set_tiled(groups, "bfloat16")
    finally:
        for groups in _build.FP4_TILED_GROUPS:
            ctx._set_tiled(groups, "bfloat16")


@pytest.mark.parametrize("rows", [1, 2])
def test_few_token_schedules_give_the_plain_layouts_bits(ctx, rows):
    """Each few-token schedule (_build.FP4_TILED_FEW_SWEEP, FP4_TILED_FEW_BY_SIZE: the MMA's columns
    on 4 or 2 chunks of one or two tokens) gives the plain layout's bits on ragged weights whose
    warp streams end in whole rounds and in tails of 1, 2 and 3 chunks, and writes nothing
    outside the output; a schedule for 1 row leaves 2-row slices to the others."""
    from gdn_kernels import _build

    rng = np.random.default_rng(67 + rows)
    scheds = set(_build.FP4_TILED_FEW_SWEEP[rows])
    scheds |= {t[rows] for t in _build.FP4_TILED_FEW_BY_SIZE.values() if rows in t}
    try:
        for n, k in ((37, 1280), (300, 5888), (24, 7552), (16, 128)):
            hw = HostFp4Weight(rng, n, k)
            tiled = hw.w.tile_major()
            x = random_activations(rng, 2, k, "bfloat16", outliers=True)
            _, plain = run(ctx, hw, x[:rows], "bfloat16", ldx_pad=8, ldc_pad=3)
            _, plain2 = run(ctx, hw, x, "bfloat16", ldx_pad=8, ldc_pad=3)
            hw.w = tiled
            for sched in sorted(scheds):
                assert _build.fp4_schedule_tokens(sched) == rows
                ctx._set_tiled(1, "bfloat16", sched)
                assert ctx._plan(tiled, rows, "bfloat16")[4] is ctx._few[(rows, "bfloat16", _build.fp4_tiled_size(n, k))][0]
                _, got = run(ctx, hw, x[:rows], "bfloat16", ldx_pad=8, ldc_pad=3)
                assert (got.view(np.uint16) == plain.view(np.uint16)).all(), (n, k, sched)
                if rows == 1:
                    _, got2 = run(ctx, hw, x, "bfloat16", ldx_pad=8, ldc_pad=3)
                    assert (got2.view(np.uint16) == plain2.view(np.uint16)).all(), (n, k, sched)
    finally:
        ctx._set_tiled(1, "bfloat16")


def test_tile_major_copy_is_the_documented_order_and_frees_its_source():
    """Nvfp4Weight.tile_major's device bytes equal the host-side order of _quantize (which the CPU
    tests check against the kernel's addressing), and the copy holds no reference to its source."""
    import gc
    import weakref

    import cupy

    from gdn_kernels._quantize import nvfp4_tile_major_order

    rng = np.random.default_rng(59)
    hw = HostFp4Weight(rng, 40, 384)
    tiled = hw.w.tile_major()
    assert tiled.layout == "tiles16" and (tiled.n, tiled.k, tiled.scale2) == (40, 384, hw.w.scale2)
    source = weakref.ref(hw.w)
    hw.w = None
    gc.collect()
    assert source() is None, "the tile-major weight keeps its source alive"
    want_c, want_s = nvfp4_tile_major_order(hw.packed, hw.s)

    def device_bytes(ptr, size):
        return cupy.ndarray((size,), cupy.uint8, cupy.cuda.MemoryPointer(
            cupy.cuda.UnownedMemory(ptr, size, tiled), 0)).get()

    np.testing.assert_array_equal(device_bytes(tiled.packed, want_c.size), want_c)
    np.testing.assert_array_equal(device_bytes(tiled.scale, want_s.size), want_s)
