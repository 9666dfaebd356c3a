"""Behavioural tests of the numpy references in gdn_kernels.reference."""

import os
import warnings
from contextlib import contextmanager

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gdn_kernels import reference as ref

SETTINGS = settings(
    deadline=None,
    max_examples=40,
    derandomize=bool(os.environ.get("CI")),
)

F32 = np.float32
BF16 = ml_dtypes.bfloat16
E4M3 = ml_dtypes.float8_e4m3fn
INPUT_DTYPES = [BF16, np.float16, np.float32]

# Magnitudes of e2m1 codes 0-7, written out independently of the module.
E2M1_MAGNITUDES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


@contextmanager
def strict_fp():
    """Turn numpy floating-point events and warnings into errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="raise"):
            yield


@st.composite
def matrices(draw, rows=(1, 6), k_units=(1, 6), unit=16, dtypes=INPUT_DTYPES):
    """Random [rows, K] matrices of mixed magnitude, with some zero rows and
    some outliers, in one of the input dtypes. K is a multiple of ``unit``."""
    n_rows = draw(st.integers(*rows))
    k = unit * draw(st.integers(*k_units))
    dtype = draw(st.sampled_from(dtypes))
    seed = draw(st.integers(0, 2**32 - 1))
    log_mag = draw(st.floats(-3, 3))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_rows, k)) * 10.0**log_mag
    if draw(st.booleans()):
        x[rng.random((n_rows, k)) < 0.02] *= 50.0
    if n_rows > 1 and draw(st.booleans()):
        x[rng.integers(n_rows)] = 0.0
    # Keep float16 finite: the references assume finite inputs.
    return np.clip(x, -6e4, 6e4).astype(dtype)


def f64(a):
    return np.asarray(a).astype(np.float64)


# ---------------------------------------------------------------------------
# INT8
# ---------------------------------------------------------------------------


def test_int8_round_half_even():
    # amax 127 makes scale exactly 1.0, so x / scale is x itself.
    x = np.array([[127.0, 0.5, 1.5, 2.5, -0.5, -2.5, 3.5, 126.5]], F32)
    q, scale = ref.quantize_int8_rows(x)
    assert scale[0] == F32(1.0)
    np.testing.assert_array_equal(q[0], [127, 0, 2, 2, 0, -2, 4, 126])
    # amax 63.5 gives scale 0.5: 0.25 -> 0.5 -> 0 and 0.75 -> 1.5 -> 2.
    x = np.array([[63.5, 0.25, 0.75, -1.25]], F32)
    q, scale = ref.quantize_int8_rows(x)
    assert scale[0] == F32(0.5)
    np.testing.assert_array_equal(q[0], [127, 0, 2, -2])


def test_int8_negative_amax_maps_to_minus_127_not_minus_128():
    x = np.array([[-5.0, 1.0, 2.5], [3.0, -3.0, 0.0]], F32)
    q, scale = ref.quantize_int8_rows(x)
    assert q.dtype == np.int8
    np.testing.assert_array_equal(q[:, 0], [-127, 127])
    assert q[1, 1] == -127
    np.testing.assert_array_equal(scale, F32([5.0, 3.0]) / F32(127))


@SETTINGS
@given(matrices(unit=1, k_units=(1, 64)))
def test_int8_amax_hits_127_and_codes_stay_in_range(x):
    q, scale = ref.quantize_int8_rows(x)
    assert np.all(np.abs(q.astype(np.int32)) <= 127)
    for r in range(x.shape[0]):
        if scale[r] == 0:
            continue
        i = np.argmax(np.abs(f64(x[r])))
        assert abs(int(q[r, i])) == 127
        assert np.sign(q[r, i]) == np.sign(f64(x[r, i]))


@pytest.mark.parametrize("dtype", INPUT_DTYPES)
def test_int8_zero_rows_give_zero_without_nan(dtype):
    x = np.zeros((3, 8), dtype)
    x[1, 2] = 4.0
    with strict_fp():
        q, scale = ref.quantize_int8_rows(x)
        qw, sw = ref.quantize_int8_weight(x)
    np.testing.assert_array_equal(scale, F32([0.0, 4.0 / 127.0, 0.0]))
    assert not np.any(q[[0, 2]])
    assert q[1, 2] == 127
    np.testing.assert_array_equal(qw, q)
    np.testing.assert_array_equal(sw, scale)


@SETTINGS
@given(matrices(unit=1, k_units=(1, 64)))
def test_int8_round_trip_error_within_half_step(x):
    q, scale = ref.quantize_int8_rows(x)
    x64 = f64(x)
    err = np.abs(x64 - f64(q) * f64(scale)[:, None])
    # Half a step, plus the float32 rounding of x / scale (|x / scale| <= 127).
    bound = f64(scale)[:, None] * (0.5 + 2.0**-16)
    assert np.all(err <= bound)
    assert np.all(scale == np.abs(f64(x)).max(axis=1).astype(F32) / F32(127))


@SETTINGS
@given(
    seed=st.integers(0, 2**32 - 1),
    rows=st.integers(1, 4),
    n=st.integers(1, 5),
    out_dtype=st.sampled_from([BF16, np.float16]),
)
def test_int8_epilogue_matches_scalar_float32(seed, rows, n, out_dtype):
    rng = np.random.default_rng(seed)
    acc = rng.integers(-(2**30), 2**30, size=(rows, n), dtype=np.int64)
    sx = (rng.random(rows) * 1e-3).astype(F32)
    sw = (rng.random(n) * 1e-3).astype(F32)
    out = ref.w8a8_int8_epilogue(acc, sx, sw, out_dtype)
    assert out.dtype == np.dtype(out_dtype)
    for m in range(rows):
        for j in range(n):
            # Python ints convert to float64 exactly here (|acc| < 2**53).
            a32 = np.float32(float(int(acc[m, j])))
            expected = np.array([(a32 * sx[m]) * sw[j]], F32).astype(out_dtype)[0]
            assert out[m, j].tobytes() == expected.tobytes()


def test_int8_epilogue_converts_accumulator_round_half_even():
    # Above 2**24 float32 steps by 2: 2**24 + 1 ties down, 2**24 + 3 ties up.
    acc = np.array([[2**24 + 1, 2**24 + 3, -(2**24 + 1), 2**24 + 2]], np.int64)
    one = np.ones(1, F32)
    out = ref.w8a8_int8_epilogue(acc, one, np.ones(4, F32), np.float32)
    np.testing.assert_array_equal(out[0], F32([2**24, 2**24 + 4, -(2**24), 2**24 + 2]))
    # One rounding from int64: via float64 this would tie (at 2**60 + 2**36)
    # and round down to 2**60 instead of up to the nearest float32.
    big = np.array([[2**60 + 2**36 + 1]], np.int64)
    out = ref.w8a8_int8_epilogue(big, one, one, np.float32)
    assert out[0, 0] == F32(2**60 + 2**37)


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(1, 3), n=st.integers(1, 3),
       k=st.integers(1, 40))
def test_int8_gemm_acc_equals_python_dot(seed, rows, n, k):
    rng = np.random.default_rng(seed)
    qx = rng.integers(-127, 128, size=(rows, k)).astype(np.int8)
    qw = rng.integers(-127, 128, size=(n, k)).astype(np.int8)
    acc = ref.int8_gemm_acc(qx, qw)
    for m in range(rows):
        for j in range(n):
            expected = sum(int(a) * int(b) for a, b in zip(qx[m], qw[j]))
            assert int(acc[m, j]) == expected


def test_int8_gemm_acc_does_not_wrap_at_int32():
    k = 140_000  # 127 * 127 * k > 2**31
    qx = np.full((1, k), -127, np.int8)
    qw = np.full((2, k), -127, np.int8)
    qw[1] = 127
    acc = ref.int8_gemm_acc(qx, qw)
    assert acc.tolist() == [[16129 * k, -16129 * k]]


@SETTINGS
@given(x=matrices(unit=8), w=matrices(rows=(1, 5), unit=8))
def test_w8a8_proj_is_quantize_gemm_epilogue(x, w):
    k = min(x.shape[1], w.shape[1])
    x, w = x[:, :k], w[:, :k].astype(F32)
    qw, sw = ref.quantize_int8_weight(w)
    out = ref.w8a8_int8_proj(x, qw, sw, BF16)
    qx, sx = ref.quantize_int8_rows(x)
    acc = sum(f64(qx[:, i])[:, None] * f64(qw[:, i])[None, :] for i in range(k))
    manual = ((acc.astype(F32) * sx[:, None]) * sw[None, :]).astype(BF16)
    assert out.dtype == np.dtype(BF16)
    assert out.tobytes() == manual.tobytes()
    # And it approximates the dequantized float64 product.
    xd, wd = f64(qx) * f64(sx)[:, None], f64(qw) * f64(sw)[:, None]
    approx = ref.dequant_matmul_f64(xd, wd)
    # Absolute slack for float64 cancellation when the exact sum is ~0.
    atol = 1e-12 * (np.abs(xd) @ np.abs(wd).T)
    assert np.all(np.abs(f64(out) - approx) <= 2**-7 * np.abs(approx) + atol)


def test_dequant_matmul_f64_is_float64_product():
    xd = np.array([[1.0, 2.0], [3.0, 4.0]], F32)
    wd = np.array([[1.0, 1e-9], [0.5, -1.0], [0.0, 2.0]], np.float64)
    out = ref.dequant_matmul_f64(xd, wd)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, [[1.0 + 2e-9, -1.5, 4.0], [3.0 + 4e-9, -2.5, 8.0]])


# ---------------------------------------------------------------------------
# FP8 e4m3
# ---------------------------------------------------------------------------


def _e4m3_nearest(v):
    """Independent e4m3fn rounding: nearest finite value, ties to the even
    code, saturating at +-448."""
    codes = np.arange(256, dtype=np.uint8)
    values = f64(codes.view(E4M3))
    finite = np.isfinite(values)
    codes, values = codes[finite], values[finite]
    out = []
    for x in f64(v).ravel():
        x = float(np.clip(x, -448.0, 448.0))
        dist = np.abs(values - x)
        # Same sign as x keeps +0/-0 apart; the code's low bit is the
        # mantissa's, so an even code breaks true ties.
        nearest = (dist == dist.min()) & (np.signbit(values) == np.signbit(x))
        cand = codes[nearest]
        even = cand[cand % 2 == 0]
        out.append((even if len(even) else cand)[0])
    return np.array(out, np.uint8).view(E4M3).reshape(np.shape(v))


def test_e4m3_saturates_instead_of_nan():
    v = np.array([500.0, -1e9, 448.0, 464.0, 3e38, -449.0], F32)
    out = ref.e4m3_rn(v)
    assert out.dtype == np.dtype(E4M3)
    np.testing.assert_array_equal(f64(out), [448, -448, 448, 448, 448, -448])


def test_e4m3_round_half_even():
    # 432 is halfway between 416 (mantissa 101) and 448 (110); 17 between 16
    # and 18; 19 between 18 and 20; 2**-10 halfway between 0 and the smallest
    # subnormal; 3 * 2**-10 halfway between subnormals 2**-9 and 2**-8.
    v = np.array([432.0, 17.0, 19.0, 2**-10, 3 * 2**-10, -17.0], F32)
    np.testing.assert_array_equal(f64(ref.e4m3_rn(v)), [448, 16, 20, 0, 2**-8, -16])


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1))
def test_e4m3_matches_independent_rounding(seed):
    rng = np.random.default_rng(seed)
    exact = f64(rng.integers(0, 256, 64).astype(np.uint8).view(E4M3))
    exact = exact[np.isfinite(exact)]
    # Midpoints between neighbours and values nudged off them exercise ties.
    grid = np.sort(np.unique(np.abs(exact)))
    mids = (grid[:-1] + grid[1:]) / 2
    nudged = np.concatenate([mids, np.nextafter(mids.astype(F32), F32(0)),
                             np.nextafter(mids.astype(F32), F32(np.inf))])
    v = np.concatenate([exact, nudged, -nudged, rng.standard_normal(64) * 100]).astype(F32)
    np.testing.assert_array_equal(ref.e4m3_rn(v).view(np.uint8),
                                  _e4m3_nearest(v).view(np.uint8))


@pytest.mark.parametrize("dtype", INPUT_DTYPES)
def test_fp8_zero_groups_give_zero_without_nan(dtype):
    x = np.zeros((2, 256), dtype)
    x[0, 130] = -3.0
    with strict_fp():
        q, s = ref.quantize_fp8_groups(x)
        qr, sr = ref.quantize_fp8_rows(x)
    np.testing.assert_array_equal(s, F32([[0.0, 3.0 / 448.0], [0.0, 0.0]]))
    qf = f64(q)
    assert qf[0, 130] == -448
    qf[0, 130] = 0
    assert not np.any(qf) and not np.any(np.isnan(qf))
    np.testing.assert_array_equal(sr, F32([3.0, 0.0]) / F32(448))
    assert not np.any(np.isnan(f64(qr)))


def _assert_fp8_error_bound(x, q, s_per_elem):
    x64, d = f64(x), f64(q) * s_per_elem
    # Half an ulp of a 3-bit mantissa (2**-4 relative) for normals, half the
    # subnormal step 2**-9 otherwise, plus the float32 division's rounding.
    bound = 2.0**-4 * np.abs(x64) + 2.0**-10 * s_per_elem + 2.0**-20 * np.abs(x64)
    assert np.all(np.abs(x64 - d) <= bound)


@SETTINGS
@given(matrices(unit=128, k_units=(1, 3)), st.sampled_from([32, 64, 128]))
def test_fp8_groups_error_bound_and_amax(x, group):
    q, s = ref.quantize_fp8_groups(x, group)
    rows, k = x.shape
    assert s.shape == (rows, k // group)
    s_elem = np.repeat(f64(s), group, axis=1)
    _assert_fp8_error_bound(x, q, s_elem)
    xg = np.abs(f64(x)).reshape(rows, k // group, group)
    np.testing.assert_array_equal(s, xg.max(axis=2).astype(F32) / F32(448))
    qg = np.abs(f64(q)).reshape(rows, k // group, group)
    nz = s > 0
    # The group amax always decodes to 448 (x / s is within an ulp of 448).
    np.testing.assert_array_equal(qg.max(axis=2)[nz], 448.0)


@SETTINGS
@given(matrices(unit=16))
def test_fp8_rows_and_channel_equal_one_group_per_row(x):
    q, s = ref.quantize_fp8_rows(x)
    qg, sg = ref.quantize_fp8_groups(x, x.shape[1])
    qc, sc = ref.quantize_fp8_weight_channel(x)
    assert s.shape == (x.shape[0],)
    np.testing.assert_array_equal(s, sg[:, 0])
    np.testing.assert_array_equal(q.view(np.uint8), qg.view(np.uint8))
    np.testing.assert_array_equal(qc.view(np.uint8), q.view(np.uint8))
    np.testing.assert_array_equal(sc, s)
    _assert_fp8_error_bound(x, q, f64(s)[:, None])


def test_fp8_weight_block_ragged_shapes():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((130, 260)).astype(BF16)
    w[128:, 256:] = 0  # the 2 x 4 corner tile is all zero
    w[0, 0] = 100.0
    w[129, 5] = -7.0
    q, s = ref.quantize_fp8_weight_block(w)
    assert s.shape == (2, 3) and q.shape == (130, 260)
    w64, q64 = f64(w), f64(q)
    for bn in range(2):
        for bk in range(3):
            tile = (slice(128 * bn, 128 * (bn + 1)), slice(128 * bk, 128 * (bk + 1)))
            amax = np.abs(w64[tile]).max()
            assert s[bn, bk] == F32(amax) / F32(448)
            if amax == 0:
                assert not np.any(q64[tile])
            else:
                assert np.abs(q64[tile]).max() == 448
            _assert_fp8_error_bound(w64[tile], q[tile], f64(s[bn, bk]))
    assert q64[0, 0] == 448 and q64[129, 5] == -448


# ---------------------------------------------------------------------------
# e2m1 codes
# ---------------------------------------------------------------------------


def test_e2m1_decode_all_codes():
    expected = E2M1_MAGNITUDES + [-m for m in E2M1_MAGNITUDES]
    out = ref.e2m1_decode(np.arange(16))
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, expected)
    assert np.signbit(out[8]) and not np.signbit(out[0])
    np.testing.assert_array_equal(ref.E2M1_VALUES, expected)


def test_e2m1_encode_ties_and_saturation():
    # (input, decoded value, code); ties go to the even mantissa.
    cases = [
        (0.0, 0.0, 0), (0.25, 0.0, 0), (0.75, 1.0, 2), (1.25, 1.0, 2),
        (1.75, 2.0, 4), (2.5, 2.0, 4), (3.5, 4.0, 6), (5.0, 4.0, 6),
        (0.5, 0.5, 1), (0.26, 0.5, 1), (5.01, 6.0, 7), (6.0, 6.0, 7),
        (7.0, 6.0, 7), (100.0, 6.0, 7), (-0.0, -0.0, 8), (-0.1, -0.0, 8),
        (-0.25, -0.0, 8), (-0.75, -1.0, 10), (-5.0, -4.0, 14), (-7.0, -6.0, 15),
        (-1e30, -6.0, 15),
    ]
    inputs, values, codes = (list(c) for c in zip(*cases))
    for dtype in (F32, np.float64):
        out = ref.e2m1_encode(np.array(inputs, dtype))
        assert out.dtype == np.uint8
        np.testing.assert_array_equal(out, codes)
        decoded = ref.e2m1_decode(out)
        np.testing.assert_array_equal(decoded, values)
        np.testing.assert_array_equal(np.signbit(decoded), np.signbit(values))


@SETTINGS
@given(st.lists(st.floats(-8, 8, width=32), min_size=1, max_size=64))
def test_e2m1_encode_is_nearest_even(values):
    v = np.array(values, F32)
    codes = ref.e2m1_encode(v)
    mags = np.array(E2M1_MAGNITUDES)
    a = np.minimum(np.abs(f64(v)), 6.0)
    got = mags[codes & 7]
    dist = np.abs(mags[None, :] - a[:, None])
    best = dist.min(axis=1)
    assert np.all(np.abs(got - a) == best)
    tie = (dist == best[:, None]).sum(axis=1) > 1
    assert np.all(codes[tie] % 2 == 0)
    np.testing.assert_array_equal(codes >> 3, np.signbit(v).astype(np.uint8))


def test_pack_e2m1_nibble_order():
    codes = np.array([[1, 2, 15, 8], [0, 7, 9, 0]], np.uint8)
    packed = ref.pack_e2m1(codes)
    assert packed.dtype == np.uint8
    np.testing.assert_array_equal(packed, [[0x21, 0x8F], [0x70, 0x09]])
    np.testing.assert_array_equal(ref.unpack_e2m1(packed), codes)


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), lead=st.integers(1, 3), k2=st.integers(1, 20))
def test_pack_unpack_round_trip(seed, lead, k2):
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 16, size=(lead, 2, 2 * k2)).astype(np.uint8)
    packed = ref.pack_e2m1(codes)
    assert packed.shape == (lead, 2, k2)
    np.testing.assert_array_equal(ref.unpack_e2m1(packed), codes)
    bytes_ = rng.integers(0, 256, size=(lead, k2)).astype(np.uint8)
    np.testing.assert_array_equal(ref.pack_e2m1(ref.unpack_e2m1(bytes_)), bytes_)


# ---------------------------------------------------------------------------
# NVFP4
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", INPUT_DTYPES)
def test_nvfp4_zero_row_gives_zero_without_nan(dtype):
    x = np.zeros((2, 32), dtype)
    x[1, 3] = -2.0
    with strict_fp():
        packed, s, gs = ref.quantize_nvfp4_rows(x)
        d = ref.nvfp4_decode(packed, s, gs)
    assert gs[0] == 0 and not np.any(packed[0]) and not np.any(f64(s[0]))
    assert gs[1] == F32(2.0) / F32(2688)
    assert not np.any(np.isnan(d))
    assert d[1, 3] == pytest.approx(-2.0, rel=1e-6)
    assert ref.unpack_e2m1(packed)[1, 3] == 15
    np.testing.assert_array_equal(f64(s[1]), [448.0, 0.0])


def test_nvfp4_tiny_block_relative_to_row_is_zeroed():
    x = np.zeros((1, 48), F32)
    x[0, :16] = np.linspace(-2688, 2688, 16)  # gs = 1
    x[0, 16:32] = -1e-6  # amax / 6 / gs ~ 1.7e-7, below e4m3's half-subnormal
    x[0, 32:48] = 0.01  # 0.01 / 6 ~ 0.0017 still rounds to subnormal 2**-9
    with strict_fp():
        packed, s, gs = ref.quantize_nvfp4_rows(x)
    codes = ref.unpack_e2m1(packed)[0]
    assert gs[0] == 1.0
    np.testing.assert_array_equal(f64(s[0]), [448.0, 0.0, 2.0**-9])
    # Code 0 (+0), not 8 (-0), even though the block is negative.
    assert np.all(codes[16:32] == 0)
    assert np.all(codes[32:48] != 0)


def test_nvfp4_codes_round_half_even_exactly():
    # Block 0 sets gs = 2688 / 2688 = 1. Block 1 has amax 6 -> s = 1, so
    # x / (s * gs) is x itself; block 2 has amax 3 -> s = 0.5 and every
    # element sits on an e2m1 tie after the exact division by 0.5.
    ties = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.75, -1.75, -5.0]
    x = np.zeros((1, 48), F32)
    x[0, 0] = 2688.0
    x[0, 16:32] = [6.0] + ties + [0.0, -0.0, 0.5, 7.0 / 8.0, -6.0]
    x[0, 32:48] = [3.0] + [t / 2 for t in ties] + [0.0, 0.125, 1.0, 1.5, -1.5]
    packed, s, gs = ref.quantize_nvfp4_rows(x)
    assert gs[0] == 1.0
    np.testing.assert_array_equal(f64(s[0]), [448.0, 1.0, 0.5])
    tie_values = [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, -1.0, -2.0, -4.0]
    d = ref.e2m1_decode(ref.unpack_e2m1(packed)[0])
    np.testing.assert_array_equal(d[16:32], [6.0] + tie_values + [0.0, -0.0, 0.5, 1.0, -6.0])
    np.testing.assert_array_equal(d[32:48], [6.0] + tie_values + [0.0, 0.0, 2.0, 3.0, -3.0])
    assert np.signbit(d[28]) and not np.signbit(d[27])


def _nvfp4_check_error(x, packed, s, gs_rows):
    """Each element is within half an e2m1 gap of its block scale, and a
    saturated element decodes to exactly +-6 block scales."""
    x64 = f64(x)
    rows, k = x64.shape
    scale = np.repeat(f64(s) * f64(gs_rows)[:, None], 16, axis=1)
    d = ref.nvfp4_decode(packed, s, gs_rows)
    err = np.abs(x64 - d)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.abs(x64) / scale
    live = scale > 0
    half_gap = np.where(a < 2, 0.25, np.where(a < 4, 0.5, 1.0))
    inside = live & (a <= 6)
    slack = 1e-6 * np.abs(x64)
    assert np.all(err[inside] <= (half_gap * scale + slack)[inside])
    sat = live & (a > 6)
    assert np.all(np.abs(d[sat]) == 6 * scale[sat])
    assert np.all(np.sign(d[sat]) == np.sign(x64[sat]))
    assert np.all(d[~live] == 0)
    # With a normal, unsaturated e4m3 block scale the error is below one block
    # scale unit even when e2m1 saturates (amax / scale <= 6 / (1 - 2**-4)).
    with np.errstate(divide="ignore", invalid="ignore"):
        want_s = np.abs(x64).reshape(rows, k // 16, 16).max(axis=2) / (6 * f64(gs_rows)[:, None])
    normal = np.repeat((f64(s) >= 2.0**-6) & (want_s <= 448), 16, axis=1)
    assert np.all(err[normal] <= scale[normal] * (1 + 1e-6))
    return d


@SETTINGS
@given(matrices(unit=16))
def test_nvfp4_rows_error_bound_and_scales(x):
    packed, s, gs = ref.quantize_nvfp4_rows(x)
    rows, k = x.shape
    assert packed.dtype == np.uint8 and s.dtype == np.dtype(E4M3) and gs.dtype == F32
    amax = np.abs(f64(x)).max(axis=1)
    np.testing.assert_array_equal(gs, amax.astype(F32) / F32(2688))
    d = _nvfp4_check_error(x, packed, s, gs)
    for r in range(rows):
        if gs[r] == 0:
            assert not np.any(packed[r])
            continue
        # The row's amax element lands on the top of both grids: 6 x 448.
        i = np.argmax(np.abs(f64(x[r])))
        assert ref.unpack_e2m1(packed)[r, i] & 7 == 7
        assert f64(s[r, i // 16]) == 448
        assert abs(d[r, i]) == pytest.approx(amax[r], rel=1e-6)


@SETTINGS
@given(matrices(rows=(2, 6), unit=16))
def test_nvfp4_rows_quantizer_is_row_independent(x):
    packed, s, gs = ref.quantize_nvfp4_rows(x)
    for r in range(x.shape[0]):
        p1, s1, g1 = ref.quantize_nvfp4_rows(x[r:r + 1])
        np.testing.assert_array_equal(p1[0], packed[r])
        np.testing.assert_array_equal(s1[0].view(np.uint8), s[r].view(np.uint8))
        assert g1[0] == gs[r]


def test_nvfp4_static_scale_saturates():
    x = np.zeros((2, 32), F32)
    x[0, :16] = 1000.0
    x[0, 3] = -1000.0
    x[0, 16:] = 0.02
    x[1, 16] = 1e30
    packed, s = ref.quantize_nvfp4_rows_static(x, 0.01)
    codes = ref.unpack_e2m1(packed)
    # 1000 / 6 / 0.01 ~ 16667 -> 448; 1000 / (448 * 0.01) ~ 223 -> 6.
    assert f64(s[0, 0]) == 448
    assert np.all(codes[0, :16] == np.where(np.arange(16) == 3, 15, 7))
    # 0.02 / 6 / 0.01 = 1/3 -> e4m3 0.34375; 0.02 / (0.34375 * 0.01) ~ 5.8 -> 6.
    assert f64(s[0, 1]) == 0.34375
    assert np.all(codes[0, 16:] == 7)
    assert f64(s[1, 1]) == 448 and codes[1, 16] == 7
    assert f64(s[1, 0]) == 0 and not np.any(codes[1, :16])
    assert not np.any(np.isnan(f64(s)))


@SETTINGS
@given(matrices(rows=(1, 1), unit=16))
def test_nvfp4_static_with_dynamic_scale_matches_dynamic(x):
    packed, s, gs = ref.quantize_nvfp4_rows(x)
    p2, s2 = ref.quantize_nvfp4_rows_static(x, gs[0])
    np.testing.assert_array_equal(p2, packed)
    np.testing.assert_array_equal(s2.view(np.uint8), s.view(np.uint8))


@SETTINGS
@given(matrices(unit=16), st.floats(1e-4, 1e2))
def test_nvfp4_static_error_bound(x, input_scale):
    packed, s = ref.quantize_nvfp4_rows_static(x, input_scale)
    gs_rows = np.full(x.shape[0], F32(input_scale))
    _nvfp4_check_error(x, packed, s, gs_rows)


@SETTINGS
@given(matrices(rows=(1, 6), unit=16))
def test_nvfp4_weight_uses_one_tensor_scale(w):
    packed, s, scale2 = ref.quantize_nvfp4_weight(w)
    assert isinstance(scale2, np.float32)
    assert scale2 == np.abs(f64(w)).max().astype(F32) / F32(2688)
    p2, s2 = ref.quantize_nvfp4_rows_static(w, scale2)
    np.testing.assert_array_equal(p2, packed)
    np.testing.assert_array_equal(s2.view(np.uint8), s.view(np.uint8))
    _nvfp4_check_error(w, packed, s, np.full(w.shape[0], scale2))


# ---------------------------------------------------------------------------
# float64 projection oracles
# ---------------------------------------------------------------------------


def _decode_nvfp4_independently(packed, s, gs):
    lut = np.array(E2M1_MAGNITUDES + [-m for m in E2M1_MAGNITUDES])
    lo, hi = packed & 0x0F, packed >> 4
    codes = np.stack([lo, hi], axis=-1).reshape(packed.shape[0], -1)
    block = np.repeat(f64(s), 16, axis=1)
    return lut[codes] * block * np.broadcast_to(f64(gs), (packed.shape[0],))[:, None]


@SETTINGS
@given(x=matrices(rows=(1, 4), k_units=(2, 2)), w=matrices(rows=(1, 5), k_units=(2, 2)))
def test_nvfp4_proj_f64_matches_dequant_matmul(x, w):
    xp, xs, xgs = ref.quantize_nvfp4_rows(x)
    wp, ws, w2 = ref.quantize_nvfp4_weight(w)
    out = ref.nvfp4_proj_f64(xp, xs, xgs, wp, ws, w2)
    expected = _decode_nvfp4_independently(xp, xs, xgs) @ _decode_nvfp4_independently(wp, ws, w2).T
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=0)
    np.testing.assert_array_equal(ref.nvfp4_decode(wp, ws, w2),
                                  _decode_nvfp4_independently(wp, ws, w2))


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(1, 4), n=st.integers(1, 300),
       kb=st.integers(1, 3))
def test_fp8_block_proj_f64_matches_blockwise_dequant(seed, rows, n, kb):
    rng = np.random.default_rng(seed)
    k = 128 * kb
    x = rng.standard_normal((rows, k)).astype(BF16)
    w = (rng.standard_normal((n, k)) * rng.uniform(0.01, 10, (n, 1))).astype(BF16)
    qx, sx = ref.quantize_fp8_groups(x, 128)
    qw, sw = ref.quantize_fp8_weight_block(w)
    out = ref.fp8_block_proj_f64(qx, sx, qw, sw)
    xd = f64(qx) * np.repeat(f64(sx), 128, axis=1)
    wd = f64(qw) * np.repeat(np.repeat(f64(sw), 128, axis=0), 128, axis=1)[:n, :k]
    expected = xd @ wd.T
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())
    # The oracle also tracks the unquantized product to fp8 accuracy.
    exact = f64(x) @ f64(w).T
    assert np.abs(out - exact).max() <= 2**-3 * (np.abs(f64(x)) @ np.abs(f64(w)).T).max()


@SETTINGS
@given(x=matrices(rows=(1, 4), k_units=(1, 4)), seed=st.integers(0, 2**32 - 1),
       n=st.integers(1, 6))
def test_fp8_channel_proj_f64_matches_dequant_matmul(x, seed, n):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, x.shape[1])).astype(F32)
    qx, sx = ref.quantize_fp8_rows(x)
    qw, sw = ref.quantize_fp8_weight_channel(w)
    out = ref.fp8_channel_proj_f64(qx, sx, qw, sw)
    xd = f64(qx) * f64(sx)[:, None]
    wd = f64(qw) * f64(sw)[:, None]
    expected = xd @ wd.T
    tol = 1e-12 * max(np.abs(expected).max(), 1e-300)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=tol)
    np.testing.assert_allclose(out, ref.dequant_matmul_f64(xd, wd), rtol=1e-12, atol=tol)
