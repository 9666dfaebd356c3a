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

from gdn_kernels import _ptr

NVFP4_BLOCK = 16
# K must be a multiple of this: the GEMM streams 128-value (64-byte) chunks of a weight row.
NVFP4_K_MULTIPLE = 128
MAX_SEGMENTS = 3


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
    """

    n: int
    k: int
    packed: int
    scale: int
    scale2: float
    input_scale: float | None = None
    segments: tuple[int, ...] = ()
    owner: object = field(default=None, repr=False)

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
        _ptr.check_pointer(self.packed, "packed", 16)
        _ptr.check_pointer(self.scale, "scale", 8)

    @property
    def nbytes(self) -> int:
        """Bytes a projection reads: packed values and block scales."""
        return self.n * self.k // 2 + self.n * self.k // NVFP4_BLOCK

    @classmethod
    def from_pointers(cls, packed: int, scale: int, n: int, k: int, scale2: float, *,
                      input_scale: float | None = None, owner=None) -> "Nvfp4Weight":
        """Wrap raw device pointers (no GPU touched); the caller keeps the memory alive."""
        return cls(n, k, packed, scale, scale2, input_scale, (n,), owner)

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


# The context, the fixed-format dispatch and the kernels follow below (work in progress).
