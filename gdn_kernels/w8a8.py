"""The W8A8 projection: context, pure ``supports`` check and launch.

``ctx.proj(w, x, ldx, rows, out, ldc, stream)`` quantizes the activations per token (int8, e4m3)
or per (token, 128) (e4m3 block), runs the decode-shaped GEMM of ``kernels/w8a8_gemm.cu`` and
writes ``out[0:rows, 0:N]`` once, rounded to the activations' dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from gdn_kernels import _build, _nvtx, _ptr, _tma
from gdn_kernels.weights import FP8_BLOCK, Fp8ScaleFormat, Fp8Weight, W8a8Weight, WeightFormat

ACT_DTYPES = ("bfloat16", "float16")
DEFAULT_MAX_ROWS = 256
DEFAULT_MAX_K = 17408

_FMT = {
    WeightFormat.INT8: _build.FMT_INT8,
    WeightFormat.FP8_CHANNEL: _build.FMT_FP8_CHANNEL,
    WeightFormat.FP8_BLOCK: _build.FMT_FP8_BLOCK,
}
_QUANT_KIND = {
    WeightFormat.INT8: "int8",
    WeightFormat.FP8_CHANNEL: "fp8_row",
    WeightFormat.FP8_BLOCK: "fp8_group",
}
# The per-token quantizers from _build.QUANT_ROWS_MIN rows: one CTA a row. (The fp8 per-channel
# one was withdrawn once, after the back-to-back test on a stream gave other bits than the same
# calls alone at d7b7779; the likely cause, GEMMs reading their activations before the PDL wait, was
# fixed at 51f803f, and with this quantizer the test passes since (2600bd5). bench/NOTES.md W8A8 v6,
# v8, v10.)
_QUANT_ROWS_KIND = {WeightFormat.INT8: "int8_rows", WeightFormat.FP8_CHANNEL: "fp8_row_rows"}
# Below that, with _build.QUANT_SPLIT and K < _build.QUANT_SPLIT_K_BELOW: the same quantizers
# without the cluster (each CTA of a row finds the row's amax itself; the same bytes and scales).
_QUANT_SPLIT_KIND = {WeightFormat.INT8: "int8_split", WeightFormat.FP8_CHANNEL: "fp8_row_split"}
# Kernel parameter layouts (struct formats, see _build.Kernel).
_QUANT_ARGS = "PPPiq"  # x, q, s, K, ldx


class Support(NamedTuple):
    """Answer of a pure ``supports`` check: truthy when the call is inside the family."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


def stream_handle(stream) -> int:
    """A raw CUDA stream handle from an int, a CuPy stream (``.ptr``) or a PyTorch stream
    (``.cuda_stream``); 0 is the legacy default stream."""
    if isinstance(stream, int):
        return stream
    if stream is None:
        return 0
    for attr in ("ptr", "cuda_stream"):
        h = getattr(stream, attr, None)
        if isinstance(h, int):
            return h
    raise TypeError(f"stream must be an int handle or a CUDA stream object, got {type(stream).__name__}")


def check_strided_args(n: int, k: int, x: int, ldx: int, rows: int, out: int, ldc: int, dtype: str) -> None:
    """Raise on bad arguments of a projection of a weight [n, k] (never on a call that is merely
    outside the family): dtype, rows, strides, and null or misaligned pointers."""
    if dtype not in ACT_DTYPES:
        raise TypeError(f"activations must be bfloat16 or float16, got {dtype}")
    if not isinstance(rows, int) or rows < 0:
        raise ValueError(f"rows must be an int >= 0, got {rows!r}")
    if ldx < k:
        raise ValueError(f"ldx = {ldx} < K = {k}")
    if ldc < n:
        raise ValueError(f"ldc = {ldc} < N = {n}")
    # Rows are read with 16-byte loads: every row start must stay 16-byte aligned.
    if ldx % 8:
        raise ValueError(f"ldx = {ldx} must be a multiple of 8 elements (16-byte aligned rows)")
    _ptr.check_pointer(x, "x", 16)
    _ptr.check_pointer(out, "out", 16)


def check_proj_args(w: W8a8Weight, x: int, ldx: int, rows: int, out: int, ldc: int, dtype: str) -> None:
    """Raise on bad arguments of a W8A8 projection (see :func:`check_strided_args`)."""
    if not isinstance(w, W8a8Weight):
        raise TypeError(f"w must be a W8a8Weight, got {type(w).__name__}")
    check_strided_args(w.n, w.k, x, ldx, rows, out, ldc, dtype)


def supports(w: W8a8Weight, rows: int, dtype: str = "bfloat16", *, max_rows: int = DEFAULT_MAX_ROWS,
             max_k: int = DEFAULT_MAX_K) -> Support:
    """Pure family check of a W8A8 projection: rows in [1, max_rows], K <= max_k, a served dtype."""
    if not 1 <= rows <= max_rows:
        return Support(False, f"rows = {rows} outside [1, {max_rows}]")
    if w.k > max_k:
        return Support(False, f"K = {w.k} > max_k = {max_k} of this context")
    if dtype not in ACT_DTYPES:
        return Support(False, f"no instance for activations of dtype {dtype}")
    return Support(True)


@dataclass(frozen=True, eq=False)
class W8a8Mixer:
    """The W8A8 weights a GDN layer installs: ``input`` the stacked ``[QKV | Z]`` in_proj and
    ``output`` the out_proj, run through ``ctx``."""

    ctx: "W8a8Ctx"
    input: W8a8Weight
    output: W8a8Weight


class W8a8Ctx:
    """One device's compiled W8A8 kernels and the activation workspace they share.

    Parameters
    ----------
    device : int, optional
        CUDA device ordinal (default: CuPy's current device).
    max_rows : int
        Largest row count served: the family is rows in [1, max_rows].
    max_k : int
        Largest K served (the workspace holds [max_rows, max_k] quantized activations).

    Notes
    -----
    Every call uses the one workspace: calls on a context must be ordered (one stream, or
    streams ordered by events). Give each concurrently running stream its own context. Calls
    launch on the current device, which must be this context's.
    """

    def __init__(self, device: int | None = None, max_rows: int = DEFAULT_MAX_ROWS, max_k: int = DEFAULT_MAX_K):
        import cupy

        if max_rows < 1 or max_k < 128 or max_k % 128:
            raise ValueError(f"max_rows >= 1 and max_k a positive multiple of 128, got {max_rows}, {max_k}")
        self.device_id = cupy.cuda.Device().id if device is None else int(device)
        self.max_rows = int(max_rows)
        self.max_k = int(max_k)
        self.modules = _build.device_modules(self.device_id)
        with cupy.cuda.Device(self.device_id):
            self._xq = cupy.empty(self.max_rows * self.max_k, cupy.uint8)
            self._xs = cupy.empty(self.max_rows * (self.max_k // FP8_BLOCK), cupy.float32)
        self._xq_ptr = self._xq.data.ptr
        self._xs_ptr = self._xs.data.ptr
        # Fetch every kernel now, so that no call compiles or looks anything up by name.
        self._gemm = {}
        for fmt, code in _FMT.items():
            scales = ("float32", "bfloat16") if fmt is WeightFormat.FP8_BLOCK else ("float32",)
            for tiles in _build.GEMM_TILES:
                for cfg in _build.gemm_configs(code, tiles):
                    for out in ACT_DTYPES:
                        for scale in scales:
                            self._gemm[(fmt, tiles, cfg, out, scale)] = self._gemm_kernel(code, tiles, out, scale, cfg)
        self._gemm_by_shape = {}
        self._maps = _tma.MapCache()
        self._quant = {}
        self._quant_threads = {fmt: _build.quant_threads(kind) for fmt, kind in _QUANT_KIND.items()}
        for fmt, kind in _QUANT_KIND.items():
            for dtype in ACT_DTYPES:
                name = _build.quant_instance(kind, dtype)
                self._quant[(fmt, dtype)] = self.modules.kernel("act_quant", name, _QUANT_ARGS)
        self._quant_rows = {(fmt, dtype): self.modules.kernel("act_quant", _build.quant_instance(kind, dtype), _QUANT_ARGS)
                            for fmt, kind in _QUANT_ROWS_KIND.items() for dtype in ACT_DTYPES}
        self._quant_split = {(fmt, dtype): self.modules.kernel("act_quant", _build.quant_instance(kind, dtype), _QUANT_ARGS)
                             for fmt, kind in _QUANT_SPLIT_KIND.items() for dtype in ACT_DTYPES}

    def _gemm_kernel(self, code: int, tiles: int, out: str, scale: str, cfg):
        """(kernel, the schedule it runs): a tensor-copy schedule falls back to its cp.async twin
        where this driver cannot lay out or encode tensor maps (same bits)."""
        def kern(c):
            return self.modules.kernel("w8a8_gemm", _build.gemm_instance(code, tiles, out, scale, c), c.args, c.smem)

        if cfg.tma:
            try:
                _tma.check_driver()
                return kern(cfg), cfg
            except (AttributeError, OSError, RuntimeError):
                cfg = _build.wgmma_fallback(cfg)
        return kern(cfg), cfg

    def supports(self, w: W8a8Weight, rows: int, dtype: str = "bfloat16") -> Support:
        """Pure: whether ``proj`` runs this case (True) or declines it (False, with the reason)."""
        return supports(w, rows, dtype, max_rows=self.max_rows, max_k=self.max_k)

    def proj(self, w: W8a8Weight, x, ldx: int, rows: int, out, ldc: int, stream=0, *, dtype: str | None = None) -> bool:
        """out[0:rows, 0:N] = W8A8(x[0:rows, 0:K] . w^T), rounded once to x's dtype.

        Parameters
        ----------
        w : W8a8Weight
        x : int or array
            Activations [rows, K] bf16/fp16 at row stride ``ldx`` elements (16-byte aligned
            pointer, ldx a multiple of 8). Never modified.
        ldx, ldc : int
            Row strides of x and out, in elements (ldx >= K, ldc >= N).
        rows : int
            Token rows (>= 0); outside [1, max_rows] the call declines.
        out : int or array
            Output [rows, N] of x's dtype at row stride ``ldc`` (16-byte aligned pointer).
            Nothing outside out[0:rows, 0:N] is written.
        stream : int or stream object
            CUDA stream handle (0: the legacy default stream).
        dtype : str, optional
            ``"bfloat16"`` or ``"float16"`` when x and out are raw pointers (default bfloat16).

        Returns
        -------
        bool
            True when launched (the output will be written in stream order); False when the case
            is outside the family: nothing launched, ``out`` untouched.
        """
        x_ptr, out_ptr, dtype = _ptr.resolve_io(x, out, dtype)
        check_proj_args(w, x_ptr, ldx, rows, out_ptr, ldc, dtype)
        if not self.supports(w, rows, dtype):
            return False
        self.launch(w, x_ptr, ldx, rows, out_ptr, ldc, stream_handle(stream), dtype)
        return True

    def launch(self, w: W8a8Weight, x: int, ldx: int, rows: int, out: int, ldc: int, stream: int, dtype: str) -> None:
        """Launch without checks: the caller has run check_proj_args and supports."""
        if _nvtx.ENABLED:
            _nvtx.push(f"gdn_kernels.{w.format.value}.proj[{w.n}x{w.k}]x{rows}")
        self._quant_launch(w.format, x, ldx, rows, w.k, stream, dtype)
        self.gemm_on_workspace(w, rows, out, ldc, stream, dtype)
        if _nvtx.ENABLED:
            _nvtx.pop()

    @property
    def workspace(self) -> tuple[int, int]:
        """Device pointers (q, s) of the quantized-activation workspace, for a producer kernel
        that quantizes an activation itself (the dense FFN's fused SiLU-and-multiply) before
        :meth:`gemm_on_workspace`.

        q holds [rows, K] int8 or e4m3 bytes at row stride K (max_rows * max_k bytes); s holds fp32
        scales, [rows] (int8, fp8 per channel) or [rows, K / 128] (fp8 block).
        """
        return self._xq_ptr, self._xs_ptr

    def gemm_on_workspace(self, w: W8a8Weight, rows: int, out: int, ldc: int, stream: int, dtype: str) -> None:
        """Launch only the GEMM of ``w`` on activations already quantized in the workspace, in
        ``w``'s format, by an earlier launch on the same stream.

        No checks: the caller has checked the arguments (as :func:`check_proj_args`) and that
        :meth:`supports` is true. ``out`` is a raw pointer to [rows, N] of ``dtype`` at row
        stride ``ldc``; ``stream`` a raw handle.
        """
        key = (w.format, rows, w.n, w.k, dtype, w.scale_dtype, w.layout)
        entry = self._gemm_by_shape.get(key)
        if entry is None:
            # The schedule, its grid and the workspace's tensor map depend on the shape, row count
            # and layout alone: found once, then looked up.
            tiles, cfg = _build.gemm_schedule(_FMT[w.format], rows, w.n, w.k, w.layout == "tiles16")
            gemm, cfg = self._gemm[(w.format, tiles, cfg, dtype, w.scale_dtype)]
            xmap = self._maps.activations(self._xq_ptr, self.max_rows, w.k, cfg.wg) if cfg.tma else None
            entry = self._gemm_by_shape[key] = (gemm, cfg, cfg.grid(rows, w.n, tiles), cfg.threads, xmap)
        gemm, cfg, grid, threads, xmap = entry
        # The weight's tensor map depends on its address too: looked up by it.
        maps = (self._weight_map(w, cfg), xmap) if xmap else ()
        gemm.launch_dependent(grid, threads, stream, *maps, w.qweight, w.scale, self._xq_ptr, self._xs_ptr, out, ldc,
                              w.n, w.k, rows)

    def tma_maps(self, w: W8a8Weight, cfg) -> tuple[bytes, ...]:
        """The tensor maps a schedule's kernel takes before its other arguments (weight, then
        the workspace's tokens), none for the kernels without tensor copies; built once each."""
        if not cfg.tma:
            return ()
        return self._weight_map(w, cfg), self._maps.activations(self._xq_ptr, self.max_rows, w.k, cfg.wg)

    def _weight_map(self, w: W8a8Weight, cfg) -> bytes:
        return self._maps.weight(w.qweight, w.n, w.k, w.layout, cfg.rows_tile)

    def _quant_launch(self, fmt: WeightFormat, x: int, ldx: int, rows: int, k: int, stream: int, dtype: str) -> None:
        if fmt is WeightFormat.FP8_BLOCK:
            warps = _build.QUANT_THREADS // 32
            kernel, grid, threads = self._quant[(fmt, dtype)], (-(-(k // FP8_BLOCK) // warps), rows, 1), _build.QUANT_THREADS
        elif rows >= _build.QUANT_ROWS_MIN and fmt in _QUANT_ROWS_KIND:
            kernel, grid, threads = self._quant_rows[(fmt, dtype)], (1, rows, 1), _build.ROWS_QUANT_THREADS
        else:
            kernels = self._quant_split if _build.QUANT_SPLIT and k < _build.QUANT_SPLIT_K_BELOW else self._quant
            kernel, grid, threads = kernels[(fmt, dtype)], (_build.QUANT_CLUSTER, rows, 1), self._quant_threads[fmt]
        (kernel.launch_dependent if _build.PDL_QUANT_W8A8 else kernel.launch)(grid, threads, stream, x, self._xq_ptr,
                                                                          self._xs_ptr, k, ldx)

    def quantize_activations(self, w: W8a8Weight, x: int, ldx: int, rows: int, stream=0, *, dtype: str = "bfloat16"):
        """Run only the activation quantizer of ``w``'s format (for tests and profiling).

        Returns CuPy views of the workspace: q [rows, K] (int8 or e4m3 bytes) and the fp32 scales
        ([rows], or [rows, K/128] for block-scaled weights), valid until the next call.
        """
        import cupy

        check_proj_args(w, x, ldx, rows, 16, w.n, dtype)
        if not self.supports(w, rows, dtype):
            raise ValueError(self.supports(w, rows, dtype).reason)
        self._quant_launch(w.format, x, ldx, rows, w.k, stream_handle(stream), dtype)
        q = self._xq[: rows * w.k].reshape(rows, w.k)
        if w.format is WeightFormat.INT8:
            q = q.view(cupy.int8)
        groups = w.k // FP8_BLOCK if w.format is WeightFormat.FP8_BLOCK else 1
        s = self._xs[: rows * groups].reshape(rows, groups)
        return q, (s if groups > 1 or w.format is WeightFormat.FP8_BLOCK else s[:, 0])


def fp8_block_qualifies(qkvz, out_proj) -> bool:
    """Pure: whether checkpoint FP8 weights can run as the W8A8 block-scaled path: ``qkvz`` (an
    Fp8Weight or 1 to 3 segments, e.g. (QKV, Z)) and ``out_proj`` (an Fp8Weight) all present and
    all with 128x128 block scales."""
    segs = tuple(qkvz) if isinstance(qkvz, (tuple, list)) else (qkvz,)
    if not segs or out_proj is None or any(w is None for w in segs):
        return False
    return all(isinstance(w, Fp8Weight) and w.scale_format is Fp8ScaleFormat.BLOCK_SCALED
               for w in (*segs, out_proj))


def fp8_block_mixer(ctx: "W8a8Ctx", qkvz, out_proj) -> W8a8Mixer | None:
    """The W8a8Mixer of checkpoint FP8 weights, or None when they do not qualify
    (:func:`fp8_block_qualifies`). Several [QKV | Z] segments are stacked into new device memory
    (once, here), in the tile-major layout (:meth:`W8a8Weight.tile_major`, the same bits, faster);
    a single segment and the output projection are wrapped in place, row-major, so the checkpoint's
    memory is not doubled. Activations will be quantized per (token, 128)."""
    if not fp8_block_qualifies(qkvz, out_proj):
        return None
    segs = list(qkvz) if isinstance(qkvz, (tuple, list)) else [qkvz]
    stacked = W8a8Weight.new(segs)
    return W8a8Mixer(ctx, stacked.tile_major() if len(segs) > 1 else stacked, out_proj.as_w8a8())
