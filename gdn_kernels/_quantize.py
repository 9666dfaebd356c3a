"""GPU-side weight preparation with CuPy: views of foreign arrays, weight quantizers, stacking.

Not on the hot path: these run once when a weight is built.
"""

from __future__ import annotations

import numpy as np

from gdn_kernels import _ptr

_E4M3_KERNEL = None


def cupy_view(arr: _ptr.DevArray):
    """A CuPy array over the same device memory (bf16 appears as uint16 bits)."""
    import cupy

    np_dtype = {
        "bfloat16": np.uint16,
        "float16": np.float16,
        "float32": np.float32,
        "int8": np.int8,
        "uint8": np.uint8,
        "float8_e4m3fn": np.uint8,
    }[arr.dtype]
    item = _ptr.ITEMSIZE[arr.dtype]
    extent = 1 + sum((s - 1) * st for s, st in zip(arr.shape, arr.strides)) if all(arr.shape) else 0
    mem = cupy.cuda.UnownedMemory(arr.ptr, extent * item, arr.owner)
    return cupy.ndarray(arr.shape, np_dtype, cupy.cuda.MemoryPointer(mem, 0),
                        strides=tuple(s * item for s in arr.strides))


def as_float32(arr: _ptr.DevArray):
    """A bf16/fp16/fp32 device array converted to a new CuPy float32 array (exact)."""
    import cupy

    v = cupy_view(arr)
    if arr.dtype == "bfloat16":
        return (v.astype(cupy.uint32) << 16).view(cupy.float32)
    if arr.dtype in ("float16", "float32"):
        return v.astype(cupy.float32)
    raise TypeError(f"expected a bf16/fp16/fp32 weight, got {arr.dtype}")


def e4m3_rn(v):
    """float32 CuPy array -> e4m3 bytes (uint8), round to nearest even, saturating at +-448."""
    global _E4M3_KERNEL
    import cupy

    if _E4M3_KERNEL is None:
        _E4M3_KERNEL = cupy.ElementwiseKernel(
            "float32 v", "uint8 q",
            "q = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3)",
            "gdn_e4m3_rn", preamble="#include <cuda_fp8.h>",
        )
    return _E4M3_KERNEL(v)


def quantize_weight(arr: _ptr.DevArray, fmt):
    """Quantize w [N, K] per the format: returns (q uint8/int8 [N, K], scale float32)."""
    import cupy

    from gdn_kernels.weights import FP8_BLOCK, WeightFormat

    if len(arr.shape) != 2:
        raise ValueError(f"weight must be [N, K], got shape {arr.shape}")
    w = as_float32(arr)
    n, k = w.shape
    if fmt is WeightFormat.FP8_BLOCK:
        nb, kb = -(-n // FP8_BLOCK), -(-k // FP8_BLOCK)
        padded = cupy.zeros((nb * FP8_BLOCK, kb * FP8_BLOCK), cupy.float32)
        padded[:n, :k] = cupy.abs(w)
        amax = padded.reshape(nb, FP8_BLOCK, kb, FP8_BLOCK).max(axis=(1, 3))
        s = amax / np.float32(448)
        s_full = cupy.repeat(cupy.repeat(s, FP8_BLOCK, axis=0), FP8_BLOCK, axis=1)[:n, :k]
        safe = cupy.where(s_full == 0, np.float32(1), s_full)
        q = e4m3_rn(cupy.where(s_full == 0, np.float32(0), w / safe))
        return cupy.ascontiguousarray(q), cupy.ascontiguousarray(s)
    limit = np.float32(127 if fmt is WeightFormat.INT8 else 448)
    amax = cupy.abs(w).max(axis=1)
    s = amax / limit
    safe = cupy.where(s == 0, np.float32(1), s)[:, None]
    ratio = cupy.where(s[:, None] == 0, np.float32(0), w / safe)
    if fmt is WeightFormat.INT8:
        q = cupy.clip(cupy.rint(ratio), -127, 127).astype(cupy.int8)
    else:
        q = e4m3_rn(ratio)
    return cupy.ascontiguousarray(q), s


def stack(segs):
    """Copy weights [n_i, K] and their scales into one [sum n_i, K] weight (device memory)."""
    import cupy

    from gdn_kernels.weights import WeightFormat

    n = sum(s.n for s in segs)
    k = segs[0].k
    fmt = segs[0].format
    q = cupy.empty((n, k), cupy.uint8)
    scale_item = _ptr.ITEMSIZE[segs[0].scale_dtype]
    if fmt is WeightFormat.FP8_BLOCK:
        s_rows = sum(s.scale_shape[0] for s in segs)
        s = cupy.empty((s_rows, segs[0].scale_shape[1]), np.uint16 if scale_item == 2 else np.float32)
    else:
        s = cupy.empty((n,), cupy.float32)
    q_off = s_off = 0
    for seg in segs:
        qb = seg.n * k
        cupy.cuda.runtime.memcpy(q.data.ptr + q_off, seg.qweight, qb, cupy.cuda.runtime.memcpyDeviceToDevice)
        q_off += qb
        sb = seg.scale_nbytes
        cupy.cuda.runtime.memcpy(s.data.ptr + s_off, seg.scale, sb, cupy.cuda.runtime.memcpyDeviceToDevice)
        s_off += sb
    return q, s


def tile_major(w):
    """A tile-major copy of a row-major W8A8 weight's bytes (kernels/w8a8_gemm.cu, kPacked): N
    padded to a multiple of 16 with zero rows, then for each 16-row tile and 128-wide chunk the
    2048 bytes [64-byte half][row group of 8][row][16-byte unit], as one warp's four loads read
    them. Returns the new CuPy uint8 array [ceil(N/16) * 16, K]."""
    import cupy

    n, k = w.n, w.k
    src = cupy.ndarray((n, k), cupy.uint8, cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(w.qweight, n * k, w), 0))
    n16 = -(-n // 16) * 16
    padded = cupy.zeros((n16, k), cupy.uint8)
    padded[:n] = src
    return tile_major_order(padded)


def tile_major_order(padded):
    """The tile-major copy of a row-major [N16, K] byte array (numpy or CuPy; N16 a multiple of
    16, K of 128): per 16-row tile and 128-wide chunk, [64-byte half][row group][row][16 bytes]."""
    n16, k = padded.shape
    tiles = padded.reshape(n16 // 16, 2, 8, k // 128, 2, 4, 16).transpose(0, 3, 4, 1, 2, 5, 6)
    return tiles.copy(order="C").reshape(n16, k)


# e2m1 code (sign in bit 3) -> the nibble fp4_tiled_gemm_kernel decodes to twice its value
# (kernels/fp4_mx_gemm.cu, decode_tile_word): slot i of mode 0 or 1 (bit 3). Magnitudes 0, 0.5, 1,
# 1.5, 2, 3, 4, 6 then their negatives (-0 as 0).
NVFP4_TILE_CODE = np.array([0x0, 0x8, 0x1, 0x9, 0x2, 0xA, 0x3, 0xB,
                            0x0, 0x4, 0xC, 0x5, 0xD, 0x6, 0xE, 0x7], np.uint8)


def nvfp4_tile_major_order(packed, scale, xp=np):
    """The tile-major copy of a plain NVFP4 weight (numpy or CuPy arrays, ``xp`` their module):
    packed uint8 [N, K/2] and e4m3 scale bytes [N, K/16] -> (codes uint8 [T * K/128 * 1024],
    scales uint8 [T * K/128 * 128]), T = ceil(N/16), padded with zero rows.

    Codes, per 16-row tile and 128-value chunk (1 KB, as one warp of fp4_tiled_gemm_kernel loads
    it): [half h][row group g][quad lane t][pair p'][row r][block parity][code i], that is row
    g + 8r, block 2(2h + p') + parity, value 4t + i of the block; re-encoded by NVFP4_TILE_CODE,
    two a byte (the earlier in the low nibble). Scales, per tile and chunk: [row group g][row
    r][block b]."""
    n, half_k = packed.shape
    k = 2 * half_k
    n16 = -(-n // 16) * 16
    codes = xp.zeros((n16, k), xp.uint8)
    codes[:n, 0::2] = packed & 0xF
    codes[:n, 1::2] = packed >> 4
    codes = xp.asarray(NVFP4_TILE_CODE)[codes]
    # [tile, r, g, chunk, h, p', parity, t, i] -> [tile, chunk, h, g, t, p', r, parity, i]
    order = codes.reshape(n16 // 16, 2, 8, k // 128, 2, 2, 2, 4, 4).transpose(0, 3, 4, 2, 7, 5, 1, 6, 8)
    nib = order.copy(order="C").reshape(-1, 2)
    tiled = (nib[:, 0] | (nib[:, 1] << 4)).astype(xp.uint8)
    s = xp.zeros((n16, k // 16), xp.uint8)
    s[:n] = scale
    # [tile, r, g, chunk, b] -> [tile, chunk, g, r, b]
    tiled_s = s.reshape(n16 // 16, 2, 8, k // 128, 8).transpose(0, 3, 2, 1, 4).copy(order="C").reshape(-1)
    return tiled, tiled_s


def nvfp4_tile_major(w):
    """Tile-major device copies (CuPy uint8 arrays) of a plain Nvfp4Weight's codes and scales."""
    import cupy

    n, k = w.n, w.k
    packed = cupy_view(_ptr.DevArray(w.packed, (n, k // 2), (k // 2, 1), "uint8", w))
    scale = cupy_view(_ptr.DevArray(w.scale, (n, k // 16), (k // 16, 1), "uint8", w))
    return nvfp4_tile_major_order(packed, scale, cupy)


def stack_bytes(*parts):
    """Concatenate device byte ranges: each argument a list of (pointer, nbytes); returns one new
    CuPy uint8 array per list."""
    import cupy

    outs = []
    for ranges in parts:
        out = cupy.empty(sum(n for _, n in ranges), cupy.uint8)
        off = 0
        for ptr, n in ranges:
            cupy.cuda.runtime.memcpy(out.data.ptr + off, ptr, n, cupy.cuda.runtime.memcpyDeviceToDevice)
            off += n
        outs.append(out)
    return tuple(outs)


def quantize_nvfp4_weight(arr: _ptr.DevArray):
    """NVFP4 weight [N, K] on the GPU: (packed uint8 [N, K/2], scale e4m3 bytes [N, K/16], scale2).

    scale2 = amax(w) / 2688 in fp32; the rows are then quantized by the same kernel as static-
    scale activations (fp4_quant.cu), so the two can never disagree.
    """
    import cupy

    from gdn_kernels import _build, nvfp4

    if len(arr.shape) != 2:
        raise ValueError(f"weight must be [N, K], got shape {arr.shape}")
    w = as_float32(arr)
    n, k = w.shape
    if k % 128:
        raise ValueError(f"NVFP4 K = {k} is not a multiple of 128")
    amax = np.float32(cupy.abs(w).max().get())
    scale2 = amax / np.float32(2688)
    if not scale2 > 0:
        raise ValueError("cannot quantize an all-zero weight to NVFP4 (its global scale would be 0)")
    w = cupy.ascontiguousarray(w)
    packed = cupy.empty((n, k // 2), cupy.uint8)
    scale = cupy.empty((n, k // 16), cupy.uint8)
    mods = _build.device_modules(cupy.cuda.Device().id)
    threads = _build.FP4_WEIGHT_QUANT[1]
    kern = mods.kernel("fp4_quant", _build.fp4_quant_instance(*_build.FP4_WEIGHT_QUANT), nvfp4._QUANT_ARGS)
    stream = cupy.cuda.get_current_stream()
    kern.launch((n, 1, 1), threads, stream.ptr,
                w.data.ptr, packed.data.ptr, scale.data.ptr, 0, 0, 0, float(scale2), k, k, 0)
    stream.synchronize()
    return packed, scale, float(scale2)
