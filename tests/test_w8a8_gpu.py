"""W8A8 projections on the GPU (int8, fp8 per channel, fp8 128x128 blocks) against the numpy
references: quantized activations bit-equal, outputs within the stated bound, nothing outside the
output written, bitwise row invariance and run-to-run determinism."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gdn_kernels import reference as ref
from gdn_kernels.bench import MODEL_SHAPES
from tests.gpu_util import (
    NP_DTYPE,
    assert_tile_major,
    POISON,
    poisoned,
    random_activations,
    region,
    to_device_2d,
    ulp_distance,
    untouched_mask,
)

pytestmark = pytest.mark.gpu

FORMATS = ("int8", "fp8_channel", "fp8_block")


@pytest.fixture(scope="module")
def ctx():
    from gdn_kernels import W8a8Ctx

    return W8a8Ctx(max_rows=256, max_k=17408)


class HostWeight:
    """A random quantized weight on host and device, in one of the W8A8 formats."""

    def __init__(self, rng, fmt: str, n: int, k: int, scale_dtype: str = "float32", layout: str = "rows"):
        import cupy

        from gdn_kernels import W8a8Weight

        self.fmt, self.n, self.k = fmt, n, k
        if fmt == "int8":
            self.q = rng.integers(-127, 128, (n, k), dtype=np.int8)
            self.s = (rng.random(n, dtype=np.float32) * 0.02 + 1e-3).astype(np.float32)
        else:
            # Random e4m3 bytes, NaN codes (0x7f, 0xff) excluded.
            b = rng.integers(0, 254, (n, k), dtype=np.uint8)
            b[b >= 0x7F] += 1
            self.q = b.view(ml_dtypes.float8_e4m3fn)
            shape = (-(-n // 128), k // 128) if fmt == "fp8_block" else (n,)
            self.s = (rng.random(shape, dtype=np.float32) * 0.01 + 1e-4).astype(np.float32)
            if scale_dtype == "bfloat16":
                self.s = self.s.astype(ml_dtypes.bfloat16)
        self.dq = cupy.asarray(self.q.view(np.uint8) if fmt != "int8" else self.q)
        s_dev = self.s.view(np.uint16) if scale_dtype == "bfloat16" else self.s
        self.ds = cupy.asarray(s_dev)
        self.w = W8a8Weight.from_pointers(self.dq.data.ptr, self.ds.data.ptr, n, k, format=fmt,
                                          scale_dtype=scale_dtype, owner=(self.dq, self.ds))
        if layout == "tiles16":
            self.w = self.w.tile_major()

    def decoded(self) -> np.ndarray:
        """float64 [n, k] dequantized weight."""
        q = self.q.astype(np.float64)
        s = self.s.astype(np.float64)
        if self.fmt == "fp8_block":
            s = np.repeat(np.repeat(s, 128, axis=0), 128, axis=1)[: self.n, : self.k]
            return q * s
        return q * s[:, None]


def run_proj(ctx, hw: HostWeight, x: np.ndarray, dtype: str, *, ldx_pad=0, ldc_pad=0, offset=8):
    """Run ctx.proj with x and out inside larger poisoned buffers; returns (result, out buffer)."""
    import cupy

    rows, k = x.shape
    ldx, ldc = k + ldx_pad, hw.n + ldc_pad
    x_buf, x_ptr = to_device_2d(x, ldx, offset=offset)
    size = rows * ldc + 2 * offset
    out = poisoned(size)
    ok = ctx.proj(hw.w, x_ptr, ldx, rows, out.data.ptr + 2 * offset, ldc, 0, dtype=dtype)
    cupy.cuda.runtime.deviceSynchronize()
    host = out.get()
    mask = untouched_mask(size, offset, rows, hw.n, ldc)
    assert (host[mask] == POISON).all(), "proj wrote outside out[0:rows, 0:N]"
    y = region(host, offset, rows, hw.n, ldc).copy().view(NP_DTYPE[dtype])
    return ok, y


def expected(hw: HostWeight, x: np.ndarray, dtype: str):
    """(quantized activations, scales, reference output or None, float64 output)."""
    if hw.fmt == "int8":
        qx, sx = ref.quantize_int8_rows(x)
        acc = np.rint(qx.astype(np.float64) @ hw.q.astype(np.float64).T).astype(np.int64)
        y_ref = ref.w8a8_int8_epilogue(acc, sx, hw.s, NP_DTYPE[dtype])
        return qx.view(np.uint8), sx, y_ref, None
    if hw.fmt == "fp8_channel":
        qx, sx = ref.quantize_fp8_rows(x)
        y64 = ref.fp8_channel_proj_f64(qx, sx, hw.q, hw.s.astype(np.float32))
    else:
        qx, sx = ref.quantize_fp8_groups(x)
        y64 = ref.fp8_block_proj_f64(qx, sx, hw.q, hw.s.astype(np.float32))
    return qx.view(np.uint8), sx, None, y64


def fp8_bound(hw: HostWeight, qx, sx) -> np.ndarray:
    """Per-element error bound of the fp8 GEMMs against the float64 reference.

    A generous bound: 2^-8 of a chunk's absolute sum for its four MMAs, as if each k32 step kept
    only 13 bits (what Hopper's e4m3 warpgroup MMA does; the formats' MMAs do not: on sm_90 the
    e4m3 mma.sync is two f16 MMAs accumulating in fp32 and an fp32 add, about 2^-23 of the chunk's
    absolute sum, bench/results/probe_fp8_wgmma_h200.txt). Chunks of 128 are promoted to fp32
    registers, scaled and summed (2^-23 of the running absolute sum, K/128 times, bounded by
    2^-22); the output rounds once (half an ulp, applied by the caller).
    """
    xd = qx.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    if hw.fmt == "fp8_block":
        sxd = np.repeat(sx.astype(np.float64), 128, axis=1)
        xd = xd * sxd
    else:
        xd = xd * sx.astype(np.float64)[:, None]
    absdot = np.abs(xd) @ np.abs(hw.decoded()).T
    return absdot * (2.0 ** -8 + (hw.k / 128) * 2.0 ** -22)


@pytest.mark.parametrize("fmt", ["fp8_channel", "fp8_block"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_fp8_exact_where_the_arithmetic_is_exact(ctx, fmt, dtype):
    """Small-integer operands and power-of-two scales make every MMA sum, promotion and scaling
    exact, so the output must be the float64 result rounded once: any slip in indexing, scale
    selection or chunk order shows as a wrong bit."""
    import cupy

    from gdn_kernels import W8a8Weight

    rng = np.random.default_rng(21)
    n, k, rows = 200, 1024, 19
    q = rng.integers(-8, 9, (n, k)).astype(np.float32)
    # Column 0 of the weight is zero so that the activation entry that pins amax = 448 (and so a
    # scale of exactly 1) contributes nothing.
    q[:, 0] = 0
    q8 = q.astype(ml_dtypes.float8_e4m3fn)
    if fmt == "fp8_block":
        s = (2.0 ** rng.integers(-6, 2, (-(-n // 128), k // 128))).astype(np.float32)
        s_full = np.repeat(np.repeat(s, 128, axis=0), 128, axis=1)[:n, :k]
    else:
        s = (2.0 ** rng.integers(-6, 2, n)).astype(np.float32)
        s_full = s[:, None]
    x = rng.integers(-4, 5, (rows, k)).astype(np.float32)
    if fmt == "fp8_block":
        x[:, ::128] = 448.0  # every 128-group has amax 448: its scale is 1
        q[:, ::128] = 0
        q8 = q.astype(ml_dtypes.float8_e4m3fn)
    else:
        x[:, 0] = 448.0
    xd = x.astype(NP_DTYPE[dtype])
    dq, ds = cupy.asarray(q8.view(np.uint8)), cupy.asarray(s)
    hw = HostWeight.__new__(HostWeight)
    hw.fmt, hw.n, hw.k, hw.q, hw.s = fmt, n, k, q8, s
    hw.w = W8a8Weight.from_pointers(dq.data.ptr, ds.data.ptr, n, k, format=fmt, owner=(dq, ds))
    ok, y = run_proj(ctx, hw, xd, dtype, ldc_pad=5)
    assert ok
    y64 = x.astype(np.float64) @ (q.astype(np.float64) * s_full).T
    np.testing.assert_array_equal(y.view(np.uint16), y64.astype(NP_DTYPE[dtype]).view(np.uint16))


@pytest.mark.parametrize("fmt", FORMATS)
@given(
    n=st.integers(1, 400),
    kb=st.integers(1, 24),
    rows=st.integers(1, 40),
    dtype=st.sampled_from(["bfloat16", "float16"]),
    ldx_pad=st.sampled_from([0, 8, 136]),
    ldc_pad=st.sampled_from([0, 1, 13]),
    outliers=st.booleans(),
    zero_row=st.integers(0, 60),
    seed=st.integers(0, 2**31 - 1),
    layout=st.sampled_from(["rows", "tiles16"]),
)
@example(n=16, kb=1, rows=1, dtype="bfloat16", ldx_pad=0, ldc_pad=0, outliers=False, zero_row=0, seed=1,
         layout="rows")
@example(n=129, kb=3, rows=17, dtype="float16", ldx_pad=8, ldc_pad=1, outliers=True, zero_row=5, seed=2,
         layout="tiles16")
@example(n=300, kb=2, rows=70, dtype="bfloat16", ldx_pad=0, ldc_pad=3, outliers=True, zero_row=9, seed=3,
         layout="tiles16")
def test_proj_matches_reference(ctx, fmt, n, kb, rows, dtype, ldx_pad, ldc_pad, outliers, zero_row, seed, layout):
    rng = np.random.default_rng(seed)
    k = 128 * kb
    hw = HostWeight(rng, fmt, n, k, layout=layout)
    x = random_activations(rng, rows, k, dtype, outliers=outliers, zero_rows=(zero_row,))
    ok, y = run_proj(ctx, hw, x, dtype, ldx_pad=ldx_pad, ldc_pad=ldc_pad)
    assert ok
    check_output(hw, x, y, dtype)


def check_output(hw: HostWeight, x: np.ndarray, y: np.ndarray, dtype: str):
    qx, sx, y_ref, y64 = expected(hw, x, dtype)
    assert not np.isnan(y.astype(np.float32)).any()
    if y_ref is not None:
        # int8: exact int32 accumulation, so the output is the reference epilogue's to one ulp.
        assert ulp_distance(y, y_ref).max() <= 1
        return
    half_ulp = 2.0 ** -8 if dtype == "bfloat16" else 2.0 ** -11
    bound = fp8_bound(hw, qx, sx) * (1 + half_ulp) + half_ulp * np.abs(y64) + 1e-30
    err = np.abs(y.astype(np.float64) - y64)
    assert (err <= bound).all(), f"max err/bound {np.max(err / bound):.3g}"
    rel = np.linalg.norm(y.astype(np.float64) - y64) / max(np.linalg.norm(y64), 1e-30)
    assert rel <= 2 * half_ulp + 2.0 ** -8


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("split", [True, False], ids=["split", "cluster"])
@given(k=st.sampled_from([128, 2048, 5120, 17408]), rows=st.integers(1, 256),
       dtype=st.sampled_from(["bfloat16", "float16"]), seed=st.integers(0, 2**31 - 1))
@example(k=5120, rows=64, dtype="bfloat16", seed=1)  # the first row count of int8's one-CTA-a-row quantizer
@example(k=17408, rows=200, dtype="float16", seed=2)
@example(k=2048, rows=63, dtype="bfloat16", seed=3)
def test_quantized_activations_bit_equal(ctx, fmt, split, k, rows, dtype, seed):
    """The quantizers' bytes and scales equal the reference's: per token below 64 rows both without
    the cluster (_build.QUANT_SPLIT, each CTA the row's amax, at K < _build.QUANT_SPLIT_K_BELOW;
    here at every K) and with it."""
    from gdn_kernels import _build

    shipped = _build.QUANT_SPLIT, _build.QUANT_SPLIT_K_BELOW
    _build.QUANT_SPLIT, _build.QUANT_SPLIT_K_BELOW = split, 1 << 30
    try:
        run_quantized_activations_bit_equal(ctx, fmt, k, rows, dtype, seed)
    finally:
        _build.QUANT_SPLIT, _build.QUANT_SPLIT_K_BELOW = shipped


def run_quantized_activations_bit_equal(ctx, fmt, k, rows, dtype, seed):
    import cupy

    rng = np.random.default_rng(seed)
    hw = HostWeight(rng, fmt, 16, k)
    x = random_activations(rng, rows, k, dtype, outliers=True, zero_rows=(rows // 2,))
    # A zero 128-group inside a live row, and subnormal-sized values in another.
    x[0, :128] = 0
    if rows > 1:
        x[1, 128:] = (x[1, 128:].astype(np.float32) * np.float32(1e-36)).astype(NP_DTYPE[dtype])
    x_buf, x_ptr = to_device_2d(x, k)
    q, s = ctx.quantize_activations(hw.w, x_ptr, k, rows, dtype=dtype)
    cupy.cuda.runtime.deviceSynchronize()
    qx, sx, _, _ = expected(hw, x, dtype)
    np.testing.assert_array_equal(q.get().view(np.uint8), np.asarray(qx).view(np.uint8))
    np.testing.assert_array_equal(s.get().view(np.uint32), np.asarray(sx, np.float32).view(np.uint32))


def boundary_rows(fmt: str, dtype: str, k: int) -> np.ndarray:
    """Rows of every finite value up to a maximum, 127 a 128-group after the maximum itself (so
    each group, and the row, has that maximum): maxima that make the scale a power of two (every
    quotient exact, so every tie of the code occurs), a random one and a tiny one."""
    kmax = 127.0 if fmt == "int8" else 448.0
    npd = NP_DTYPE[dtype]
    finite = np.arange(1 << 16, dtype=np.uint16).view(npd)
    finite = finite[np.isfinite(finite.astype(np.float32))]
    top = float(np.finfo(np.float16).max) if dtype == "float16" else 3e38
    rows = []
    for amax in (kmax, kmax * 2.0 ** -6, min(kmax * 2.0 ** 8, top), 3.71, 2.0 ** -14 * 1.3):
        amax = npd(amax)
        v = finite[np.abs(finite.astype(np.float32)) <= np.float32(amax)]
        groups = -(-v.size // 127)
        body = np.zeros(groups * 127, npd)
        body[: v.size] = v
        g = np.concatenate([np.full((groups, 1), amax, npd), body.reshape(groups, 127)], axis=1).ravel()
        per_row = k // 128
        g = np.concatenate([g, np.tile(np.full(128, amax, npd), -(-groups // per_row) * per_row - groups)])
        rows.append(g.reshape(-1, k))
    return np.concatenate(rows)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_quantizers_at_rounding_boundaries(ctx, fmt, dtype):
    """Every value of a row up to its maximum, with scales whose quotients tie (rint's and
    e4m3's round-half-even cases), gives the references' bytes and scales, through the cluster
    kernels (per token, fewer than 64 rows), the one-CTA-a-row kernels (per token, 64 and more) and
    the grouped kernel."""
    import cupy

    rng = np.random.default_rng(11)
    x = boundary_rows(fmt, dtype, 17408)
    hw = HostWeight(rng, fmt, 16, 17408)
    for rows in (x.shape[0], 64 * -(-x.shape[0] // 64)):
        xr = np.resize(x, (rows, x.shape[1]))
        x_buf, x_ptr = to_device_2d(xr, xr.shape[1])
        q, s = ctx.quantize_activations(hw.w, x_ptr, xr.shape[1], rows, dtype=dtype)
        cupy.cuda.runtime.deviceSynchronize()
        qx, sx, _, _ = expected(hw, xr, dtype)
        np.testing.assert_array_equal(q.get().view(np.uint8), np.asarray(qx).view(np.uint8))
        np.testing.assert_array_equal(s.get().view(np.uint32), np.asarray(sx, np.float32).view(np.uint32))


# bf16 weight scales exist for block-scaled fp8 only.
@pytest.mark.parametrize("fmt, scale_dtype", [(f, "float32") for f in FORMATS] + [("fp8_block", "bfloat16")])
def test_row_invariance_and_determinism(ctx, fmt, scale_dtype):
    """Bitwise row invariance and determinism, and the two weight layouts give the same bits."""
    rng = np.random.default_rng(7)
    hw = HostWeight(rng, fmt, 300, 1280, scale_dtype)
    x = random_activations(rng, 256, 1280, "bfloat16", outliers=True, zero_rows=(3,))
    _, full = run_proj(ctx, hw, x, "bfloat16")
    _, again = run_proj(ctx, hw, x, "bfloat16")
    assert (full.view(np.uint16) == again.view(np.uint16)).all(), "run-to-run results differ"
    rows_w = hw.w
    for rows in (1, 2, 7, 8, 9, 16, 17, 33, 100, 256):
        pick = rng.choice(256, rows, replace=False)
        for hw.w in (rows_w, rows_w.tile_major()):
            _, sub = run_proj(ctx, hw, x[pick], "bfloat16")
            assert (sub.view(np.uint16) == full[pick].view(np.uint16)).all(), \
                f"row invariance broken at rows={rows}, layout {hw.w.layout}"
    hw.w = rows_w
    check_output(hw, x, full, "bfloat16")


# [N, K] and the CTAs a tile (split) by row count, for every format or by format, of
# test_warpgroup_rows_match_decode_rows; tests/test_build.py checks that they reach every fp8
# warpgroup schedule gemm_configs ships.
WARPGROUP_ROWS_CASES = (
    (12300, 1280, {64: 1, 100: 1, 256: 1}),
    (4200, 2176, {64: 2, 100: 2}),
    # fp8 at long K in clusters of 4 below one wave of tiles; beyond 128 rows unsplit where the
    # tiles fill one wave, past it up to 160 tiles in clusters of 2 at any K; the narrow weight in
    # clusters of 2. With both layouts these cases hold every shipped fp8 warpgroup schedule
    # (split, overlap, stages) to the decode kernel's bits.
    (5000, 8192, {"int8": {192: 1, 256: 1}, "fp8_channel": {128: 4, 192: 1, 256: 2},
                  "fp8_block": {128: 4, 192: 1, 256: 2}}),
    (4300, 1280, {"int8": {256: 1}, "fp8_channel": {192: 1, 256: 2}, "fp8_block": {192: 1, 256: 2}}),
    (2000, 4096, {192: 2, 256: 2}),
)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("n,k,splits", WARPGROUP_ROWS_CASES)
def test_warpgroup_rows_match_decode_rows(ctx, fmt, n, k, splits):
    """At 64-256 rows on a weight where the shipped schedule is a warpgroup-MMA kernel (checked;
    fp8's keeps the decode kernels' arithmetic on f16 MMAs), every row's bits equal the decode
    kernel's for that row (8-row calls), in both layouts, on ragged N and K whose 10, 17, 32 or 64
    chunks do not all divide among the decode kernel's 8 warps; the CTAs a tile (1: unsplit, 2 or
    4: K split over a cluster) are those ``splits`` names, for every format or by format
    (checked); the output is within the reference's bound."""
    from gdn_kernels import _build
    from gdn_kernels.w8a8 import _FMT

    rng = np.random.default_rng(13)
    hw = HostWeight(rng, fmt, n, k)
    x = random_activations(rng, 256, k, "bfloat16", outliers=True, zero_rows=(5, 200))
    rows_w = hw.w
    for hw.w in (rows_w, rows_w.tile_major()):
        packed = hw.w.layout == "tiles16"
        assert _build.gemm_config(_FMT[fmt], 8, n, k, packed).stages == 0
        decode = np.concatenate([run_proj(ctx, hw, x[i:i + 8], "bfloat16")[1] for i in range(0, 256, 8)])
        for rows, split in splits.get(fmt, splits).items():
            cfg = _build.gemm_config(_FMT[fmt], rows, n, k, packed)
            assert cfg.wg, f"{fmt} {rows} rows: not a warpgroup schedule"
            assert cfg.split == split, f"{fmt} {hw.w.layout} {rows} rows: split {cfg.split}"
            ok, many = run_proj(ctx, hw, x[:rows], "bfloat16")
            assert ok
            diff = np.argwhere(many.view(np.uint16) != decode[:rows].view(np.uint16))
            assert not len(diff), (f"{fmt} {hw.w.layout} {rows} rows: {len(diff)} outputs differ from the decode "
                                   f"kernel's, first (row, n) {diff[:4].tolist()}")
    check_output(hw, x[:rows], many, "bfloat16")


# The model shapes of ../shared/FORMATS.md, [N, K].


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("n,k", MODEL_SHAPES)
def test_model_shapes(ctx, fmt, n, k):
    rng = np.random.default_rng(n + k)
    hw = HostWeight(rng, fmt, n, k, layout="tiles16")
    for rows in (1, 16, 32, 256) if n * k <= 16384 * 5120 else (3,):
        x = random_activations(rng, rows, k, "bfloat16", outliers=True)
        ok, y = run_proj(ctx, hw, x, "bfloat16", ldx_pad=8, ldc_pad=8)
        assert ok
        check_output(hw, x, y, "bfloat16")


def test_declines_leave_output_untouched(ctx):
    import cupy

    rng = np.random.default_rng(3)
    hw = HostWeight(rng, "int8", 64, 256)
    x = random_activations(rng, 300, 256, "bfloat16")
    x_buf, x_ptr = to_device_2d(x, 256)
    out = poisoned(300 * 64)
    for rows in (0, 257, 300):
        assert ctx.proj(hw.w, x_ptr, 256, rows, out.data.ptr, 64, 0, dtype="bfloat16") is False
    cupy.cuda.runtime.deviceSynchronize()
    assert (out.get() == POISON).all()


def test_weight_quantizers_match_reference():
    import cupy

    from gdn_kernels import Fp8Weight, W8a8Weight, WeightFormat

    rng = np.random.default_rng(11)
    w = (rng.standard_normal((300, 384)) * 0.05).astype(ml_dtypes.bfloat16)
    w[7] = 0
    dw = cupy.asarray(w.view(np.uint16))
    from gdn_kernels._ptr import DevArray

    arr = DevArray(dw.data.ptr, (300, 384), (384, 1), "bfloat16", dw)
    for fmt, fn in ((WeightFormat.INT8, ref.quantize_int8_weight),
                    (WeightFormat.FP8_CHANNEL, ref.quantize_fp8_weight_channel),
                    (WeightFormat.FP8_BLOCK, ref.quantize_fp8_weight_block)):
        qw = W8a8Weight.quantize(arr, format=fmt)
        q_dev, s_dev = qw.owner
        q_ref, s_ref = fn(w)
        np.testing.assert_array_equal(q_dev.get().view(np.uint8), np.asarray(q_ref).view(np.uint8))
        np.testing.assert_array_equal(s_dev.get(), s_ref)
    f8 = Fp8Weight.quantize(arr)
    assert f8.as_w8a8().format is WeightFormat.FP8_BLOCK


def test_stacked_weight_equals_separate_projections(ctx):
    import cupy

    from gdn_kernels import W8a8Weight

    rng = np.random.default_rng(5)
    for fmt in FORMATS:
        parts = [HostWeight(rng, fmt, n, 512) for n in (256, 128, 384)]
        stacked = W8a8Weight.new([p.w for p in parts])
        assert stacked.segments == (256, 128, 384) and stacked.n == 768
        x = random_activations(rng, 5, 512, "bfloat16")
        x_buf, x_ptr = to_device_2d(x, 512)
        out = cupy.zeros((5, 768), cupy.uint16)
        assert ctx.proj(stacked, x_ptr, 512, 5, out.data.ptr, 768, 0, dtype="bfloat16")
        col = 0
        for p in parts:
            _, y = run_proj(ctx, p, x, "bfloat16")
            assert (out.get()[:, col: col + p.n] == y.view(np.uint16)).all()
            col += p.n


@pytest.mark.parametrize("layout", ["rows", "tiles16"])
def test_tensor_copy_fallbacks_give_the_same_bits(ctx, layout, monkeypatch):
    """Where the driver cannot describe tensor maps (no cuTensorMapEncodeTiled or
    cuFuncGetParamInfo), each tensor-copy schedule runs its fallback (_build.wgmma_fallback: int8's
    cp.async twin, unsplit; fp8's tiled kernel): the same output bits as the shipped schedules,
    here int8 with 64, 128 and 256 tokens a CTA and split over a cluster, fp8's warpgroup kernel
    unsplit and split."""
    from gdn_kernels import W8a8Ctx, _build, _tma
    from gdn_kernels.w8a8 import _FMT

    def missing():
        raise AttributeError("cuTensorMapEncodeTiled")

    monkeypatch.setattr(_tma, "check_driver", missing)
    fallback = W8a8Ctx(max_rows=256, max_k=2048)
    rng = np.random.default_rng(21)
    for fmt in FORMATS:
        for n, k in ((12288, 2048), (5120, 2048)):
            hw = HostWeight(rng, fmt, n, k, layout=layout)
            for rows in (64, 200):
                assert _build.gemm_config(_FMT[hw.w.format], rows, n, k, layout == "tiles16").tma
                x = random_activations(rng, rows, k, "bfloat16", outliers=True)
                _, want = run_proj(ctx, hw, x, "bfloat16")
                _, got = run_proj(fallback, hw, x, "bfloat16")
                key = (hw.w.format, rows, n, k, "bfloat16", hw.w.scale_dtype, hw.w.layout)
                assert not fallback._gemm_by_shape[key][1].tma and ctx._gemm_by_shape[key][1].tma
                assert (got.view(np.uint16) == want.view(np.uint16)).all(), (fmt, n, k, rows)


def test_arrays_of_cupy_accepted(ctx):
    import cupy

    from gdn_kernels import W8a8Weight

    rng = np.random.default_rng(9)
    q = cupy.asarray(rng.integers(-127, 128, (96, 256), dtype=np.int8))
    s = cupy.asarray(rng.random(96, dtype=np.float32) * 0.01)
    w = W8a8Weight.from_arrays(q, s)
    x = cupy.asarray(rng.standard_normal((4, 256)).astype(np.float16))
    out = cupy.full((4, 96), np.nan, cupy.float16)
    assert ctx.proj(w, x, 256, 4, out, 96)
    y_ref = ref.w8a8_int8_proj(x.get(), q.get(), s.get(), np.float16)
    assert ulp_distance(out.get(), y_ref).max() <= 1


def test_fp8_channel_agrees_with_torch_scaled_mm(ctx):
    """Outside check: the per-channel fp8 projection against torch._scaled_mm with row-wise
    scales on the same quantized operands (skipped where torch is not importable)."""
    torch = pytest.importorskip("torch")
    import cupy

    rng = np.random.default_rng(13)
    n, k, rows = 512, 2048, 32
    hw = HostWeight(rng, "fp8_channel", n, k)
    x = random_activations(rng, rows, k, "bfloat16", outliers=True)
    ok, y = run_proj(ctx, hw, x, "bfloat16")
    assert ok
    x_buf, x_ptr = to_device_2d(x, k)
    qx, sx = ctx.quantize_activations(hw.w, x_ptr, k, rows, dtype="bfloat16")
    cupy.cuda.runtime.deviceSynchronize()
    a = torch.from_dlpack(qx.copy()).view(torch.float8_e4m3fn)
    b = torch.from_dlpack(hw.dq.copy()).view(torch.float8_e4m3fn)
    sa = torch.from_dlpack(sx.copy()).reshape(rows, 1)
    sb = torch.from_dlpack(hw.ds.copy()).reshape(1, n)
    yt = torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    yt = yt.float().cpu().numpy()
    bound = fp8_bound(hw, qx.get().view(np.uint8), sx.get()) * 2 + 2.0 ** -8 * np.abs(yt)
    assert (np.abs(y.astype(np.float64) - yt) <= bound).all()
    rel = np.linalg.norm(y.astype(np.float64) - yt) / np.linalg.norm(yt)
    assert rel < 1e-2


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("layout", ["rows", "tiles16"])
def test_back_to_back_calls_on_a_stream(ctx, fmt, layout):
    """Twenty calls in a row on a non-default stream (where each GEMM is launched programmatically
    dependent on its quantizer unless GDN_KERNELS_PDL=0), different inputs and row counts sharing the
    one workspace, must give the bits of the same calls made one at a time, in both weight layouts.
    (A GEMM that read its activations with non-coherent loads failed this: ptxas had moved them
    before the wait on the quantizer.)"""
    import cupy

    rng = np.random.default_rng(43)
    hw = HostWeight(rng, fmt, 2048, 4096, layout=layout)
    # Row counts of the decode kernels and (64+ rows here) the warpgroup-MMA ones, mixed.
    counts = rng.permutation(np.concatenate([rng.integers(1, 40, 14), [64, 128, 130, 200, 255, 256]]))
    xs = [random_activations(rng, int(r), 4096, "bfloat16") for r in counts]
    stream = cupy.cuda.Stream(non_blocking=True)
    bufs = [to_device_2d(x, 4096) for x in xs]
    outs = [cupy.full((x.shape[0], 2048), 0xFFFF, cupy.uint16) for x in xs]
    cupy.cuda.runtime.deviceSynchronize()
    for (x_buf, x_ptr), x, out in zip(bufs, xs, outs):
        assert ctx.proj(hw.w, x_ptr, 4096, x.shape[0], out.data.ptr, 2048, stream.ptr, dtype="bfloat16")
    stream.synchronize()
    for i, (x, out) in enumerate(zip(xs, outs)):
        _, alone = run_proj(ctx, hw, x, "bfloat16")
        diff = np.argwhere(out.get() != alone.view(np.uint16))
        assert not len(diff), (f"call {i} of {len(xs)} ({x.shape[0]} rows, after {[len(p) for p in xs[:i]]}): "
                               f"{len(diff)} outputs differ, first (row, n) {diff[:4].tolist()}")


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_schedule_gives_the_same_bits(ctx, fmt):
    """The GEMM schedules (weight tiles a CTA, chunks in flight, pipelining, occupancy, the
    weight layout, chunks staged in shared memory before the quantizer wait, int8's warpgroup-MMA
    kernel, the token tiles a CTA) change no output bit:
    each is compared with ctx.proj's, on a ragged N (tiles past N clamped) and a K whose chunks do
    not divide among the warps, writing nothing outside the output. The staging schedules run as
    whole projections (quantizer, then the GEMM programmatically dependent on it)."""
    import cupy

    from gdn_kernels import _build
    from gdn_kernels.bench import w8a8_gemm_launcher
    from gdn_kernels.w8a8 import _FMT

    rng = np.random.default_rng(11)
    hw = HostWeight(rng, fmt, 300, 1280)
    packed = hw.w.tile_major()
    for rows in (1, 5, 16, 40, 100):
        x = random_activations(rng, rows, 1280, "bfloat16", outliers=True)
        ok, want = run_proj(ctx, hw, x, "bfloat16")
        assert ok
        x_dev = cupy.asarray(x.view(np.uint16))
        tiles = _build.gemm_tiles(rows)
        code = _FMT[hw.w.format]
        cases = [(cfg, "w8a8_gemm_sweep", tiles) for cfg in _build.sweep_cfgs(tiles) + _build.sweep_cfgs(tiles, True)
                 + _build.wgmma_sweep_cfgs(code, tiles) + _build.wgmma_sweep_cfgs(code, tiles, True)
                 if not cfg.qg]  # the e4m3 prototype: other bits (its own test below)
        # The staging schedules also with the rows spread over more CTAs (fewer token tiles a CTA).
        cases += [(cfg, "w8a8_gemm_pre_sweep", t) for t in (1, 2) if t <= tiles for cfg in _build.pre_sweep_cfgs(t)]
        stream = cupy.cuda.Stream(non_blocking=True)
        for cfg, family, t in cases:
            offset, ldc = 8, hw.n + 3
            size = rows * ldc + 2 * offset
            out = poisoned(size)
            wt = packed if cfg.packed else hw.w
            if family == "w8a8_gemm_pre_sweep":
                # A non-blocking stream (a programmatic launch needs one) does not wait for the
                # legacy stream's fills.
                cupy.cuda.Device().synchronize()
                w8a8_gemm_launcher(ctx, wt, rows, out.data.ptr + 2 * offset, ldc, stream.ptr, cfg, family,
                                   x_dev.data.ptr, t)()
                stream.synchronize()
            else:
                ctx.quantize_activations(hw.w, x_dev.data.ptr, 1280, rows, 0)
                w8a8_gemm_launcher(ctx, wt, rows, out.data.ptr + 2 * offset, ldc, 0, cfg)()
            host = out.get()
            assert (host[untouched_mask(size, offset, rows, hw.n, ldc)] == POISON).all(), f"{cfg} t{t} wrote outside"
            got = region(host, offset, rows, hw.n, ldc)
            assert (got == want.view(np.uint16)).all(), f"{fmt} {cfg} t{t} rows {rows} differs from the shipped schedule"


@pytest.mark.parametrize("fmt", ["fp8_channel", "fp8_block"])
def test_e4m3_prototype_within_the_fp8_bound_and_row_invariant(ctx, fmt):
    """The sweep's e4m3 warpgroup prototype (w8a8_qgmma_kernel and its split form, the tokens put
    in MMA order for them; w8a8_qgmma_decode_kernel on the row-major tokens), every schedule and
    layout at 1-200 rows: within the fp8 bound of the float64
    reference, nothing written outside its output, and a token's bits the same at every row count,
    token tile, cluster split and weight layout (its MMAs' sums do not depend on N:
    bench/probe_fp8_wgmma.py). N ragged, K's chunks uneven over the decode order's 8 warps."""
    import cupy

    from gdn_kernels import _build
    from gdn_kernels.bench import tokens_to_mma_order, w8a8_gemm_launcher
    from gdn_kernels.w8a8 import _FMT

    rng = np.random.default_rng(31)
    n, k = 300, 1280
    hw = HostWeight(rng, fmt, n, k)
    packed = hw.w.tile_major()
    code = _FMT[hw.w.format]
    x_all = random_activations(rng, 200, k, "bfloat16", outliers=True)
    first = None
    for rows in (200, 40, 12, 5, 1):
        tiles = _build.gemm_tiles(rows)
        cfgs = [c for c in _build.wgmma_sweep_cfgs(code, tiles) + _build.wgmma_sweep_cfgs(code, tiles, True) if c.qg]
        assert len(cfgs) >= 8
        # Only these instances compiled (the whole sweep family is one long NVRTC call).
        family = _build.subset_family("w8a8_gemm_sweep", [
            _build.gemm_instance(code, tiles, "bfloat16", hw.w.scale_dtype, c) for c in cfgs])
        x = x_all[:rows]
        qx, sx, _, y64 = expected(hw, x, "bfloat16")
        half_ulp = 2.0 ** -8
        bound = fp8_bound(hw, qx, sx) * (1 + half_ulp) + half_ulp * np.abs(y64) + 1e-30
        x_dev = cupy.asarray(x.view(np.uint16))
        for cfg in cfgs:
            ctx.quantize_activations(hw.w, x_dev.data.ptr, k, rows, 0)
            if cfg.mma_order:
                tokens_to_mma_order(ctx, rows, k)
            offset, ldc = 8, n + 3
            size = rows * ldc + 2 * offset
            out = poisoned(size)
            w8a8_gemm_launcher(ctx, packed if cfg.packed else hw.w, rows, out.data.ptr + 2 * offset, ldc, 0, cfg,
                               family)()
            host = out.get()
            assert (host[untouched_mask(size, offset, rows, n, ldc)] == POISON).all(), f"{cfg} wrote outside"
            got = region(host, offset, rows, n, ldc).copy()
            err = np.abs(got.view(NP_DTYPE["bfloat16"]).astype(np.float64) - y64)
            assert (err <= bound).all(), f"{cfg} rows {rows}: max err/bound {np.max(err / bound):.3g}"
            if first is None:
                first = got
            assert (got == first[:rows]).all(), f"{cfg} rows {rows}: other bits than the first schedule at 200 rows"


def test_tile_major_layout_is_the_documented_permutation():
    """W8a8Weight.tile_major's bytes on the device, checked element by element against the layout
    the GEMM reads (tests.gpu_util.assert_tile_major); rows past N are zero. The scales are a
    copy and the result holds no reference to its source, which can be freed."""
    import gc
    import weakref

    import cupy

    rng = np.random.default_rng(5)
    n, k = 40, 384
    hw = HostWeight(rng, "int8", n, k)
    packed = hw.w.tile_major()
    assert packed.layout == "tiles16" and packed.scale != hw.w.scale
    scales = cupy.ndarray((n,), cupy.float32, cupy.cuda.MemoryPointer(
        cupy.cuda.UnownedMemory(packed.scale, 4 * n, packed), 0)).get()
    assert (scales.view(np.uint32) == hw.s.astype(np.float32).view(np.uint32)).all()
    source = weakref.ref(hw.w)
    hw.w = None
    gc.collect()
    assert source() is None, "the tile-major weight keeps its row-major source alive"
    got = cupy.ndarray((48 * k,), cupy.uint8, cupy.cuda.MemoryPointer(
        cupy.cuda.UnownedMemory(packed.qweight, 48 * k, packed), 0)).get()
    src = np.zeros((48, k), np.uint8)
    src[:n] = hw.q.view(np.uint8)
    assert_tile_major(got, src)
