"""The kernel build on the CPU: source hashing, and the compile gate (every instance compiles for
sm_90a through NVRTC with the run-time options, no local memory in the hot kernels)."""

from __future__ import annotations

import importlib.util
import itertools
import os
import shutil

import pytest

from gdn_kernels import _build
from gdn_kernels.bench import MODEL_SHAPES

GATE_REQUIRED = os.environ.get("GDN_KERNELS_REQUIRE_COMPILE_GATE", "0") not in ("", "0")


def _nvrtc_missing() -> str | None:
    for mod in ("cuda.bindings.nvrtc", "cupy"):
        try:
            if importlib.util.find_spec(mod) is None:
                return f"{mod} is not installed"
        except ModuleNotFoundError as exc:
            return f"{mod} is not installed ({exc})"
    return None


def test_source_hash_covers_headers(tmp_path):
    tree = tmp_path / "kernels"
    shutil.copytree(_build.kernel_dir(), tree)
    before = _build.source_tree_hash(tree)
    assert before == _build.source_tree_hash(_build.kernel_dir())
    header = tree / "include" / "gdn" / "ptx.cuh"
    header.write_text(header.read_text() + "\n// edited\n")
    after = _build.source_tree_hash(tree)
    assert after != before
    (tree / "include" / "gdn" / "new.cuh").write_text("#pragma once\n")
    assert _build.source_tree_hash(tree) not in (before, after)


def test_compile_options_carry_hash_and_arch():
    opts = _build.compile_options("sm_90a")
    assert "-arch=sm_90a" in opts
    assert f"-DGDN_KERNELS_SRC_HASH=0x{_build.source_tree_hash()[:16]}" in opts
    assert _build.arch_for(90) == "sm_90a" and _build.arch_for(89) == "sm_89"


def test_instance_list_is_curated_and_unique():
    for fam in _build.FAMILIES.values():
        assert len(set(fam.instances)) == len(fam.instances)
        assert set(fam.hot) <= set(fam.instances)
        assert (_build.kernel_dir() / fam.source).is_file()


def test_compile_gate():
    missing = _nvrtc_missing()
    if missing:
        if GATE_REQUIRED:
            pytest.fail(f"GDN_KERNELS_REQUIRE_COMPILE_GATE is set but {missing}")
        pytest.skip(f"compile gate needs NVRTC: {missing}")
    from gdn_kernels import compile_gate

    reports = compile_gate.compile_all("sm_90a")
    names = {(r.family, r.name) for r in reports}
    for family, fam in _build.FAMILIES.items():
        for inst in fam.instances:
            assert (family, inst) in names, f"{inst} did not compile"
    hot = [r for r in reports if r.name in _build.FAMILIES[r.family].hot]
    dirty = [r.name for r in hot if not r.clean]
    assert not dirty, f"local memory (stack or spills) in hot kernels: {dirty}"
    assert all(r.registers <= 255 for r in reports)


def test_epilogue_scale_loads_come_before_the_stores():
    """A performance property (bench/NOTES.md W8A8 v11): the epilogues of the many-row W8A8 kernels
    load their scales (gdn::ld_dep, ld.global.f32 in the PTX, ordered with the stores) in batches
    of 8 or more on average ahead of the output stores, not one beside each store (which made every output
    wait out a load: 63 store-to-load turns in the 128-token kernel before c2a5220). Checked on
    the PTX NVRTC makes of one instance of each kernel kind, as CuPy compiles them."""
    missing = _nvrtc_missing()
    if missing:
        if GATE_REQUIRED:
            pytest.fail(f"GDN_KERNELS_REQUIRE_COMPILE_GATE is set but {missing}")
        pytest.skip(f"needs NVRTC: {missing}")
    import re

    from cuda.bindings import nvrtc

    from gdn_kernels import compile_gate

    kinds = ("w8a8_wgmma_tma_kernel<8, 64, 1", "w8a8_wgmma_tma_kernel<6, 128, 1", "w8a8_wgmma_tma_kernel<4, 256, 1",
             "w8a8_wgmma_ws_kernel<4, 256, 1", "w8a8_wgmma_split_kernel<8, 64, 1, 2, 2",
             "w8a8_wgmma_split_kernel<6, 128, 1, 2, 4", "w8a8_wgmma_kernel<6, 128, 1", "w8a8_wgmma_fp8_kernel<1, 4, 1",
             "w8a8_wgmma_fp8_split_kernel<1, 4, 1, 2, 0, 2", "w8a8_tiled_kernel<1, 4, 1", "w8a8_tiled_kernel<0, 3, 1",
             "w8a8_qgmma_kernel<1, 6, 128, 1")
    shipped = _build.FAMILIES["w8a8_gemm"].instances + _build.FAMILIES["w8a8_gemm_sweep"].instances
    names = [next(n for n in shipped if n.startswith(kind) and n.endswith("__nv_bfloat16, float>")) for kind in kinds]
    err, prog = nvrtc.nvrtcCreateProgram(_build.family_source("w8a8_gemm").encode(), b"w8a8_gemm.cu", 0, [], [])
    try:
        for name in names:
            assert int(nvrtc.nvrtcAddNameExpression(prog, name.encode())[0]) == 0
        opts = [o.encode() for o in compile_gate.gate_options("sm_90a") if o != "-Xptxas=-v"]
        assert int(nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]) == 0
        _, size = nvrtc.nvrtcGetPTXSize(prog)
        buf = b" " * size
        nvrtc.nvrtcGetPTX(prog, buf)
        ptx = buf.decode()
        lowered = {name: nvrtc.nvrtcGetLoweredName(prog, name.encode())[1].decode() for name in names}
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    for name, low in lowered.items():
        start = ptx.index(f".entry {low}(")
        end = ptx.find(".entry ", start + 1)
        seq = re.findall(r"\b(ld\.global\.f32|st\.global\.[bu]16)\b", ptx[start:end if end > 0 else None])
        loads = sum(op.startswith("ld") for op in seq)
        turns = sum(a.startswith("st") and b.startswith("ld") for a, b in zip(seq, seq[1:]))
        assert len(seq) > loads, f"{name}: no output stores found"
        assert turns + 1 <= max(1, loads // 8), f"{name}: {turns} store-to-load turns for {loads} scale loads"


def test_every_chosen_gemm_schedule_is_compiled():
    """gemm_config may pick any schedule for any shape, row count and layout, but only the schedules of
    gemm_configs are compiled and fetched by W8a8Ctx: every pick must be among them."""
    for fmt in (_build.FMT_INT8, _build.FMT_FP8_CHANNEL, _build.FMT_FP8_BLOCK):
        for rows in (1, 5, 8, 9, 16, 17, 32, 63, 64, 100, 128, 256):
            for n in (16, 300, 2048, 5120, 12288, 16384, 34816, 40000):
                for k in (128, 1280, 2048, 4096, 5120, 6144, 8192, 17408):
                    for packed in (False, True):  # row-major and tile-major weights
                        tiles, cfg = _build.gemm_schedule(fmt, rows, n, k, packed)
                        assert cfg.packed == packed
                        assert cfg in _build.gemm_configs(fmt, tiles), (fmt, rows, n, k, cfg)
    names = set(_build.FAMILIES["w8a8_gemm"].instances)
    for fmt in (_build.FMT_INT8, _build.FMT_FP8_CHANNEL, _build.FMT_FP8_BLOCK):
        for tiles in _build.GEMM_TILES:
            for cfg in _build.gemm_configs(fmt, tiles):
                assert _build.gemm_instance(fmt, tiles, "bfloat16", "float32", cfg) in names


def test_warpgroup_rows_cases_reach_every_fp8_warpgroup_schedule():
    """The GPU test holding the fp8 warpgroup kernels to the decode kernel's bits
    (test_w8a8_gpu.test_warpgroup_rows_match_decode_rows) runs, over its cases and both layouts,
    every fp8 warpgroup schedule that is shipped: each split with its overlap and stages."""
    from tests.test_w8a8_gpu import WARPGROUP_ROWS_CASES

    for fmt, name in ((_build.FMT_FP8_CHANNEL, "fp8_channel"), (_build.FMT_FP8_BLOCK, "fp8_block")):
        shipped = {c for t in _build.GEMM_TILES for c in _build.gemm_configs(fmt, t) if c.f16}
        reached = {_build.gemm_config(fmt, rows, n, k, packed) for n, k, splits in WARPGROUP_ROWS_CASES
                   for rows in splits.get(name, splits) for packed in (False, True)}
        assert shipped, name
        assert shipped <= reached, f"{name}: not run by the warpgroup-rows test: {shipped - reached}"


def test_w8a8_schedules_fit_shared_memory_and_their_formats():
    """Every W8A8 schedule, shipped or swept, asks for at most the 227 KB of shared memory a Hopper
    CTA may have (the launch would fail on the GPU otherwise), and a one-warpgroup fp8 schedule
    lets two CTAs share a multiprocessor's 228 KB; int8's warpgroup-MMA kernel, whose K order is
    not the decode kernels', is chosen and named for int8 only, from WGMMA_MIN_ROWS rows
    (WGMMA_MIN_ROWS_TILE_MAJOR on tile-major weights) and with
    at least WGMMA_MIN_CTAS CTAs; the fp8 warpgroup kernel (f16 MMAs, the decode kernels' bits)
    for fp8 only, from 64 rows."""
    limit = _build.SMEM_LIMIT
    formats = (_build.FMT_INT8, _build.FMT_FP8_CHANNEL, _build.FMT_FP8_BLOCK)
    for fmt in formats:
        for tiles in _build.GEMM_TILES:
            cfgs = (_build.gemm_configs(fmt, tiles) + _build.sweep_cfgs(tiles) + _build.sweep_cfgs(tiles, True)
                    + _build.wgmma_sweep_cfgs(fmt, tiles) + _build.wgmma_sweep_cfgs(fmt, tiles, True))
            for cfg in cfgs:
                assert cfg.smem <= limit, cfg
                if cfg.qg == 2:
                    # The e4m3 decode form launches with what K needs, the attribute allows the most.
                    longest = 128 * _build.GEMM_WARPS * _build.QGMMA_DECODE_MAX_CHUNKS
                    assert cfg.smem == min(cfg.decode_smem(longest), _build.SMEM_LIMIT), cfg
                    assert cfg.decode_smem(17408) > cfg.decode_smem(2048), cfg
                if cfg.f16 == 1:
                    assert 2 * (cfg.smem + 1024) <= 228 * 1024, cfg
                assert not cfg.wg or (fmt == _build.FMT_INT8) == (not cfg.f16 and not cfg.qg), (fmt, cfg)
    for fmt in (_build.FMT_FP8_CHANNEL, _build.FMT_FP8_BLOCK):
        with pytest.raises(ValueError):
            _build.GemmCfg(stages=6, wg=64).name(fmt, 4, "__nv_bfloat16", "float")
        for rows in (1, 16, 32, 63):
            assert not _build.gemm_config(fmt, rows, 34816, 5120).wg
    with pytest.raises(ValueError):
        _build.WGMMA_FP8.name(_build.FMT_INT8, 4, "__nv_bfloat16", "float")
    for rows, n, packed in itertools.product(range(1, 257, 7), (16, 2048, 4096, 5120, 16384, 34816), (False, True)):
        cfg = _build.wgmma_config(rows, n, 4096, packed)
        if cfg is None:
            continue
        assert rows >= (_build.WGMMA_MIN_ROWS_TILE_MAJOR if packed else _build.WGMMA_MIN_ROWS)
        assert -(-rows // cfg.wg) * -(-n // 128) * cfg.split >= _build.WGMMA_MIN_CTAS
        # A K split keeps one wave and a few chunks a CTA.
        assert cfg.split == 1 or (-(-rows // cfg.wg) * -(-n // 128) * cfg.split <= _build.WGMMA_SPLIT_CTAS[cfg.split]
                                  and 4096 // 128 // cfg.split >= _build.SPLIT_MIN_CHUNKS)
        assert _build.gemm_config(_build.FMT_INT8, rows, n, 4096, packed) == cfg
        fp8 = _build.gemm_config(_build.FMT_FP8_CHANNEL, rows, n, 4096, packed)
        assert not fp8.wg or fp8.f16, fp8


def test_int8_256_token_tiles_only_where_they_fill_one_wave():
    """256 tokens a CTA only for tile-major weights beyond 128 rows, with one wave of
    WG256_CTAS[0]..WG256_CTAS[1] CTAs: of the model shapes, [12288, 2048] and [16384, 5120] at
    129-256 rows (sweep_wg256_2600bd5_h200.md); row-major weights keep 128. Of those, the ones
    with K >= WG256_WS_MIN_K ([16384, 5120]) run the producer-warp kernel, which nothing else
    runs and which is named only unsplit with both operands by tensor copies."""
    lo, hi = _build.WG256_CTAS
    model = MODEL_SHAPES
    for rows in range(64, 257):
        for n, k in model + [(4096, 1024), (40000, 5120)]:
            ctas = -(-rows // 256) * -(-n // 128)
            cfg = _build.wgmma_config(rows, n, k, True)
            assert (cfg is not None and cfg.wg == 256) == (rows > 128 and lo <= ctas <= hi), (rows, n, k, cfg)
            assert getattr(_build.wgmma_config(rows, n, k, False), "wg", 0) != 256
            if (n, k) in model and cfg is not None and cfg.wg == 256:
                assert (n, k) in ((12288, 2048), (16384, 5120)) and cfg.split == 1
            if cfg is not None:
                assert cfg.ws == (cfg.wg == 256 and k >= _build.WG256_WS_MIN_K), (rows, n, k, cfg)
    shipped = {c for t in _build.GEMM_TILES for c in _build.gemm_configs(_build.FMT_INT8, t)}
    assert {(c.wg, c.split, c.tma) for c in shipped if c.ws} == {(256, 1, 2)}
    for fmt in (_build.FMT_FP8_CHANNEL, _build.FMT_FP8_BLOCK):
        assert not any(c.ws for t in _build.GEMM_TILES for c in _build.gemm_configs(fmt, t))
    for bad in (_build.GemmCfg(stages=6, wg=128, tma=1, ws=1), _build.GemmCfg(stages=6, wg=128, tma=2, split=2, ws=1)):
        with pytest.raises(ValueError):
            bad.name(_build.FMT_INT8, 4, "__nv_bfloat16", "float")


def test_int8_64_token_tiles_where_their_split_makes_more_ctas():
    """Beyond 64 rows int8 takes 128 tokens a CTA, except where 64 tokens with a K split make more
    CTAs (still one wave) than 128 tokens do: of the model shapes, [2048, 4096] at 129-256 rows."""
    model = MODEL_SHAPES
    for packed in (False, True):
        for rows in range(65, 257):
            for n, k in model:
                cfg = _build.wgmma_config(rows, n, k, packed)
                if cfg.wg == 256:
                    continue
                tiles_n = -(-n // 128)
                ctas = {wg: -(-rows // wg) * tiles_n for wg in (64, 128)}
                split = {wg: _build.wgmma_split(c, k) for wg, c in ctas.items()}
                more = split[64] > 1 and ctas[64] * split[64] > ctas[128] * split[128]
                assert (cfg.wg == 64) == (more or ctas[128] * split[128] < 64), (rows, n, k, cfg)
                assert more == ((n, k) == (2048, 4096) and rows > 128), (rows, n, k)
                assert cfg.split == split[cfg.wg]
                assert cfg.split == 1 or -(-rows // cfg.wg) * tiles_n * cfg.split <= _build.WGMMA_SPLIT_CTAS[cfg.split]


def test_tile_major_decode_staging_deepest_where_the_grid_is_one_wave():
    """At 1-8 rows on tile-major weights the decode kernel stages more chunks before its wait where
    all its CTAs are resident at once (the next GEMM's CTAs then start during the previous GEMM's
    tail): four chunks a warp on the small weight, all of [2048, 4096]'s (int8 at 1-4 rows, fp8
    per channel; one chunk for block fp8), four for int8 at 1-4 rows on the one-wave short-K
    weights, none for int8 at 5-8 rows and for fp8 per channel there (its first register round
    already in flight before the wait); the multi-wave weights stage at most two. Every staged
    schedule leaves room for its CTAs a multiprocessor."""
    model = MODEL_SHAPES
    for fmt in (_build.FMT_INT8, _build.FMT_FP8_CHANNEL, _build.FMT_FP8_BLOCK):
        for (n, k), rows in itertools.product(model, (1, 2, 4, 8, 16)):
            cfg = _build.gemm_config(fmt, rows, n, k, True)
            assert cfg.smem * cfg.min_blocks <= 228 * 1024, (fmt, n, k, rows, cfg)
            one_wave = -(-n // 16) <= _build.DECODE_WAVE_CTAS and k < 8192
            if _build.token_tiles(fmt, rows, n, k, True) < _build.gemm_tiles(rows):
                continue  # the rows spread over more CTAs: test_rows_spread_over_ctas_on_tile_major_weights
            if cfg.pipe == 2:
                continue  # slots of a ring, not staging: test_tile_major_ring_where_measured_faster
            if rows <= 8 and one_wave:
                deep = {_build.FMT_INT8: 4 if rows <= 4 else 0,
                        _build.FMT_FP8_CHANNEL: 4 if n * k <= _build._SMALL_WEIGHT else 0,
                        _build.FMT_FP8_BLOCK: 1 if n * k <= _build._SMALL_WEIGHT else 0}[fmt]
                assert cfg.pre == deep, (fmt, n, k, rows, cfg)
            else:
                assert cfg.pre <= 2, (fmt, n, k, rows, cfg)


def test_tile_major_ring_where_measured_faster():
    """The ring (pipe 2: every chunk through shared-memory slots) runs, among the model shapes,
    exactly where sweep_w8a8_ring_ac6193f_h200.md measured it faster: block fp8 at 9-16 rows on the
    one-wave weights (N 5120, two weight tiles, two slots), fp8 per channel there below K 8192 (one
    tile, three slots), int8 and fp8 per channel at 1 row on [34816, 5120] and block fp8 at 1 row
    on [5120, 17408] (three slots); never on row-major weights. Its slots fit the CTAs a
    multiprocessor."""
    fp8c, fp8b = _build.FMT_FP8_CHANNEL, _build.FMT_FP8_BLOCK
    want = {(fp8b, 16, 5120, 6144): (2, 2, 2), (fp8b, 16, 5120, 17408): (2, 2, 2), (fp8c, 16, 5120, 6144): (1, 3, 3),
            (_build.FMT_INT8, 1, 34816, 5120): (1, 3, 3), (fp8c, 1, 34816, 5120): (1, 3, 3),
            (fp8b, 1, 5120, 17408): (1, 3, 3)}
    for fmt in (_build.FMT_INT8, fp8c, fp8b):
        for (n, k), rows in itertools.product(MODEL_SHAPES, (1, 2, 4, 8, 12, 16, 24, 64)):
            assert _build.gemm_config(fmt, rows, n, k).pipe != 2
            cfg = _build.gemm_config(fmt, rows, n, k, True)
            key = (fmt, 16 if 9 <= rows <= 16 else rows, n, k)
            got = (cfg.m, cfg.min_blocks, cfg.pre) if cfg.pipe == 2 else None
            assert got == want.get(key), (key, cfg)
            if got:
                assert cfg.smem * cfg.min_blocks <= 228 * 1024


def test_rows_spread_over_ctas_on_tile_major_weights():
    """token_tiles gives the 8-token tiles a CTA of the shipped schedule: the row count's own on
    row-major weights and wherever no spread was measured faster; on tile-major weights one tile
    (two CTAs a weight tile) for int8 at 9-16 rows up to N = 12288 below K = 8192 and for fp8 at
    9-16 rows on the small weights and [12288, 2048], two tiles for fp8 at 17-48 rows and int8 at
    17-32 on the small weights. The grid covers every row, and the spread schedules are the
    measured ones."""
    model = MODEL_SHAPES
    int8, fp8c, fp8b = _build.FMT_INT8, _build.FMT_FP8_CHANNEL, _build.FMT_FP8_BLOCK
    spread = {(int8, 16, 12288, 2048): 1, (int8, 16, 2048, 4096): 1, (int8, 16, 5120, 6144): 1,
              (fp8c, 16, 2048, 4096): 1, (fp8b, 16, 2048, 4096): 1,
              (int8, 32, 2048, 4096): 2, (fp8c, 16, 12288, 2048): 1, (fp8b, 16, 12288, 2048): 1}
    spread.update({(f, r, n, k): 2 for f in (fp8c, fp8b) for r in (32, 48) for n, k in model})
    for fmt in (int8, fp8c, fp8b):
        for (n, k), rows in itertools.product(model + [(300, 1280), (40000, 8192)], range(1, 257)):
            natural = _build.gemm_tiles(rows)
            assert _build.token_tiles(fmt, rows, n, k, False) == natural
            tiles = _build.token_tiles(fmt, rows, n, k, True)
            cfg = _build.gemm_config(fmt, rows, n, k, True)
            assert tiles <= natural and cfg.grid(rows, n, tiles)[0] * (cfg.wg or 8 * tiles) >= rows
            if (n, k) in model and rows in (16, 32, 48, 64):
                assert tiles == spread.get((fmt, rows, n, k), natural), (fmt, rows, n, k)
            if tiles < natural:
                top = 32 if fmt == int8 else 48
                assert 9 <= rows <= top and not cfg.wg and not cfg.stages, (fmt, rows, n, k, cfg)
                small = n * k <= _build._SMALL_WEIGHT
                want = (_build.GemmCfg(2, 1, 0, 3, packed=1) if fmt == int8 and tiles == 1 and not small
                        else _build.GemmCfg(1, 4, 0, 1, packed=1, pre=4) if fmt == int8 and tiles == 1
                        else _build.GemmCfg(2, 1, 0, 2, packed=1) if (n, k) == (12288, 2048) and tiles == 1
                        else _build.GemmCfg(1, 2, 0, 2, packed=1, pre=int(small)))
                assert cfg == want, (fmt, rows, n, k, cfg)


def test_two_weight_tiles_at_16_rows_on_the_large_weights():
    """At 9-16 rows on the tile-major large weights ([16384, 5120] and up) int8 and fp8 per channel
    take two 16-row weight tiles a CTA at two CTAs a multiprocessor, staging a chunk a warp at long
    K; block fp8 keeps one tile (its two-tile register form spills), but on the one-wave [5120,
    17408] takes two tiles through the ring of two slots."""
    for fmt in (_build.FMT_INT8, _build.FMT_FP8_CHANNEL, _build.FMT_FP8_BLOCK):
        for (n, k), rows in itertools.product([(16384, 5120), (34816, 5120), (5120, 17408)], (9, 16)):
            cfg = _build.gemm_config(fmt, rows, n, k, True)
            assert _build.token_tiles(fmt, rows, n, k, True) == 2
            if fmt == _build.FMT_FP8_BLOCK and n == 5120:
                assert cfg == _build.GemmCfg(2, 1, 2, 2, packed=1, pre=2), cfg
            elif fmt == _build.FMT_FP8_BLOCK:
                assert cfg.m == 1, cfg
            else:
                assert cfg == _build.GemmCfg(2, 1, 0, 2, packed=1, pre=int(k >= 8192)), (fmt, n, k, cfg)


def test_fp8_two_weight_tiles_on_the_wide_mid_size_weights():
    """At 1-8 rows on tile-major weights fp8 (both formats) takes two 16-row weight tiles a CTA at
    two CTAs a multiprocessor on [12288, 2048] and [16384, 5120] (the measured wins), not on
    [34816, 5120], the N = 5120 weights or the small one; int8 keeps its schedules."""
    model = MODEL_SHAPES
    for fmt in (_build.FMT_INT8, _build.FMT_FP8_CHANNEL, _build.FMT_FP8_BLOCK):
        for (n, k), rows in itertools.product(model, (1, 4, 8)):
            cfg = _build.gemm_config(fmt, rows, n, k, True)
            two = fmt != _build.FMT_INT8 and (n, k) in ((12288, 2048), (16384, 5120))
            assert (cfg == _build.GemmCfg(2, 1, 0, 2, packed=1)) == two, (fmt, n, k, rows, cfg)


def test_nvfp4_slice_schedules_are_compiled_and_fit_their_rows():
    """Every tile-major NVFP4 schedule a slice may run is a shipped (compiled) instance; a
    few-token schedule runs only slices of at most its rows, and the model shapes fall in the
    size classes the schedule tables were measured on."""
    names = set(_build.FAMILIES["fp4_mx_gemm"].instances)
    sizes = {(2048, 4096): "small", (12288, 2048): "wide", (5120, 6144): "base", (16384, 5120): "large",
             (34816, 5120): "large", (5120, 17408): "long"}
    for (n, k), size in sizes.items():
        assert _build.fp4_tiled_size(n, k) == size
    for size in _build.FP4_TILED_BY_SIZE:
        for rows in (1, 2, 3, 4, 5, 8, 9, 16, 17, 32):
            sched = _build.fp4_slice_schedule(rows, size)
            tokens = _build.fp4_schedule_tokens(sched)
            assert tokens == 0 or rows <= tokens, (size, rows, sched)
            assert _build.fp4_tiled_instance(_build.fp4_groups(rows), "bfloat16", sched) in names
            assert _build.fp4_tiled_instance(_build.fp4_groups(rows), "float16", sched) in names
    for table in _build.FP4_TILED_FEW_BY_SIZE.values():
        for rows, sched in table.items():
            assert _build.fp4_schedule_tokens(sched) == rows


def test_first_weight_round_is_requested_before_the_quantizer_wait():
    """Every shipped W8A8 decode instance and every early NVFP4 form issues weight loads before
    griddepcontrol.wait as ptxas compiles it (bench/wait_order.py): the first round by coherent
    loads, which ptxas keeps there; it had sunk non-coherent ones below the wait. The rings (W8A8
    pipe 2, NVFP4 FP4_ARITH_RING), which load no weight into registers, copy their first slots
    before it."""
    from bench import wait_order

    if not shutil.which("nvcc") or not wait_order.disassembler():
        pytest.skip("needs nvcc on the PATH and cuobjdump or nvdisasm (the test extras' nvidia-cuda-nvdisasm)")

    tables = list(_build.FP4_TILED_FEW_BY_SIZE.values()) + list(_build.FP4_TILED_BY_SIZE.values())
    early_arith = {s[1] for table in tables for s in table.values() if s[1] & _build.FP4_ARITH_EARLY}
    assert early_arith  # the shipped NVFP4 schedules have early forms to check
    early_arith |= {s[1] for table in tables for s in table.values() if s[1] & _build.FP4_ARITH_RING}
    for path, family in (("w8a8", "w8a8_gemm"), ("nvfp4", "fp4_mx_gemm")):
        names = wait_order.shipped(path)
        funcs = wait_order.functions(wait_order.sass_of(family, names))
        assert len(funcs) >= len(names)
        for mangled, lines in funcs.items():
            # fp4_tiled_gemm_kernel<warps, groups, unroll, arith, ...>: arith is the fourth argument.
            early = "w8a8_gemm_kernel" in mangled or any(f"Li{a}ELi" in mangled for a in early_arith)
            if early:
                report = wait_order.counts(lines)
                before, total = map(int, report.split("weight loads ")[1].split(",")[0].split("/"))
                if total == 0:  # a ring: its first slots by cp.async
                    before = int(report.split("cp.async ")[1].split("/")[0])
                assert before > 0, (mangled, report)
