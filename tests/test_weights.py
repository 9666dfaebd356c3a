"""Weight construction, stacking rules and argument validation: pure, no GPU."""

from __future__ import annotations

import pytest

from gdn_kernels import Fp8Weight, Support, W8a8Weight, WeightFormat, supports
from gdn_kernels.w8a8 import check_proj_args, stream_handle

P = 1 << 24  # a plausible, aligned fake device address: nothing here dereferences it


def w8(n=256, k=512, fmt="int8", **kw):
    return W8a8Weight.from_pointers(P, P + (1 << 20), n, k, format=fmt, **kw)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(n=0), "positive"),
        (dict(k=100), "multiple of 128"),
        (dict(qweight=0), "null"),
        (dict(qweight=P + 8), "16-byte aligned"),
        (dict(scale=P + 2), "4-byte aligned"),
        (dict(scale_dtype="float16"), "float32 or bfloat16"),
        (dict(scale_dtype="bfloat16"), "scales must be float32"),
        (dict(layout="cols"), "layout must be one of"),
    ],
)
def test_from_pointers_rejects(kwargs, message):
    args = dict(qweight=P, scale=P + 4096, n=256, k=512)
    fmt = "int8"
    extra = {}
    for key, v in kwargs.items():
        if key in args:
            args[key] = v
        else:
            extra[key] = v
    with pytest.raises(ValueError, match=message):
        W8a8Weight.from_pointers(args["qweight"], args["scale"], args["n"], args["k"], format=fmt, **extra)


def test_block_scales_may_be_bf16_and_shape_is_ceil():
    w = w8(n=300, k=640, fmt="fp8_block", scale_dtype="bfloat16")
    assert w.scale_shape == (3, 5)
    assert w.nbytes == 300 * 640 + 3 * 5 * 2
    assert w.scale_nbytes == 3 * 5 * 2
    assert w8(n=300, k=640).scale_shape == (300,)
    assert w8(n=300, k=640).scale_nbytes == 300 * 4


def test_stacking_rules_checked_before_any_gpu_work():
    a, b = w8(256, 512), w8(128, 512)
    assert W8a8Weight.new([a]) is a
    with pytest.raises(ValueError, match="share K"):
        W8a8Weight.new([a, w8(128, 256)])
    with pytest.raises(ValueError, match="share a format"):
        W8a8Weight.new([a, w8(128, 512, fmt="fp8_channel")])
    with pytest.raises(ValueError, match="1 to 3"):
        W8a8Weight.new([a, b, a, b])
    with pytest.raises(ValueError, match="1 to 3"):
        W8a8Weight.new([])
    with pytest.raises(ValueError, match="multiple of 128"):
        W8a8Weight.new([w8(200, 512, fmt="fp8_block"), w8(128, 512, fmt="fp8_block")])
    with pytest.raises(ValueError, match="share a scale dtype"):
        W8a8Weight.new([w8(256, 512, fmt="fp8_block"), w8(128, 512, fmt="fp8_block", scale_dtype="bfloat16")])
    with pytest.raises(TypeError):
        W8a8Weight.new([a, "not a weight"])
    # A tile-major weight passes alone, but stacking reorders rows: segments must be row-major.
    packed = w8(256, 512, layout="tiles16")
    assert W8a8Weight.new([packed]) is packed and packed.tile_major() is packed
    with pytest.raises(ValueError, match="row-major segments"):
        W8a8Weight.new([packed, b])


def test_fp8_weight_maps_to_w8a8_formats():
    blk = Fp8Weight.from_pointers(P, P + 4096, 256, 512)
    assert blk.as_w8a8().format is WeightFormat.FP8_BLOCK
    ch = Fp8Weight.from_pointers(P, P + 4096, 256, 512, scale_format="per_channel")
    assert ch.as_w8a8().format is WeightFormat.FP8_CHANNEL
    with pytest.raises(ValueError, match="multiple of 128"):
        Fp8Weight.from_pointers(P, P + 4096, 256, 500)


def test_supports_is_the_family_boundary():
    w = w8(256, 512)
    assert supports(w, 1) and supports(w, 256)
    for rows in (0, 257):
        s = supports(w, rows)
        assert not s and isinstance(s, Support) and "rows" in s.reason
    assert not supports(w8(256, 17408 + 128), 4)
    assert not supports(w, 4, "float32")


@pytest.mark.parametrize(
    "change, exc, message",
    [
        (dict(ldx=256), ValueError, "ldx = 256 < K = 512"),
        (dict(ldc=100), ValueError, "ldc = 100 < N = 256"),
        (dict(ldx=516), ValueError, "multiple of 8"),
        (dict(rows=-1), ValueError, "rows"),
        (dict(x=0), ValueError, "x: null"),
        (dict(out=P + 2), ValueError, "out: pointer"),
        (dict(dtype="float32"), TypeError, "bfloat16 or float16"),
    ],
)
def test_proj_argument_errors(change, exc, message):
    args = dict(x=P, ldx=512, rows=4, out=P + 65536, ldc=256, dtype="bfloat16")
    args.update(change)
    with pytest.raises(exc, match=message):
        check_proj_args(w8(256, 512), args["x"], args["ldx"], args["rows"], args["out"], args["ldc"], args["dtype"])


def test_stream_handles():
    class CupyLike:
        ptr = 1234

    class TorchLike:
        cuda_stream = 99

    assert stream_handle(0) == 0 and stream_handle(None) == 0
    assert stream_handle(CupyLike()) == 1234 and stream_handle(TorchLike()) == 99
    with pytest.raises(TypeError):
        stream_handle("stream")


def test_fp8_block_qualification():
    from gdn_kernels.w8a8 import fp8_block_mixer, fp8_block_qualifies

    blk = Fp8Weight.from_pointers(P, P + 4096, 256, 512)
    out = Fp8Weight.from_pointers(P, P + 4096, 512, 256)
    ch = Fp8Weight.from_pointers(P, P + 4096, 256, 512, scale_format="per_channel")
    assert fp8_block_qualifies(blk, out) and fp8_block_qualifies((blk, blk), out)
    assert not fp8_block_qualifies(blk, None) and not fp8_block_qualifies((), out)
    assert not fp8_block_qualifies((blk, ch), out) and not fp8_block_qualifies(blk, ch)
    assert not fp8_block_qualifies((blk, None), out)
    assert fp8_block_mixer("ctx", (blk, ch), out) is None
    mixer = fp8_block_mixer("ctx", blk, out)
    assert mixer.input.format is WeightFormat.FP8_BLOCK and mixer.output.n == 512


def test_tile_major_order_is_the_documented_permutation():
    """The byte order of W8a8Weight.tile_major (numpy here, the same function on the GPU), against
    kernels/w8a8_gemm.cu's description: tile T, chunk c, piece j, lane l hold row
    16T + l/4 + 8 (j % 2), bytes 128c + 64 (j / 2) + 16 (l % 4) + 0..15."""
    import numpy as np

    from gdn_kernels._quantize import tile_major_order
    from tests.gpu_util import assert_tile_major

    k = 384
    src = np.random.default_rng(0).integers(0, 256, (48, k), dtype=np.uint8)
    got = tile_major_order(src).reshape(-1)
    assert sorted(got) == sorted(src.reshape(-1))
    assert_tile_major(got, src)
