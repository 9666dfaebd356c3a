"""Helpers for the GPU tests: bf16/fp16 buffers, poison, comparisons; and the tile-major layout
check that the CPU test of the same byte order shares."""

from __future__ import annotations

import ml_dtypes
import numpy as np

NP_DTYPE = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
# 0xFFFF is a NaN in both bf16 and fp16: a poisoned element that was never written stays NaN.
POISON = np.uint16(0xFFFF)


def to_device_2d(host: np.ndarray, ld: int, rows_total: int | None = None, offset: int = 0):
    """Place host [rows, cols] (16-bit) in the middle of a poisoned device buffer at row stride ld.

    Returns (buffer uint16 [rows_total * ld + 2 * pad], pointer to element [0, 0]).
    """
    import cupy

    rows, cols = host.shape
    rows_total = rows if rows_total is None else rows_total
    buf = np.full(rows_total * ld + 2 * offset, POISON, np.uint16)
    view = buf[offset: offset + rows * ld].reshape(rows, ld)
    view[:, :cols] = host.view(np.uint16)
    dev = cupy.asarray(buf)
    return dev, dev.data.ptr + 2 * offset


def poisoned(size: int):
    import cupy

    return cupy.full(size, POISON, cupy.uint16)


def region(buf_host: np.ndarray, offset: int, rows: int, cols: int, ld: int) -> np.ndarray:
    """The [rows, cols] region at row stride ld starting at element offset of a flat buffer."""
    return buf_host[offset: offset + rows * ld].reshape(rows, ld)[:, :cols]


def untouched_mask(size: int, offset: int, rows: int, cols: int, ld: int) -> np.ndarray:
    """True where a flat buffer lies outside the output region."""
    mask = np.ones(size, bool)
    idx = offset + np.arange(rows)[:, None] * ld + np.arange(cols)[None, :]
    mask[idx.ravel()] = False
    return mask


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in units in the last place between two 16-bit float arrays of the same dtype."""

    def ordered(v):
        bits = v.view(np.uint16).astype(np.int32)
        return np.where(bits & 0x8000, 0x8000 - bits, bits)

    return np.abs(ordered(a) - ordered(b))


def random_activations(rng: np.random.Generator, rows: int, k: int, dtype: str, *,
                       outliers: bool = False, zero_rows=()) -> np.ndarray:
    """Normal activations in the given dtype, with optional outliers and all-zero rows; never
    all zeros unless asked."""
    x = rng.standard_normal((rows, k)).astype(np.float32)
    if outliers:
        hits = rng.random((rows, k)) < 0.002
        x[hits] *= 80.0
    for r in zero_rows:
        if r < rows:
            x[r] = 0.0
    return x.astype(NP_DTYPE[dtype])


def assert_tile_major(got: np.ndarray, src: np.ndarray) -> None:
    """got (flat bytes) is row-major src [N16, K] in the tile-major order kernels/w8a8_gemm.cu
    reads: tile T, chunk c, piece j, lane l hold row 16T + l/4 + 8 (j % 2), bytes
    128c + 64 (j / 2) + 16 (l % 4) + 0..15."""
    n16, k = src.shape
    assert got.shape == (n16 * k,)
    for tile in range(n16 // 16):
        for c in range(k // 128):
            for j in range(4):
                for lane in range(32):
                    row = 16 * tile + lane // 4 + 8 * (j % 2)
                    col = 128 * c + 64 * (j // 2) + 16 * (lane % 4)
                    at = tile * 16 * k + c * 2048 + 512 * j + 16 * lane
                    assert (got[at:at + 16] == src[row, col:col + 16]).all(), (tile, c, j, lane)
