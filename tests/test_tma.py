"""The tensor maps of the warpgroup-MMA kernels, read back on the CPU: no GPU.

A tensor copy takes, for each box index (innermost dimension fastest), the byte at the sum of
(coordinate + index) x stride over the dimensions, zero past a dimension's end, and writes the box
densely (before the swizzle, which permutes 16-byte units within each swizzle row and is the
hardware's). These tests walk the maps of gdn_kernels._tma that way over real weight bytes and
check that each stage's box holds the rows and K bytes the kernel's MMA descriptors expect.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gdn_kernels import _quantize, _tma


def read_box(flat: np.ndarray, dims, strides, box, coords) -> np.ndarray:
    """The box a tensor copy of (dims, strides, box) at coords reads from the bytes flat."""
    strides = (1,) + tuple(strides)
    out = np.zeros(int(np.prod(box)), np.uint8)
    for i, idx in enumerate(itertools.product(*(range(b) for b in reversed(box)))):
        pos = tuple(reversed(idx))
        at = [c + p for c, p in zip(coords, pos)]
        if all(a < d for a, d in zip(at, dims)):
            out[i] = flat[sum(a * s for a, s in zip(at, strides))]
    return out


@pytest.mark.parametrize("n, k", [(256, 256), (200, 384)])
@pytest.mark.parametrize("rows", [128, 64])
def test_weight_boxes_hold_the_stage_rows(n, k, rows):
    """Row-major: ``rows`` rows of the chunk's 128 bytes (rows past N zero). Tile-major: the
    chunk's two 64-byte halves, each ``rows`` rows of 64 bytes (rows past the padded N zero),
    whatever the tile-major order of the bytes in memory. 128 rows: int8's kernel and fp8's with
    two warpgroups; 64: fp8's with one."""
    rng = np.random.default_rng(0)
    w = rng.integers(1, 256, (n, k), dtype=np.uint8)
    n16 = -(-n // 16) * 16
    padded = np.zeros((n16, k), np.uint8)
    padded[:n] = w
    tiles = _quantize.tile_major_order(padded).ravel()
    for n0 in range(0, n, rows):
        want = np.zeros((rows, k), np.uint8)
        want[: min(rows, n - n0)] = w[n0:n0 + rows]
        for c in range(k // 128):
            dims, strides, box, swizzle = _tma.weight_map_shape(n, k, "rows", rows)
            assert swizzle == 128 and box[0] == 128
            got = read_box(w.ravel(), dims, strides, box, (c * 128, n0)).reshape(rows, 128)
            assert (got == want[:, c * 128:(c + 1) * 128]).all(), (n0, c)
            dims, strides, box, swizzle = _tma.weight_map_shape(n, k, "tiles16", rows)
            assert swizzle == 64 and box[0] == 64
            got = read_box(tiles, dims, strides, box, (0, 0, 0, n0 // 16, 2 * c)).reshape(2, rows, 64)
            for half in range(2):
                assert (got[half] == want[:, c * 128 + 64 * half:c * 128 + 64 * (half + 1)]).all(), (n0, c, half)


def test_activation_box_holds_the_token_rows():
    """The workspace as [max_rows, K] at row stride K: tokens x the chunk's 128 bytes."""
    rng = np.random.default_rng(1)
    max_rows, k, tokens = 100, 256, 64
    x = rng.integers(1, 256, (max_rows, k), dtype=np.uint8)
    dims, strides, box, swizzle = _tma.act_map_shape(max_rows, k, tokens)
    assert swizzle == 128
    for tok0 in (0, 64):
        got = read_box(x.ravel(), dims, strides, box, (128, tok0)).reshape(tokens, 128)
        want = np.zeros((tokens, 128), np.uint8)
        want[: min(tokens, max_rows - tok0)] = x[tok0:tok0 + tokens, 128:256]
        assert (got == want).all()


def test_map_cache_builds_each_map_once(monkeypatch):
    """A map is encoded on its first use and looked up after; another address, shape, layout or
    token tile is another map (the driver's encoder replaced by a recorder: no GPU here)."""
    calls = []

    def fake_encode(ptr, dims, strides, box, swizzle=128):
        calls.append((ptr, dims, strides, box, swizzle))
        return bytes([len(calls)]) * _tma.MAP_BYTES

    monkeypatch.setattr(_tma, "encode_bytes", fake_encode)
    cache = _tma.MapCache()
    a = cache.weight(1 << 20, 256, 512, "rows")
    assert cache.weight(1 << 20, 256, 512, "rows") == a and len(calls) == 1
    assert calls[0] == ((1 << 20,) + _tma.weight_map_shape(256, 512, "rows"))
    assert cache.weight(1 << 20, 256, 512, "tiles16") != a
    assert cache.weight(1 << 20, 256, 512, "rows", 64) != a
    assert cache.weight(2 << 20, 256, 512, "rows") != a
    x = cache.activations(3 << 20, 64, 512, 64)
    assert cache.activations(3 << 20, 64, 512, 64) == x and cache.activations(3 << 20, 64, 512, 128) != x
    assert len(calls) == 6
