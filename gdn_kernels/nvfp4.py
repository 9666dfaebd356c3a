"""NVFP4 W4A4 on Hopper: weights, the per-row activation quantizer and the row-invariant mx GEMM.

NVFP4 stores e2m1 values (two a byte, the even element in the low nibble), an e4m3 scale per 16
elements and an fp32 global scale. Hopper has no FP4 tensor cores, so the GEMM decodes codes to
int8 (twice the e2m1 value: 0, +-1, 2, 3, 4, 6, 8, 12) in registers and runs the int8 tensor cores
one 16-element block per MMA (m16n8k16): each block's sum is an exact integer, scaled by
sa * sw (exact in fp32) and accumulated in fp32 in one fixed K order, so a row's result never
depends on the other rows or on how many there are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gdn_kernels import _build, _nvtx, _ptr
from gdn_kernels.config import ActQuant, ActQuantConfig, ProjFamily
from gdn_kernels.w8a8 import ACT_DTYPES, Support, check_strided_args, stream_handle

NVFP4_BLOCK = 16
# K must be a multiple of this: the GEMM streams 128-value (64-byte) chunks of a weight row.
NVFP4_K_MULTIPLE = 128
MAX_SEGMENTS = 3
# Byte layouts of an NVFP4 weight (Nvfp4Weight.layout).
LAYOUTS = ("rows", "tiles16")


@dataclass(frozen=True, eq=False)
class Nvfp4Weight:
    """An NVFP4 weight [N, K] in device memory, in the checkpoints' plain layouts.

    Attributes
    ----------
    n, k : int
        Output and input features (K a multiple of 128).
    packed : int
        Device pointer to uint8 [n, k/2]: two e2m1 codes a byte, element 2j in the low nibble.
    scale : int
        Device pointer to e4m3 [n, k/16], row-major (one scale per 16 elements).
    scale2 : float
        Global weight scale (ModelOpt ``weight_scale_2``): w = e2m1 * scale * scale2.
    input_scale : float or None
        Static per-tensor activation global scale (ModelOpt ``input_scale``), if calibrated.
    segments : tuple of int
    owner : object
    layout : str
        ``"rows"``: the checkpoint layouts above. ``"tiles16"``: the copy :meth:`tile_major`
        makes (the faster layout for the GEMM; same results bit for bit).
    """

    n: int
    k: int
    packed: int
    scale: int
    scale2: float
    input_scale: float | None = None
    segments: tuple[int, ...] = ()
    owner: object = field(default=None, repr=False)
    layout: str = "rows"

    def __post_init__(self):
        if not self.segments:
            object.__setattr__(self, "segments", (self.n,))
        if not (isinstance(self.n, int) and isinstance(self.k, int)) or self.n <= 0 or self.k <= 0:
            raise ValueError(f"weight shape must be positive ints, got [{self.n}, {self.k}]")
        if self.k % NVFP4_K_MULTIPLE:
            raise ValueError(f"NVFP4 K = {self.k} is not a multiple of {NVFP4_K_MULTIPLE}")
        if sum(self.segments) != self.n or not 1 <= len(self.segments) <= MAX_SEGMENTS:
            raise ValueError(f"segments {self.segments} must be 1 to {MAX_SEGMENTS} sizes summing to N = {self.n}")
        if not (float(self.scale2) > 0 and float(self.scale2) < float("inf")):
            raise ValueError(f"scale2 must be a positive finite float, got {self.scale2}")
        object.__setattr__(self, "scale2", float(self.scale2))
        if self.input_scale is not None:
            if not (float(self.input_scale) > 0 and float(self.input_scale) < float("inf")):
                raise ValueError(f"input_scale must be a positive finite float, got {self.input_scale}")
            object.__setattr__(self, "input_scale", float(self.input_scale))
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        _ptr.check_pointer(self.packed, "packed", 16)
        _ptr.check_pointer(self.scale, "scale", 16 if self.layout == "tiles16" else 8)

    @property
    def nbytes(self) -> int:
        """Bytes a projection reads: packed values and block scales."""
        return self.n * self.k // 2 + self.n * self.k // NVFP4_BLOCK

    @classmethod
    def from_pointers(cls, packed: int, scale: int, n: int, k: int, scale2: float, *,
                      input_scale: float | None = None, owner=None, layout: str = "rows") -> "Nvfp4Weight":
        """Wrap raw device pointers (no GPU touched); the caller keeps the memory alive.
        ``layout="tiles16"`` wraps bytes already in :meth:`tile_major` order."""
        return cls(n, k, packed, scale, scale2, input_scale, (n,), owner, layout)

    def tile_major(self) -> "Nvfp4Weight":
        """This weight copied (on the GPU, once: call at load time) into the layout the GEMM
        reads fastest: per 16-row tile and 128-value chunk the 1 KB one warp loads, each code
        re-encoded and placed where the int8 MMA takes it, so the GEMM decodes it with no
        shuffle (kernels/fp4_mx_gemm.cu, fp4_tiled_gemm_kernel). Outputs are the same bit for
        bit. The result owns its bytes (N padded to a multiple of 16; values and scales, the
        same size as the source's but for the padding) and keeps no reference to this weight:
        drop this one to hold one copy only. A tile-major weight is returned as it is."""
        if self.layout == "tiles16":
            return self
        from gdn_kernels import _quantize

        codes, scales = _quantize.nvfp4_tile_major(self)
        return Nvfp4Weight(self.n, self.k, codes.data.ptr, scales.data.ptr, self.scale2, self.input_scale,
                           self.segments, (codes, scales), "tiles16")

    @classmethod
    def _from_arrays(cls, packed, scale, scale2: float, input_scale) -> "Nvfp4Weight":
        p = _ptr.as_array(packed)
        s = _ptr.as_array(scale)
        if p.dtype not in ("uint8", "int8") or len(p.shape) != 2 or not p.row_major():
            raise ValueError(f"packed NVFP4 weight must be a row-major uint8 [N, K/2], got {p.dtype} {p.shape}")
        n, k = p.shape[0], 2 * p.shape[1]
        if tuple(s.shape) != (n, k // NVFP4_BLOCK) or not s.row_major() or s.dtype not in ("float8_e4m3fn", "uint8"):
            raise ValueError(f"NVFP4 block scales for [{n}, {k}] must be row-major e4m3 [{n}, {k // NVFP4_BLOCK}], "
                             f"got {s.dtype} {list(s.shape)}")
        return cls(n, k, p.ptr, s.ptr, scale2, input_scale, (n,), (p.owner, s.owner))

    @classmethod
    def from_modelopt(cls, weight, weight_scale, weight_scale_2, input_scale=None) -> "Nvfp4Weight":
        """From ModelOpt checkpoint tensors (any framework): ``weight`` uint8 [N, K/2],
        ``weight_scale`` e4m3 [N, K/16], ``weight_scale_2`` and ``input_scale`` fp32 scalars
        (tensors or floats; a device scalar is read once here)."""
        return cls._from_arrays(weight, weight_scale, _scalar(weight_scale_2),
                                None if input_scale is None else _scalar(input_scale))

    @classmethod
    def from_compressed_tensors(cls, weight_packed, weight_scale, weight_global_scale,
                                input_global_scale=None) -> "Nvfp4Weight":
        """From compressed-tensors NVFP4 tensors, whose global scales are reciprocal
        (448 * 6 / amax): scale2 = 1 / weight_global_scale, input_scale = 1 / input_global_scale."""
        wgs = _scalar(weight_global_scale)
        igs = None if input_global_scale is None else _scalar(input_global_scale)
        return cls._from_arrays(weight_packed, weight_scale, 1.0 / wgs, None if igs is None else 1.0 / igs)

    @classmethod
    def quantize(cls, w) -> "Nvfp4Weight":
        """Quantize a bf16/fp16/fp32 weight [N, K] to NVFP4 on the GPU (scale2 = amax / 2688,
        block scales e4m3(amax16 / 6 / scale2), codes rounded to nearest even)."""
        from gdn_kernels import _quantize

        packed, scale, scale2 = _quantize.quantize_nvfp4_weight(_ptr.as_array(w))
        n, k = packed.shape[0], packed.shape[1] * 2
        return cls(n, k, packed.data.ptr, scale.data.ptr, scale2, None, (n,), (packed, scale))

    @classmethod
    def new(cls, segments) -> "Nvfp4Weight":
        """Stack 1 to 3 NVFP4 weights along N (same K, same scale2 and input_scale: a global
        scale belongs to the whole stacked tensor)."""
        segs = list(segments)
        if not 1 <= len(segs) <= MAX_SEGMENTS:
            raise ValueError(f"a stacked weight takes 1 to {MAX_SEGMENTS} segments, got {len(segs)}")
        for s in segs:
            if not isinstance(s, Nvfp4Weight):
                raise TypeError(f"segments must be Nvfp4Weight, got {type(s).__name__}")
        first = segs[0]
        if len(segs) > 1 and any(s.layout != "rows" for s in segs):
            raise ValueError("stack plain segments, then call tile_major() on the result")
        for s in segs[1:]:
            if s.k != first.k:
                raise ValueError(f"segments must share K: {first.k} != {s.k}")
            if s.scale2 != first.scale2 or s.input_scale != first.input_scale:
                raise ValueError("NVFP4 segments must share scale2 and input_scale to stack "
                                 f"({first.scale2}, {first.input_scale}) != ({s.scale2}, {s.input_scale})")
        if len(segs) == 1:
            return first
        from gdn_kernels import _quantize

        packed, scale = _quantize.stack_bytes([(s.packed, s.n * s.k // 2) for s in segs],
                                              [(s.scale, s.n * s.k // NVFP4_BLOCK) for s in segs])
        n = sum(s.n for s in segs)
        return cls(n, first.k, packed.data.ptr, scale.data.ptr, first.scale2, first.input_scale,
                   tuple(s.n for s in segs), (packed, scale))


def _scalar(v) -> float:
    """A Python float from a float or a one-element array of any framework (read once)."""
    if isinstance(v, (int, float)):
        return float(v)
    if hasattr(v, "item"):
        return float(v.item())
    raise TypeError(f"expected a float or a one-element array, got {type(v).__name__}")


DEFAULT_MAX_ROWS = 512
DEFAULT_MAX_K = 17408
_GEMM_ARGS = "PPfPPPPqiii"  # w, sw, scale2, xd, sx, gs, out, ldc, N, K, rows
_QUANT_ARGS = "PPPPPPfiqi"  # x, packed, s, gs, xd, sxf, static_gs, K, ldx, masked


def supports(w: Nvfp4Weight, rows: int, dtype: str = "bfloat16", *, max_k: int = DEFAULT_MAX_K) -> Support:
    """Pure family check of the NVFP4 projection: every rows >= 1, K <= max_k, a served dtype."""
    if rows < 1:
        return Support(False, f"rows = {rows} < 1")
    if w.k > max_k:
        return Support(False, f"K = {w.k} > max_k = {max_k} of this context")
    if dtype not in ACT_DTYPES:
        return Support(False, f"no instance for activations of dtype {dtype}")
    return Support(True)


class Nvfp4Ctx:
    """One device's NVFP4 kernels and the activation workspace they share.

    Parameters
    ----------
    device : int, optional
        CUDA device ordinal (default: CuPy's current device).
    max_rows : int
        Rows quantized at once; larger calls run in slices of max_rows rows, each row through
        the same arithmetic, so every row count is served by the same kernels.
    max_k : int
        Largest K served.

    Notes
    -----
    Calls on one context must be ordered (one stream, or streams ordered by events): give each
    concurrently running stream its own context. Calls launch on the current device.
    """

    def __init__(self, device: int | None = None, max_rows: int = DEFAULT_MAX_ROWS, max_k: int = DEFAULT_MAX_K):
        import cupy

        if max_rows < 1 or max_k < NVFP4_K_MULTIPLE or max_k % NVFP4_K_MULTIPLE:
            raise ValueError(f"max_rows >= 1 and max_k a positive multiple of 128, got {max_rows}, {max_k}")
        self.device_id = cupy.cuda.Device().id if device is None else int(device)
        self.max_rows, self.max_k = int(max_rows), int(max_k)
        self.modules = _build.device_modules(self.device_id)
        r, k = self.max_rows, self.max_k
        with cupy.cuda.Device(self.device_id):
            self._packed = cupy.empty(r * k // 2, cupy.uint8)
            self._s = cupy.empty(r * k // NVFP4_BLOCK, cupy.uint8)
            self._gs = cupy.empty(r, cupy.float32)
            # The operand, and room for its second copy where a slice of rows may take the masked
            # form of the tile-major GEMM (two copies a row, kernels/fp4_quant.cu).
            self._masked_rows = min(r, _build.fp4_masked_rows())
            self._xd = cupy.empty((r + self._masked_rows) * k, cupy.int8)
            self._sxf = cupy.empty(r * k // NVFP4_BLOCK, cupy.float32)
        self._ws = (self._packed.data.ptr, self._s.data.ptr, self._gs.data.ptr, self._xd.data.ptr, self._sxf.data.ptr)
        self._gemm = {(tiles, out): self.modules.kernel("fp4_mx_gemm", _build.fp4_gemm_instance(tiles, out), _GEMM_ARGS)
                      for tiles in _build.GEMM_TILES for out in ACT_DTYPES}
        # The tile-major GEMM by token groups, output dtype and weight size class
        # (_build.fp4_tiled_size): (kernel, whether it reads the masked operand form).
        self._tiled = {}
        # Slices of 1 and 2 rows where a few-token schedule runs them: (rows, dtype, size class).
        self._few = {}
        # Each launch's kernels and grids by (N, K, layout, rows, dtype), chosen once.
        self._plans = {}
        for groups in _build.FP4_TILED_GROUPS:
            for out in ACT_DTYPES:
                self._set_tiled(groups, out)
        # The activation quantizer by input dtype, threads and CTAs a row (_build.fp4_quant_shape).
        self._quant = {(d, t, c): self.modules.kernel("fp4_quant", _build.fp4_quant_instance(d, t, c), _QUANT_ARGS)
                       for d in ACT_DTYPES for t in _build.FP4_QUANT_THREADS for c in (1, _build.FP4_QUANT_CLUSTER)}

    def supports(self, w: Nvfp4Weight, rows: int, dtype: str = "bfloat16") -> Support:
        """Pure: whether ``proj`` runs this case."""
        return supports(w, rows, dtype, max_k=self.max_k)

    def _set_tiled(self, groups: int, dtype: str, schedule: tuple[int, int, int] | None = None) -> None:
        """Run tile-major weights of every size at this group count and dtype with ``schedule``
        (the sweep and the tests try them); None: the shipped ones (_build.fp4_tiled_schedule and,
        at one group, _build.FP4_TILED_FEW_BY_SIZE). A few-token schedule (_build.FP4_ARITH_TOK1,
        TOK2) then runs only the slices of its 1 or 2 rows, in place of the shipped one there;
        any other schedule at one group runs every slice of 1 to 4 rows."""
        few = _build.fp4_schedule_tokens(schedule) if schedule else 0
        if few and groups != 1:
            raise ValueError(f"a few-token schedule runs one group, not {groups}")
        for size in _build.FP4_TILED_BY_SIZE:
            if few:
                self._few[(few, dtype, size)] = self._tiled_kernel(1, dtype, schedule, few)
                continue
            sched = schedule or _build.fp4_tiled_schedule(groups, size)
            self._tiled[(groups, dtype, size)] = self._tiled_kernel(groups, dtype, sched, 4 * groups)
            if groups == 1:
                for rows in (1, 2):
                    sched = None if schedule else _build.FP4_TILED_FEW_BY_SIZE[size].get(rows)
                    if sched:
                        self._few[(rows, dtype, size)] = self._tiled_kernel(1, dtype, sched, rows)
                    else:
                        self._few.pop((rows, dtype, size), None)
        self._plans.clear()

    def _tiled_kernel(self, groups: int, dtype: str, sched: tuple[int, int, int], rows: int) -> tuple:
        """(kernel, whether it reads the masked operand form, 16-row weight tiles a CTA) of a schedule
        for slices of up to ``rows``."""
        masked = int(bool(sched[1] & _build.FP4_ARITH_MASKED))
        if masked and min(self.max_rows, rows) > self._masked_rows:
            raise ValueError(f"the workspace holds the masked operand for {self._masked_rows} rows, "
                             f"not {rows} (_build.fp4_masked_rows)")
        name = _build.fp4_tiled_instance(groups, dtype, sched)
        family = "fp4_mx_gemm" if name in _build.FAMILIES["fp4_mx_gemm"].instances else "fp4_mx_gemm_sweep"
        return (self.modules.kernel(family, name, _GEMM_ARGS, _build.fp4_tiled_smem(sched)), masked,
                _build.fp4_tiled_weight_tiles(sched))

    def _plan(self, w: Nvfp4Weight, rows: int, dtype: str) -> tuple:
        """(quantizer, its threads, CTAs a row, masked operand, GEMM, its grid) of rows <= max_rows."""
        key = (w.n, w.k, w.layout, rows, dtype)
        plan = self._plans.get(key)
        if plan is None:
            threads, cluster = _build.fp4_quant_shape(w.k)
            if w.layout == "tiles16":
                groups, size = _build.fp4_groups(rows), _build.fp4_tiled_size(w.n, w.k)
                gemm, masked, m = self._few.get((rows, dtype, size)) or self._tiled[(groups, dtype, size)]
                grid = (-(-rows // (4 * groups)), -(-(-(-w.n // 16)) // m), 1)
            else:
                tiles = _build.gemm_tiles(rows)
                gemm, masked = self._gemm[(tiles, dtype)], 0
                grid = (-(-rows // (8 * tiles)), -(-w.n // 16), 1)
            if len(self._plans) > 4096:
                self._plans.clear()
            plan = self._plans[key] = (self._quant[(dtype, threads, cluster)], threads, cluster, masked, gemm, grid)
        return plan

    def _run_quant(self, plan: tuple, x: int, ldx: int, rows: int, k: int, stream: int, static_gs: float) -> None:
        quant, threads, cluster, masked = plan[:4]
        packed, s, gs, xd, sxf = self._ws
        (quant.launch_dependent if _build.PDL_QUANT_NVFP4 else quant.launch)(
            (cluster * rows, 1, 1), threads, stream, x, packed, s, gs, xd, sxf, static_gs, k, ldx, masked)

    def _run_gemm(self, plan: tuple, w: Nvfp4Weight, rows: int, out: int, ldc: int, stream: int,
                  dependent: bool) -> None:
        gemm, grid = plan[4:]
        _, _, gs, xd, sxf = self._ws
        (gemm.launch_dependent if dependent else gemm.launch)(
            grid, 32 * _build.FP4_WARPS, stream, w.packed, w.scale, w.scale2, xd, sxf, gs, out, ldc, w.n, w.k, rows)

    def proj(self, w: Nvfp4Weight, x, ldx: int, rows: int, out, ldc: int, stream=0, *,
             dtype: str | None = None, static_scale: bool = False) -> bool:
        """out[0:rows, 0:N] = NVFP4(x) . NVFP4(w)^T, rounded once to x's dtype.

        Same arguments, errors and guarantees as :meth:`gdn_kernels.W8a8Ctx.proj`. Activations
        are quantized per row (dynamic gs = amax(row) / 2688), or with the weight's static
        ``input_scale`` when ``static_scale`` is True. Every rows >= 1 runs.
        """
        x_ptr, out_ptr, dtype = _ptr.resolve_io(x, out, dtype)
        check_nvfp4_args(w, x_ptr, ldx, rows, out_ptr, ldc, dtype)
        if static_scale and w.input_scale is None:
            raise ValueError("static_scale needs a weight with an input_scale")
        if not self.supports(w, rows, dtype):
            return False
        self.launch(w, x_ptr, ldx, rows, out_ptr, ldc, stream_handle(stream), dtype,
                    w.input_scale if static_scale else 0.0)
        return True

    def launch(self, w: Nvfp4Weight, x: int, ldx: int, rows: int, out: int, ldc: int, stream: int, dtype: str,
               static_gs: float = 0.0) -> None:
        """Launch without checks (the caller ran check_nvfp4_args and supports)."""
        if _nvtx.ENABLED:
            _nvtx.push(f"gdn_kernels.nvfp4.proj[{w.n}x{w.k}]x{rows}")
        item = 2
        for r0 in range(0, rows, self.max_rows):
            r = min(self.max_rows, rows - r0)
            plan = self._plan(w, r, dtype)
            self._run_quant(plan, x + r0 * ldx * item, ldx, r, w.k, stream, static_gs)
            self._run_gemm(plan, w, r, out + r0 * ldc * item, ldc, stream, True)
        if _nvtx.ENABLED:
            _nvtx.pop()

    def _gemm_launch(self, w: Nvfp4Weight, rows: int, out: int, ldc: int, stream: int, dtype: str,
                     dependent: bool = True) -> None:
        """Only the GEMM of rows <= max_rows, on the workspace's quantized activations (the sweep
        and host_overhead; dependent: with programmatic dependent launch, after the quantizer)."""
        self._run_gemm(self._plan(w, rows, dtype), w, rows, out, ldc, stream, dependent)

    def _quant_launch(self, x: int, ldx: int, rows: int, k: int, stream: int, dtype: str, static_gs: float,
                      shape: tuple[int, int] | None = None) -> None:
        """Only the activation quantizer (plain operand form) into the workspace (tests,
        host_overhead); shape: (threads, CTAs a row), by default _build.fp4_quant_shape(k)."""
        threads, cluster = shape or _build.fp4_quant_shape(k)
        self._run_quant((self._quant[(dtype, threads, cluster)], threads, cluster, 0), x, ldx, rows, k, stream,
                        static_gs)

    def quantize_activations(self, x: int, ldx: int, rows: int, k: int, stream=0, *, dtype: str = "bfloat16",
                             static_gs: float = 0.0):
        """Run only the activation quantizer (tests, profiling): CuPy views of the workspace,
        packed [rows, K/2] uint8, s [rows, K/16] e4m3 bytes, gs [rows] fp32."""
        if not 1 <= rows <= self.max_rows or k > self.max_k or k % NVFP4_K_MULTIPLE:
            raise ValueError(f"rows {rows} / K {k} outside this context")
        self._quant_launch(x, ldx, rows, k, stream_handle(stream), dtype, static_gs)
        return (self._packed[: rows * k // 2].reshape(rows, k // 2),
                self._s[: rows * k // NVFP4_BLOCK].reshape(rows, k // NVFP4_BLOCK), self._gs[:rows])


def check_nvfp4_args(w: Nvfp4Weight, x: int, ldx: int, rows: int, out: int, ldc: int, dtype: str) -> None:
    """Raise on bad arguments (never on a call outside the family)."""
    if not isinstance(w, Nvfp4Weight):
        raise TypeError(f"w must be an Nvfp4Weight, got {type(w).__name__}")
    check_strided_args(w.n, w.k, x, ldx, rows, out, ldc, dtype)


@dataclass(frozen=True, eq=False)
class GpuCtx:
    """What fixed-format dispatch needs: the activation-quantization configuration and the GPU
    contexts of the formats it may run (``fctx`` of the layer's pinned calls)."""

    config: ActQuantConfig
    w8a8: object = None  # W8a8Ctx
    nvfp4: Nvfp4Ctx | None = None


def fixed_nvfp4_proj(gpu: GpuCtx, family, nvfp4: Nvfp4Weight, x, out, rows: int, ldc: int, ldx: int, stream=0,
                     *, dtype: str | None = None) -> bool:
    """The NVFP4 projection when ``gpu.config`` pins nvfp4 for ``family``; else False.

    Argument order is the serving engine's: ``ldc`` before ``ldx``. Returns True when launched;
    False (nothing launched, ``out`` untouched) when the family is not pinned to nvfp4 or the
    case is outside the NVFP4 family. Raises on bad arguments, and when nvfp4 is pinned but
    ``gpu`` holds no Nvfp4Ctx.
    """
    if not gpu.config.pins(ProjFamily(family), ActQuant.NVFP4):
        return False
    if gpu.nvfp4 is None:
        raise ValueError(f"{ProjFamily(family).value}=nvfp4 is configured but the GpuCtx has no Nvfp4Ctx")
    return gpu.nvfp4.proj(nvfp4, x, ldx, rows, out, ldc, stream, dtype=dtype)
