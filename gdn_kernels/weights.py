"""W8A8 weights over device memory: int8 per channel, e4m3 per channel or in 128x128 blocks.

A weight is a dataclass of device pointers, shapes and the segments it was stacked from. It can
be built from raw pointers (no GPU needed: validation is pure), from arrays of any framework,
by quantizing a floating-point weight on the GPU, or by stacking 1 to 3 segments along N; and
copied once into the tile-major layout the GEMM reads fastest (``W8a8Weight.tile_major``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from gdn_kernels import _ptr

QUANT_K_MULTIPLE = 128
FP8_BLOCK = 128
MAX_SEGMENTS = 3
# Byte layouts of a W8A8 weight (W8a8Weight.layout).
LAYOUTS = ("rows", "tiles16")


class WeightFormat(str, enum.Enum):
    """How a W8A8 weight's bytes and scales are to be read."""

    INT8 = "int8"  # int8 [N, K], fp32 scale [N]; activations int8 per token
    FP8_CHANNEL = "fp8_channel"  # e4m3 [N, K], fp32 scale [N]; activations e4m3 per token
    FP8_BLOCK = "fp8_block"  # e4m3 [N, K], scale [ceil(N/128), K/128]; activations per (token, 128)


class Fp8ScaleFormat(str, enum.Enum):
    """Scale layout of an FP8 checkpoint weight."""

    BLOCK_SCALED = "block_scaled"  # [ceil(N/128), ceil(K/128)], fp32 or bf16
    PER_CHANNEL = "per_channel"  # [N], fp32


Fp8BlockScaled = Fp8ScaleFormat.BLOCK_SCALED
Fp8PerChannel = Fp8ScaleFormat.PER_CHANNEL


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def scale_shape(fmt: WeightFormat, n: int, k: int) -> tuple[int, ...]:
    """Shape of the scale tensor of a weight [n, k] in this format."""
    if fmt is WeightFormat.FP8_BLOCK:
        return (_cdiv(n, FP8_BLOCK), _cdiv(k, FP8_BLOCK))
    return (n,)


@dataclass(frozen=True, eq=False)
class W8a8Weight:
    """A W8A8 projection weight in device memory.

    Attributes
    ----------
    format : WeightFormat
    n, k : int
        Output features N and input features K (K a multiple of 128).
    qweight : int
        Device pointer to the 1-byte weight [n, k], K contiguous (row stride k), 16-byte aligned.
    scale : int
        Device pointer to the weight scales: fp32 [n] (int8, fp8 per channel) or
        ``scale_dtype`` [ceil(n/128), k/128] (fp8 block), dequantized w = q * scale.
    scale_dtype : str
        ``"float32"``, or ``"bfloat16"`` for block scales stored so.
    segments : tuple of int
        N of each segment the weight was stacked from (``(n,)`` for one).
    owner : object
        Whatever keeps the device memory alive (arrays, or the stacked copy).
    layout : str
        ``"rows"``: qweight is row-major [n, k]. ``"tiles16"``: the tile-major copy of
        :meth:`tile_major` (the faster layout for the GEMM; same results bit for bit).
    """

    format: WeightFormat
    n: int
    k: int
    qweight: int
    scale: int
    scale_dtype: str = "float32"
    segments: tuple[int, ...] = ()
    owner: object = field(default=None, repr=False)
    layout: str = "rows"

    def __post_init__(self):
        fmt = WeightFormat(self.format)
        object.__setattr__(self, "format", fmt)
        if not self.segments:
            object.__setattr__(self, "segments", (self.n,))
        if not (isinstance(self.n, int) and isinstance(self.k, int)) or self.n <= 0 or self.k <= 0:
            raise ValueError(f"weight shape must be positive ints, got [{self.n}, {self.k}]")
        if self.k % QUANT_K_MULTIPLE:
            raise ValueError(f"K = {self.k} is not a multiple of {QUANT_K_MULTIPLE}")
        if sum(self.segments) != self.n or not 1 <= len(self.segments) <= MAX_SEGMENTS:
            raise ValueError(f"segments {self.segments} must be 1 to {MAX_SEGMENTS} sizes summing to N = {self.n}")
        if self.scale_dtype not in ("float32", "bfloat16"):
            raise ValueError(f"scale dtype must be float32 or bfloat16, got {self.scale_dtype}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        if self.scale_dtype != "float32" and fmt is not WeightFormat.FP8_BLOCK:
            raise ValueError(f"{fmt.value} scales must be float32")
        _ptr.check_pointer(self.qweight, "qweight", 16)
        _ptr.check_pointer(self.scale, "scale", _ptr.ITEMSIZE[self.scale_dtype])

    @property
    def scale_shape(self) -> tuple[int, ...]:
        return scale_shape(self.format, self.n, self.k)

    @property
    def scale_nbytes(self) -> int:
        """Bytes of the scale tensor."""
        count = 1
        for s in self.scale_shape:
            count *= s
        return count * _ptr.ITEMSIZE[self.scale_dtype]

    @property
    def nbytes(self) -> int:
        """Bytes a projection must read: the weight and its scales."""
        return self.n * self.k + self.scale_nbytes

    @classmethod
    def from_pointers(cls, qweight: int, scale: int, n: int, k: int, *, format="int8",
                      scale_dtype: str = "float32", owner=None, layout: str = "rows") -> "W8a8Weight":
        """Wrap raw device pointers (no GPU touched). The caller keeps the memory alive.
        ``layout="tiles16"`` wraps bytes already in :meth:`tile_major` order ([ceil(n/16) * 16, k])."""
        return cls(WeightFormat(format), n, k, qweight, scale, scale_dtype, (n,), owner, layout)

    def tile_major(self) -> "W8a8Weight":
        """This weight copied (on the GPU, once: call at load time) into the tile-major layout
        the GEMM reads fastest: each warp load 512 contiguous bytes instead of 64-byte pieces of
        16 rows (bench/NOTES.md v4). Outputs are the same bit for bit. The result owns its own
        bytes (N padded to a multiple of 16) and a copy of the scales, and keeps no reference to
        this weight: drop this one to hold one copy only. A tile-major weight is returned as it
        is."""
        if self.layout == "tiles16":
            return self
        from gdn_kernels import _quantize

        packed = _quantize.tile_major(self)
        (scale,) = _quantize.stack_bytes([(self.scale, self.scale_nbytes)])
        return W8a8Weight(self.format, self.n, self.k, packed.data.ptr, scale.data.ptr, self.scale_dtype,
                          self.segments, (packed, scale), "tiles16")

    @classmethod
    def from_arrays(cls, qweight, scale, *, format="int8") -> "W8a8Weight":
        """Wrap a framework's arrays: qweight [N, K] int8 (or uint8/e4m3 for fp8), scale as
        :func:`scale_shape` (fp32; bf16 allowed for fp8 block scales). Both must be row-major."""
        fmt = WeightFormat(format)
        q = _ptr.as_array(qweight)
        s = _ptr.as_array(scale)
        want_q = ("int8",) if fmt is WeightFormat.INT8 else ("uint8", "float8_e4m3fn", "int8")
        if q.dtype not in want_q:
            raise TypeError(f"{fmt.value} qweight must be {' or '.join(want_q)}, got {q.dtype}")
        if len(q.shape) != 2 or not q.row_major():
            raise ValueError(f"qweight must be a row-major [N, K] array, got shape {q.shape} strides {q.strides}")
        n, k = q.shape
        want_s = scale_shape(fmt, n, k)
        s_shape = s.shape if fmt is WeightFormat.FP8_BLOCK else tuple(x for x in s.shape if x != 1) or (1,)
        if tuple(s_shape) != want_s or not s.row_major():
            raise ValueError(f"{fmt.value} scale for [{n}, {k}] must be row-major {list(want_s)}, got {list(s.shape)}")
        return cls(fmt, n, k, q.ptr, s.ptr, s.dtype, (n,), (q.owner, s.owner))

    @classmethod
    def quantize(cls, w, *, format="int8") -> "W8a8Weight":
        """Quantize a bf16/fp16/fp32 weight [N, K] on the GPU: int8 per channel (scale amax/127),
        fp8 per channel (amax/448) or fp8 in 128x128 blocks (block amax/448)."""
        from gdn_kernels import _quantize

        fmt = WeightFormat(format)
        q, s = _quantize.quantize_weight(_ptr.as_array(w), fmt)
        n, k = q.shape
        return cls(fmt, n, k, q.data.ptr, s.data.ptr, "float32", (n,), (q, s))

    @classmethod
    def new(cls, segments) -> "W8a8Weight":
        """Stack 1 to 3 weights (W8a8Weight or Fp8Weight) along N into one, e.g. ``[QKV | Z]``.

        They must share K, format and scale dtype; fp8 block-scaled segments must each have N a
        multiple of 128 when there is more than one. One segment is returned as it is; more are
        copied into new device memory that the result owns.
        """
        segs = [s.as_w8a8() if isinstance(s, Fp8Weight) else s for s in segments]
        if not 1 <= len(segs) <= MAX_SEGMENTS:
            raise ValueError(f"a stacked weight takes 1 to {MAX_SEGMENTS} segments, got {len(segs)}")
        for s in segs:
            if not isinstance(s, W8a8Weight):
                raise TypeError(f"segments must be W8a8Weight or Fp8Weight, got {type(s).__name__}")
            if s.layout != "rows" and len(segs) > 1:
                raise ValueError("stack row-major segments, then call tile_major() on the result")
        first = segs[0]
        for s in segs[1:]:
            if s.k != first.k:
                raise ValueError(f"segments must share K: {first.k} != {s.k}")
            if s.format is not first.format:
                raise ValueError(f"segments must share a format: {first.format.value} != {s.format.value}")
            if s.scale_dtype != first.scale_dtype:
                raise ValueError(f"segments must share a scale dtype: {first.scale_dtype} != {s.scale_dtype}")
        if first.format is WeightFormat.FP8_BLOCK and len(segs) > 1:
            bad = [s.n for s in segs if s.n % FP8_BLOCK]
            if bad:
                raise ValueError(f"block-scaled segments must have N a multiple of {FP8_BLOCK} to stack, got {bad}")
        if len(segs) == 1:
            return first
        from gdn_kernels import _quantize

        q, s = _quantize.stack(segs)
        n = sum(x.n for x in segs)
        return cls(first.format, n, first.k, q.data.ptr, s.data.ptr, first.scale_dtype,
                   tuple(x.n for x in segs), (q, s))


@dataclass(frozen=True, eq=False)
class Fp8Weight:
    """An e4m3 checkpoint weight [N, K] and its scale (``weight_scale_inv``, which multiplies).

    Attributes
    ----------
    n, k : int
    qweight : int
        Device pointer to e4m3 [n, k], K contiguous.
    scale : int
        Device pointer: [ceil(n/128), ceil(k/128)] fp32/bf16 (BLOCK_SCALED) or [n] fp32.
    scale_format : Fp8ScaleFormat
    scale_dtype : str
    owner : object
    """

    n: int
    k: int
    qweight: int
    scale: int
    scale_format: Fp8ScaleFormat
    scale_dtype: str = "float32"
    owner: object = field(default=None, repr=False)

    def as_w8a8(self) -> W8a8Weight:
        """The same memory as a W8A8 weight (validates K and the pointers)."""
        fmt = WeightFormat.FP8_BLOCK if self.scale_format is Fp8ScaleFormat.BLOCK_SCALED else WeightFormat.FP8_CHANNEL
        return W8a8Weight(fmt, self.n, self.k, self.qweight, self.scale, self.scale_dtype, (self.n,), self)

    @classmethod
    def from_pointers(cls, qweight: int, scale: int, n: int, k: int, *,
                      scale_format=Fp8ScaleFormat.BLOCK_SCALED, scale_dtype: str = "float32",
                      owner=None) -> "Fp8Weight":
        w = cls(n, k, qweight, scale, Fp8ScaleFormat(scale_format), scale_dtype, owner)
        w.as_w8a8()
        return w

    @classmethod
    def from_checkpoint(cls, weight, weight_scale_inv) -> "Fp8Weight":
        """From checkpoint tensors of any framework: ``weight`` e4m3 [N, K] (uint8 views accepted)
        and ``weight_scale_inv`` [ceil(N/128), ceil(K/128)] fp32/bf16, or [N] / [N, 1] fp32."""
        q = _ptr.as_array(weight)
        s = _ptr.as_array(weight_scale_inv)
        if q.dtype not in ("float8_e4m3fn", "uint8", "int8") or len(q.shape) != 2 or not q.row_major():
            raise ValueError(f"weight must be a row-major e4m3 [N, K], got {q.dtype} {q.shape}")
        n, k = q.shape
        if tuple(s.shape) == scale_shape(WeightFormat.FP8_BLOCK, n, k) and s.row_major():
            fmt = Fp8ScaleFormat.BLOCK_SCALED
        elif tuple(x for x in s.shape if x != 1) == (n,) and s.dtype == "float32":
            fmt = Fp8ScaleFormat.PER_CHANNEL
        else:
            raise ValueError(
                f"weight_scale_inv for [{n}, {k}] must be [{_cdiv(n, 128)}, {_cdiv(k, 128)}] or [{n}] fp32, "
                f"got {list(s.shape)} {s.dtype}"
            )
        return cls.from_pointers(q.ptr, s.ptr, n, k, scale_format=fmt, scale_dtype=s.dtype, owner=(q.owner, s.owner))

    @classmethod
    def quantize(cls, w, *, scale_format=Fp8ScaleFormat.BLOCK_SCALED) -> "Fp8Weight":
        """Quantize a bf16/fp16/fp32 weight [N, K] to e4m3 on the GPU (block or channel amax/448)."""
        fmt = Fp8ScaleFormat(scale_format)
        wf = WeightFormat.FP8_BLOCK if fmt is Fp8ScaleFormat.BLOCK_SCALED else WeightFormat.FP8_CHANNEL
        qw = W8a8Weight.quantize(w, format=wf)
        return cls(qw.n, qw.k, qw.qweight, qw.scale, fmt, "float32", qw.owner)
