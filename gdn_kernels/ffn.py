"""The dense FFN of a decode step in W8A8: ``down(silu(gate) * up)``.

``W8a8Ffn.ffn(x, ldx, rows, out, ldc, stream)`` runs three launches on one stream: the stacked
``[gate | up]`` W8A8 projection into a bf16/fp16 workspace the FFN owns, a kernel that computes
silu(gate) * up in fp32 and quantizes it per token (or per (token, 128)) straight into the
W8A8 context's activation workspace (the intermediate is never stored), and the down GEMM on it.
"""

from __future__ import annotations

from gdn_kernels import _build, _nvtx, _ptr
from gdn_kernels.w8a8 import _QUANT_ARGS, ACT_DTYPES, Support, check_proj_args, stream_handle
from gdn_kernels.weights import FP8_BLOCK, W8a8Weight, WeightFormat

# The fused quantizer of kernels/act_quant.cu that feeds a down weight of each format.
_SILU_KIND = {
    WeightFormat.INT8: "silu_mul_int8",
    WeightFormat.FP8_CHANNEL: "silu_mul_fp8_row",
    WeightFormat.FP8_BLOCK: "silu_mul_fp8_group",
}


def check_ffn_weights(gate_up: W8a8Weight, down: W8a8Weight) -> tuple[int, int]:
    """Pure shape check of a dense FFN's W8A8 weights; returns (hidden, inter).

    gate_up must be [2 * inter, hidden], stacked from two segments of inter rows (gate, then up)
    or one fused tensor of 2 * inter rows laid out the same way; down must be [hidden, inter].
    """
    for w, what in ((gate_up, "gate_up"), (down, "down")):
        if not isinstance(w, W8a8Weight):
            raise TypeError(f"{what} must be a W8a8Weight, got {type(w).__name__}")
    hidden, inter = down.n, down.k
    if (gate_up.n, gate_up.k) != (2 * inter, hidden):
        raise ValueError(f"W8A8 FFN weights: gate_up is [{gate_up.n}, {gate_up.k}] and down [{down.n}, {down.k}]; "
                         f"for down [hidden, inter] = [{hidden}, {inter}] gate_up must be [2 * inter, hidden] = "
                         f"[{2 * inter}, {hidden}]")
    if gate_up.segments not in ((inter, inter), (2 * inter,)):
        raise ValueError(f"W8A8 FFN gate_up segments {gate_up.segments} must be ({inter}, {inter}) (gate, up) "
                         f"or one fused ({2 * inter},)")
    return hidden, inter


class W8a8Ffn:
    """A dense FFN's W8A8 weights, its gate/up workspace and its launches.

    Parameters
    ----------
    ctx : W8a8Ctx
        Runs both projections; its activation workspace receives the quantized intermediate.
    gate_up : W8a8Weight
        [2 * inter, hidden]: rows 0..inter-1 the gate projection, inter..2*inter-1 the up
        projection (see :func:`check_ffn_weights`).
    down : W8a8Weight
        [hidden, inter]. Its format decides how the intermediate is quantized: int8 per token,
        e4m3 per token (per-channel fp8) or e4m3 per (token, 128) (block-scaled fp8).

    Notes
    -----
    Holds a [ctx.max_rows, 2 * inter] 16-bit workspace, allocated here, once. A call uses it and
    the context's workspace: calls must be ordered (one stream, or streams ordered by events);
    give each concurrently running stream its own context and its own W8a8Ffn.
    """

    def __init__(self, ctx, gate_up: W8a8Weight, down: W8a8Weight):
        self.hidden, self.inter = check_ffn_weights(gate_up, down)
        self.ctx = ctx
        self.gate_up = gate_up
        self.down = down
        self._setup_device()

    def _setup_device(self) -> None:
        """Allocate the gate/up workspace and fetch the fused quantizers (needs the GPU)."""
        import cupy

        ctx = self.ctx
        with cupy.cuda.Device(ctx.device_id):
            self._gu = cupy.empty(ctx.max_rows * 2 * self.inter, cupy.uint16)
        self._gu_ptr = self._gu.data.ptr
        kind = _SILU_KIND[self.down.format]
        self._quant_threads = _build.quant_threads(kind)
        self._quant = {d: ctx.modules.kernel("act_quant", _build.silu_quant_instance(kind, d), _QUANT_ARGS)
                       for d in ACT_DTYPES}

    def supports(self, rows: int, dtype: str = "bfloat16") -> Support:
        """Pure: whether ``ffn`` runs this case (both projections inside the context's family)."""
        for w in (self.gate_up, self.down):
            ok = self.ctx.supports(w, rows, dtype)
            if not ok:
                return ok
        return Support(True)

    def ffn(self, x, ldx: int, rows: int, out, ldc: int, stream=0, *, dtype: str | None = None) -> bool:
        """out[0:rows, 0:hidden] = down(silu(x . gate^T) * (x . up^T)), W8A8 throughout.

        Parameters
        ----------
        x : int or array
            Activations [rows, hidden] bf16/fp16 at row stride ``ldx`` elements (16-byte aligned
            pointer, ldx a multiple of 8). Never modified.
        ldx, ldc : int
            Row strides of x and out, in elements (ldx >= hidden, ldc >= hidden).
        rows : int
            Token rows (>= 0); outside [1, ctx.max_rows] the call declines.
        out : int or array
            Output [rows, hidden] of x's dtype at row stride ``ldc`` (16-byte aligned pointer).
            Nothing outside out[0:rows, 0:hidden] is written.
        stream : int or stream object
            CUDA stream handle (0: the legacy default stream).
        dtype : str, optional
            ``"bfloat16"`` or ``"float16"`` when x and out are raw pointers (default bfloat16).

        Returns
        -------
        bool
            True when launched (out is written in stream order); False when the case is outside
            the family: nothing launched, ``out`` untouched.

        Notes
        -----
        gate and up are rounded once to x's dtype (the gate/up projection's output); silu(gate) *
        up is computed in fp32 as gate / (1 + expf(-gate)) * up and quantized from fp32; the down
        projection rounds once to x's dtype.
        """
        x_ptr, out_ptr, dtype = _ptr.resolve_io(x, out, dtype)
        check_proj_args(self.gate_up, x_ptr, ldx, rows, self._gu_ptr, self.gate_up.n, dtype)
        if ldc < self.hidden:
            raise ValueError(f"ldc = {ldc} < N = {self.hidden}")
        _ptr.check_pointer(out_ptr, "out", 16)
        if not self.supports(rows, dtype):
            return False
        self.launch(x_ptr, ldx, rows, out_ptr, ldc, stream_handle(stream), dtype)
        return True

    def launch(self, x: int, ldx: int, rows: int, out: int, ldc: int, stream: int, dtype: str) -> None:
        """Launch without checks: the caller has checked the arguments and ``supports``."""
        if _nvtx.ENABLED:
            _nvtx.push(f"gdn_kernels.ffn.{self.down.format.value}[{self.hidden}x{self.inter}]x{rows}")
        ctx = self.ctx
        ldg = 2 * self.inter
        ctx.launch(self.gate_up, x, ldx, rows, self._gu_ptr, ldg, stream, dtype)
        q, s = ctx.workspace
        if self.down.format is WeightFormat.FP8_BLOCK:
            grid = (-(-(self.inter // FP8_BLOCK) // (self._quant_threads // 32)), rows, 1)
        else:
            grid = (rows, 1, 1)
        self._quant[dtype].launch(grid, self._quant_threads, stream, self._gu_ptr, q, s, self.inter, ldg)
        ctx.gemm_on_workspace(self.down, rows, out, ldc, stream, dtype)
        if _nvtx.ENABLED:
            _nvtx.pop()

    def gate_up_output(self, rows: int):
        """CuPy view of the gate/up workspace, [rows, 2 * inter] 16-bit bit patterns (uint16):
        the last call's gate and up, valid until the next call (tests, profiling)."""
        return self._gu[: rows * 2 * self.inter].reshape(rows, 2 * self.inter)

    def down_input(self, rows: int):
        """CuPy views of the quantized intermediate in the context's workspace, valid until the
        context's next call (tests, profiling): q [rows, inter] (int8, or e4m3 bytes as uint8) and
        the fp32 scales, [rows] or [rows, inter / 128] (block-scaled down weight)."""
        from gdn_kernels import _quantize

        q_ptr, s_ptr = self.ctx.workspace
        fmt = self.down.format
        q = _quantize.cupy_view(_ptr.DevArray(q_ptr, (rows, self.inter), (self.inter, 1),
                                              "int8" if fmt is WeightFormat.INT8 else "uint8", self.ctx))
        if fmt is WeightFormat.FP8_BLOCK:
            g = self.inter // FP8_BLOCK
            s = _quantize.cupy_view(_ptr.DevArray(s_ptr, (rows, g), (g, 1), "float32", self.ctx))
        else:
            s = _quantize.cupy_view(_ptr.DevArray(s_ptr, (rows,), (1,), "float32", self.ctx))
        return q, s
