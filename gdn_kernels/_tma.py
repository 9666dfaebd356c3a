"""Tensor maps (CUtensorMap) for the warpgroup-MMA GEMMs' tensor copies.

A tensor map describes a global array to the tensor memory accelerator: the kernel asks for one
box of it by coordinates, and the copy lands in shared memory swizzled as the warpgroup MMA reads
it. Maps are 128 host-side bytes built by the driver (``cuTensorMapEncodeTiled``, through ctypes;
no device memory, no synchronisation) and passed by value as kernel arguments, so a CUDA graph
captures them with the launch. They depend only on the address, shape and layout they describe:
:class:`MapCache` builds each once.
"""

from __future__ import annotations

import ctypes

from gdn_kernels import _build

MAP_BYTES = 128

_UINT8 = 0                 # CU_TENSOR_MAP_DATA_TYPE_UINT8
_INTERLEAVE_NONE = 0
_SWIZZLE_64B = 2
_SWIZZLE_128B = 3
_L2_PROMOTION_256B = 3
_OOB_FILL_ZERO = 0         # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: boxes past the end read zeros


def _encoder():
    u32p, u64p = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint64)
    return _build.driver_fn("cuTensorMapEncodeTiled", ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32,
                            ctypes.c_void_p, u64p, u64p, u32p, u32p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                            ctypes.c_int)


def check_driver() -> None:
    """Raises (AttributeError, OSError) unless the driver has what the tensor-copy kernels need:
    cuTensorMapEncodeTiled and cuFuncGetParamInfo (CUDA 12.4+)."""
    _encoder()
    _build.param_info_fn()


def encode_bytes(ptr: int, dims, strides, box, swizzle: int = 128) -> bytes:
    """A uint8 tensor map with the 128- or 64-byte swizzle (``swizzle``; the box's rows of
    ``box[0]`` bytes at that pitch): ``dims`` innermost first (dimension 0 contiguous), ``strides``
    in bytes of dimensions 1.., ``box`` the elements a copy takes in each. Raises RuntimeError with
    the driver's code when the driver refuses the description."""
    rank = len(dims)
    if not (len(strides) == rank - 1 and len(box) == rank and 1 <= rank <= 5):
        raise ValueError("a tensor map takes 1-5 dimensions, a stride for each but the first, a box size for each")
    buf = (ctypes.c_uint64 * (MAP_BYTES // 8 + 8))()
    # The map must sit on 64 bytes: an aligned place inside a larger buffer.
    addr = (ctypes.addressof(buf) + 63) & ~63
    err = _encoder()(addr, _UINT8, rank, ctypes.c_void_p(ptr),
                     (ctypes.c_uint64 * rank)(*dims), (ctypes.c_uint64 * max(rank - 1, 1))(*strides),
                     (ctypes.c_uint32 * rank)(*box), (ctypes.c_uint32 * rank)(*([1] * rank)),
                     _INTERLEAVE_NONE, {128: _SWIZZLE_128B, 64: _SWIZZLE_64B}[swizzle], _L2_PROMOTION_256B,
                     _OOB_FILL_ZERO)
    if err:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed (CUresult {err}) for dims {dims}, strides {strides}, "
                           f"box {box}")
    return ctypes.string_at(addr, MAP_BYTES)


def weight_map_shape(n: int, k: int, layout: str, rows: int = 128):
    """(dims, strides, box, swizzle) of the map over a 1-byte weight [N, K] whose box is one stage
    of the warpgroup-MMA kernels: ``rows`` weight rows (a multiple of 16, at most 256) x one
    128-byte chunk of K.

    Row-major: two dimensions (K, N), the box as ``rows`` rows of 128 bytes, 128-byte swizzle.
    Tile-major (``tiles16``, per 16-row tile and chunk 2048 bytes [64-byte half][row group of
    8][row][16-byte unit]): five dimensions (the 64 bytes of a half-row, the row in its group, the
    group, the tile, then the chunk's halves) so that the box lands as two blocks of ``rows`` rows
    of 64 bytes, one a half of the chunk, 64-byte swizzle."""
    if layout == "tiles16":
        tiles = -(-n // 16)
        return ((64, 8, 2, tiles, 2 * (k // 128)), (64, 512, 16 * k, 1024), (64, 8, 2, rows // 16, 2), 64)
    return ((k, n), (k,), (128, rows), 128)


def act_map_shape(max_rows: int, k: int, tokens: int):
    """(dims, strides, box, swizzle) of the map over the quantized activations [max_rows, K] (row stride
    K): ``tokens`` rows x one 128-byte chunk a box."""
    return ((k, max_rows), (k,), (128, tokens), 128)


class MapCache:
    """Tensor maps by what they describe: each built once, then looked up."""

    def __init__(self):
        self._maps: dict[tuple, bytes] = {}

    def weight(self, ptr: int, n: int, k: int, layout: str, rows: int = 128) -> bytes:
        return self._get(("w", ptr, n, k, layout, rows), ptr, lambda: weight_map_shape(n, k, layout, rows))

    def activations(self, ptr: int, max_rows: int, k: int, tokens: int) -> bytes:
        return self._get(("x", ptr, max_rows, k, tokens), ptr, lambda: act_map_shape(max_rows, k, tokens))

    def _get(self, key: tuple, ptr: int, shape) -> bytes:
        m = self._maps.get(key)
        if m is None:
            if len(self._maps) > 4096:
                self._maps.clear()
            m = self._maps[key] = encode_bytes(ptr, *shape())
        return m
