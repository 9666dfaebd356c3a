"""A GDN layer's decode-step projections, as an engine holds them: installs, adoption, the pure
path decision, pinned dispatch and the bf16 fallback; and the layer's dense FFN.

An engine keeps one :class:`GdnLayer` a GDN layer. At every decode step it runs the layer's input
projection ``[QKV | Z]`` and its out_proj through :meth:`GdnLayer.qkvz` and
:meth:`GdnLayer.out_proj`, which try the pinned path first (NVFP4 when the configuration pins it,
else an installed W8A8 mixer) and fall back to the engine's bf16 weight through cuBLAS, and say
which ran. The three decode shapes of an engine are the same calls at different row counts: the
single-token step (1 row), the batched speculative verify (1 + draft rows of one sequence) and
the multi-sequence batch (one row a sequence).

Which path runs is :func:`qkvz_path` / :func:`out_path` / :func:`ffn_path`: pure functions of
the layer, the configuration and the row count, so an engine can log or test its dispatch with no
GPU (a layer can be built from raw pointers).

Streams: a W8A8 context, an NVFP4 context and a :class:`~gdn_kernels.ffn.W8a8Ffn` each own a
workspace that serialises their calls. Layers that run on one stream may share contexts; layers
driven from concurrently running streams each need their own (a W8a8Ctx for the mixer and FFN,
an fctx with its own Nvfp4Ctx, a W8a8Ffn).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from gdn_kernels import _blas, _ptr
from gdn_kernels.config import ActQuant, ActQuantConfig, ProjFamily
from gdn_kernels.ffn import W8a8Ffn
from gdn_kernels.nvfp4 import Nvfp4Weight
from gdn_kernels.w8a8 import ACT_DTYPES, W8a8Mixer, fp8_block_mixer, fp8_block_qualifies, stream_handle
from gdn_kernels.weights import Fp8Weight


class QkvzLayout(str, enum.Enum):
    """Row order of the stacked input projection's output."""

    SEQUENTIAL = "sequential"  # [Q | K | V | Z] (Qwen3.5/3.6: in_proj_qkv and in_proj_z stacked)
    INTERLEAVED = "interleaved"  # per key head [q_g | k_g | v_g | z_g] (Qwen3-Next in_proj_qkvz)


class ProjPath(str, enum.Enum):
    """Which implementation runs (or ran) a projection."""

    NVFP4 = "nvfp4"  # the NVFP4 W4A4 projection (gdn_kernels.nvfp4)
    W8A8 = "w8a8"  # the installed W8A8 projection (int8 or fp8)
    BF16 = "bf16"  # the fallback: cuBLAS on the layer's bf16/fp16 weight (entry points only)
    NONE = "none"  # no pinned path (the decision), or nothing to compute at rows = 0


@dataclass(frozen=True, eq=False)
class DenseWeight:
    """An unquantized bf16/fp16 weight [n, k] in device memory (the engine's own).

    Attributes
    ----------
    n, k : int
        Output and input features.
    ptr : int
        Device pointer to [n, k], k contiguous, at row stride ``ld`` elements.
    dtype : str
        ``"bfloat16"`` or ``"float16"``.
    ld : int
        Row stride in elements (0: k).
    owner : object
        Whatever keeps the memory alive.
    """

    n: int
    k: int
    ptr: int
    dtype: str = "bfloat16"
    ld: int = 0
    owner: object = field(default=None, repr=False)

    def __post_init__(self):
        if not (isinstance(self.n, int) and isinstance(self.k, int)) or self.n <= 0 or self.k <= 0:
            raise ValueError(f"weight shape must be positive ints, got [{self.n}, {self.k}]")
        if self.dtype not in ACT_DTYPES:
            raise TypeError(f"a dense weight must be bfloat16 or float16, got {self.dtype}")
        if self.ld == 0:
            object.__setattr__(self, "ld", self.k)
        if self.ld < self.k:
            raise ValueError(f"ld = {self.ld} < K = {self.k}")
        _ptr.check_pointer(self.ptr, "dense weight", 2)

    @classmethod
    def from_array(cls, w) -> "DenseWeight":
        """Wrap a framework's bf16/fp16 array [N, K] whose rows are contiguous."""
        a = _ptr.as_array(w)
        if len(a.shape) != 2 or a.strides[1] != 1:
            raise ValueError(f"dense weight must be [N, K] with contiguous rows, got {a.shape} strides {a.strides}")
        return cls(a.shape[0], a.shape[1], a.ptr, a.dtype, a.strides[0], a.owner)


@dataclass(frozen=True)
class MoeFfn:
    """A mixture-of-experts FFN: the engine runs it; this library does not serve its experts."""

    num_experts: int = 0


def _shape(w) -> str:
    return f"[{w.n}, {w.k}]"


class DenseFfn:
    """A layer's dense FFN, with its W8A8 weights once installed.

    Parameters
    ----------
    w8a8 : W8a8Ffn, optional
        Installed at construction without a shape check; prefer :meth:`set_w8a8`.
    """

    def __init__(self, w8a8: W8a8Ffn | None = None):
        if w8a8 is not None and not isinstance(w8a8, W8a8Ffn):
            raise TypeError(f"w8a8 must be a W8a8Ffn, got {type(w8a8).__name__}")
        self.w8a8 = w8a8

    def set_w8a8(self, ffn: W8a8Ffn, hidden: int, inter: int) -> None:
        """Install W8A8 gate/up/down after checking gate/up [2 * inter, hidden] and down
        [hidden, inter] (the message shows the shapes given and the shapes wanted)."""
        if not isinstance(ffn, W8a8Ffn):
            raise TypeError(f"ffn must be a W8a8Ffn, got {type(ffn).__name__}")
        got = (ffn.gate_up.n, ffn.gate_up.k, ffn.down.n, ffn.down.k)
        want = (2 * inter, hidden, hidden, inter)
        if got != want:
            raise ValueError(
                f"W8A8 FFN shapes: got gate_up {_shape(ffn.gate_up)} and down {_shape(ffn.down)}, "
                f"want gate_up [2 * inter, hidden] = [{2 * inter}, {hidden}] and down [hidden, inter] = "
                f"[{hidden}, {inter}]")
        self.w8a8 = ffn


def _check_rows(rows) -> None:
    if not isinstance(rows, int) or isinstance(rows, bool) or rows < 0:
        raise ValueError(f"rows must be an int >= 0, got {rows!r}")


def qkvz_path(layer: "GdnLayer", config: ActQuantConfig, rows: int, dtype: str = "bfloat16") -> ProjPath:
    """Pure: the pinned path of ``layer``'s [QKV | Z] projection at ``rows`` rows.

    NVFP4 when the layer is sequential, holds NVFP4 [QKV | Z] weights and ``config`` pins nvfp4
    for the GDN family (every row count >= 1); else W8A8 when a mixer is installed and its context
    serves ``rows``; else NONE (the caller falls back). rows < 1 is NONE.
    """
    if rows < 1:
        return ProjPath.NONE
    if (layer.layout is QkvzLayout.SEQUENTIAL and layer.nvfp4_qkvz is not None
            and config.pins(ProjFamily.GDN, ActQuant.NVFP4)):
        return ProjPath.NVFP4
    m = layer.w8a8
    if m is not None and m.ctx.supports(m.input, rows, dtype):
        return ProjPath.W8A8
    return ProjPath.NONE


def out_path(layer: "GdnLayer", config: ActQuantConfig, rows: int, dtype: str = "bfloat16") -> ProjPath:
    """Pure: the pinned path of ``layer``'s out_proj at ``rows`` rows.

    NVFP4 only when the layer holds an NVFP4 out_proj and neither an FP8 nor a dense out_proj,
    and ``config`` pins nvfp4 for the GDN family; else W8A8 when a mixer is installed and its
    context serves ``rows``; else NONE. rows < 1 is NONE.
    """
    if rows < 1:
        return ProjPath.NONE
    if (layer.nvfp4_out is not None and layer.fp8_out is None and layer.dense_out is None
            and config.pins(ProjFamily.GDN, ActQuant.NVFP4)):
        return ProjPath.NVFP4
    m = layer.w8a8
    if m is not None and m.ctx.supports(m.output, rows, dtype):
        return ProjPath.W8A8
    return ProjPath.NONE


def ffn_path(layer: "GdnLayer", rows: int, dtype: str = "bfloat16") -> ProjPath:
    """Pure: W8A8 when the layer's FFN is dense with W8A8 weights installed and their context
    serves ``rows``; else NONE (a MoE or absent FFN is the engine's to run)."""
    ffn = layer.ffn
    if rows < 1 or not isinstance(ffn, DenseFfn) or ffn.w8a8 is None:
        return ProjPath.NONE
    return ProjPath.W8A8 if ffn.w8a8.supports(rows, dtype) else ProjPath.NONE


@dataclass(eq=False)
class GdnLayer:
    """One GDN layer's decode-time projection weights and the W8A8 mixer installed on it.

    Attributes
    ----------
    layout : QkvzLayout
        Row order of the [QKV | Z] projection's output.
    tp_size : int
        Tensor-parallel size the layer's weights are sharded for.
    ffn : DenseFfn, MoeFfn or None
        The layer's FFN component.
    fp8_qkvz : Fp8Weight or tuple of Fp8Weight, optional
        Checkpoint FP8 [QKV | Z]: one stacked weight, or the segments in order (QKV, Z), which
        :meth:`adopt_fp8_block_w8a8` stacks (a copy).
    fp8_out : Fp8Weight, optional
        Checkpoint FP8 out_proj [hidden, value_dim].
    nvfp4_qkvz, nvfp4_out : Nvfp4Weight, optional
    dense_qkvz, dense_out : DenseWeight, optional
        The engine's bf16/fp16 weights: the fallback when no pinned path runs.
    w8a8 : W8a8Mixer or None
        Read-only; set by :meth:`set_w8a8_decode_weights` or :meth:`adopt_fp8_block_w8a8`.
    """

    layout: QkvzLayout
    tp_size: int = 1
    ffn: DenseFfn | MoeFfn | None = None
    fp8_qkvz: Fp8Weight | tuple | None = None
    fp8_out: Fp8Weight | None = None
    nvfp4_qkvz: Nvfp4Weight | None = None
    nvfp4_out: Nvfp4Weight | None = None
    dense_qkvz: DenseWeight | None = None
    dense_out: DenseWeight | None = None
    _w8a8: W8a8Mixer | None = field(default=None, init=False, repr=False)

    def __post_init__(self):
        self.layout = QkvzLayout(self.layout)
        if not isinstance(self.tp_size, int) or isinstance(self.tp_size, bool) or self.tp_size < 1:
            raise ValueError(f"tp_size must be an int >= 1, got {self.tp_size!r}")
        if not (self.ffn is None or isinstance(self.ffn, (DenseFfn, MoeFfn))):
            raise TypeError(f"ffn must be a DenseFfn, a MoeFfn or None, got {type(self.ffn).__name__}")
        if isinstance(self.fp8_qkvz, (list, tuple)):
            self.fp8_qkvz = tuple(self.fp8_qkvz)
            if not self.fp8_qkvz:
                self.fp8_qkvz = None
        for name, cls in (("fp8_out", Fp8Weight), ("nvfp4_qkvz", Nvfp4Weight), ("nvfp4_out", Nvfp4Weight),
                          ("dense_qkvz", DenseWeight), ("dense_out", DenseWeight)):
            v = getattr(self, name)
            if v is not None and not isinstance(v, cls):
                raise TypeError(f"{name} must be a {cls.__name__}, got {type(v).__name__}")
        for seg in self._fp8_qkvz_segments():
            if not isinstance(seg, Fp8Weight):
                raise TypeError(f"fp8_qkvz must be Fp8Weight segments, got {type(seg).__name__}")
        segs = self._fp8_qkvz_segments()
        if segs and any(s.k != segs[0].k for s in segs):
            raise ValueError(f"fp8_qkvz segments must share K, got {[_shape(s) for s in segs]}")
        fp8_qkvz = (sum(s.n for s in segs), segs[0].k) if segs else None
        for proj, weights in (("in_proj_qkvz", (("fp8", fp8_qkvz), ("nvfp4", self.nvfp4_qkvz),
                                                  ("dense", self.dense_qkvz))),
                              ("out_proj", (("fp8", self.fp8_out), ("nvfp4", self.nvfp4_out),
                                            ("dense", self.dense_out)))):
            shapes = {fmt: (w if isinstance(w, tuple) else (w.n, w.k)) for fmt, w in weights if w is not None}
            if len(set(shapes.values())) > 1:
                listed = ", ".join(f"{fmt} [{n}, {k}]" for fmt, (n, k) in shapes.items())
                raise ValueError(f"{proj} weights disagree in shape: {listed}")

    def _fp8_qkvz_segments(self) -> tuple:
        if self.fp8_qkvz is None:
            return ()
        return self.fp8_qkvz if isinstance(self.fp8_qkvz, tuple) else (self.fp8_qkvz,)

    @property
    def w8a8(self) -> W8a8Mixer | None:
        return self._w8a8

    # Installs.

    def set_w8a8_decode_weights(self, mixer: W8a8Mixer, qkvz_size: int, hidden: int, value_dim: int) -> None:
        """Install a W8A8 mixer: [QKV | Z] ``mixer.input`` and out_proj ``mixer.output``.

        Only on a sequential layer at TP 1: the stacked W8A8 output is then the [QKV | Z] layout
        every reader of the buffer expects, and the out_proj's output is the whole sum (at TP > 1
        it would be a partial sum whose all-reduce this path does not do).

        Raises
        ------
        ValueError
            On an interleaved layer, a TP size other than 1, or shapes other than input
            [qkvz_size, hidden] and output [hidden, value_dim].
        TypeError
            When ``mixer`` is not a W8a8Mixer.
        """
        if not isinstance(mixer, W8a8Mixer):
            raise TypeError(f"mixer must be a W8a8Mixer, got {type(mixer).__name__}")
        self._check_w8a8_installable()
        if ((mixer.input.n, mixer.input.k) != (qkvz_size, hidden)
                or (mixer.output.n, mixer.output.k) != (hidden, value_dim)):
            raise ValueError(
                f"W8A8 mixer shapes: got input {_shape(mixer.input)} and output {_shape(mixer.output)}, "
                f"want input [qkvz_size, hidden] = [{qkvz_size}, {hidden}] and output [hidden, value_dim] = "
                f"[{hidden}, {value_dim}]")
        self._w8a8 = mixer

    def _check_w8a8_installable(self) -> None:
        if self.layout is not QkvzLayout.SEQUENTIAL:
            raise ValueError("W8A8 QKV|Z needs the sequential [QKV | Z] layout")
        if self.tp_size != 1:
            raise ValueError(f"W8A8 decode weights need tensor-parallel size 1, got {self.tp_size}: at TP > 1 "
                             "the out_proj output is a partial sum whose all-reduce the W8A8 path does not do")

    def set_w8a8_ffn_weights(self, ffn: W8a8Ffn, hidden: int, inter: int) -> None:
        """Install W8A8 gate/up/down on the layer's dense FFN (see :meth:`DenseFfn.set_w8a8`).

        Raises
        ------
        ValueError
            When the layer's FFN is MoE or absent, or the shapes are not gate/up
            [2 * inter, hidden] and down [hidden, inter].
        """
        if isinstance(self.ffn, MoeFfn):
            raise ValueError("W8A8 FFN weights need a dense FFN; this layer's FFN is MoE (its experts are the "
                             "engine's to run)")
        if self.ffn is None:
            raise ValueError("W8A8 FFN weights need a dense FFN; this layer has no FFN")
        self.ffn.set_w8a8(ffn, hidden, inter)

    def adopt_fp8_block_w8a8(self, ctx, hidden: int) -> bool:
        """Run the layer's block-scaled FP8 [QKV | Z] and out_proj as W8A8 from now on
        (activations quantized per (token, 128)).

        Returns False, installing nothing, when either FP8 weight is absent or not block-scaled.
        Otherwise installs through :meth:`set_w8a8_decode_weights` (same refusals: an
        interleaved layer or TP > 1 raises) and returns True. Segmented ``fp8_qkvz`` is stacked
        into new device memory here, once.

        Parameters
        ----------
        ctx : W8a8Ctx
        hidden : int
            The model's hidden size: K of [QKV | Z] and N of out_proj.
        """
        segs = self._fp8_qkvz_segments()
        if not fp8_block_qualifies(segs, self.fp8_out):
            return False
        # The refusals that do not depend on the weights come before the stacking copy.
        self._check_w8a8_installable()
        mixer = fp8_block_mixer(ctx, segs, self.fp8_out)
        self.set_w8a8_decode_weights(mixer, mixer.input.n, hidden, mixer.output.k)
        return True

    # The pure decision.

    def qkvz_path(self, config: ActQuantConfig, rows: int, dtype: str = "bfloat16") -> ProjPath:
        """See :func:`qkvz_path`."""
        return qkvz_path(self, config, rows, dtype)

    def out_path(self, config: ActQuantConfig, rows: int, dtype: str = "bfloat16") -> ProjPath:
        """See :func:`out_path`."""
        return out_path(self, config, rows, dtype)

    def ffn_path(self, rows: int, dtype: str = "bfloat16") -> ProjPath:
        """See :func:`ffn_path`."""
        return ffn_path(self, rows, dtype)

    # Pinned dispatch.

    def pinned_qkvz(self, fctx, normed, ldx: int, rows: int, out, ldc: int, stream=0, *,
                    dtype: str | None = None) -> bool:
        """The [QKV | Z] projection on the pinned path of :func:`qkvz_path`, if any.

        Parameters
        ----------
        fctx : GpuCtx
            The configuration (``fctx.config``) and, when it pins nvfp4, the Nvfp4Ctx.
        normed : int or array
            RMS-normed hidden state [rows, hidden] bf16/fp16 at row stride ``ldx`` elements
            (16-byte aligned, ldx a multiple of 8).
        rows : int
            Token rows: 1 (decode step), 1 + draft (speculative verify), or one a sequence.
        out : int or array
            [rows, qkvz_size] of normed's dtype at row stride ``ldc`` (16-byte aligned).
            Nothing outside out[0:rows, 0:qkvz_size] is written.
        stream : int or stream object
        dtype : str, optional
            ``"bfloat16"`` or ``"float16"`` when normed and out are raw pointers.

        Returns
        -------
        bool
            True when launched; False (nothing launched, out untouched) when no pinned path runs.
        """
        _check_rows(rows)
        x_ptr, out_ptr, dtype = _ptr.resolve_io(normed, out, dtype)
        return self._pinned("in_proj_qkvz", fctx, x_ptr, ldx, rows, out_ptr, ldc, stream, dtype) is not ProjPath.NONE

    def pinned_out(self, fctx, x, ldx: int, rows: int, out, ldc: int, stream=0, *,
                   dtype: str | None = None) -> bool:
        """The out_proj on the pinned path of :func:`out_path`, if any: x [rows, value_dim] ->
        out [rows, hidden]; otherwise as :meth:`pinned_qkvz`."""
        _check_rows(rows)
        x_ptr, out_ptr, dtype = _ptr.resolve_io(x, out, dtype)
        return self._pinned("out_proj", fctx, x_ptr, ldx, rows, out_ptr, ldc, stream, dtype) is not ProjPath.NONE

    def pinned_ffn(self, x, ldx: int, rows: int, out, ldc: int, stream=0, *, dtype: str | None = None) -> bool:
        """The dense FFN in W8A8 (see :meth:`W8a8Ffn.ffn`) when :func:`ffn_path` says so: x
        [rows, hidden] -> out [rows, hidden]; False (nothing launched) otherwise."""
        _check_rows(rows)
        ffn = self.ffn
        if not isinstance(ffn, DenseFfn) or ffn.w8a8 is None:
            return False
        return ffn.w8a8.ffn(x, ldx, rows, out, ldc, stream, dtype=dtype)

    def _pinned(self, proj: str, fctx, x_ptr: int, ldx: int, rows: int, out_ptr: int, ldc: int, stream,
                dtype: str) -> ProjPath:
        decide = qkvz_path if proj == "in_proj_qkvz" else out_path
        path = decide(self, fctx.config, rows, dtype)
        if path is ProjPath.NVFP4:
            from gdn_kernels.nvfp4 import fixed_nvfp4_proj

            w = self.nvfp4_qkvz if proj == "in_proj_qkvz" else self.nvfp4_out
            if not fixed_nvfp4_proj(fctx, ProjFamily.GDN, w, x_ptr, out_ptr, rows, ldc, ldx, stream, dtype=dtype):
                reason = fctx.nvfp4.supports(w, rows, dtype).reason
                raise ValueError(f"gdn=nvfp4 is pinned but the NVFP4 context declines {proj} {_shape(w)} at "
                                 f"rows = {rows}: {reason}")
            return path
        if path is ProjPath.W8A8:
            m = self._w8a8
            w = m.input if proj == "in_proj_qkvz" else m.output
            # The decision asked the context's own supports, so proj launches.
            if not m.ctx.proj(w, x_ptr, ldx, rows, out_ptr, ldc, stream, dtype=dtype):
                raise RuntimeError(f"W8A8 {proj} declined rows = {rows} after its supports accepted it")
        return path

    # Entry points: pinned first, then the bf16 fallback.

    def qkvz(self, fctx, normed, ldx: int, rows: int, out, ldc: int, stream=0, *,
             dtype: str | None = None) -> ProjPath:
        """out = normed . [QKV | Z]^T on the pinned path, else on the bf16 weight through cuBLAS.

        Arguments as :meth:`pinned_qkvz`. Returns the path that ran: NVFP4, W8A8 or BF16 (NONE
        at rows = 0: nothing to compute, nothing launched).

        Raises
        ------
        ValueError
            When no pinned path runs and the layer holds no dense [QKV | Z] weight, or on bad
            arguments.
        """
        return self._entry("in_proj_qkvz", self.dense_qkvz, fctx, normed, ldx, rows, out, ldc, stream, dtype)

    def out_proj(self, fctx, x, ldx: int, rows: int, out, ldc: int, stream=0, *,
                 dtype: str | None = None) -> ProjPath:
        """out = x . out_proj^T on the pinned path, else on the bf16 weight through cuBLAS; as
        :meth:`qkvz`."""
        return self._entry("out_proj", self.dense_out, fctx, x, ldx, rows, out, ldc, stream, dtype)

    def _entry(self, proj, dense, fctx, x, ldx, rows, out, ldc, stream, dtype) -> ProjPath:
        _check_rows(rows)
        x_ptr, out_ptr, dtype = _ptr.resolve_io(x, out, dtype)
        path = self._pinned(proj, fctx, x_ptr, ldx, rows, out_ptr, ldc, stream, dtype)
        if path is not ProjPath.NONE or rows == 0:
            return path
        if dense is None:
            cfg = fctx.config.format_for(ProjFamily.GDN).value
            raise ValueError(
                f"{proj} at rows = {rows}: no pinned path runs (layout {self.layout.value}, gdn={cfg}, "
                f"W8A8 {'installed' if self._w8a8 else 'not installed'}) and the layer holds no dense weight "
                "to fall back on")
        if dense.dtype != dtype:
            raise TypeError(f"{proj} fallback: activations are {dtype} but the dense weight is {dense.dtype}")
        if ldx < dense.k:
            raise ValueError(f"ldx = {ldx} < K = {dense.k}")
        if ldc < dense.n:
            raise ValueError(f"ldc = {ldc} < N = {dense.n}")
        _ptr.check_pointer(x_ptr, "x", 2)
        _ptr.check_pointer(out_ptr, "out", 2)
        _blas.gemm_xwt(x_ptr, ldx, dense.ptr, dense.ld, rows, dense.n, dense.k, out_ptr, ldc,
                       stream_handle(stream), dtype)
        return ProjPath.BF16
