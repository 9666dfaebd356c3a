"""NVFP4 on the CPU: the kernels' e2m1 decode table (emulated), weight construction and
validation, the per-family configuration and fixed-format dispatch decisions."""

from __future__ import annotations

import numpy as np
import pytest

from gdn_kernels import ActQuant, ActQuantConfig, GpuCtx, Nvfp4Weight, ProjFamily, fixed_nvfp4_proj
from gdn_kernels import reference as ref
from gdn_kernels.config import ENV_VAR
from gdn_kernels.nvfp4 import check_nvfp4_args, supports

P = 1 << 24


def prmt(a: int, b: int, sel: int) -> int:
    """PTX prmt.b32 (default mode) on Python ints."""
    src = (b << 32) | a
    out = 0
    for i in range(4):
        nib = (sel >> (4 * i)) & 0xF
        byte = (src >> (8 * (nib & 7))) & 0xFF
        if nib & 8:
            byte = 0xFF if byte & 0x80 else 0x00
        out |= byte << (8 * i)
    return out


def e2m1x4_to_s8x4(u: int) -> int:
    """The kernels' decode (kernels/include/gdn/convert.cuh), step for step."""
    sel = u & 0x7777
    pos = prmt(0x03020100, 0x0C080604, sel)
    neg = prmt(0xFDFEFF00, 0xF4F8FAFC, sel)
    w = (u | (u << 20)) & 0xFFFFFFFF
    mask = prmt(w, 0, 0x9B8A)
    return ((neg & mask) | (pos & ~mask)) & 0xFFFFFFFF


def test_decode_table_gives_twice_the_e2m1_value_for_every_code_quad():
    rng = np.random.default_rng(0)
    for u in list(range(0, 1 << 16, 7)) + [0x0000, 0xFFFF, 0x8888, 0x7777, 0x1234] + list(rng.integers(0, 1 << 16, 200)):
        got = e2m1x4_to_s8x4(int(u))
        for i in range(4):
            code = (int(u) >> (4 * i)) & 0xF
            want = 2 * ref.E2M1_VALUES[code]
            byte = (got >> (8 * i)) & 0xFF
            assert byte - 256 * (byte >= 128) == want, (hex(u), i, code)


# fp4_tiled_gemm_kernel's decode tables (kernels/fp4_mx_gemm.cu, decode_tile_word).
DEC_P, DEC_Q = (0x08040200, 0x0B050200), (0x0C060301, 0xF4F8FCFE)


def decode_tile_word(w: int) -> tuple[int, int]:
    """The tile-major decode of eight codes, step for step: (low half's int8 x4, high half's)."""
    m = w ^ 0x88888888
    lo = prmt(*DEC_P, w & 0xFFFF) ^ prmt(*DEC_Q, m & 0xFFFF)
    hi = prmt(*DEC_P, w >> 16) ^ prmt(*DEC_Q, m >> 16)
    return lo, hi


def s8(word: int, i: int) -> int:
    byte = (word >> (8 * i)) & 0xFF
    return byte - 256 * (byte >= 128)


def test_tile_major_decode_gives_twice_the_e2m1_value_for_every_code():
    from gdn_kernels._quantize import NVFP4_TILE_CODE

    rng = np.random.default_rng(1)
    for codes in [list(range(8)), list(range(8, 16))] + [list(rng.integers(0, 16, 8)) for _ in range(300)]:
        w = sum(int(NVFP4_TILE_CODE[c]) << (4 * i) for i, c in enumerate(codes))
        lo, hi = decode_tile_word(w)
        got = [s8(lo, i) for i in range(4)] + [s8(hi, i) for i in range(4)]
        assert got == [2 * ref.E2M1_VALUES[c] for c in codes], codes


def test_tile_major_order_puts_each_code_and_scale_where_the_kernel_reads_it():
    """Emulate fp4_tiled_gemm_kernel's addressing over the tile-major copy: thread (g, t) of tile
    T, chunk c reads 16 bytes at T*chunks*1024 + c*1024 + h*512 + lane*16 (h = 0, 1), words
    (p, r) in order, and 16 scale bytes at (T*chunks + c)*128 + g*16; each must decode to the
    plain weight's code at row 16T + g + 8r, value 128c + 16b + 4t + i (b = 2p, 2p + 1), and the
    scale of that row and block (zero in the padding rows)."""
    from gdn_kernels._quantize import nvfp4_tile_major_order

    rng = np.random.default_rng(2)
    n, k = 37, 384
    packed = rng.integers(0, 256, (n, k // 2), dtype=np.uint8)
    scale = rng.integers(1, 256, (n, k // 16), dtype=np.uint8)
    codes = np.zeros((n, k), np.int64)
    codes[:, 0::2], codes[:, 1::2] = packed & 0xF, packed >> 4
    want = np.zeros((48, k), np.int64)
    want[:n] = 2 * np.asarray(ref.E2M1_VALUES)[codes]
    want_s = np.zeros((48, k // 16), np.int64)
    want_s[:n] = scale
    tiled, tiled_s = nvfp4_tile_major_order(packed, scale)
    chunks = k // 128
    assert tiled.shape == (3 * chunks * 1024,) and tiled_s.shape == (3 * chunks * 128,)
    words = tiled.view("<u4")
    for tile in range(3):
        for c in range(chunks):
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                base = tile * chunks * 1024 + c * 1024 + lane * 16
                thread_words = list(words[base // 4: base // 4 + 4]) + list(words[(base + 512) // 4: (base + 512) // 4 + 4])
                for p in range(4):
                    for r in range(2):
                        lo, hi = decode_tile_word(int(thread_words[2 * p + r]))
                        row = 16 * tile + g + 8 * r
                        for half, word in ((0, lo), (1, hi)):
                            kk = 128 * c + 16 * (2 * p + half) + 4 * t
                            assert [s8(word, i) for i in range(4)] == list(want[row, kk:kk + 4]), (tile, c, lane, p, r)
                sbase = (tile * chunks + c) * 128 + g * 16
                for r in range(2):
                    got = tiled_s[sbase + 8 * r: sbase + 8 * r + 8]
                    assert list(got) == list(want_s[16 * tile + g + 8 * r, 8 * c: 8 * c + 8])


def test_weight_validation():
    w = Nvfp4Weight.from_pointers(P, P + 4096, 300, 256, 1e-3)
    assert w.nbytes == 300 * 128 + 300 * 16
    with pytest.raises(ValueError, match="multiple of 128"):
        Nvfp4Weight.from_pointers(P, P, 64, 96, 1e-3)
    with pytest.raises(ValueError, match="scale2"):
        Nvfp4Weight.from_pointers(P, P, 64, 128, 0.0)
    with pytest.raises(ValueError, match="input_scale"):
        Nvfp4Weight.from_pointers(P, P, 64, 128, 1.0, input_scale=float("inf"))
    with pytest.raises(ValueError, match="16-byte"):
        Nvfp4Weight.from_pointers(P + 4, P, 64, 128, 1.0)
    with pytest.raises(ValueError, match="null"):
        Nvfp4Weight.from_pointers(P, 0, 64, 128, 1.0)


def test_stacking_rules():
    a = Nvfp4Weight.from_pointers(P, P, 256, 512, 1e-3)
    assert Nvfp4Weight.new([a]) is a
    with pytest.raises(ValueError, match="share K"):
        Nvfp4Weight.new([a, Nvfp4Weight.from_pointers(P, P, 256, 256, 1e-3)])
    with pytest.raises(ValueError, match="scale2"):
        Nvfp4Weight.new([a, Nvfp4Weight.from_pointers(P, P, 256, 512, 2e-3)])
    with pytest.raises(ValueError, match="1 to 3"):
        Nvfp4Weight.new([a] * 4)
    tiled = Nvfp4Weight.from_pointers(P, P, 256, 512, 1e-3, layout="tiles16")
    assert tiled.tile_major() is tiled and Nvfp4Weight.new([tiled]) is tiled
    with pytest.raises(ValueError, match="tile_major"):
        Nvfp4Weight.new([a, tiled])
    with pytest.raises(ValueError, match="layout"):
        Nvfp4Weight.from_pointers(P, P, 256, 512, 1e-3, layout="cols")
    with pytest.raises(ValueError, match="16-byte"):
        Nvfp4Weight.from_pointers(P, P + 8, 256, 512, 1e-3, layout="tiles16")


def test_family_and_arguments():
    w = Nvfp4Weight.from_pointers(P, P, 256, 512, 1e-3)
    assert supports(w, 1) and supports(w, 100000)
    assert not supports(w, 0) and not supports(w, 4, "float32")
    assert not supports(Nvfp4Weight.from_pointers(P, P, 256, 17536, 1e-3), 4)
    with pytest.raises(ValueError, match="ldx = 100 < K = 512"):
        check_nvfp4_args(w, P, 100, 4, P, 256, "bfloat16")
    with pytest.raises(ValueError, match="ldc = 10 < N = 256"):
        check_nvfp4_args(w, P, 512, 4, P, 10, "bfloat16")
    with pytest.raises(ValueError, match="out: null"):
        check_nvfp4_args(w, P, 512, 4, 0, 256, "bfloat16")


@pytest.mark.parametrize(
    "text, expect",
    [
        ("gdn=nvfp4,ffn=w8a8", {ProjFamily.GDN: ActQuant.NVFP4, ProjFamily.FFN: ActQuant.W8A8}),
        (" GDN = NVFP4 , ", {ProjFamily.GDN: ActQuant.NVFP4}),
        ("", {}),
        ("attn=none", {ProjFamily.ATTN: ActQuant.NONE}),
    ],
)
def test_config_parse(text, expect):
    cfg = ActQuantConfig.parse(text)
    for fam in ProjFamily:
        assert cfg.format_for(fam) is expect.get(fam, ActQuant.NONE)


@pytest.mark.parametrize(
    "text, message",
    [
        ("mlp=nvfp4", "unknown projection family 'mlp'"),
        ("gdn=int4", "unknown activation quantization 'int4'"),
        ("gdn", "not family=format"),
        ("gdn=nvfp4,gdn=w8a8", "given twice"),
    ],
)
def test_config_errors(text, message):
    with pytest.raises(ValueError, match=message):
        ActQuantConfig.parse(text)


def test_config_from_env_and_argparse():
    import argparse

    from gdn_kernels.config import add_argument

    assert ActQuantConfig.from_env({ENV_VAR: "ffn=nvfp4"}).pins("ffn", "nvfp4")
    assert ActQuantConfig.from_env({}).format_for("gdn") is ActQuant.NONE
    ap = argparse.ArgumentParser()
    add_argument(ap)
    args = ap.parse_args(["--activation-quantization", "gdn=nvfp4,ffn=w8a8"])
    assert args.activation_quantization.pins(ProjFamily.GDN, ActQuant.NVFP4)
    with pytest.raises(SystemExit):
        ap.parse_args(["--activation-quantization", "gdn=fp3"])


def test_fixed_nvfp4_declines_unless_pinned_and_needs_a_context_when_pinned():
    w = Nvfp4Weight.from_pointers(P, P, 256, 512, 1e-3)
    for text in ("", "gdn=w8a8", "ffn=nvfp4", "gdn=none"):
        gpu = GpuCtx(ActQuantConfig.parse(text))
        assert fixed_nvfp4_proj(gpu, "gdn", w, P, P, 4, 256, 512, 0) is False
    with pytest.raises(ValueError, match="no Nvfp4Ctx"):
        fixed_nvfp4_proj(GpuCtx(ActQuantConfig.parse("gdn=nvfp4")), ProjFamily.GDN, w, P, P, 4, 256, 512, 0)
