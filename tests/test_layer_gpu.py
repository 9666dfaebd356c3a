"""The GDN layer and the W8A8 dense FFN on the GPU: every path of each projection against the
references at the decode row counts (1, verify sizes 2-9, multi-sequence sizes up to 256), outputs
in slices of larger poisoned buffers; the FFN step by step and against the float64 FFN; a decode
step captured in a CUDA graph and replayed, with no allocation inside; two layers on two streams."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from gdn_kernels import reference as ref
from tests.gpu_util import NP_DTYPE, POISON, poisoned, random_activations, region, to_device_2d, ulp_distance, \
    untouched_mask
from tests.test_w8a8_gpu import HostWeight, check_output, fp8_bound

pytestmark = pytest.mark.gpu

FORMATS = ("int8", "fp8_channel", "fp8_block")
# Decode row counts: the single-token step, speculative verify (1 + draft), multi-sequence batches.
ROWS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 33, 64, 128, 256)
# A small sequential GDN layer: hidden, [QKV | Z] = 1536 + 512 rows, value_dim; dense FFN inter.
HIDDEN, QKV, Z, VALUE, INTER = 1024, 1536, 512, 512, 768
QKVZ = QKV + Z
HALF_ULP = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}


@pytest.fixture(scope="module")
def ctx():
    from gdn_kernels import W8a8Ctx

    return W8a8Ctx(max_rows=256, max_k=17408)


def make_fctx(config: str = "", w8a8=None, nvfp4=None):
    from gdn_kernels import ActQuantConfig, GpuCtx

    return GpuCtx(ActQuantConfig.parse(config), w8a8, nvfp4)


def _code_rms(fmt: str) -> float:
    if fmt == "int8":
        return float(np.sqrt(np.mean(np.arange(-127, 128, dtype=np.float64) ** 2)))
    codes = np.array([b for b in range(256) if b & 0x7F != 0x7F], np.uint8)
    return float(np.sqrt(np.mean(codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64) ** 2)))


def random_weight(rng, fmt: str, n: int, k: int, std: float, segments=None) -> HostWeight:
    """A random W8A8 weight whose decoded values have about the given standard deviation: random
    codes (NaN-free e4m3 for fp8) and scales std / rms(code) * U(0.5, 1.5)."""
    import cupy

    from gdn_kernels import W8a8Weight

    if fmt == "int8":
        q = rng.integers(-127, 128, (n, k), dtype=np.int8)
    else:
        b = rng.integers(0, 254, (n, k), dtype=np.uint8)
        b[(b & 0x7F) == 0x7F] -= 1  # 0x7f / 0xff are NaN: take the neighbour
        q = b.view(ml_dtypes.float8_e4m3fn)
    shape = (-(-n // 128), k // 128) if fmt == "fp8_block" else (n,)
    s = (std / _code_rms(fmt) * rng.uniform(0.5, 1.5, shape)).astype(np.float32)
    hw = HostWeight.__new__(HostWeight)
    hw.fmt, hw.n, hw.k, hw.q, hw.s = fmt, n, k, q, s
    hw.dq = cupy.asarray(q.view(np.uint8) if fmt != "int8" else q)
    hw.ds = cupy.asarray(s)
    hw.w = W8a8Weight(fmt, n, k, hw.dq.data.ptr, hw.ds.data.ptr, "float32", tuple(segments or (n,)), (hw.dq, hw.ds))
    return hw


def call_poisoned(fn, x: np.ndarray, n: int, dtype: str, *, ldx_pad: int = 8, ldc_pad: int = 3, offset: int = 8):
    """fn(x_ptr, ldx, rows, out_ptr, ldc) with x and out inside larger poisoned buffers; checks
    that nothing outside out[0:rows, 0:n] was written; returns (fn's result, out [rows, n])."""
    import cupy

    rows, k = x.shape
    ldx, ldc = k + ldx_pad, n + ldc_pad
    x_buf, x_ptr = to_device_2d(x, ldx, offset=offset)
    size = rows * ldc + 2 * offset
    out = poisoned(size)
    res = fn(x_ptr, ldx, rows, out.data.ptr + 2 * offset, ldc)
    cupy.cuda.runtime.deviceSynchronize()
    host = out.get()
    assert (host[untouched_mask(size, offset, rows, n, ldc)] == POISON).all(), "wrote outside out[0:rows, 0:N]"
    return res, region(host, offset, rows, n, ldc).copy().view(NP_DTYPE[dtype])


def dense_weight(rng, n: int, k: int, dtype: str, std: float):
    """(host [n, k] of dtype, DenseWeight over a device copy)."""
    import cupy

    from gdn_kernels.layer import DenseWeight

    host = (rng.standard_normal((n, k)) * std).astype(NP_DTYPE[dtype])
    dev = cupy.asarray(host.view(np.uint16))
    return host, DenseWeight(n, k, dev.data.ptr, dtype, 0, dev)


def check_dense(x: np.ndarray, w: np.ndarray, y: np.ndarray, dtype: str):
    """cuBLAS with fp32 accumulation against float64: a K-term fp32 sum in any order errs by at most
    K * 2^-23 of the absolute sum (first order, allowing the tensor cores' truncating adds), plus
    half an ulp of the output."""
    y64 = ref.dequant_matmul_f64(x, w)
    absdot = np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)).T
    bound = (x.shape[1] + 2) * 2.0 ** -23 * absdot + HALF_ULP[dtype] * np.abs(y64) + 1e-30
    err = np.abs(y.astype(np.float64) - y64)
    assert (err <= bound).all(), f"max err/bound {np.max(err / bound):.3g}"


# ---- the [QKV | Z] and out_proj paths ----


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_w8a8_mixer_paths(ctx, fmt, dtype):
    from gdn_kernels import W8a8Mixer
    from gdn_kernels.layer import GdnLayer, ProjPath

    rng = np.random.default_rng(1)
    w_in = random_weight(rng, fmt, QKVZ, HIDDEN, 0.05, (QKV, Z))
    w_out = random_weight(rng, fmt, HIDDEN, VALUE, 0.05)
    layer = GdnLayer("sequential")
    layer.set_w8a8_decode_weights(W8a8Mixer(ctx, w_in.w, w_out.w), QKVZ, HIDDEN, VALUE)
    # gdn=nvfp4 is pinned but the layer holds no NVFP4 weight: W8A8 runs.
    fctx = make_fctx("gdn=nvfp4,ffn=w8a8")
    for rows in ROWS:
        x = random_activations(rng, rows, HIDDEN, dtype, outliers=True, zero_rows=(rows // 2,))
        path, y = call_poisoned(lambda xp, ldx, r, op, ldc: layer.qkvz(fctx, xp, ldx, r, op, ldc, dtype=dtype),
                                x, QKVZ, dtype)
        assert path is ProjPath.W8A8
        check_output(w_in, x, y, dtype)
        v = random_activations(rng, rows, VALUE, dtype)
        ok, y = call_poisoned(lambda xp, ldx, r, op, ldc: layer.pinned_out(fctx, xp, ldx, r, op, ldc, dtype=dtype),
                              v, HIDDEN, dtype)
        assert ok is True
        check_output(w_out, v, y, dtype)


def test_w8a8_model_shape_and_row_invariance(ctx):
    """The Qwen3.5/3.6-27B GDN shapes: [QKV | Z] [10240 + 6144, 5120], out_proj [5120, 6144]; a
    row's bits are the same at 1, verify and batch row counts."""
    from gdn_kernels import W8a8Mixer
    from gdn_kernels.layer import GdnLayer

    rng = np.random.default_rng(2)
    hidden, qkv, z, value = 5120, 10240, 6144, 6144
    w_in = random_weight(rng, "int8", qkv + z, hidden, 0.02, (qkv, z))
    w_out = random_weight(rng, "int8", hidden, value, 0.02)
    layer = GdnLayer("sequential")
    layer.set_w8a8_decode_weights(W8a8Mixer(ctx, w_in.w, w_out.w), qkv + z, hidden, value)
    fctx = make_fctx()
    x = random_activations(rng, 64, hidden, "bfloat16", outliers=True)
    ok, full = call_poisoned(lambda xp, ldx, r, op, ldc: layer.pinned_qkvz(fctx, xp, ldx, r, op, ldc), x,
                             qkv + z, "bfloat16")
    assert ok
    check_output(w_in, x, full, "bfloat16")
    for rows in (1, 2, 5, 9, 33):
        _, y = call_poisoned(lambda xp, ldx, r, op, ldc: layer.pinned_qkvz(fctx, xp, ldx, r, op, ldc), x[:rows],
                             qkv + z, "bfloat16", ldx_pad=0, ldc_pad=0)
        assert (y.view(np.uint16) == full[:rows].view(np.uint16)).all(), f"row invariance broken at rows={rows}"
    v = random_activations(rng, 9, value, "bfloat16")
    ok, y = call_poisoned(lambda xp, ldx, r, op, ldc: layer.pinned_out(fctx, xp, ldx, r, op, ldc), v, hidden,
                          "bfloat16")
    assert ok
    check_output(w_out, v, y, "bfloat16")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_bf16_fallback(ctx, dtype):
    """No pinned path: cuBLAS on the dense weight. A W8A8 layer falls back past the context's
    max_rows, and runs W8A8 again below it."""
    from gdn_kernels import W8a8Mixer
    from gdn_kernels.layer import GdnLayer, ProjPath

    rng = np.random.default_rng(3)
    wq, dq = dense_weight(rng, QKVZ, HIDDEN, dtype, 0.05)
    wo, do = dense_weight(rng, HIDDEN, VALUE, dtype, 0.05)
    layer = GdnLayer("interleaved", dense_qkvz=dq, dense_out=do)
    fctx = make_fctx("gdn=nvfp4")
    for rows in ROWS + (300,):
        x = random_activations(rng, rows, HIDDEN, dtype)
        path, y = call_poisoned(lambda xp, ldx, r, op, ldc: layer.qkvz(fctx, xp, ldx, r, op, ldc, dtype=dtype),
                                x, QKVZ, dtype)
        assert path is ProjPath.BF16
        check_dense(x, wq, y, dtype)
        v = random_activations(rng, rows, VALUE, dtype)
        path, y = call_poisoned(lambda xp, ldx, r, op, ldc: layer.out_proj(fctx, xp, ldx, r, op, ldc, dtype=dtype),
                                v, HIDDEN, dtype)
        assert path is ProjPath.BF16
        check_dense(v, wo, y, dtype)

    w_in = random_weight(rng, "int8", QKVZ, HIDDEN, 0.05)
    w_out = random_weight(rng, "int8", HIDDEN, VALUE, 0.05)
    seq = GdnLayer("sequential", dense_qkvz=dq, dense_out=do)
    seq.set_w8a8_decode_weights(W8a8Mixer(ctx, w_in.w, w_out.w), QKVZ, HIDDEN, VALUE)
    for rows, want in ((256, ProjPath.W8A8), (257, ProjPath.BF16), (300, ProjPath.BF16)):
        x = random_activations(rng, rows, HIDDEN, dtype)
        path, y = call_poisoned(lambda xp, ldx, r, op, ldc: seq.qkvz(fctx, xp, ldx, r, op, ldc, dtype=dtype),
                                x, QKVZ, dtype)
        assert path is want
        if want is ProjPath.W8A8:
            check_output(w_in, x, y, dtype)
        else:
            check_dense(x, wq, y, dtype)


def test_adopted_fp8_block_checkpoint(ctx):
    """Checkpoint-style FP8 (separate QKV and Z, block scales) adopted: [QKV | Z] and out_proj
    run the fp8 block W8A8 path and match the reference on the stacked weight."""
    import cupy

    from gdn_kernels import Fp8Weight
    from gdn_kernels._ptr import DevArray
    from gdn_kernels.layer import GdnLayer, ProjPath

    rng = np.random.default_rng(4)

    def checkpoint(n, k):
        w = (rng.standard_normal((n, k)) * 0.05).astype(ml_dtypes.bfloat16)
        d = cupy.asarray(w.view(np.uint16))
        return Fp8Weight.quantize(DevArray(d.data.ptr, (n, k), (k, 1), "bfloat16", d))

    def host(*ws):
        hw = HostWeight.__new__(HostWeight)
        hw.fmt, hw.k = "fp8_block", ws[0].k
        hw.n = sum(w.n for w in ws)
        hw.q = np.concatenate([w.owner[0].get() for w in ws]).view(ml_dtypes.float8_e4m3fn)
        hw.s = np.concatenate([w.owner[1].get() for w in ws])
        return hw

    qkv, z, out = checkpoint(QKV, HIDDEN), checkpoint(Z, HIDDEN), checkpoint(HIDDEN, VALUE)
    layer = GdnLayer("sequential", fp8_qkvz=(qkv, z), fp8_out=out)
    assert layer.adopt_fp8_block_w8a8(ctx, HIDDEN)
    assert layer.w8a8.input.segments == (QKV, Z)
    # The stacked copy is tile-major; the output projection wraps the checkpoint in place.
    assert layer.w8a8.input.layout == "tiles16" and layer.w8a8.output.layout == "rows"
    h_in, h_out = host(qkv, z), host(out)
    fctx = make_fctx()
    for rows in (1, 4, 9, 64, 256):
        x = random_activations(rng, rows, HIDDEN, "bfloat16", outliers=True)
        path, y = call_poisoned(lambda xp, ldx, r, op, ldc: layer.qkvz(fctx, xp, ldx, r, op, ldc), x, QKVZ,
                                "bfloat16")
        assert path is ProjPath.W8A8
        check_output(h_in, x, y, "bfloat16")
        v = random_activations(rng, rows, VALUE, "bfloat16")
        path, y = call_poisoned(lambda xp, ldx, r, op, ldc: layer.out_proj(fctx, xp, ldx, r, op, ldc), v, HIDDEN,
                                "bfloat16")
        assert path is ProjPath.W8A8
        check_output(h_out, v, y, "bfloat16")


def _nvfp4():
    try:
        from gdn_kernels.nvfp4 import Nvfp4Ctx  # noqa: F401
        from tests.test_nvfp4_gpu import HostFp4Weight, check
    except ImportError as exc:
        pytest.skip(f"NVFP4 is not available: {exc}")
    return HostFp4Weight, check


def test_nvfp4_paths(ctx):
    """gdn=nvfp4 on a sequential layer: NVFP4 for [QKV | Z] at every row count, including past
    the W8A8 context's max_rows; the out_proj is NVFP4 only without an FP8 or dense out_proj."""
    host_fp4, check_fp4 = _nvfp4()
    from gdn_kernels import Nvfp4Ctx, W8a8Mixer
    from gdn_kernels.layer import GdnLayer, ProjPath

    rng = np.random.default_rng(5)
    nctx = Nvfp4Ctx(max_rows=512, max_k=17408)
    fctx = make_fctx("gdn=nvfp4", ctx, nctx)
    n_in, n_out = host_fp4(rng, QKVZ, HIDDEN), host_fp4(rng, HIDDEN, VALUE)
    w_in = random_weight(rng, "int8", QKVZ, HIDDEN, 0.05)
    w_out = random_weight(rng, "int8", HIDDEN, VALUE, 0.05)
    wo, do = dense_weight(rng, HIDDEN, VALUE, "bfloat16", 0.05)
    # A W8A8 mixer is installed too: the pin wins for [QKV | Z] and for a bare NVFP4 out_proj.
    layer = GdnLayer("sequential", nvfp4_qkvz=n_in.w, nvfp4_out=n_out.w)
    layer.set_w8a8_decode_weights(W8a8Mixer(ctx, w_in.w, w_out.w), QKVZ, HIDDEN, VALUE)
    with_dense = GdnLayer("sequential", nvfp4_qkvz=n_in.w, nvfp4_out=n_out.w, dense_out=do)
    for rows in ROWS + (300,):
        x = random_activations(rng, rows, HIDDEN, "bfloat16", outliers=True)
        path, y = call_poisoned(lambda xp, ldx, r, op, ldc: layer.qkvz(fctx, xp, ldx, r, op, ldc), x, QKVZ,
                                "bfloat16")
        assert path is ProjPath.NVFP4
        check_fp4(n_in, x, y, "bfloat16")
        v = random_activations(rng, rows, VALUE, "bfloat16")
        path, y = call_poisoned(lambda xp, ldx, r, op, ldc: layer.out_proj(fctx, xp, ldx, r, op, ldc), v, HIDDEN,
                                "bfloat16")
        assert path is ProjPath.NVFP4
        check_fp4(n_out, v, y, "bfloat16")
        path, y = call_poisoned(lambda xp, ldx, r, op, ldc: with_dense.out_proj(fctx, xp, ldx, r, op, ldc), v,
                                HIDDEN, "bfloat16")
        assert path is ProjPath.BF16
        check_dense(v, wo, y, "bfloat16")
    # Not pinned: the same layer runs its W8A8 mixer.
    x = random_activations(rng, 5, HIDDEN, "bfloat16")
    path, y = call_poisoned(lambda xp, ldx, r, op, ldc: layer.qkvz(make_fctx("ffn=nvfp4", ctx, nctx), xp, ldx, r,
                                                                   op, ldc), x, QKVZ, "bfloat16")
    assert path is ProjPath.W8A8
    check_output(w_in, x, y, "bfloat16")


# ---- the W8A8 dense FFN ----


def make_ffn(ctx, rng, fmt: str, hidden: int, inter: int):
    """A W8a8Ffn with random weights scaled so that gate and up have a standard deviation of
    about 3 for unit activations (silu is far from linear there), and its host weights."""
    from gdn_kernels.ffn import W8a8Ffn

    gate_up = random_weight(rng, fmt, 2 * inter, hidden, 3.0 / np.sqrt(hidden), (inter, inter))
    down = random_weight(rng, fmt, hidden, inter, 1.0 / np.sqrt(inter))
    return W8a8Ffn(ctx, gate_up.w, down.w), gate_up, down


def check_ffn(ctx, ffn, gate_up: HostWeight, down: HostWeight, x: np.ndarray, y: np.ndarray, dtype: str, *,
              end_to_end: bool = True):
    """Step by step, each step within its own bound:

    1. gate/up in the FFN's workspace are bit for bit ctx.proj of the stacked weight (which the
       W8A8 tests hold to the references).
    2. The quantized intermediate against h = silu(gate) * up in float64 from those gate/up
       values: the kernel's fp32 h is within 2^-20 relative of it (expf within 2 ulp, three
       correctly rounded steps), so |q * s - h| is at most half a code step (int8: s / 2) or half
       an e4m3 ulp (at most 2^-4 |h|, or 2^-10 s below the normal range), plus that slack.
    3. The output against the reference of the down GEMM on the device's own quantized
       intermediate: int8 within one ulp, fp8 within the GEMM bound of the W8A8 tests.
    4. End to end against ``ref.w8a8_ffn_f64``, the float64 FFN with the library's quantization
       points: relative Frobenius error at most 2^-6 for int8 (the two agree up to the output
       rounding and rare code flips) and 2^-4 for fp8, where each fp8 GEMM's error (up to 2^-8
       of the absolute sum, see fp8_bound) moves gate and up by an ulp here and there, and an
       e4m3 code of h then flips by up to an eighth of its value (a numpy simulation of that
       effect on these shapes stays below 2.6%).
    """
    import cupy

    rows = x.shape[0]
    inter = ffn.inter
    gu_bits = ffn.gate_up_output(rows).get()
    q_dev, s_dev = (a.get() for a in ffn.down_input(rows))
    # 1.
    _, gu_again = call_poisoned(lambda xp, ldx, r, op, ldc: ctx.proj(gate_up.w, xp, ldx, r, op, ldc, dtype=dtype),
                                x, 2 * inter, dtype)
    assert (gu_again.view(np.uint16) == gu_bits).all(), "gate/up differ from ctx.proj of the stacked weight"
    cupy.cuda.runtime.deviceSynchronize()
    # 2.
    gu = gu_bits.view(NP_DTYPE[dtype]).astype(np.float64)
    h = ref.silu_mul_f64(gu[:, :inter], gu[:, inter:])
    slack = 2.0 ** -20 * np.abs(h)
    if down.fmt == "int8":
        dq = q_dev.astype(np.float64) * s_dev.astype(np.float64)[:, None]
        bound = 0.5 * s_dev.astype(np.float64)[:, None] * (1 + 2.0 ** -20) + slack
        s_ref = np.max(np.abs(h), axis=1) / 127
    else:
        codes = q_dev.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
        if down.fmt == "fp8_block":
            s_full = np.repeat(s_dev.astype(np.float64), 128, axis=1)
            s_ref = np.max(np.abs(h).reshape(rows, -1, 128), axis=2) / 448
        else:
            s_full = np.broadcast_to(s_dev.astype(np.float64)[:, None], codes.shape)
            s_ref = np.max(np.abs(h), axis=1) / 448
        dq = codes * s_full
        bound = np.maximum(2.0 ** -4 * np.abs(h), 2.0 ** -10 * s_full) * (1 + 2.0 ** -18) + slack
    np.testing.assert_allclose(s_dev, s_ref, rtol=2.0 ** -19, atol=0)
    err = np.abs(dq - h)
    assert (err <= bound + 1e-38).all(), f"intermediate: max err/bound {np.max(err / (bound + 1e-38)):.3g}"
    # 3.
    assert not np.isnan(y.astype(np.float32)).any()
    if down.fmt == "int8":
        # Integer products summed in float64 are exact here (|acc| < 2^53).
        acc = np.rint(q_dev.astype(np.float64) @ down.q.astype(np.float64).T).astype(np.int64)
        y_ref = ref.w8a8_int8_epilogue(acc, s_dev, down.s, NP_DTYPE[dtype])
        assert ulp_distance(y, y_ref).max() <= 1
    else:
        q8 = q_dev.view(ml_dtypes.float8_e4m3fn)
        if down.fmt == "fp8_block":
            y64 = ref.fp8_block_proj_f64(q8, s_dev, down.q, down.s)
        else:
            y64 = ref.fp8_channel_proj_f64(q8, s_dev, down.q, down.s)
        half = HALF_ULP[dtype]
        b = fp8_bound(down, q_dev, s_dev) * (1 + half) + half * np.abs(y64) + 1e-30
        e = np.abs(y.astype(np.float64) - y64)
        assert (e <= b).all(), f"down GEMM: max err/bound {np.max(e / b):.3g}"
    # 4.
    if end_to_end:
        y64 = ref.w8a8_ffn_f64(x, (gate_up.fmt, gate_up.q, gate_up.s), (down.fmt, down.q, down.s), NP_DTYPE[dtype])
        rel = np.linalg.norm(y.astype(np.float64) - y64) / max(np.linalg.norm(y64), 1e-30)
        assert rel <= (2.0 ** -6 if down.fmt == "int8" else 2.0 ** -4), f"end-to-end relative error {rel:.3g}"


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_ffn_matches_reference(ctx, fmt, dtype):
    from gdn_kernels.layer import DenseFfn, GdnLayer

    rng = np.random.default_rng(6)
    ffn, gate_up, down = make_ffn(ctx, rng, fmt, HIDDEN, INTER)
    layer = GdnLayer("sequential", ffn=DenseFfn())
    layer.set_w8a8_ffn_weights(ffn, HIDDEN, INTER)
    for rows in ROWS:
        x = random_activations(rng, rows, HIDDEN, dtype, outliers=True, zero_rows=(rows - 1,) if rows > 2 else ())
        ok, y = call_poisoned(lambda xp, ldx, r, op, ldc: layer.pinned_ffn(xp, ldx, r, op, ldc, dtype=dtype),
                              x, HIDDEN, dtype)
        assert ok is True
        check_ffn(ctx, ffn, gate_up, down, x, y, dtype)
        if rows > 2:
            # An all-zero input row: gate = up = 0, h = 0, scale 0, codes 0, output exactly 0.
            assert (y[rows - 1].view(np.uint16) & 0x7FFF == 0).all()


@pytest.mark.parametrize("fmt", ["int8", "fp8_block"])
def test_ffn_model_shape(ctx, fmt):
    """The 27B dense FFN: gate/up [2 x 17408, 5120], down [5120, 17408], and row invariance."""
    rng = np.random.default_rng(7)
    hidden, inter = 5120, 17408
    ffn, gate_up, down = make_ffn(ctx, rng, fmt, hidden, inter)
    x = random_activations(rng, 9, hidden, "bfloat16", outliers=True)
    ok, full = call_poisoned(lambda xp, ldx, r, op, ldc: ffn.ffn(xp, ldx, r, op, ldc), x, hidden, "bfloat16")
    assert ok
    check_ffn(ctx, ffn, gate_up, down, x, full, "bfloat16", end_to_end=False)
    for rows in (1, 2, 5):
        _, y = call_poisoned(lambda xp, ldx, r, op, ldc: ffn.ffn(xp, ldx, r, op, ldc), x[:rows], hidden, "bfloat16",
                             ldx_pad=0, ldc_pad=0)
        assert (y.view(np.uint16) == full[:rows].view(np.uint16)).all(), f"row invariance broken at rows={rows}"


def test_ffn_declines_and_bad_arguments(ctx):
    import cupy

    rng = np.random.default_rng(8)
    ffn, _, _ = make_ffn(ctx, rng, "int8", HIDDEN, INTER)
    x = random_activations(rng, 300, HIDDEN, "bfloat16")
    x_buf, x_ptr = to_device_2d(x, HIDDEN)
    out = poisoned(300 * HIDDEN)
    for rows in (0, 257, 300):
        assert ffn.ffn(x_ptr, HIDDEN, rows, out.data.ptr, HIDDEN, dtype="bfloat16") is False
    cupy.cuda.runtime.deviceSynchronize()
    assert (out.get() == POISON).all()
    with pytest.raises(ValueError, match="ldc = 1000 < N = 1024"):
        ffn.ffn(x_ptr, HIDDEN, 4, out.data.ptr, 1000, dtype="bfloat16")
    with pytest.raises(ValueError, match="ldx = 1000 < K = 1024"):
        ffn.ffn(x_ptr, 1000, 4, out.data.ptr, HIDDEN, dtype="bfloat16")
    with pytest.raises(ValueError, match="not 16-byte aligned"):
        ffn.ffn(x_ptr, HIDDEN, 4, out.data.ptr + 2, HIDDEN, dtype="bfloat16")


# ---- CUDA graphs and streams ----


class Decode:
    """A decode step of one layer on device buffers: [QKV | Z], out_proj and FFN (bf16)."""

    def __init__(self, ctx, rng, rows: int, fmt: str = "int8", dims=(HIDDEN, QKV, Z, VALUE, INTER)):
        import cupy

        from gdn_kernels import W8a8Mixer
        from gdn_kernels.layer import DenseFfn, GdnLayer

        hidden, qkv, z, value, inter = dims
        self.dims, self.rows = dims, rows
        w_in = random_weight(rng, fmt, qkv + z, hidden, 0.05, (qkv, z))
        w_out = random_weight(rng, fmt, hidden, value, 0.05)
        ffn, _, _ = make_ffn(ctx, rng, fmt, hidden, inter)
        self.layer = GdnLayer("sequential", ffn=DenseFfn())
        self.layer.set_w8a8_decode_weights(W8a8Mixer(ctx, w_in.w, w_out.w), qkv + z, hidden, value)
        self.layer.set_w8a8_ffn_weights(ffn, hidden, inter)
        self.fctx = make_fctx()
        self.keep = (w_in, w_out, ffn)
        self.x = cupy.empty((rows, hidden), cupy.uint16)
        self.v = cupy.empty((rows, value), cupy.uint16)
        self.qkvz_out = cupy.empty((rows, qkv + z), cupy.uint16)
        self.o_out = cupy.empty((rows, hidden), cupy.uint16)
        self.f_out = cupy.empty((rows, hidden), cupy.uint16)
        self.new_inputs(rng)

    def new_inputs(self, rng):
        hidden, _, _, value, _ = self.dims
        self.x.set(random_activations(rng, self.rows, hidden, "bfloat16").view(np.uint16))
        self.v.set(random_activations(rng, self.rows, value, "bfloat16").view(np.uint16))

    def outputs(self):
        return (self.qkvz_out, self.o_out, self.f_out)

    def step(self, stream, outs=None):
        """Enqueue the step on ``stream``; every call is pinned (asserted)."""
        q, o, f = outs or self.outputs()
        hidden, qkv, z, value, _ = self.dims
        s, r, L = stream.ptr, self.rows, self.layer
        assert L.pinned_qkvz(self.fctx, self.x.data.ptr, hidden, r, q.data.ptr, qkv + z, s, dtype="bfloat16")
        assert L.pinned_out(self.fctx, self.v.data.ptr, value, r, o.data.ptr, hidden, s, dtype="bfloat16")
        assert L.pinned_ffn(self.x.data.ptr, hidden, r, f.data.ptr, hidden, s, dtype="bfloat16")


class CountAllocations:
    """Counts CuPy device allocations while active (CuPy lets a graph capture allocate, so a
    successful capture alone does not prove an allocation-free hot path)."""

    def __enter__(self):
        import cupy

        self.pool = cupy.get_default_memory_pool()
        self.count = 0

        def malloc(size):
            self.count += 1
            return self.pool.malloc(size)

        cupy.cuda.set_allocator(malloc)
        return self

    def __exit__(self, *exc):
        import cupy

        cupy.cuda.set_allocator(self.pool.malloc)


@pytest.mark.parametrize("rows", [1, 5, 64])
def test_decode_step_graph_replay_equals_eager(ctx, rows):
    import cupy

    from gdn_kernels.layer import GdnLayer, ProjPath

    rng = np.random.default_rng(9 + rows)
    d = Decode(ctx, rng, rows)
    wo, do = dense_weight(rng, HIDDEN, VALUE, "bfloat16", 0.05)
    fallback = GdnLayer("interleaved", dense_out=do)
    fb_out = cupy.empty((rows, HIDDEN), cupy.uint16)
    stream = cupy.cuda.Stream(non_blocking=True)

    def poison():
        with stream:
            for a in (*d.outputs(), fb_out):
                a.fill(POISON)
        stream.synchronize()

    def step():
        d.step(stream)
        assert fallback.out_proj(d.fctx, d.v.data.ptr, VALUE, rows, fb_out.data.ptr, HIDDEN, stream.ptr,
                                 dtype="bfloat16") is ProjPath.BF16

    def results():
        stream.synchronize()
        return [a.get() for a in (*d.outputs(), fb_out)]

    poison()
    with CountAllocations() as eager_allocs:
        step()
    eager = results()
    assert eager_allocs.count == 0, f"{eager_allocs.count} allocations in an eager decode step"
    assert not any((e == POISON).any() for e in eager)

    poison()
    with CountAllocations() as capture_allocs:
        # Global mode: any call that could synchronise (or cudaMalloc) inside the capture fails it.
        stream.begin_capture(cupy.cuda.runtime.streamCaptureModeGlobal)
        try:
            step()
        finally:
            graph = stream.end_capture()
    assert capture_allocs.count == 0, f"{capture_allocs.count} allocations while capturing a decode step"
    assert all((r == POISON).all() for r in results()), "the capture ran work instead of recording it"
    graph.launch(stream)
    for got, want in zip(results(), eager):
        assert (got == want).all(), "graph replay differs from the eager step"

    # An engine replays the graph on new inputs written into the same buffers.
    d.new_inputs(rng)
    poison()
    step()
    eager2 = results()
    poison()
    graph.launch(stream)
    for got, want in zip(results(), eager2):
        assert (got == want).all(), "graph replay on new inputs differs from the eager step"


def test_two_layers_on_two_streams_equal_alone():
    """Two layers, each with its own W8A8 context (mixer and FFN), driven from two streams at once,
    give the bits each gives alone."""
    import cupy

    from gdn_kernels import W8a8Ctx

    rng = np.random.default_rng(10)
    dims = (2048, 3072, 1024, 1024, 4096)
    rows, iters = 48, 12
    a = Decode(W8a8Ctx(max_rows=64, max_k=4096), rng, rows, "int8", dims)
    b = Decode(W8a8Ctx(max_rows=64, max_k=4096), rng, rows, "fp8_block", dims)
    s1, s2 = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
    alone = []
    for d, s in ((a, s1), (b, s2)):
        d.step(s)
        s.synchronize()
        alone.append([o.get() for o in d.outputs()])
    outs = [[tuple(cupy.full(o.shape, POISON, cupy.uint16) for o in d.outputs()) for _ in range(iters)]
            for d in (a, b)]
    cupy.cuda.runtime.deviceSynchronize()
    for i in range(iters):
        a.step(s1, outs[0][i])
        b.step(s2, outs[1][i])
    s1.synchronize()
    s2.synchronize()
    for k, name in enumerate(("a", "b")):
        for i in range(iters):
            for got, want in zip(outs[k][i], alone[k]):
                assert (got.get() == want).all(), f"layer {name}, iteration {i}: differs from running alone"
