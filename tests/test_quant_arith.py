"""The quantizers' division-free codes (kernels/include/gdn/convert.cuh int8_code, e4m3_code),
emulated in numpy float32, against the references' division: wherever the kernel takes the
product's code, it is the quotient's, for every bf16 and fp16 value a row with that scale can hold."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from gdn_kernels import reference as ref

F32 = np.float32


def all_finite(dtype) -> np.ndarray:
    """Every finite value of a 16-bit float type, as float32."""
    v = np.arange(1 << 16, dtype=np.uint16).view(dtype).astype(F32)
    return v[np.isfinite(v)]


def int8_code(v, inv):
    """(code, exact) as gdn::int8_code computes them, fp32 throughout."""
    y = v * inv
    n = np.rint(y)
    exact = (np.abs(y - n) < F32(0.5 - 2.0 ** -12)) & (np.abs(y) < F32(512))
    with np.errstate(invalid="ignore"):
        code = np.clip(np.nan_to_num(n), -127, 127).astype(np.int8)
    return code, exact


def e4m3_code(v, inv):
    """(code, exact) as gdn::e4m3_code computes them (saturating conversions)."""
    y = v * inv
    lo = ref.e4m3_rn(y * F32(1 - 2.0 ** -16)).view(np.uint8)
    hi = ref.e4m3_rn(y * F32(1 + 2.0 ** -16)).view(np.uint8)
    return hi, (lo == hi) & (np.abs(y) < F32(65536))


def amaxes(dtype, kmax, rng) -> np.ndarray:
    """Row maxima: those that make the scale a power of two (the quotients exact, so every tie of
    the code occurs), random ones over the type's range, subnormal ones, the largest."""
    info = ml_dtypes.finfo(dtype) if dtype == ml_dtypes.bfloat16 else np.finfo(dtype)
    exact = [kmax * F32(2.0) ** e for e in range(-20, 8)]
    lo, hi = np.log2(float(info.smallest_subnormal)), np.log2(float(info.max))
    rand = np.exp2(rng.uniform(lo, hi, 120))
    sub = np.array([float(info.smallest_subnormal) * m for m in (1, 3, 63, 64, 127, 200, 448, 1000)])
    a = np.concatenate([exact, rand, sub, [float(info.max)]]).astype(dtype).astype(F32)
    return np.unique(a[(a > 0) & np.isfinite(a)])


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("kind", ["int8", "e4m3"])
def test_product_code_equals_quotient_code(kind, dtype):
    rng = np.random.default_rng(7)
    values = all_finite(dtype)
    kmax = ref.INT8_MAX if kind == "int8" else ref.E4M3_MAX
    undecided = total = 0
    for amax in amaxes(dtype, kmax, rng):
        v = values[np.abs(values) <= amax]
        s = F32(amax) / kmax
        if s == 0:
            continue
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            inv = F32(1) / s
            if kind == "int8":
                want = np.clip(np.rint(v / s), -127, 127).astype(np.int8)
                code, exact = int8_code(v, inv)
            else:
                want = ref.e4m3_rn(v / s).view(np.uint8)
                code, exact = e4m3_code(v, inv)
        bad = exact & (code != want)
        assert not bad.any(), f"amax {amax!r}: value {v[bad][0]!r} gives {code[bad][0]}, not {want[bad][0]}"
        if np.isfinite(inv) and inv >= np.finfo(F32).tiny:
            undecided += int((~exact).sum())
            total += v.size
    # The division stays rare where the reciprocal is normal (ties of exact scales included).
    assert undecided / total < 1 / 200
