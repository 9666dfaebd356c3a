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
