"""Plain numpy references for the quantizers and GEMMs of gdn_kernels.

The quantizers are a bit-exact contract for the GPU kernels: every fp32 step
is one numpy float32 operation (IEEE, correctly rounded, round to nearest
even) done in the order written in the docstring, and format rounding is done
by ml_dtypes casts.  The ``*_f64`` projections are float64 oracles used to
bound the error of the GPU GEMMs; they are not bit-exact contracts.

Inputs ``x``/``w`` to the quantizers are 2-D arrays of dtype
``ml_dtypes.bfloat16``, ``np.float16`` or ``np.float32``; they are converted
to float32 first, which is exact.  All-zero rows, groups and blocks quantize to
zero codes with scale 0 and never produce NaN or floating-point warnings.
Inputs are assumed finite; inf and NaN are outside the contract.
"""

import ml_dtypes
import numpy as np

__all__ = [
    "quantize_int8_rows",
    "quantize_int8_weight",
    "int8_gemm_acc",
    "w8a8_int8_epilogue",
    "w8a8_int8_proj",
    "dequant_matmul_f64",
    "e4m3_rn",
    "quantize_fp8_groups",
    "quantize_fp8_rows",
    "quantize_fp8_weight_block",
    "quantize_fp8_weight_channel",
    "fp8_block_proj_f64",
    "fp8_channel_proj_f64",
    "E2M1_VALUES",
    "e2m1_encode",
    "e2m1_decode",
    "pack_e2m1",
    "unpack_e2m1",
    "quantize_nvfp4_rows",
    "quantize_nvfp4_rows_static",
    "quantize_nvfp4_weight",
    "nvfp4_decode",
    "nvfp4_proj_f64",
]

INT8_MAX = np.float32(127.0)
E4M3_MAX = np.float32(448.0)
E2M1_MAX = np.float32(6.0)
NVFP4_GLOBAL_DIV = np.float32(2688.0)  # E2M1_MAX * E4M3_MAX
NVFP4_BLOCK = 16
FP8_BLOCK = 128

_INPUT_DTYPES = (
    np.dtype(ml_dtypes.bfloat16),
    np.dtype(np.float16),
    np.dtype(np.float32),
)


def _as_f32_matrix(x, name):
    """Validate a 2-D bf16/f16/f32 array and convert it (exactly) to float32."""
    x = np.asarray(x)
    if x.dtype not in _INPUT_DTYPES:
        raise TypeError(f"{name} must be bfloat16, float16 or float32, got {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {x.shape}")
    return x.astype(np.float32)


def _safe_div(num, den):
    """float32 ``num / den`` with +0 wherever ``den == 0`` (no NaN, no warning)."""
    num, den = np.broadcast_arrays(np.asarray(num, np.float32), np.asarray(den, np.float32))
    out = np.zeros(num.shape, np.float32)
    # Saturating formats absorb an overflow to inf, so it is expected, not an error.
    with np.errstate(over="ignore"):
        np.divide(num, den, out=out, where=den != 0)
    return out


def _amax(x32, axis):
    """float32 max of |x| along ``axis`` (exact)."""
    return np.max(np.abs(x32), axis=axis)


# ---------------------------------------------------------------------------
# INT8 W8A8 (symmetric, per token / per output channel)
# ---------------------------------------------------------------------------


def quantize_int8_rows(x):
    """Symmetric per-row INT8 quantization.

    Parameters
    ----------
    x : ndarray, [rows, K] bfloat16, float16 or float32
        Activations (one token per row).

    Returns
    -------
    q : ndarray, [rows, K] int8
        ``clip(rint(float32(x) / scale), -127, 127)``; ``np.rint`` rounds half
        to even. Rows with ``scale == 0`` are all 0.
    scale : ndarray, [rows] float32
        ``float32(amax(|row|)) / float32(127)``, real units per integer step.
    """
    x32 = _as_f32_matrix(x, "x")
    scale = _amax(x32, axis=1) / INT8_MAX
    ratio = _safe_div(x32, scale[:, None])
    q = np.clip(np.rint(ratio), -INT8_MAX, INT8_MAX).astype(np.int8)
    return q, scale


def quantize_int8_weight(w):
    """Symmetric per-output-channel INT8 quantization of a weight.

    Same arithmetic as :func:`quantize_int8_rows`, one scale per row of ``w``.

    Parameters
    ----------
    w : ndarray, [N, K] bfloat16, float16 or float32
        Weight, one output channel per row.

    Returns
    -------
    q : ndarray, [N, K] int8
    scale : ndarray, [N] float32
    """
    return quantize_int8_rows(w)


def int8_gemm_acc(qx, qw):
    """Exact integer accumulation ``acc[m, n] = sum_k qx[m, k] * qw[n, k]``.

    Parameters
    ----------
    qx : ndarray, [rows, K] int8
    qw : ndarray, [N, K] int8

    Returns
    -------
    acc : ndarray, [rows, N] int64
        Exact (int64 cannot overflow for any realistic K).
    """
    return np.asarray(qx).astype(np.int64) @ np.asarray(qw).astype(np.int64).T


def w8a8_int8_epilogue(acc, sx, sw, out_dtype):
    """Dequantizing epilogue of the W8A8 GEMM.

    Computes, in float32, ``(float32(acc) * sx[:, None]) * sw[None, :]`` and
    rounds the result to ``out_dtype`` (nearest even).

    Parameters
    ----------
    acc : ndarray, [rows, N] integer
        Exact accumulators; ``float32(acc)`` rounds to nearest even.
    sx : ndarray, [rows] float32
        Activation scales.
    sw : ndarray, [N] float32
        Weight scales.
    out_dtype : dtype
        ``ml_dtypes.bfloat16`` or ``np.float16`` (``np.float32`` also works
        and skips the final rounding).

    Returns
    -------
    out : ndarray, [rows, N] out_dtype
    """
    # numpy converts int64 -> float32 in one correctly rounded step; going
    # through float64 would double-round accumulators above 2**53.
    acc32 = np.asarray(acc).astype(np.float32)
    sx = np.asarray(sx, np.float32)
    sw = np.asarray(sw, np.float32)
    with np.errstate(over="ignore"):
        out32 = (acc32 * sx[:, None]) * sw[None, :]
        return out32.astype(out_dtype)


def w8a8_int8_proj(x, qw, sw, out_dtype):
    """W8A8 projection: per-row INT8 quantization, integer GEMM, epilogue.

    Parameters
    ----------
    x : ndarray, [rows, K] bfloat16, float16 or float32
    qw : ndarray, [N, K] int8
        Weight codes from :func:`quantize_int8_weight`.
    sw : ndarray, [N] float32
        Weight scales from :func:`quantize_int8_weight`.
    out_dtype : dtype
        ``ml_dtypes.bfloat16`` or ``np.float16``.

    Returns
    -------
    out : ndarray, [rows, N] out_dtype
    """
    qx, sx = quantize_int8_rows(x)
    return w8a8_int8_epilogue(int8_gemm_acc(qx, qw), sx, sw, out_dtype)


def dequant_matmul_f64(xd, wd):
    """float64 ``xd @ wd.T`` of already dequantized operands.

    Parameters
    ----------
    xd : ndarray, [rows, K] any real dtype
    wd : ndarray, [N, K] any real dtype

    Returns
    -------
    out : ndarray, [rows, N] float64
    """
    return np.asarray(xd, np.float64) @ np.asarray(wd, np.float64).T


# ---------------------------------------------------------------------------
# FP8 e4m3fn (max 448, no inf)
# ---------------------------------------------------------------------------


def e4m3_rn(v):
    """Round float32 values to e4m3fn, nearest even, saturating at +-448.

    Parameters
    ----------
    v : array_like, any shape, float32 (other dtypes are converted to float32)

    Returns
    -------
    ndarray, same shape, ml_dtypes.float8_e4m3fn
        Never NaN for non-NaN input: the clip makes overflow saturate, since a
        plain cast of a value beyond 464 would give NaN (e4m3fn has no inf).
    """
    v32 = np.asarray(v).astype(np.float32)
    return np.clip(v32, -E4M3_MAX, E4M3_MAX).astype(ml_dtypes.float8_e4m3fn)


def quantize_fp8_groups(x, group=128):
    """Per-(row, K-group) FP8 e4m3 quantization of activations.

    Parameters
    ----------
    x : ndarray, [rows, K] bfloat16, float16 or float32
        ``K % group == 0``.
    group : int
        Group width along K.

    Returns
    -------
    q : ndarray, [rows, K] float8_e4m3fn
        ``e4m3_rn(float32(x) / s)`` (one float32 division); 0 where ``s == 0``.
    s : ndarray, [rows, K // group] float32
        ``float32(amax(|group|)) / float32(448)``, real units per e4m3 unit.
    """
    x32 = _as_f32_matrix(x, "x")
    rows, k = x32.shape
    if group <= 0 or k % group != 0:
        raise ValueError(f"K={k} must be a positive multiple of group={group}")
    xg = x32.reshape(rows, k // group, group)
    s = _amax(xg, axis=2) / E4M3_MAX
    q = e4m3_rn(_safe_div(xg, s[:, :, None]))
    return q.reshape(rows, k), s


def quantize_fp8_rows(x):
    """Per-row FP8 e4m3 quantization (one group spanning the whole row).

    Parameters
    ----------
    x : ndarray, [rows, K] bfloat16, float16 or float32

    Returns
    -------
    q : ndarray, [rows, K] float8_e4m3fn
    s : ndarray, [rows] float32
        ``float32(amax(|row|)) / float32(448)``.
    """
    x = np.asarray(x)
    q, s = quantize_fp8_groups(x, group=x.shape[-1])
    return q, s[:, 0]


def quantize_fp8_weight_block(w, block=128):
    """Per-(block x block) tile FP8 e4m3 quantization of a weight.

    Edge tiles of a ragged ``N`` or ``K`` are partial; their amax covers only
    the elements that exist.

    Parameters
    ----------
    w : ndarray, [N, K] bfloat16, float16 or float32
    block : int
        Tile edge along both N and K.

    Returns
    -------
    q : ndarray, [N, K] float8_e4m3fn
        ``e4m3_rn(float32(w) / s_of_its_tile)``; 0 in tiles with ``s == 0``.
    s : ndarray, [ceil(N / block), ceil(K / block)] float32
        ``float32(amax(|tile|)) / float32(448)``.
    """
    w32 = _as_f32_matrix(w, "w")
    n, k = w32.shape
    nb, kb = -(-n // block), -(-k // block)
    # Zero padding leaves each partial tile's amax unchanged and is cropped below.
    padded = np.zeros((nb * block, kb * block), np.float32)
    padded[:n, :k] = w32
    tiles = padded.reshape(nb, block, kb, block)
    s = _amax(tiles, axis=(1, 3)) / E4M3_MAX
    q = e4m3_rn(_safe_div(tiles, s[:, None, :, None]))
    return q.reshape(nb * block, kb * block)[:n, :k], s


def quantize_fp8_weight_channel(w):
    """Per-output-channel FP8 e4m3 quantization of a weight.

    Parameters
    ----------
    w : ndarray, [N, K] bfloat16, float16 or float32

    Returns
    -------
    q : ndarray, [N, K] float8_e4m3fn
    s : ndarray, [N] float32
        ``float32(amax(|row|)) / float32(448)``.
    """
    return quantize_fp8_rows(w)


def fp8_block_proj_f64(qx, sx, qw, sw_block):
    """float64 oracle of the block-scaled FP8 GEMM.

    ``out[m, n] = sum_kb (sum_{k in kb} qx[m, k] * qw[n, k]) * sx[m, kb] * sw_block[n // 128, kb]``
    with 128-wide K groups ``kb`` and decoded e4m3 values.

    Parameters
    ----------
    qx : ndarray, [rows, K] float8_e4m3fn
    sx : ndarray, [rows, ceil(K / 128)] float32
        Activation group scales.
    qw : ndarray, [N, K] float8_e4m3fn
    sw_block : ndarray, [ceil(N / 128), ceil(K / 128)] float32
        Weight tile scales.

    Returns
    -------
    out : ndarray, [rows, N] float64
    """
    qx64 = np.asarray(qx).astype(np.float64)
    qw64 = np.asarray(qw).astype(np.float64)
    sx64 = np.asarray(sx).astype(np.float64)
    sw64 = np.asarray(sw_block).astype(np.float64)
    rows, k = qx64.shape
    n = qw64.shape[0]
    sw_rows = sw64[np.arange(n) // FP8_BLOCK]
    out = np.zeros((rows, n), np.float64)
    for kb in range(-(-k // FP8_BLOCK)):
        cols = slice(kb * FP8_BLOCK, (kb + 1) * FP8_BLOCK)
        partial = qx64[:, cols] @ qw64[:, cols].T
        out += partial * sx64[:, kb][:, None] * sw_rows[:, kb][None, :]
    return out


def fp8_channel_proj_f64(qx, sx, qw, sw):
    """float64 oracle of the per-row x per-channel FP8 GEMM.

    Parameters
    ----------
    qx : ndarray, [rows, K] float8_e4m3fn
    sx : ndarray, [rows] float32
    qw : ndarray, [N, K] float8_e4m3fn
    sw : ndarray, [N] float32

    Returns
    -------
    out : ndarray, [rows, N] float64
        ``(qx @ qw.T) * sx[:, None] * sw[None, :]``.
    """
    acc = dequant_matmul_f64(np.asarray(qx).astype(np.float64), np.asarray(qw).astype(np.float64))
    sx64 = np.asarray(sx).astype(np.float64)
    sw64 = np.asarray(sw).astype(np.float64)
    return acc * sx64[:, None] * sw64[None, :]


# ---------------------------------------------------------------------------
# NVFP4: e2m1 codes, 16-wide e4m3 block scales, float32 global scale
# ---------------------------------------------------------------------------

E2M1_VALUES = np.array(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
     -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
    dtype=np.float64,
)
E2M1_VALUES.flags.writeable = False


def e2m1_encode(v):
    """Round to e2m1 codes: nearest even, saturating at +-6.

    Ties go to the even mantissa (values: 0.25->0, 0.75->1, 1.25->1,
    1.75->2, 2.5->2, 3.5->4, 5->4); the sign bit is the sign bit of ``v``, so
    -0.1 and -0.0 both give code 8.

    Parameters
    ----------
    v : array_like, any shape, float32 or float64 (others go through float32)

    Returns
    -------
    codes : ndarray, same shape, uint8 in [0, 15]
        Bits 0-2 index the magnitude in ``E2M1_VALUES``, bit 3 is the sign.
    """
    v = np.asarray(v)
    # Casting float64 directly avoids a double rounding through float32.
    if v.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        v = v.astype(np.float32)
    e2m1 = np.clip(v, -E2M1_MAX, E2M1_MAX).astype(ml_dtypes.float4_e2m1fn)
    # ml_dtypes keeps the 4-bit code in the low nibble of each byte.
    return e2m1.view(np.uint8) & np.uint8(0x0F)


def e2m1_decode(codes):
    """Decode e2m1 codes.

    Parameters
    ----------
    codes : array_like, any shape, integer in [0, 15]

    Returns
    -------
    ndarray, same shape, float64
    """
    return E2M1_VALUES[np.asarray(codes).astype(np.intp) & 0x0F]


def pack_e2m1(codes):
    """Pack pairs of e2m1 codes into bytes.

    Parameters
    ----------
    codes : ndarray, [..., K] uint8 in [0, 15], K even

    Returns
    -------
    packed : ndarray, [..., K // 2] uint8
        Element ``2j`` in the low nibble, ``2j + 1`` in the high nibble.
    """
    codes = np.asarray(codes).astype(np.uint8)
    if codes.shape[-1] % 2 != 0:
        raise ValueError(f"last dimension must be even, got {codes.shape[-1]}")
    lo = codes[..., 0::2] & np.uint8(0x0F)
    hi = codes[..., 1::2] & np.uint8(0x0F)
    return lo | (hi << np.uint8(4))


def unpack_e2m1(packed):
    """Inverse of :func:`pack_e2m1`.

    Parameters
    ----------
    packed : ndarray, [..., K2] uint8

    Returns
    -------
    codes : ndarray, [..., 2 * K2] uint8
    """
    packed = np.asarray(packed).astype(np.uint8)
    codes = np.empty(packed.shape[:-1] + (2 * packed.shape[-1],), np.uint8)
    codes[..., 0::2] = packed & np.uint8(0x0F)
    codes[..., 1::2] = packed >> np.uint8(4)
    return codes


def _nvfp4_blocks(x32, gs):
    """Quantize float32 rows with per-row float32 global scales ``gs``.

    Returns packed uint8 [rows, K // 2] and e4m3 block scales [rows, K // 16].
    """
    rows, k = x32.shape
    if k % NVFP4_BLOCK != 0:
        raise ValueError(f"K={k} must be a multiple of {NVFP4_BLOCK}")
    xb = x32.reshape(rows, k // NVFP4_BLOCK, NVFP4_BLOCK)
    gsb = np.broadcast_to(np.asarray(gs, np.float32).reshape(rows, 1), (rows, k // NVFP4_BLOCK))
    s = e4m3_rn(_safe_div(_amax(xb, axis=2) / E2M1_MAX, gsb))
    # A zero gs already gave s == 0, so testing the float32 product covers
    # gs == 0, s == 0 and the denormal case where s * gs underflows to 0.
    block_scale = s.astype(np.float32) * gsb
    codes = e2m1_encode(_safe_div(xb, block_scale[:, :, None]))
    codes[block_scale == 0] = 0
    s[block_scale == 0] = 0
    return pack_e2m1(codes.reshape(rows, k)), s


def quantize_nvfp4_rows(x):
    """NVFP4 quantization of activations with a dynamic per-row global scale.

    Per row ``gs = float32(amax(|row|)) / float32(2688)``. Per 16-wide block
    ``s = e4m3_rn((float32(amax(|block|)) / float32(6)) / gs)`` and codes
    ``e2m1_encode(float32(x) / (float32(s) * gs))`` (float32 product, then
    float32 division). A block whose float32 ``s * gs`` is 0 (``gs == 0``,
    ``s == 0`` because the block is tiny relative to the row, or underflow)
    gets codes 0 and ``s = 0``.

    Parameters
    ----------
    x : ndarray, [rows, K] bfloat16, float16 or float32
        ``K % 16 == 0``.

    Returns
    -------
    packed : ndarray, [rows, K // 2] uint8
        e2m1 codes, see :func:`pack_e2m1`.
    s : ndarray, [rows, K // 16] float8_e4m3fn
        Block scales, in units of ``gs``.
    gs : ndarray, [rows] float32
        Global scales, real units per (e4m3 unit x e2m1 unit).
    """
    x32 = _as_f32_matrix(x, "x")
    gs = _amax(x32, axis=1) / NVFP4_GLOBAL_DIV
    packed, s = _nvfp4_blocks(x32, gs)
    return packed, s, gs


def quantize_nvfp4_rows_static(x, input_scale):
    """NVFP4 quantization of activations with a fixed (calibrated) global scale.

    Same arithmetic as :func:`quantize_nvfp4_rows` with
    ``gs = float32(input_scale)`` for every row. Out-of-range values saturate:
    ``s`` at 448 and codes at +-6.

    Parameters
    ----------
    x : ndarray, [rows, K] bfloat16, float16 or float32
        ``K % 16 == 0``.
    input_scale : float
        Global scale, real units per (e4m3 unit x e2m1 unit).

    Returns
    -------
    packed : ndarray, [rows, K // 2] uint8
    s : ndarray, [rows, K // 16] float8_e4m3fn
    """
    x32 = _as_f32_matrix(x, "x")
    gs = np.full(x32.shape[0], np.float32(input_scale), np.float32)
    return _nvfp4_blocks(x32, gs)


def quantize_nvfp4_weight(w):
    """NVFP4 quantization of a weight with one per-tensor global scale.

    ``scale2 = float32(amax(|w|)) / float32(2688)``; blocks and codes as in
    :func:`quantize_nvfp4_rows` with ``gs = scale2`` for every row.

    Parameters
    ----------
    w : ndarray, [N, K] bfloat16, float16 or float32
        ``K % 16 == 0``.

    Returns
    -------
    packed : ndarray, [N, K // 2] uint8
    s : ndarray, [N, K // 16] float8_e4m3fn
    scale2 : np.float32
        Global scale, real units per (e4m3 unit x e2m1 unit).
    """
    w32 = _as_f32_matrix(w, "w")
    scale2 = np.float32(_amax(w32, axis=None) / NVFP4_GLOBAL_DIV)
    packed, s = _nvfp4_blocks(w32, np.full(w32.shape[0], scale2, np.float32))
    return packed, s, scale2


def nvfp4_decode(packed, s, global_scale):
    """Decode NVFP4 to float64.

    Parameters
    ----------
    packed : ndarray, [rows, K // 2] uint8
    s : ndarray, [rows, K // 16] float8_e4m3fn
    global_scale : float or ndarray [rows] float32
        One scale for the tensor, or one per row.

    Returns
    -------
    ndarray, [rows, K] float64
        ``e2m1 value * float64(s of its 16-block) * global_scale``.
    """
    values = e2m1_decode(unpack_e2m1(packed))
    rows, k = values.shape
    s64 = np.asarray(s).astype(np.float64)
    gs64 = np.asarray(global_scale).astype(np.float64)
    gs64 = gs64.reshape(rows, 1, 1) if gs64.ndim else gs64
    blocks = values.reshape(rows, k // NVFP4_BLOCK, NVFP4_BLOCK)
    return (blocks * s64[:, :, None] * gs64).reshape(rows, k)


def nvfp4_proj_f64(xp, xs, xgs, wp, ws, wscale2):
    """float64 oracle of the NVFP4 x NVFP4 GEMM.

    Parameters
    ----------
    xp : ndarray, [rows, K // 2] uint8
    xs : ndarray, [rows, K // 16] float8_e4m3fn
    xgs : float or ndarray [rows] float32
        Activation global scale(s).
    wp : ndarray, [N, K // 2] uint8
    ws : ndarray, [N, K // 16] float8_e4m3fn
    wscale2 : float
        Weight global scale.

    Returns
    -------
    out : ndarray, [rows, N] float64
    """
    return dequant_matmul_f64(nvfp4_decode(xp, xs, xgs), nvfp4_decode(wp, ws, wscale2))


# ---------------------------------------------------------------------------
# Dense FFN: down(silu(gate) * up)
# ---------------------------------------------------------------------------

__all__ += ["silu_mul_f64", "ffn_f64", "w8a8_decode", "w8a8_ffn_f64"]


def silu_mul_f64(gate, up):
    """float64 ``silu(gate) * up = gate / (1 + exp(-gate)) * up``.

    Parameters
    ----------
    gate, up : ndarray, same shape, any real dtype (bf16, fp16, fp32, fp64)

    Returns
    -------
    ndarray, same shape, float64
        A very negative gate (exp overflowing to inf) gives a signed zero, never NaN.
    """
    g = np.asarray(gate).astype(np.float64)
    u = np.asarray(up).astype(np.float64)
    with np.errstate(over="ignore"):
        return g / (1.0 + np.exp(-g)) * u


def ffn_f64(x, w_gate_up, w_down):
    """float64 dense FFN on decoded (dequantized) weights, no activation quantization.

    Parameters
    ----------
    x : ndarray, [rows, hidden] any real dtype
    w_gate_up : ndarray, [2 * inter, hidden] any real dtype
        The gate projection's rows, then the up projection's.
    w_down : ndarray, [hidden, inter] any real dtype

    Returns
    -------
    ndarray, [rows, hidden] float64
        ``silu(x . gate^T) * (x . up^T) . down^T``.
    """
    gu = dequant_matmul_f64(x, w_gate_up)
    inter = gu.shape[1] // 2
    return dequant_matmul_f64(silu_mul_f64(gu[:, :inter], gu[:, inter:]), w_down)


def w8a8_decode(fmt, q, s):
    """Decode a W8A8 weight to float64.

    Parameters
    ----------
    fmt : str
        ``"int8"``, ``"fp8_channel"`` or ``"fp8_block"``.
    q : ndarray, [N, K] int8 or float8_e4m3fn
    s : ndarray, float32: [N], or [ceil(N / 128), ceil(K / 128)] for ``"fp8_block"``

    Returns
    -------
    ndarray, [N, K] float64
        ``q * s`` of each element's channel or 128x128 block.
    """
    q64 = np.asarray(q).astype(np.float64)
    s64 = np.asarray(s).astype(np.float64)
    if fmt == "fp8_block":
        n, k = q64.shape
        return q64 * np.repeat(np.repeat(s64, FP8_BLOCK, axis=0), FP8_BLOCK, axis=1)[:n, :k]
    return q64 * s64.reshape(-1, 1)


def _w8a8_act_f64(fmt, x):
    """Activations as the W8A8 projection of a ``fmt`` weight quantizes them, decoded to float64."""
    if fmt == "int8":
        q, s = quantize_int8_rows(x)
        return q.astype(np.float64) * s.astype(np.float64)[:, None]
    if fmt == "fp8_channel":
        q, s = quantize_fp8_rows(x)
        return q.astype(np.float64) * s.astype(np.float64)[:, None]
    q, s = quantize_fp8_groups(x)
    return q.astype(np.float64) * np.repeat(s.astype(np.float64), FP8_BLOCK, axis=1)


def w8a8_ffn_f64(x, gate_up, down, act_dtype):
    """float64 oracle of the W8A8 dense FFN, with the library's quantization points.

    1. x is quantized as the gate/up projection quantizes it (per token, or per (token, 128) for
       ``"fp8_block"``; :func:`quantize_int8_rows`, :func:`quantize_fp8_rows`,
       :func:`quantize_fp8_groups`) and multiplied by the decoded gate/up weight in float64;
    2. gate and up are rounded to ``act_dtype`` (the projection's output);
    3. h = :func:`silu_mul_f64` (gate, up), rounded to float32, is quantized as the down
       projection quantizes its input;
    4. the down product is taken in float64 and not rounded.

    The GPU computes h in fp32 with expf and sums in fp32 (fp8) or int32 (int8), so it is not
    bit-equal to this: its error is bounded, not zero.

    Parameters
    ----------
    x : ndarray, [rows, hidden] bfloat16, float16 or float32
    gate_up : tuple (fmt, q, s)
        The stacked [gate | up] weight [2 * inter, hidden] (gate rows first), see
        :func:`w8a8_decode`.
    down : tuple (fmt, q, s)
        The down weight [hidden, inter].
    act_dtype : dtype
        ``ml_dtypes.bfloat16`` or ``np.float16``.

    Returns
    -------
    ndarray, [rows, hidden] float64
    """
    fmt_gu, q_gu, s_gu = gate_up
    fmt_d, q_d, s_d = down
    gu = dequant_matmul_f64(_w8a8_act_f64(fmt_gu, x), w8a8_decode(fmt_gu, q_gu, s_gu))
    gu = gu.astype(act_dtype).astype(np.float64)
    inter = gu.shape[1] // 2
    h = silu_mul_f64(gu[:, :inter], gu[:, inter:]).astype(np.float32)
    return dequant_matmul_f64(_w8a8_act_f64(fmt_d, h), w8a8_decode(fmt_d, q_d, s_d))
