"""The GDN layer on the CPU: every refusal and its message, adoption, and the path decision for
every combination of layout, TP size, weights present, configuration and row count. Layers are
built from raw pointers (fake aligned addresses that nothing dereferences)."""

from __future__ import annotations

import itertools
import re
from types import SimpleNamespace

import pytest

from gdn_kernels import w8a8
from gdn_kernels.config import ActQuantConfig
from gdn_kernels.ffn import W8a8Ffn, check_ffn_weights
from gdn_kernels.layer import (
    DenseFfn,
    DenseWeight,
    GdnLayer,
    MoeFfn,
    ProjPath,
    QkvzLayout,
    ffn_path,
    out_path,
    qkvz_path,
)
from gdn_kernels.nvfp4 import Nvfp4Weight
from gdn_kernels.w8a8 import W8a8Mixer
from gdn_kernels.weights import Fp8ScaleFormat, Fp8Weight, W8a8Weight, WeightFormat

# A small sequential GDN layer: hidden 256, [QKV | Z] = 512 + 256 rows, value_dim 256; FFN 384.
HIDDEN, QKV, Z, VALUE, INTER = 256, 512, 256, 256, 384
QKVZ = QKV + Z
MAX_ROWS = 256

_next = [1 << 24]


def fake_ptr() -> int:
    """A distinct 256-byte aligned fake device address."""
    _next[0] += 1 << 20
    return _next[0]


class FakeW8a8Ctx:
    """The pure part of a W8a8Ctx: its family check, with no GPU behind it."""

    def __init__(self, max_rows: int = MAX_ROWS, max_k: int = 17408):
        self.max_rows, self.max_k = max_rows, max_k

    def supports(self, w, rows, dtype="bfloat16"):
        return w8a8.supports(w, rows, dtype, max_rows=self.max_rows, max_k=self.max_k)


class CpuFfn(W8a8Ffn):
    """A W8a8Ffn whose device set-up (workspace, kernels) is skipped: shapes and decisions only."""

    def _setup_device(self) -> None:
        pass


def w8(n, k, fmt="int8", segments=None) -> W8a8Weight:
    w = W8a8Weight.from_pointers(fake_ptr(), fake_ptr(), n, k, format=fmt)
    if segments:
        w = W8a8Weight(w.format, n, k, w.qweight, w.scale, w.scale_dtype, tuple(segments))
    return w


def fp8(n, k, block=True) -> Fp8Weight:
    fmt = Fp8ScaleFormat.BLOCK_SCALED if block else Fp8ScaleFormat.PER_CHANNEL
    return Fp8Weight.from_pointers(fake_ptr(), fake_ptr(), n, k, scale_format=fmt)


def nv(n, k) -> Nvfp4Weight:
    return Nvfp4Weight.from_pointers(fake_ptr(), fake_ptr(), n, k, 0.01)


def dense(n, k, dtype="bfloat16") -> DenseWeight:
    return DenseWeight(n, k, fake_ptr(), dtype)


def mixer(ctx=None, n_in=QKVZ, k_in=HIDDEN, n_out=HIDDEN, k_out=VALUE, fmt="int8") -> W8a8Mixer:
    return W8a8Mixer(ctx or FakeW8a8Ctx(), w8(n_in, k_in, fmt), w8(n_out, k_out, fmt))


def cpu_ffn(hidden=HIDDEN, inter=INTER, fmt="int8", ctx=None) -> CpuFfn:
    return CpuFfn(ctx or FakeW8a8Ctx(), w8(2 * inter, hidden, fmt, (inter, inter)), w8(hidden, inter, fmt))


def fctx(config: str = ""):
    return SimpleNamespace(config=ActQuantConfig.parse(config), w8a8=None, nvfp4=None)


# ---- set_w8a8_decode_weights ----


def test_install_on_sequential_tp1():
    layer = GdnLayer(QkvzLayout.SEQUENTIAL)
    m = mixer()
    layer.set_w8a8_decode_weights(m, QKVZ, HIDDEN, VALUE)
    assert layer.w8a8 is m


def test_install_refuses_interleaved():
    layer = GdnLayer("interleaved")
    with pytest.raises(ValueError, match=r"^W8A8 QKV\|Z needs the sequential \[QKV \| Z\] layout$"):
        layer.set_w8a8_decode_weights(mixer(), QKVZ, HIDDEN, VALUE)
    assert layer.w8a8 is None


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_install_refuses_tp_other_than_1(tp):
    layer = GdnLayer(QkvzLayout.SEQUENTIAL, tp_size=tp)
    with pytest.raises(ValueError, match=rf"tensor-parallel size 1, got {tp}:.*all-reduce"):
        layer.set_w8a8_decode_weights(mixer(), QKVZ, HIDDEN, VALUE)
    assert layer.w8a8 is None


@pytest.mark.parametrize("shapes", [
    (QKVZ + 128, HIDDEN, HIDDEN, VALUE),  # input N
    (QKVZ, HIDDEN + 128, HIDDEN, VALUE),  # input K
    (QKVZ, HIDDEN, HIDDEN + 128, VALUE),  # output N
    (QKVZ, HIDDEN, HIDDEN, VALUE + 128),  # output K
    (HIDDEN, VALUE, QKVZ, HIDDEN),  # input and output swapped
])
def test_install_refuses_shapes_and_shows_both(shapes):
    n_in, k_in, n_out, k_out = shapes
    layer = GdnLayer(QkvzLayout.SEQUENTIAL)
    old = mixer()
    layer.set_w8a8_decode_weights(old, QKVZ, HIDDEN, VALUE)
    want = (f"W8A8 mixer shapes: got input [{n_in}, {k_in}] and output [{n_out}, {k_out}], want input "
            f"[qkvz_size, hidden] = [{QKVZ}, {HIDDEN}] and output [hidden, value_dim] = [{HIDDEN}, {VALUE}]")
    with pytest.raises(ValueError, match=f"^{re.escape(want)}$"):
        layer.set_w8a8_decode_weights(mixer(None, n_in, k_in, n_out, k_out), QKVZ, HIDDEN, VALUE)
    assert layer.w8a8 is old, "a refused install must leave the installed mixer in place"


def test_install_refuses_non_mixer():
    layer = GdnLayer(QkvzLayout.SEQUENTIAL)
    with pytest.raises(TypeError, match="must be a W8a8Mixer, got W8a8Weight"):
        layer.set_w8a8_decode_weights(w8(QKVZ, HIDDEN), QKVZ, HIDDEN, VALUE)


# ---- set_w8a8_ffn_weights ----


def test_ffn_install_on_dense():
    layer = GdnLayer(QkvzLayout.SEQUENTIAL, ffn=DenseFfn())
    f = cpu_ffn()
    layer.set_w8a8_ffn_weights(f, HIDDEN, INTER)
    assert layer.ffn.w8a8 is f


def test_ffn_install_refuses_moe():
    layer = GdnLayer(QkvzLayout.INTERLEAVED, ffn=MoeFfn(512))
    with pytest.raises(ValueError, match=r"^W8A8 FFN weights need a dense FFN; this layer's FFN is MoE"):
        layer.set_w8a8_ffn_weights(cpu_ffn(), HIDDEN, INTER)


def test_ffn_install_refuses_absent_ffn():
    layer = GdnLayer(QkvzLayout.SEQUENTIAL)
    with pytest.raises(ValueError, match=r"^W8A8 FFN weights need a dense FFN; this layer has no FFN$"):
        layer.set_w8a8_ffn_weights(cpu_ffn(), HIDDEN, INTER)


@pytest.mark.parametrize("hidden,inter", [(HIDDEN + 128, INTER), (HIDDEN, INTER + 128), (INTER, HIDDEN)])
def test_ffn_install_refuses_shapes_and_shows_both(hidden, inter):
    layer = GdnLayer(QkvzLayout.SEQUENTIAL, ffn=DenseFfn())
    want = (f"W8A8 FFN shapes: got gate_up [{2 * INTER}, {HIDDEN}] and down [{HIDDEN}, {INTER}], want gate_up "
            f"[2 * inter, hidden] = [{2 * inter}, {hidden}] and down [hidden, inter] = [{hidden}, {inter}]")
    with pytest.raises(ValueError, match=f"^{re.escape(want)}$"):
        layer.set_w8a8_ffn_weights(cpu_ffn(), hidden, inter)
    assert layer.ffn.w8a8 is None


def test_ffn_install_refuses_non_ffn():
    with pytest.raises(TypeError, match="must be a W8a8Ffn"):
        DenseFfn().set_w8a8(mixer(), HIDDEN, INTER)


def test_w8a8_ffn_checks_its_weights():
    assert check_ffn_weights(w8(2 * INTER, HIDDEN), w8(HIDDEN, INTER)) == (HIDDEN, INTER)
    assert check_ffn_weights(w8(2 * INTER, HIDDEN, segments=(INTER, INTER)), w8(HIDDEN, INTER)) == (HIDDEN, INTER)
    want = (f"W8A8 FFN weights: gate_up is [{2 * INTER + 128}, {HIDDEN}] and down [{HIDDEN}, {INTER}]; for down "
            f"[hidden, inter] = [{HIDDEN}, {INTER}] gate_up must be [2 * inter, hidden] = [{2 * INTER}, {HIDDEN}]")
    with pytest.raises(ValueError, match=f"^{re.escape(want)}$"):
        check_ffn_weights(w8(2 * INTER + 128, HIDDEN), w8(HIDDEN, INTER))
    with pytest.raises(ValueError, match=r"gate_up must be \[2 \* inter, hidden\]"):
        CpuFfn(FakeW8a8Ctx(), w8(2 * INTER, HIDDEN + 128), w8(HIDDEN, INTER))
    with pytest.raises(ValueError, match=rf"segments \(256, 512\) must be \({INTER}, {INTER}\)"):
        check_ffn_weights(w8(2 * INTER, HIDDEN, segments=(256, 512)), w8(HIDDEN, INTER))
    with pytest.raises(TypeError, match="down must be a W8a8Weight"):
        check_ffn_weights(w8(2 * INTER, HIDDEN), fp8(HIDDEN, INTER))


# ---- adopt_fp8_block_w8a8 ----


@pytest.mark.parametrize("qkvz,out", [
    (None, "block"), ("block", None), (None, None),
    ("channel", "block"), ("block", "channel"), ("channel", "channel"),
])
def test_adopt_declines_absent_or_not_block_scaled(qkvz, out):
    def make(kind, n, k):
        return None if kind is None else fp8(n, k, block=kind == "block")

    layer = GdnLayer(QkvzLayout.SEQUENTIAL, fp8_qkvz=make(qkvz, QKVZ, HIDDEN), fp8_out=make(out, HIDDEN, VALUE))
    assert layer.adopt_fp8_block_w8a8(FakeW8a8Ctx(), HIDDEN) is False
    assert layer.w8a8 is None
    old = mixer()
    layer.set_w8a8_decode_weights(old, QKVZ, HIDDEN, VALUE)
    assert layer.adopt_fp8_block_w8a8(FakeW8a8Ctx(), HIDDEN) is False
    assert layer.w8a8 is old, "a declined adoption must install nothing"


def test_adopt_block_scaled():
    ctx = FakeW8a8Ctx()
    q, o = fp8(QKVZ, HIDDEN), fp8(HIDDEN, VALUE)
    layer = GdnLayer(QkvzLayout.SEQUENTIAL, fp8_qkvz=q, fp8_out=o)
    assert layer.adopt_fp8_block_w8a8(ctx, HIDDEN) is True
    m = layer.w8a8
    assert m.ctx is ctx
    assert (m.input.format, m.input.n, m.input.k, m.input.qweight, m.input.scale) == (
        WeightFormat.FP8_BLOCK, QKVZ, HIDDEN, q.qweight, q.scale)
    assert (m.output.format, m.output.n, m.output.k, m.output.qweight) == (
        WeightFormat.FP8_BLOCK, HIDDEN, VALUE, o.qweight)
    assert layer.qkvz_path(ActQuantConfig(), 1) is ProjPath.W8A8


def test_adopt_refuses_interleaved_and_tp():
    for layout, tp, msg in ((QkvzLayout.INTERLEAVED, 1, r"^W8A8 QKV\|Z needs the sequential \[QKV \| Z\] layout$"),
                            (QkvzLayout.SEQUENTIAL, 2, "tensor-parallel size 1, got 2")):
        # Two segments: a refusal must come before the stacking copy (which needs a GPU).
        layer = GdnLayer(layout, tp_size=tp, fp8_qkvz=(fp8(QKV, HIDDEN), fp8(Z, HIDDEN)),
                         fp8_out=fp8(HIDDEN, VALUE))
        with pytest.raises(ValueError, match=msg):
            layer.adopt_fp8_block_w8a8(FakeW8a8Ctx(), HIDDEN)
        assert layer.w8a8 is None


def test_adopt_refuses_wrong_hidden():
    layer = GdnLayer(QkvzLayout.SEQUENTIAL, fp8_qkvz=fp8(QKVZ, HIDDEN), fp8_out=fp8(HIDDEN, VALUE))
    want = (f"W8A8 mixer shapes: got input [{QKVZ}, {HIDDEN}] and output [{HIDDEN}, {VALUE}], want input "
            f"[qkvz_size, hidden] = [{QKVZ}, 384] and output [hidden, value_dim] = [384, {VALUE}]")
    with pytest.raises(ValueError, match=f"^{re.escape(want)}$"):
        layer.adopt_fp8_block_w8a8(FakeW8a8Ctx(), 384)
    assert layer.w8a8 is None


# ---- construction ----


def test_layer_checks_its_weights():
    with pytest.raises(ValueError, match=r"in_proj_qkvz weights disagree in shape: fp8 \[768, 256\], "
                                         r"nvfp4 \[640, 256\]"):
        GdnLayer(QkvzLayout.SEQUENTIAL, fp8_qkvz=(fp8(QKV, HIDDEN), fp8(Z, HIDDEN)), nvfp4_qkvz=nv(640, HIDDEN))
    with pytest.raises(ValueError, match=r"out_proj weights disagree in shape: nvfp4 \[256, 256\], dense \[256, 384\]"):
        GdnLayer(QkvzLayout.SEQUENTIAL, nvfp4_out=nv(HIDDEN, VALUE), dense_out=dense(HIDDEN, 384))
    with pytest.raises(ValueError, match="fp8_qkvz segments must share K"):
        GdnLayer(QkvzLayout.SEQUENTIAL, fp8_qkvz=(fp8(QKV, HIDDEN), fp8(Z, 384)))
    with pytest.raises(TypeError, match="nvfp4_out must be a Nvfp4Weight, got W8a8Weight"):
        GdnLayer(QkvzLayout.SEQUENTIAL, nvfp4_out=w8(HIDDEN, VALUE))
    with pytest.raises(TypeError, match="ffn must be a DenseFfn, a MoeFfn or None"):
        GdnLayer(QkvzLayout.SEQUENTIAL, ffn=cpu_ffn())
    with pytest.raises(ValueError, match="tp_size must be an int >= 1, got 0"):
        GdnLayer(QkvzLayout.SEQUENTIAL, tp_size=0)
    with pytest.raises(ValueError, match="'diagonal' is not a valid QkvzLayout"):
        GdnLayer("diagonal")
    with pytest.raises(AttributeError):
        GdnLayer(QkvzLayout.SEQUENTIAL).w8a8 = mixer()


def test_dense_weight_checks():
    assert DenseWeight(64, 128, 1 << 24).ld == 128
    with pytest.raises(ValueError, match="ld = 64 < K = 128"):
        DenseWeight(64, 128, 1 << 24, ld=64)
    with pytest.raises(TypeError, match="bfloat16 or float16, got float32"):
        DenseWeight(64, 128, 1 << 24, "float32")
    with pytest.raises(ValueError, match="null pointer"):
        DenseWeight(64, 128, 0)


# ---- the decision table ----

ROWS = (0, 1, 2, 5, 9, 16, 64, 255, 256, 257, 1000)
CONFIGS = ("", "gdn=none", "gdn=nvfp4", "gdn=w8a8", "ffn=nvfp4", "attn=nvfp4", "gdn=nvfp4,ffn=w8a8")
OTHER_OUT = (None, "fp8", "dense")
FFNS = (None, "moe", "dense", "dense+w8a8")


def expected_paths(layout, tp, nv_qkvz, nv_out, other_out, want_w8a8, ffn, config, rows):
    """The issue's rules, written out independently of gdn_kernels.layer."""
    gdn_nvfp4 = "gdn=nvfp4" in config
    mixer_installed = want_w8a8 and layout == "sequential" and tp == 1
    w8a8_serves = mixer_installed and 1 <= rows <= MAX_ROWS
    if rows == 0:
        q = o = ProjPath.NONE
    else:
        if layout == "sequential" and nv_qkvz and gdn_nvfp4:
            q = ProjPath.NVFP4
        else:
            q = ProjPath.W8A8 if w8a8_serves else ProjPath.NONE
        if nv_out and other_out is None and gdn_nvfp4:
            o = ProjPath.NVFP4
        else:
            o = ProjPath.W8A8 if w8a8_serves else ProjPath.NONE
    f = ProjPath.W8A8 if ffn == "dense+w8a8" and 1 <= rows <= MAX_ROWS else ProjPath.NONE
    return q, o, f


def build_layer(layout, tp, nv_qkvz, nv_out, other_out, want_w8a8, ffn):
    out_kw = {"fp8": {"fp8_out": fp8(HIDDEN, VALUE)}, "dense": {"dense_out": dense(HIDDEN, VALUE)}}.get(other_out, {})
    ffn_obj = {None: None, "moe": MoeFfn(64), "dense": DenseFfn(), "dense+w8a8": DenseFfn()}[ffn]
    layer = GdnLayer(layout, tp_size=tp, ffn=ffn_obj, nvfp4_qkvz=nv(QKVZ, HIDDEN) if nv_qkvz else None,
                     nvfp4_out=nv(HIDDEN, VALUE) if nv_out else None, **out_kw)
    if want_w8a8:
        if layout == "sequential" and tp == 1:
            layer.set_w8a8_decode_weights(mixer(), QKVZ, HIDDEN, VALUE)
        else:
            with pytest.raises(ValueError):
                layer.set_w8a8_decode_weights(mixer(), QKVZ, HIDDEN, VALUE)
    if ffn == "dense+w8a8":
        layer.set_w8a8_ffn_weights(cpu_ffn(), HIDDEN, INTER)
    return layer


@pytest.mark.parametrize("layout", ["sequential", "interleaved"])
@pytest.mark.parametrize("tp", [1, 2])
def test_decision_table(layout, tp):
    """Every combination of weights present, configuration and rows, for one layout and TP."""
    checked = 0
    for nv_qkvz, nv_out, other_out, want_w8a8, ffn in itertools.product(
            (False, True), (False, True), OTHER_OUT, (False, True), FFNS):
        layer = build_layer(layout, tp, nv_qkvz, nv_out, other_out, want_w8a8, ffn)
        for config in CONFIGS:
            cfg = ActQuantConfig.parse(config)
            for rows in ROWS:
                want = expected_paths(layout, tp, nv_qkvz, nv_out, other_out, want_w8a8, ffn, config, rows)
                got = (qkvz_path(layer, cfg, rows), out_path(layer, cfg, rows), ffn_path(layer, rows))
                assert got == want, (layout, tp, nv_qkvz, nv_out, other_out, want_w8a8, ffn, config, rows)
                assert (layer.qkvz_path(cfg, rows, "float16"), layer.out_path(cfg, rows, "float16"),
                        layer.ffn_path(rows, "float16")) == want
                checked += 1
    assert checked == 2 * 2 * 3 * 2 * 4 * len(CONFIGS) * len(ROWS)


@pytest.mark.parametrize("case,config,rows,want", [
    # Qwen3.5-style sequential layer with NVFP4 and a W8A8 mixer: the pin decides.
    ("seq_nvfp4_w8a8", "gdn=nvfp4", 1, ("nvfp4", "nvfp4")),
    ("seq_nvfp4_w8a8", "gdn=nvfp4", 1000, ("nvfp4", "nvfp4")),
    ("seq_nvfp4_w8a8", "gdn=w8a8", 1, ("w8a8", "w8a8")),
    ("seq_nvfp4_w8a8", "", 256, ("w8a8", "w8a8")),
    ("seq_nvfp4_w8a8", "", 257, ("none", "none")),
    ("seq_nvfp4_w8a8", "ffn=nvfp4", 9, ("w8a8", "w8a8")),
    # An FP8 out_proj keeps NVFP4 off the out_proj even when pinned.
    ("seq_nvfp4_fp8out_w8a8", "gdn=nvfp4", 4, ("nvfp4", "w8a8")),
    # Qwen3-Next-style interleaved layer: no NVFP4 [QKV | Z], no W8A8; its out_proj may be NVFP4.
    ("inter_nvfp4", "gdn=nvfp4", 1, ("none", "nvfp4")),
    ("inter_nvfp4", "", 1, ("none", "none")),
])
def test_decision_examples(case, config, rows, want):
    layer = {
        "seq_nvfp4_w8a8": lambda: build_layer("sequential", 1, True, True, None, True, None),
        "seq_nvfp4_fp8out_w8a8": lambda: build_layer("sequential", 1, True, True, "fp8", True, None),
        "inter_nvfp4": lambda: build_layer("interleaved", 1, True, True, None, False, None),
    }[case]()
    cfg = ActQuantConfig.parse(config)
    assert (layer.qkvz_path(cfg, rows).value, layer.out_path(cfg, rows).value) == want


def test_decision_follows_the_context_limits():
    layer = GdnLayer(QkvzLayout.SEQUENTIAL)
    layer.set_w8a8_decode_weights(mixer(FakeW8a8Ctx(max_rows=16)), QKVZ, HIDDEN, VALUE)
    cfg = ActQuantConfig()
    assert [layer.qkvz_path(cfg, r) for r in (1, 16, 17)] == [ProjPath.W8A8, ProjPath.W8A8, ProjPath.NONE]
    small_k = GdnLayer(QkvzLayout.SEQUENTIAL)
    small_k.set_w8a8_decode_weights(mixer(FakeW8a8Ctx(max_k=HIDDEN)), QKVZ, HIDDEN, VALUE)
    # K = hidden fits, out_proj K = value_dim fits; a wider value_dim would not.
    assert small_k.out_path(cfg, 1) is ProjPath.W8A8
    wide = GdnLayer(QkvzLayout.SEQUENTIAL)
    wide.set_w8a8_decode_weights(mixer(FakeW8a8Ctx(max_k=HIDDEN), k_out=2 * VALUE), QKVZ, HIDDEN, 2 * VALUE)
    assert (wide.qkvz_path(cfg, 1), wide.out_path(cfg, 1)) == (ProjPath.W8A8, ProjPath.NONE)


# ---- dispatch without a GPU: declines, errors before any launch ----


def test_pinned_declines_and_fallback_errors_without_launching():
    layer = GdnLayer(QkvzLayout.INTERLEAVED, nvfp4_qkvz=nv(QKVZ, HIDDEN))
    x, out = fake_ptr(), fake_ptr()
    assert layer.pinned_qkvz(fctx("gdn=nvfp4"), x, HIDDEN, 4, out, QKVZ) is False
    assert layer.pinned_out(fctx("gdn=nvfp4"), x, VALUE, 4, out, HIDDEN) is False
    assert layer.pinned_ffn(x, HIDDEN, 4, out, HIDDEN) is False
    with pytest.raises(ValueError, match=r"^in_proj_qkvz at rows = 4: no pinned path runs \(layout interleaved, "
                                         r"gdn=nvfp4, W8A8 not installed\) and the layer holds no dense weight"):
        layer.qkvz(fctx("gdn=nvfp4"), x, HIDDEN, 4, out, QKVZ)
    assert layer.qkvz(fctx(), x, HIDDEN, 0, out, QKVZ) is ProjPath.NONE
    with pytest.raises(ValueError, match="rows must be an int >= 0, got -1"):
        layer.pinned_qkvz(fctx(), x, HIDDEN, -1, out, QKVZ)


def test_fallback_argument_errors():
    layer = GdnLayer(QkvzLayout.SEQUENTIAL, dense_out=dense(HIDDEN, VALUE, "float16"))
    x, out = fake_ptr(), fake_ptr()
    with pytest.raises(TypeError, match="activations are bfloat16 but the dense weight is float16"):
        layer.out_proj(fctx(), x, VALUE, 3, out, HIDDEN, dtype="bfloat16")
    with pytest.raises(ValueError, match=f"ldx = 128 < K = {VALUE}"):
        layer.out_proj(fctx(), x, 128, 3, out, HIDDEN, dtype="float16")
    with pytest.raises(ValueError, match=f"ldc = 128 < N = {HIDDEN}"):
        layer.out_proj(fctx(), x, VALUE, 3, out, 128, dtype="float16")


def test_pinned_nvfp4_needs_an_nvfp4_context():
    layer = GdnLayer(QkvzLayout.SEQUENTIAL, nvfp4_qkvz=nv(QKVZ, HIDDEN))
    x, out = fake_ptr(), fake_ptr()
    with pytest.raises(ValueError, match="no Nvfp4Ctx"):
        layer.pinned_qkvz(fctx("gdn=nvfp4"), x, HIDDEN, 1, out, QKVZ)


# ---- the FFN references ----


def test_silu_mul_f64_values():
    import numpy as np

    from gdn_kernels import reference as ref

    with np.errstate(all="raise"):
        h = ref.silu_mul_f64(np.array([0.0, -1000.0, 40.0, 1.0, -2.0]), np.array([5.0, 2.0, 3.0, 1.0, 1.5]))
    assert h[0] == 0.0
    assert h[1] == 0.0 and np.signbit(h[1]), "exp overflow must give -0, never NaN"
    assert h[2] == 120.0  # exp(-40) vanishes next to 1 in float64
    assert h[3] == 1.0 / (1.0 + np.exp(-1.0))
    assert h[4] == -2.0 / (1.0 + np.exp(2.0)) * 1.5


def test_ffn_references_agree():
    """ffn_f64 is the textbook FFN; w8a8_ffn_f64 differs from it by the quantization noise only,
    and equals it exactly where every quantization is exact."""
    import ml_dtypes
    import numpy as np

    from gdn_kernels import reference as ref

    rng = np.random.default_rng(0)
    hidden, inter, rows = 256, 384, 5
    x = rng.standard_normal((rows, hidden)).astype(np.float32)
    wgu = rng.standard_normal((2 * inter, hidden)) * 3 / np.sqrt(hidden)
    wd = rng.standard_normal((hidden, inter)) / np.sqrt(inter)
    g, u = x.astype(np.float64) @ wgu[:inter].T, x.astype(np.float64) @ wgu[inter:].T
    want = (g / (1 + np.exp(-g)) * u) @ wd.T
    np.testing.assert_allclose(ref.ffn_f64(x, wgu, wd), want, rtol=1e-12, atol=1e-12)
    for fmt, quant, tol in (("int8", ref.quantize_int8_weight, 0.04), ("fp8_channel", ref.quantize_fp8_weight_channel,
                                                                       0.08),
                            ("fp8_block", ref.quantize_fp8_weight_block, 0.08)):
        gu = (fmt, *quant(wgu.astype(np.float32)))
        d = (fmt, *quant(wd.astype(np.float32)))
        y = ref.w8a8_ffn_f64(x, gu, d, ml_dtypes.bfloat16)
        y64 = ref.ffn_f64(x, ref.w8a8_decode(*gu), ref.w8a8_decode(*d))
        rel = np.linalg.norm(y - y64) / np.linalg.norm(y64)
        assert 1e-4 < rel < tol, (fmt, rel)
    # Integer operands with every scale exactly 1 (amax 127) or an integer: every step is exact.
    # gate = up / 3 = 127 * 127 (silu(gate) = gate in float64), h = 3 * 127^3, y = 3 * 127^4.
    xi = np.zeros((2, 128), np.float32)
    xi[:, 0], xi[:, 1] = 127, 3
    wi = np.zeros((256, 128), np.float32)
    wi[0, 0] = wi[128, 1] = 127
    di = np.zeros((128, 128), np.float32)
    di[5, 0] = 127
    y = ref.w8a8_ffn_f64(xi, ("int8", *ref.quantize_int8_weight(wi)), ("int8", *ref.quantize_int8_weight(di)),
                         np.float32)
    assert y[0, 5] == y[1, 5] == 3 * 127 ** 4
    assert np.count_nonzero(y) == 2
