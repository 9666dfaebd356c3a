"""Kernel sources, compile options, the curated instance list and the per-device module cache.

The only module that knows about ``cupy.RawModule``. Every kernel family is one ``.cu`` file under
``kernels/`` compiled by NVRTC (CuPy's run-time compiler) with :func:`compile_options`; its
template instances come from one curated list (:data:`FAMILIES`), and :func:`instance_name`
builds the same string that compiles and fetches a function. :mod:`gdn_kernels.compile_gate`
compiles exactly these sources and options without a GPU.

Environment switches
--------------------
GDN_KERNELS_CACHE_DIR
    Directory of CuPy's on-disk kernel cache (sets ``CUPY_CACHE_DIR`` when gdn_kernels is
    imported before CuPy compiles anything).
GDN_KERNELS_DEBUG
    ``1`` adds ``-lineinfo`` (source lines in Nsight Compute and compute-sanitizer reports).
GDN_KERNELS_NVTX
    ``1`` opens an NVTX range around every dispatch (see :mod:`gdn_kernels._nvtx`).
GDN_KERNELS_PDL
    ``0`` launches the GEMMs plainly after their quantizers. By default each GEMM is launched
    programmatically dependent on its quantizer (it requests its first weight bytes while the
    quantizer runs) and lets the next kernel of the stream launch once all its CTAs have started.
    Every quantizer waits for the kernel before it before touching memory, so it may itself be
    launched programmatically dependent on that kernel (see GDN_KERNELS_PDL_QUANT).
GDN_KERNELS_PDL_QUANT
    Unset: the W8A8 quantizers are launched programmatically dependent on the kernel before them
    (the previous GEMM), so the next GEMM's CTAs start staging their weight during its tail;
    NVFP4's are launched plainly (programmatic launches of them measured up to 20% slower at
    some row counts, bench/NOTES.md). ``1``: both programmatically, ``0``: both plainly.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import hashlib
import os
import re
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

# Programmatic dependent launch of the GEMMs after their quantizers (GDN_KERNELS_PDL=0: off).
PDL_ENABLED = os.environ.get("GDN_KERNELS_PDL", "1") not in ("", "0")
# Programmatic dependent launch of the activation quantizers after the kernel before them: by
# default for W8A8, not NVFP4 (GDN_KERNELS_PDL_QUANT=1: both, 0: neither; needs PDL_ENABLED).
_PDL_QUANT_ENV = os.environ.get("GDN_KERNELS_PDL_QUANT")
PDL_QUANT_W8A8 = PDL_ENABLED and _PDL_QUANT_ENV not in ("", "0")
PDL_QUANT_NVFP4 = PDL_ENABLED and _PDL_QUANT_ENV not in (None, "", "0")

if "GDN_KERNELS_CACHE_DIR" in os.environ:
    os.environ.setdefault("CUPY_CACHE_DIR", os.environ["GDN_KERNELS_CACHE_DIR"])


def kernel_dir() -> Path:
    """The ``kernels/`` tree: inside the installed package, or beside it in a source checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "kernels", here.parent / "kernels"):
        if (candidate / "include").is_dir():
            return candidate
    raise FileNotFoundError(f"gdn_kernels: no kernels/ directory beside {here}")


def source_tree_hash(root: Path | None = None) -> str:
    """sha256 over the relative path and bytes of every ``.cu``/``.cuh`` file under ``root``.

    Part of the compile options, so CuPy's cache key (which covers the main source text but not
    headers reached through ``-I``) changes whenever any kernel file does.
    """
    root = kernel_dir() if root is None else root
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".cu", ".cuh")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def arch_for(compute_capability: int) -> str:
    """NVRTC target for a device: the arch-specific ``sm_90a`` on Hopper, else ``sm_<cc>``."""
    return f"sm_{compute_capability}a" if compute_capability == 90 else f"sm_{compute_capability}"


def compile_options(arch: str = "sm_90a") -> tuple[str, ...]:
    """The NVRTC options every module is compiled with (CuPy appends its own after these)."""
    opts = [
        "--std=c++17",
        f"-arch={arch}",
        f"-I{kernel_dir() / 'include'}",
        f"-DGDN_KERNELS_SRC_HASH=0x{source_tree_hash()[:16]}",
    ]
    if os.environ.get("GDN_KERNELS_DEBUG", "0") not in ("", "0"):
        opts.append("-lineinfo")
    if os.environ.get("GDN_KERNELS_TRACE", "0") not in ("", "0"):
        # Per-CTA timestamps of the decode-path kernels (kernels/include/gdn/trace.cuh), for
        # bench/timeline.py only.
        opts.append("-DGDN_TRACE")
    return tuple(opts)


# What CuPy's RawModule adds to the options before NVRTC sees them (cupy/cuda/compiler.py):
# the compile gate appends the same, so that it checks what users run.
CUPY_ADDED_OPTIONS = ("-ftz=true", "--device-as-default-execution-space")

OUT_TYPES = {"bfloat16": "__nv_bfloat16", "float16": "__half"}
SCALE_TYPES = {"float32": "float", "bfloat16": "__nv_bfloat16"}

# Weight formats of the W8A8 GEMM (the kFmt template constant of kernels/w8a8_gemm.cu).
FMT_INT8, FMT_FP8_CHANNEL, FMT_FP8_BLOCK = 0, 1, 2

QUANT_THREADS = 256
# CTAs of the cluster that quantizes one token row (GDN_QUANT_CLUSTER in kernels/act_quant.cu).
QUANT_CLUSTER = 8
# The fused SiLU quantizers take a whole token row in one CTA of this many threads.
SILU_ROW_THREADS = 1024

# Warps that split K in a W8A8 CTA: fixed, so a row's arithmetic never depends on the row count.
GEMM_WARPS = 8
# 8-token tiles a CTA by row count.
GEMM_TILES = (1, 2, 4)
# Chunks each warp keeps in flight for that tile count (the NVFP4 GEMM's schedule).
GEMM_UNROLL = {1: 4, 2: 2, 4: 2}


@dataclass(frozen=True)
class GemmCfg:
    """Schedule of one W8A8 GEMM instance (kernels/w8a8_gemm.cu).

    ``packed`` 1 reads the tile-major weight layout (W8a8Weight.tile_major), 0 the row-major one.
    ``stages`` 0: w8a8_gemm_kernel, the decode kernel: ``m`` 16-row weight tiles a CTA,
    ``unroll`` chunks a warp loads a round, ``pipe`` 1 to load the next round before computing
    this one (2: no register rounds, every chunk through the ``pre`` slots as a ring),
    ``min_blocks`` CTAs a multiprocessor should hold, ``pre`` chunks a warp copies into shared
    memory before it waits on the quantizer (so the weight streams while the quantizer runs).
    ``stages`` > 0:
    w8a8_tiled_kernel, 128 weight rows x 64 tokens a CTA through that many shared-memory stages
    (for many rows); with ``wg`` > 0 (int8 only), w8a8_wgmma_kernel instead: 128 weight rows x
    ``wg`` (64, 128 or 256) tokens a CTA on warpgroup MMAs, its operands copied by cp.async (``tma`` 0) or by
    tensor copies (w8a8_wgmma_tma_kernel: ``tma`` 1 the weight, 2 the tokens too; the kernel then
    takes two tensor maps before its other arguments). ``f16`` 1 or 2 (fp8 only, with ``wg`` 64
    and ``tma`` 2): w8a8_wgmma_fp8_kernel, the fp8 formats on f16 warpgroup MMAs, that many
    warpgroups (64 weight rows each) a CTA, two f16 token tiles (32 KB) beside the stages;
    ``overlap`` bit 0 converts the next chunk's tokens while the chunk's first MMAs run, bit 1
    finishes each chunk (its last sum, its promotion) under the next chunk's first MMAs, with a
    third token tile. ``split``
    > 1 (``tma`` 2): K split over a cluster of that many CTAs a tile: for int8
    w8a8_wgmma_split_kernel, each CTA a contiguous share of K, the exact int32 sums added through
    distributed shared memory; for fp8 (2 or 4) w8a8_wgmma_fp8_split_kernel, each CTA whole decode
    warps of chunks, their sums added in the decode kernel's order. ``ws`` 1 (int8, ``tma`` 2,
    unsplit): w8a8_wgmma_ws_kernel, a producer warp issuing the copies and per-stage
    release barriers in place of the block barrier; with ``mcx`` or ``mcy`` 2,
    w8a8_wgmma_mc_kernel, that kernel in clusters of ``mcx`` token tiles x ``mcy`` weight tiles
    whose copies of a shared operand are made once and multicast. ``qg`` 1 (fp8, ``wg`` 8-128,
    ``tma`` 2; sweep only): w8a8_qgmma_kernel, the fp8 formats on e4m3 warpgroup MMAs with a
    producer warp, a prototype whose bits are not the formats' and which reads its tokens in MMA
    order (:attr:`mma_order`); ``split`` 2-8 spreads the decode order's warps over a cluster
    (w8a8_qgmma_split_kernel), ``overlap`` 2 promotes each chunk under the next chunk's MMAs.
    ``qg`` 2 (fp8, ``wg`` 8 or 16): w8a8_qgmma_decode_kernel, its decode form (the weight loaded
    into the MMA's registers, row-major tokens), each warpgroup running ``m`` of the decode order's
    8 warps in turn, in clusters of ``split`` CTAs (``split`` x ``m`` 2-8), ``stages`` chunks of
    weight requested ahead (1 or 2), registers held to ``min_blocks`` CTAs an SM.
    Apart from ``qg``, no
    field changes an output bit (the decode, tiled and fp8 warpgroup kernels do the decode
    kernel's arithmetic, K split GEMM_WARPS ways; an int8 output is its exact int32 dot product
    scaled, whatever the order), so the schedule may depend on the shape and the row count
    freely."""

    m: int = 1
    unroll: int = 4
    pipe: int = 0
    min_blocks: int = 1
    stages: int = 0
    packed: int = 0
    pre: int = 0
    wg: int = 0
    tma: int = 0
    f16: int = 0
    overlap: int = 0
    split: int = 1
    ws: int = 0
    mcx: int = 1
    mcy: int = 1
    qg: int = 0

    @property
    def mma_order(self) -> bool:
        """Whether the kernel reads the quantized tokens in the e4m3 prototype's MMA order
        (:func:`mma_order_words`; its tensor-copy forms) instead of row-major (every other kernel,
        the prototype's decode form included, which reorders them itself)."""
        return self.qg == 1

    @property
    def threads(self) -> int:
        """Threads a CTA: a warpgroup per 64 weight rows for the fp8 warpgroup kernel, else
        GEMM_WARPS warps."""
        if self.qg == 2:
            return 128 * GEMM_WARPS // (self.split * self.m)  # a warpgroup for each m of the CTA's decode warps
        if self.qg:
            # Two consumer warpgroups and a producer warpgroup (from 64 tokens) or warp.
            return 384 if self.wg >= 64 else 288
        return 128 * self.f16 if self.f16 else 32 * GEMM_WARPS + 32 * self.ws

    @property
    def rows_tile(self) -> int:
        """Weight rows a CTA of the many-row kernels (the tensor maps' weight box)."""
        return 64 * self.f16 if self.f16 else 64 if self.qg == 2 else 128

    @property
    def smem(self) -> int:
        """Dynamic shared memory of a CTA in bytes: for the tiled kernel a 16 KB weight and an 8 KB
        token tile a stage; for the decode kernel the ``pre`` chunks (2 KB a weight tile) each warp
        stages before waiting on the quantizer."""
        if self.qg == 2:
            # The most any K asks for (decode_smem), at most what a CTA may have.
            return min(self.decode_smem(QGMMA_DECODE_MAX_CHUNKS * GEMM_WARPS * 128), SMEM_LIMIT)
        if self.wg:
            # A 128-row weight tile and a wg-token tile a stage, 1 KB to align the swizzle atoms,
            # with tensor copies a barrier a stage; for fp8 the f16 token tiles and block-scale
            # slots below and, split over a cluster, slots for all but one of a CTA's decode
            # warps' sums (32 floats a thread each).
            size = self.stages * (self.rows_tile + self.wg) * 128 + 1024 + (8 * self.stages * (1 + (self.ws or self.qg)) if self.tma else 0)
            if self.f16:
                # The f16 token tiles (three where the chunk's last sum is deferred), then, 16-byte
                # aligned, three slots of 64 block scales.
                size += (3 if self.overlap & 2 else 2) * self.wg * 256 + -(8 * self.stages) % 16 + 3 * 64 * 4
            if self.qg:
                # Two slots of block scales a consumer warpgroup; split, the slots of all but one of
                # a CTA's decode warps' sums (wg / 2 floats a consumer thread each).
                # With each chunk promoted under the next (overlap 2), the running total (the same size).
                slots = (GEMM_WARPS // self.split - 1 if self.split > 1 else 0) + (self.overlap >> 1)
                size += 4 * self.wg * 4 + slots * self.wg // 2 * 256 * 4
            if self.f16 and self.split > 1:
                size += (GEMM_WARPS // self.split - 1) * 128 * self.threads
            return size
        if self.stages:
            return self.stages * (128 + 64) * 128
        return GEMM_WARPS * self.pre * self.m * 2048

    def decode_smem(self, k: int) -> int:
        """The e4m3 decode form's (``qg`` 2) dynamic shared memory for rows of ``k``: for each of
        the CTA's decode warps a token tile (wg rows of 128 bytes) a chunk and its sums (wg / 2
        floats a thread), 1 KB to align the swizzle atoms. Past :data:`SMEM_LIMIT` the schedule
        cannot run that K."""
        warps = GEMM_WARPS // self.split
        return warps * (-(-k // (128 * GEMM_WARPS)) * self.wg * 128 + self.wg // 2 * 128 * 4) + 1024

    def grid(self, rows: int, n: int, tiles: int) -> tuple[int, int, int]:
        if self.wg:
            # Whole clusters: a token or weight tile past the operand is all zeros, stores nothing.
            x, y = -(-rows // self.wg), -(-n // self.rows_tile)
            return (-(-x // self.mcx) * self.mcx, -(-y // self.mcy) * self.mcy, self.split)
        if self.stages:
            return (-(-rows // 64), -(-n // 128), 1)
        return (-(-rows // (8 * tiles)), -(-n // (16 * self.m)), 1)

    @property
    def args(self) -> str:
        """The kernel's arguments as a :class:`Kernel` format: w, sw, xq, sx, out, ldc, N, K, rows,
        after two 128-byte tensor maps (weight, tokens) for the tensor-copy kernel."""
        return ("128s128s" if self.tma else "") + "PPPPPqiii"

    def name(self, fmt: int, tiles: int, out_t: str, scale_t: str) -> str:
        if self.qg == 2:
            if (fmt == FMT_INT8 or self.wg not in (8, 16) or self.tma or self.split not in (1, 2, 4, 8)
                    or self.m not in (1, 2, 4, 8) or not 2 <= self.split * self.m <= 8 or self.stages not in (1, 2)):
                raise ValueError("the e4m3 decode kernel runs fp8, 8 or 16 tokens a CTA, loads 1 or 2 chunks ahead, "
                                 "1-8 decode warps a warpgroup in clusters of 1-8, at most 4 warpgroups a CTA")
            return (f"w8a8_qgmma_decode_kernel<{fmt}, {self.wg}, {self.packed}, {self.split}, {self.m}, {self.stages}, "
                    f"{self.min_blocks}, {out_t}, {scale_t}>")
        if self.qg:
            if (fmt == FMT_INT8 or self.wg not in (8, 16, 32, 64, 128) or self.tma != 2 or self.split not in (1, 2, 4, 8)
                    or self.f16 or self.ws):
                raise ValueError("the e4m3 warpgroup kernel runs fp8, 8-128 tokens a CTA, by tensor copies, in clusters "
                                 "of 1, 2, 4 or 8")
            if self.overlap not in (0, 2):
                raise ValueError("the e4m3 warpgroup kernel's one overlap: each chunk promoted under the next (2)")
            defer = self.overlap >> 1
            if self.split > 1:
                return (f"w8a8_qgmma_split_kernel<{fmt}, {self.stages}, {self.wg}, {self.packed}, {self.split}, {defer}, "
                        f"{out_t}, {scale_t}>")
            return f"w8a8_qgmma_kernel<{fmt}, {self.stages}, {self.wg}, {self.packed}, {defer}, {out_t}, {scale_t}>"
        if self.f16:
            if fmt == FMT_INT8 or self.wg != 64 or self.tma != 2 or self.split not in (1, 2, 4):
                raise ValueError("the fp8 warpgroup kernel runs fp8, 64 tokens a CTA, by tensor copies, in clusters "
                                 "of 1, 2 or 4")
            if self.split > 1:
                return (f"w8a8_wgmma_fp8_split_kernel<{fmt}, {self.stages}, {self.packed}, {self.f16}, {self.overlap}, "
                        f"{self.split}, {out_t}, {scale_t}>")
            return (f"w8a8_wgmma_fp8_kernel<{fmt}, {self.stages}, {self.packed}, {self.f16}, {self.overlap}, {out_t}, "
                    f"{scale_t}>")
        if self.wg:
            if fmt != FMT_INT8:
                raise ValueError("the int8 warpgroup-MMA kernel runs int8 only")
            if self.ws:
                if self.tma != 2 or self.split != 1:
                    raise ValueError("the producer-warp warpgroup-MMA kernel takes both operands by tensor copies, unsplit")
                if self.mcx > 1 or self.mcy > 1:
                    return (f"w8a8_wgmma_mc_kernel<{self.stages}, {self.wg}, {self.packed}, {self.mcx}, {self.mcy}, "
                            f"{out_t}, {scale_t}>")
                return f"w8a8_wgmma_ws_kernel<{self.stages}, {self.wg}, {self.packed}, {out_t}, {scale_t}>"
            if self.split > 1:
                if self.tma != 2:
                    raise ValueError("the split warpgroup-MMA kernel takes both operands by tensor copies")
                return (f"w8a8_wgmma_split_kernel<{self.stages}, {self.wg}, {self.packed}, {self.tma}, {self.split}, "
                        f"{out_t}, {scale_t}>")
            if self.tma:
                return (f"w8a8_wgmma_tma_kernel<{self.stages}, {self.wg}, {self.packed}, {self.tma}, {out_t}, "
                        f"{scale_t}>")
            return f"w8a8_wgmma_kernel<{self.stages}, {self.wg}, {self.packed}, {out_t}, {scale_t}>"
        if self.stages:
            return f"w8a8_tiled_kernel<{fmt}, {self.stages}, {self.packed}, {out_t}, {scale_t}>"
        return (f"w8a8_gemm_kernel<{fmt}, {GEMM_WARPS}, {tiles}, {self.m}, {self.unroll}, {self.pipe}, "
                f"{self.min_blocks}, {self.packed}, {self.pre}, {out_t}, {scale_t}>")


# The schedule of each tile count before shape tuning (the one the sweep compares with).
GEMM_BASE = {1: GemmCfg(1, 4, 0, 1), 2: GemmCfg(1, 2, 0, 1), 4: GemmCfg(1, 2, 0, 1)}


def gemm_tiles(rows: int) -> int:
    """8-token tiles a W8A8 CTA takes at this row count."""
    return 1 if rows <= 8 else 2 if rows <= 16 else 4


# Weights of at most this many elements are too small to fill the GPU with one 16-row tile a CTA
# at three CTAs a multiprocessor: they keep four chunks a warp in flight instead.
_SMALL_WEIGHT = 1 << 23
# Weights of at least this many elements ([16384, 5120] and up) stage a chunk a warp at 16 rows.
_LARGE_WEIGHT = 1 << 26
# CTAs of the decode kernel resident at once at three a multiprocessor on the H200 (132): a grid of
# at most this many 16-row tiles runs as one wave.
DECODE_WAVE_CTAS = 3 * 132


# At 1 row, weights of at least this N (and not block fp8) stream every chunk through a ring of 3
# shared-memory slots a warp (GemmCfg.pipe 2; sweep_w8a8_ring_ac6193f_h200.md: 3-4% faster on
# [34816, 5120] at 1 row, even or slower at 4-8); so does block fp8 on the one-wave long-K weights
# (ab_ring1_8982135_h200.md: 3.8% faster at 1 row on [5120, 17408]; fp8 per channel there -0.5%,
# within the runs' spread, so it keeps its register rounds).
_RING_ONE_ROW_MIN_N = 32768

# Tile-major weights up to this N (and K below 8192) run int8's 9-16 rows as two CTAs of 8 tokens
# a weight tile.
_SPREAD_INT8_MAX_N = 12288


def _fp8_two_weight_tiles(fmt: int, n: int, k: int) -> bool:
    """Whether fp8's one-tile schedule on a tile-major weight is (2, 1, 0, 2), two weight tiles a
    CTA at two CTAs a multiprocessor (the three-CTA (2, 1, 0, 3) spills for fp8): on the wide
    weights below [34816, 5120] (sweep_w8a8_m24_037f85f_h200.md, whole projections at 1-8 rows:
    block fp8 [12288, 2048] 8.9 against 10.8 us, [16384, 5120] 22.9 against 24.8; per channel 2-9%
    faster; even on [34816, 5120], slower on N = 5120)."""
    return fmt != FMT_INT8 and n >= 12288 and _SMALL_WEIGHT < n * k < 1 << 27


def token_tiles(fmt: int, rows: int, n: int, k: int, packed: bool = False) -> int:
    """8-token tiles a CTA of the shipped decode schedule of a weight [n, k] at this row count:
    :func:`gemm_tiles`, or on tile-major weights fewer where the rows spread over more CTAs along
    the grid's x ran faster as whole projections (``sweep_w8a8_tiles_443c49b_h200.md``; each CTA
    reads its weight tiles again, the later ones mostly from L2): int8 at 9-16 rows with N up to
    12288 and K below 8192, and fp8 at 9-16 rows on the small weights and [12288, 2048] (one
    tile: 2 CTAs a weight tile; sweep_w8a8_m24_037f85f_h200.md for the latter), fp8 at 17-48 rows
    (two tiles: 2-3 CTAs a weight tile; 13-30% faster at 48 rows in
    sweep_w8a8_tiles64_008ccce_h200.md, mixed at 64 where the warpgroup kernels start) and int8 at
    17-32 rows on the small weights (two tiles, in place of the warpgroup kernel). The tile count
    changes no output bit (a token's sums do not depend on the other tokens)."""
    tiles = gemm_tiles(rows)
    if not packed:
        return tiles
    small = n * k <= _SMALL_WEIGHT
    # fp8's two-weight-tile weights below 2^25 elements: [12288, 2048] among the model shapes
    # ([16384, 5120] spread ran 11% slower).
    if tiles == 2 and (small or (fmt == FMT_INT8 and n <= _SPREAD_INT8_MAX_N and k < 8192)
                       or (_fp8_two_weight_tiles(fmt, n, k) and n * k < 1 << 25)):
        return 1
    if tiles == 4 and ((rows <= 32 and small) or (rows <= 48 and fmt != FMT_INT8)):
        return 2
    return tiles


def gemm_schedule(fmt: int, rows: int, n: int, k: int, packed: bool = False) -> tuple[int, GemmCfg]:
    """(8-token tiles a CTA, schedule) of a weight [n, k] at this row count: :func:`token_tiles`
    and :func:`gemm_config` together, the pair a launch takes (the schedule is compiled for that
    tile count)."""
    return token_tiles(fmt, rows, n, k, packed), gemm_config(fmt, rows, n, k, packed)


def wide_tiles(rows: int, n: int, tokens: int = 64) -> int:
    """Tiles of 128 weight rows x ``tokens`` tokens of a weight with ``n`` rows at this row count:
    with 64 tokens the CTAs of the tiled kernel and of the unsplit fp8 warpgroup kernel, with 64,
    128 or 256 those of int8's warpgroup kernel unsplit, by which their rules choose."""
    return -(-n // 128) * -(-rows // tokens)


def gemm_config(fmt: int, rows: int, n: int, k: int, packed: bool = False) -> GemmCfg:
    """The schedule of a weight [n, k] of format ``fmt`` at this row count, in the row-major or
    (``packed``) tile-major layout: the fastest in the H200 schedule sweeps
    (bench/results/sweep_w8a8_*.md) on the model shapes among those that compile without local
    memory, as rules of the shape. Any schedule gives the same bits, so this choice is free of
    numerics."""
    if packed:
        return dataclasses.replace(_tile_major_config(fmt, rows, n, k), packed=1)
    tiles = gemm_tiles(rows)
    small = n * k <= _SMALL_WEIGHT
    if tiles == 1:
        if small:
            return GemmCfg(1, 4, 0, 1)
        return GemmCfg(2, 1, 0, 3) if fmt == FMT_INT8 and k <= 2048 else GemmCfg(1, 2, 0, 3)
    if tiles == 2:
        if fmt == FMT_INT8:
            return GemmCfg(1, 2, 1, 1) if small else GemmCfg(4, 2, 0, 1) if k >= 8192 else GemmCfg(4, 1, 0, 2)
        # Block scales: (1, 2, 0, 2) is faster but the H200's NVRTC spills it at 128 registers.
        return GemmCfg(2, 1, 1, 1) if fmt == FMT_FP8_BLOCK else GemmCfg(1, 2, 0, 2)
    wgmma = wgmma_config(rows, n, k, False) if fmt == FMT_INT8 else None
    if wgmma:
        return wgmma
    # From 64 rows the tiled kernel wins once it has enough 128 x 64 tiles to fill the GPU; for fp8
    # the f16 warpgroup kernel, with the same tiles, runs in its place.
    tiled_ctas = wide_tiles(rows, n)
    if fmt == FMT_INT8:
        return GemmCfg(stages=3) if rows >= 64 and tiled_ctas >= 96 else GemmCfg(2, 2, 0, 1)
    if wide := fp8_wgmma_schedule(fmt, rows, n, k, False):
        return wide
    return wgmma_fp8_unsplit(fmt, False) if rows >= 64 and tiled_ctas >= 80 else GemmCfg(1, 2, 0, 1)


def _tile_major_config(fmt: int, rows: int, n: int, k: int) -> GemmCfg:
    # From the sweeps of the tile-major schedules, among those without local memory:
    # - rows 1-16 (sweep_w8a8_packed_h200.md): (2, 1, 0, 3) at 16 rows (int8) and for fp8 per
    #   channel at 1-8 rows, and (1, 1, 1, 2) for block fp8 at 16 rows were faster but spill; so
    #   do (2, 1, 1, 1) and (2, 2, 0, 1) for fp8 at 17+ rows;
    # - chunks staged in shared memory before the quantizer wait, timed as whole projections
    #   (sweep_w8a8_pre_4a6ca15_h200.md, sweep_w8a8_fused_pre_1eeb11a_h200.md): one chunk a warp
    #   (two for fp8 per channel at long K) gains 0.2-2 us where the weight is large or K long;
    #   block fp8 at 1-8 rows spills with it at three CTAs a multiprocessor and keeps none;
    # - the same, with the quantizers launched programmatically dependent too (PDL_QUANT_W8A8;
    #   sweep_w8a8_pre_pdlq_ec3d433_h200.md and its _run1): the next GEMM's CTAs start during the
    #   previous GEMM's tail, so where every CTA is resident at once more of its slice is staged:
    #   four chunks a warp on the small weights (int8, fp8 per channel; all of [2048, 4096]'s),
    #   four for int8 at 1-4 rows and two for fp8 per channel on the one-wave short-K weights
    #   ([5120, 6144]); one for int8's other one-tile schedules ([16384, 5120] and up, [5120,
    #   17408]), one for block fp8 on the small weights and at 16 rows (deeper spills or loses).
    # - the same once the first register round really is requested before the wait (gdn::
    #   ld_early_v4; sweep_w8a8_pre_7dab117_h200.md, rows 1 and 8): fp8 per channel stages none on
    #   the one-wave short-K weights (11.1 against 11.9 us at 1 row on [5120, 6144]) and one at
    #   long K (25.9 against 26.8 on [5120, 17408]); int8 on the small weight none at 5-8 rows
    #   (4.8 against 5.5 us at 8 rows).
    # - rows spread over more CTAs (token_tiles; sweep_w8a8_tiles_443c49b_h200.md): int8's one-tile
    #   form at 9-16 rows is the [12288, 2048] schedule (2, 1, 0, 3) (13.2 against 14.9 us on
    #   [5120, 6144]), or the small weights' own; fp8's on [12288, 2048] is its two-tile one
    #   (_fp8_two_weight_tiles); the others spread take (1, 2, 0, 2), a chunk staged on the small
    #   weights.
    # - the ring (pipe 2: every chunk through the staging slots; sweep_w8a8_ring_ac6193f_h200.md,
    #   whole projections): block fp8 at 9-16 rows on the one-wave weights [5120, 6144] and
    #   [5120, 17408] with two weight tiles, two slots (13.6 against 16.2 us, 30.4 against 35.7),
    #   fp8 per channel there at K < 8192 with one tile and three slots (14.2 against 15.0); at 1
    #   row int8 and fp8 per channel on [34816, 5120] (_RING_ONE_ROW_MIN_N); slower at 1-8 rows
    #   elsewhere, and block fp8's three-CTA rings spill.
    tiles = token_tiles(fmt, rows, n, k, True)
    small = n * k <= _SMALL_WEIGHT
    large = n * k >= _LARGE_WEIGHT
    if tiles == 1 and _fp8_two_weight_tiles(fmt, n, k):
        return GemmCfg(2, 1, 0, 2)
    if tiles < gemm_tiles(rows):
        if fmt == FMT_INT8 and tiles == 1:
            return GemmCfg(1, 4, 0, 1, pre=4) if small else GemmCfg(2, 1, 0, 3)
        return GemmCfg(1, 2, 0, 2, pre=1 if small else 0)
    one_wave_n = -(-n // 16) <= DECODE_WAVE_CTAS
    if tiles == 1:
        if small:
            return {FMT_INT8: GemmCfg(1, 4, 0, 1, pre=4 if rows <= 4 else 0),
                    FMT_FP8_CHANNEL: GemmCfg(1, 2, 0, 2, pre=4), FMT_FP8_BLOCK: GemmCfg(1, 4, 0, 1, pre=1)}[fmt]
        if rows == 1 and ((n >= _RING_ONE_ROW_MIN_N and fmt != FMT_FP8_BLOCK)
                          or (fmt == FMT_FP8_BLOCK and one_wave_n and k >= 8192)):
            return GemmCfg(1, 1, 2, 3, pre=3)
        # The row-major schedules, with staging.
        cfg = gemm_config(fmt, rows, n, k)
        one_wave = one_wave_n and k < 8192
        if fmt == FMT_FP8_CHANNEL:
            pre = 0 if one_wave else 1
        elif fmt == FMT_INT8 and cfg.m == 2:
            pre = 0  # two weight tiles a CTA (int8 at K <= 2048, e.g. [12288, 2048]) stage none
        elif fmt == FMT_INT8 and one_wave:
            pre = 4 if rows <= 4 else 0
        elif fmt == FMT_INT8:
            pre = 1
        else:
            pre = 0
        return GemmCfg(cfg.m, cfg.unroll, cfg.pipe, cfg.min_blocks, pre=pre)
    if tiles == 2:
        if small:
            return GemmCfg(1, 2, 1, 1)
        # The ring on the one-wave weights (N up to 16 DECODE_WAVE_CTAS) at 9-16 rows, fewer registers
        # than two register rounds of two token tiles.
        if fmt == FMT_FP8_BLOCK and one_wave_n:
            return GemmCfg(2, 1, 2, 2, pre=2)
        if fmt == FMT_FP8_CHANNEL and one_wave_n and k < 8192:
            return GemmCfg(1, 1, 2, 3, pre=3)
        if large and fmt != FMT_FP8_BLOCK:
            # Two weight tiles a CTA (sweep_w8a8_b2_08de3ea_h200.md, 16 rows: int8 [16384, 5120]
            # 25.8 against 27.2 us, [5120, 17408] 28.7 against 30.7; fp8 per channel 26.6 against
            # 27.8 and 30.5 against 35.7; even on [34816, 5120]); block fp8's spills.
            return GemmCfg(2, 1, 0, 2, pre=1 if k >= 8192 else 0)
        stage = large or fmt == FMT_FP8_BLOCK
        return GemmCfg(1, 2, 0, 2, pre=1 if stage else 0)
    wgmma = wgmma_config(rows, n, k, True) if fmt == FMT_INT8 else None
    if wgmma:
        return wgmma
    # 17-256 rows (sweep_w8a8_packed_rows32_256_h200.md): the tiled kernel for the wide weights
    # with short K at 64+ rows, else the decode kernel (for long K it re-reads less per byte);
    # for fp8 the f16 warpgroup kernel in the tiled kernel's place (the gemm_config wrapper makes
    # it tile-major).
    if fmt == FMT_INT8:
        tiled = rows >= 64 and wide_tiles(rows, n) >= 96 and k < 8192
        return GemmCfg(stages=3) if tiled else GemmCfg(2, 2, 0, 1)
    if wide := fp8_wgmma_schedule(fmt, rows, n, k, True):
        return wide
    # As for row-major weights (80+ tiles), at K < 8192 (w8a8_fp8_rows64_256_d1fcad6_h200.md: the
    # decode kernel 10% slower on [5120, 6144] at 128 and 256 rows than the warpgroup kernel of
    # w8a8_fp8_rows64_256_51f803f_h200.md).
    unsplit = rows >= 64 and wide_tiles(rows, n) >= 80 and k < 8192
    return wgmma_fp8_unsplit(fmt, True) if unsplit else GemmCfg(1, 2, 0, 1)


# The cp.async form's stages by token tile and weight layout (shared memory: 128 + wg rows of 128
# bytes a stage, one CTA a multiprocessor): the sweep's fastest (sweep_w8a8_wgmma_7a8c8b6_h200.md;
# on tile-major weights the deepest rings are slower than on row-major ones; for 256 tokens the 4
# that fit, not swept). Shipped only where the driver cannot run the tensor-copy form
# (wgmma_fallback).
WGMMA_STAGES = {(64, 0): 8, (128, 0): 6, (64, 1): 6, (128, 1): 5, (256, 0): 4, (256, 1): 4}
# int8 runs it from this many rows, where it has at least WGMMA_MIN_CTAS CTAs of 64 tokens
# (sweep_w8a8_wgmma_0755df7_h200.md: at 32 rows the decode kernel is faster on most model
# shapes, at 64 rows on [2048, 4096] only, whose 16 CTAs leave most multiprocessors idle).
WGMMA_MIN_ROWS = 64
WGMMA_MIN_CTAS = 32
# On tile-major weights from this many rows: sweep_wg_rows32_48_f2adfd8_h200.md, GEMM alone at 32
# and 48 rows (after the epilogue fix of c2a5220, both operands by tensor copies): [12288, 2048]
# 10.4 us, [16384, 5120] 25.5, [34816, 5120] 54.3, [5120, 6144] 13.6 and [5120, 17408] 29.2 (split
# 2), against 16.1, 34.3, 67.4, 20.1 and 43.1 for the whole projection on the decode kernel at 32
# rows (w8a8_rows32_256_c2a5220_h200.md). The warpgroup kernel's 64-token tile takes about as
# long at 17 rows as at 32, so from 17 (w8a8_int8_rows17_48_ab_h200.md: 10-30% faster at 17-24 rows).
WGMMA_MIN_ROWS_TILE_MAJOR = 17


# Stages of the tensor-copy form by token tile, either layout (sweep_w8a8_tma_ff9af0f_h200.md: both
# operands by tensor copies, 8 stages of 64 tokens or 6 of 128, was the fastest or within 4% of it
# on the model shapes at 64-256 rows, 0-22% faster than the cp.async form; 256 tokens: the 4 that fit).
WGMMA_TMA_STAGES = {64: 8, 128: 6, 256: 4}


# The K split of the int8 warpgroup-MMA kernel (GemmCfg.split): where its tiles are too few to fill
# the GPU, each tile's K is split over a cluster of 2 or 4 CTAs, the most that keeps the grid
# within WGMMA_SPLIT_CTAS[split] CTAs and at least SPLIT_MIN_CHUNKS chunks of K a CTA. Those caps
# are what ran as one wave on the H200 (one CTA a multiprocessor) in sweep_w8a8_split_65d3412_h200:
# 128 CTAs in clusters of 2, 64 in clusters of 4, not 128 in clusters of 4 nor 120 in clusters of 3
# (those took twice as long as the unsplit kernel).
WGMMA_SPLIT_CTAS = {2: 132, 4: 64}
SPLIT_MIN_CHUNKS = 8


def wgmma_split(ctas: int, k: int) -> int:
    """CTAs a tile of the int8 warpgroup-MMA kernel for ``ctas`` tiles and this K."""
    return max([s for s, cap in WGMMA_SPLIT_CTAS.items() if ctas * s <= cap and (k // 128) // s >= SPLIT_MIN_CHUNKS],
               default=1)


# 256 tokens a CTA beyond 128 rows on tile-major weights where those CTAs number WG256_CTAS: one
# wave of at least 96 (sweep_w8a8_wg256_6fc9987_h200.md, GEMM alone at 256 rows: [16384, 5120]
# 46.0 us against 50.9 for 128 tokens, [12288, 2048] 22.4 against 26.1; slower on fewer CTAs, on
# [34816, 5120]'s 2.1 waves, and on row-major [16384, 5120]).
WG256_CTAS = (96, 132)
# There, from this K on, the producer-warp kernel (GemmCfg.ws): sweep_ws_0208701_h200.md and
# sweep_sk_c378bc8_h200.md, GEMM alone, [16384, 5120] at 192 and 256 rows 39.3-41.3 us against
# 43.9-46.0 (-8 to -10%); on [12288, 2048] (16 chunks) it is 4% slower in both runs.
WG256_WS_MIN_K = 4096


def wgmma_config(rows: int, n: int, k: int, packed: bool) -> GemmCfg | None:
    """int8: the warpgroup-MMA schedule of this row count, weight shape and layout (128 tokens a
    CTA beyond 64 rows where that keeps 64 CTAs with the K split, else 64, and 64 where their
    split makes more CTAs; 256 beyond 128 rows on tile-major weights where that fills one wave
    (WG256_CTAS), by the producer-warp kernel from K = WG256_WS_MIN_K; both operands by tensor copies;
    K split over a cluster where the tiles are few), or None where the decode kernels run."""
    if rows < (WGMMA_MIN_ROWS_TILE_MAJOR if packed else WGMMA_MIN_ROWS) or wide_tiles(rows, n) < WGMMA_MIN_CTAS:
        return None
    if packed and rows > 128 and WG256_CTAS[0] <= wide_tiles(rows, n, 256) <= WG256_CTAS[1]:
        return GemmCfg(stages=WGMMA_TMA_STAGES[256], wg=256, packed=1, tma=2, ws=int(k >= WG256_WS_MIN_K))
    ctas = {wg: wide_tiles(rows, n, wg) for wg in (64, 128)}
    split = {wg: wgmma_split(c, k) for wg, c in ctas.items()}
    wg = 128 if rows > 64 and ctas[128] * split[128] >= 64 else 64
    # 64 tokens where their K split makes more CTAs than 128 tokens do (with or without their
    # split): sweep_sk_c378bc8_h200.md, GEMM alone, tile-major [2048, 4096] at 192 and 256 rows 10.8
    # and 11.9 us (96 and 128 CTAs) against 13.0 and 13.0 for 128 tokens split 2 (64 CTAs); of the
    # model shapes only [2048, 4096] at 129-256 rows is so (at 65-128 rows the CTAs are as many).
    if split[64] > 1 and ctas[64] * split[64] > ctas[128] * split[128]:
        wg = 64
    return GemmCfg(stages=WGMMA_TMA_STAGES[wg], wg=wg, packed=int(packed), tma=2, split=split[wg])


# fp8 at many rows: the f16 warpgroup kernel, two warpgroups (128 weight rows) and 64 tokens a CTA,
# 4 stages: where the tiled kernel (the same tiles) ran before, it is 0-12% faster than that
# kernel (sweep_w8a8_fp8_51f803f_h200.md, sweep_w8a8_fp8_wgmma_09c633f_h200.md; the fastest or
# within 3% of the fastest of its schedules, either layout); where the decode kernel runs (fewer
# CTAs, or long K on tile-major weights), it is not faster than that.
WGMMA_FP8 = GemmCfg(stages=4, wg=64, tma=2, f16=2)


def wgmma_fp8_unsplit(fmt: int, packed: bool) -> GemmCfg:
    """The fp8 warpgroup kernel's unsplit schedule: each chunk finished under the next one's first
    MMAs (overlap bit 1) and the next chunk's tokens converted under this one's MMAs (bit 0), but
    per channel on tile-major (``packed``) weights bit 0 alone. GEMM alone on tile-major weights,
    H200 (sweep_fp8_k2_6be7222_h200.md): per channel bit 0 alone 1.3-4.0% faster than both bits,
    block both bits 2.7-4.4% faster than bit 1 alone. Whole projections against 552bb45 (per
    channel both bits and block bit 1 alone on both layouts), H100 (ab_ovl_1c674d0_h100.md): block
    -0.5 to -6.8% on either layout; per channel -0.7 to -3.8% on tile-major weights, but -0.3 to
    +3.2% on row-major ones (slower in 14 of the 15 cases), which therefore keep both bits."""
    if fmt == FMT_FP8_CHANNEL and packed:
        return dataclasses.replace(WGMMA_FP8, overlap=1)
    return dataclasses.replace(WGMMA_FP8, overlap=3)


# fp8 at 64+ rows where the warpgroup kernel's tiles (128 weight rows x 64 tokens) fit one wave
# twice over and N >= FP8_SPLIT_MIN_N: that kernel with the decode order's warps split over
# clusters of 2 (sweep_w8a8_fp8_split_6fc9987_h200.md, GEMM alone at 64 rows: [5120, 17408] 76-97
# us against 140-174 unsplit and 103-107 for the row-major decode projection, [5120, 6144] 32-41
# against 53-67 and 43-44; on [2048, 4096] the decode kernel stays faster); with K >= 8192 past
# that, clusters of 4 (the same sweep at 128 rows, 80 tiles: [5120, 17408] 122-151 us against
# 140-172 unsplit and 152-171 for the decode projections).
# Beyond 128 rows (H100, sweep_fp8_wide_8773701_h100.md: GEMM alone on tile-major weights;
# ab_s4try_8773701_h100.md: whole projections): the narrow weight in clusters of 2 where they make
# FP8_FULL_WAVE CTAs ([2048, 4096] at 192 / 256 rows: 22.0 / 21.7 us per channel, 26.5 / 26.4
# block, against about 27.5 / 34.5 and 31.3 / 39.6 for the decode kernel, its projection less the
# quantizer); unsplit where the tiles alone fill one wave, long K included ([5120, 17408] at
# 129-192 rows, 120 tiles: 122.6 us per channel, 142.4 block, against 146.6 / 187.3 in clusters of
# 4; the whole projection 130.0 / 154.4 us on row-major weights against 225.7 / 251.7 for the
# decode kernel on tile-major ones); clusters of 4
# at long K up to FP8_SPLIT4_MAX_TILES tiles ([5120, 17408] at 193-256 rows, 160 tiles: whole
# projections 220.6 / 280.9 us against 294.0 / 329.9 for the decode kernel on tile-major weights,
# 234.7 / 295.9 against 251.0 / 303.3 unsplit on row-major ones). As shipped, on the H200:
# w8a8_wide_d5da915_h200.md. Past one wave of tiles up to FP8_SPLIT4_MAX_TILES, per channel in
# clusters of 2 at any K (the same sweep at 256 rows, 160 tiles: [5120, 17408] 202.3 us against
# 215.5 in clusters of 4, [5120, 6144] 84.9 against 92.2 unsplit), and block fp8's clusters of 4
# with each chunk finished under the next ([5120, 17408] at 256 rows: 246.4 against 276.8); as whole
# projections (H100, ab_wide_f3fcf46_h100.md) per channel -7.4% / -5.6% at 256 rows on [5120, 6144] /
# [5120, 17408], block -12.7% / -11.2% at 128 / 256 rows on [5120, 17408]. Block fp8 too in
# clusters of 2 there since d0d3613 (b10c3b6 restored; wgmma_fp8_split's deferred finish; the
# H200 sweep of 6be7222 at 256 rows: [5120, 6144] 90.5 against 105.4 us unsplit, [5120, 17408]
# 227.0 against 242.2 in clusters of 4; whole projections on an H100, ab_ovl_fbb0890_h100.md:
# -13.8% / -5.9% tile-major).
FP8_SPLIT_MIN_N = 4096
FP8_FULL_WAVE = 96
FP8_SPLIT4_MAX_TILES = 160


def fp8_wgmma_schedule(fmt: int, rows: int, n: int, k: int, packed: bool) -> GemmCfg | None:
    """The fp8 warpgroup schedule where the tile count decides it: clusters of 2 or 4 CTAs a tile
    (K split over the cluster) or unsplit (its tiles one full wave; its overlap by layout,
    ``packed`` for tile-major weights); None where the layout's own rule decides between the
    unsplit kernel and the decode kernel."""
    tiles = wide_tiles(rows, n)
    if rows < 64:
        return None
    if 2 * tiles <= WGMMA_SPLIT_CTAS[2] and (n >= FP8_SPLIT_MIN_N or 2 * tiles >= FP8_FULL_WAVE):
        split = 2
    elif FP8_FULL_WAVE <= tiles <= WGMMA_SPLIT_CTAS[2]:
        return wgmma_fp8_unsplit(fmt, packed)
    elif WGMMA_SPLIT_CTAS[2] < tiles <= FP8_SPLIT4_MAX_TILES:
        split = 2
    elif k >= 8192 and tiles <= FP8_SPLIT4_MAX_TILES:
        split = 4
    else:
        return None
    return wgmma_fp8_split(fmt, split)


def wgmma_fp8_split(fmt: int, split: int) -> GemmCfg:
    """The fp8 warpgroup kernel in clusters of ``split`` CTAs a tile. Block scales: each chunk
    finished under the next one's first MMAs (overlap bit 1; in clusters of 2 three stages then fit
    beside the exchange slots). Per channel in clusters of 2: the next chunk's tokens converted under
    this chunk's first MMAs (bit 0). GEMM alone on tile-major weights wherever they run, H200
    (sweep_fp8_k2_6be7222_h200.md): block in clusters of 2 12-15% faster than without the deferred
    finish ([5120, 6144] at 64 rows 31.4 against 36.8 us, [5120, 17408] 79.4 against 93.0,
    [2048, 4096] at 256 rows 23.4 against 26.5; 2.5-4% on an H100 in sweep_fp8_dfr_d7b555e_h100.md),
    per channel 1.5-5% with bit 0 ([5120, 17408] at 64 rows 65.1 against 68.7). Whole projections
    against 552bb45, H100 (ab_ovl_fbb0890_h100.md): block -5.9 to -14.3% where it runs clusters
    of 2, per channel -2.5 to -7.0%."""
    if fmt == FMT_FP8_BLOCK:
        return dataclasses.replace(WGMMA_FP8, split=split, overlap=2, stages=3 if split == 2 else WGMMA_FP8.stages)
    return dataclasses.replace(WGMMA_FP8, split=split, overlap=1 if split == 2 else 0)


def wgmma_fallback(cfg: GemmCfg) -> GemmCfg:
    """The schedule that runs in place of a tensor-copy one where the driver cannot describe the
    tensor-map kernel's parameters (cuFuncGetParamInfo, CUDA 12.4+) or encode its maps: int8's
    cp.async twin (unsplit); for fp8 the tiled kernel (the same bits)."""
    if cfg.f16:
        return GemmCfg(stages=4, packed=cfg.packed)
    return GemmCfg(stages=WGMMA_STAGES[(cfg.wg, cfg.packed)], wg=cfg.wg, packed=cfg.packed)


# Warpgroup-MMA schedules the sweep adds for int8 at 17+ rows (both layouts with --packed).
WGMMA_SWEEP = (GemmCfg(stages=4, wg=64), GemmCfg(stages=6, wg=64), GemmCfg(stages=8, wg=64),
               GemmCfg(stages=4, wg=128), GemmCfg(stages=5, wg=128), GemmCfg(stages=6, wg=128),
               # Tensor copies of the weight (tma 1) or of both operands (tma 2).
               GemmCfg(stages=6, wg=64, tma=1), GemmCfg(stages=8, wg=64, tma=1), GemmCfg(stages=4, wg=128, tma=1),
               GemmCfg(stages=6, wg=128, tma=1), GemmCfg(stages=6, wg=64, tma=2), GemmCfg(stages=8, wg=64, tma=2),
               GemmCfg(stages=9, wg=64, tma=2), GemmCfg(stages=4, wg=128, tma=2), GemmCfg(stages=6, wg=128, tma=2),
               # K split over a cluster of 2-4 CTAs a tile.
               *(GemmCfg(stages=st, wg=wg, tma=2, split=sp) for wg, st in ((64, 8), (128, 6)) for sp in (2, 3, 4)),
               # 256 tokens a CTA (shared memory allows 4 stages), unsplit or in clusters of 2 or 3 (3: the
               # 40 weight tiles of the N = 5120 weights at 129-256 rows as 120 CTAs, NOTES W8A8 v33).
               GemmCfg(stages=3, wg=256, tma=2), GemmCfg(stages=4, wg=256, tma=2), GemmCfg(stages=4, wg=256, tma=2, split=2),
               GemmCfg(stages=4, wg=256, tma=2, split=3),
               # A producer warp issuing the copies, per-stage release barriers (no block barrier).
               GemmCfg(stages=8, wg=64, tma=2, ws=1), GemmCfg(stages=6, wg=128, tma=2, ws=1),
               GemmCfg(stages=4, wg=256, tma=2, ws=1),
               # Its clusters of 2-4 CTAs multicasting the shared operands' copies.
               *(GemmCfg(stages=st, wg=wg, tma=2, ws=1, mcx=mx, mcy=my) for wg, st in ((64, 8), (128, 6), (256, 4))
                 for mx, my in ((1, 2), (2, 1), (2, 2))),
               # Tensor-copy schedules small enough for 2 (97 KB) or 3 (73 KB) CTAs a multiprocessor
               # (NOTES W8A8 v30: all slower): unsplit, in clusters of 2, with the producer warp (at
               # 64 tokens; at 128 its 122 registers over 288 threads leave room for one).
               GemmCfg(stages=3, wg=64, tma=2), GemmCfg(stages=4, wg=64, tma=2), GemmCfg(stages=3, wg=128, tma=2),
               GemmCfg(stages=4, wg=64, tma=2, split=2), GemmCfg(stages=3, wg=128, tma=2, split=2),
               GemmCfg(stages=4, wg=64, tma=2, ws=1))


def gemm_configs(fmt: int, tiles: int) -> tuple[GemmCfg, ...]:
    """Every schedule :func:`gemm_config` can return for this format and tile count (both
    layouts)."""
    probes = [(2048, 4096), (12288, 2048), (16384, 2048), (16384, 5120), (34816, 5120), (5120, 6144),
              (5120, 17408)]
    cfgs = [gemm_config(fmt, r, n, k, packed) for packed in (False, True) for n, k in probes
            for r in (1, 8, 16, 17, 32, 33, 64, 128, 256) if token_tiles(fmt, r, n, k, packed) == tiles]
    # The K split depends on the shape beyond the probes: every split of each tensor-copy schedule.
    cfgs += [dataclasses.replace(c, split=s) for c in cfgs if c.tma == 2 and not c.f16 and not c.ws
             for s in (1, *WGMMA_SPLIT_CTAS)]
    return tuple(dict.fromkeys(cfgs + [wgmma_fallback(c) for c in cfgs if c.tma]))


def gemm_instance(fmt: int, tiles: int, out: str, scale: str = "float32", cfg: GemmCfg | None = None) -> str:
    cfg = GEMM_BASE[tiles] if cfg is None else cfg
    return cfg.name(fmt, tiles, OUT_TYPES[out], SCALE_TYPES[scale])


def quant_threads(kind: str) -> int:
    """Threads a CTA of an activation quantizer (kernels/act_quant.cu): a whole token row a CTA
    for the fused SiLU per-token kinds and the "_rows" kinds, 256 otherwise (a cluster of
    QUANT_CLUSTER CTAs a row for the other per-token kinds, one warp a 128-group for the grouped
    ones)."""
    if kind.endswith("_rows"):
        return ROWS_QUANT_THREADS
    return SILU_ROW_THREADS if kind in ("silu_mul_int8", "silu_mul_fp8_row") else QUANT_THREADS


# The per-token quantizer kinds, each one of three templates for both formats (kernels/act_quant.cu:
# the cluster, its split form, one CTA a row), by the kind's ending.
_PER_TOKEN_FORMS = {"int8": "row", "fp8_row": "row", "int8_split": "split", "fp8_row_split": "split",
                    "int8_rows": "rows", "fp8_row_rows": "rows"}


def quant_instance(kind: str, dtype: str) -> str:
    if form := _PER_TOKEN_FORMS.get(kind):
        int8 = str(kind.startswith("int8")).lower()
        return f"act_quant_{form}_kernel<{int8}, {OUT_TYPES[dtype]}, {quant_threads(kind)}>"
    return f"act_quant_{kind}_kernel<{OUT_TYPES[dtype]}, {quant_threads(kind)}>"


def _gemm_instances() -> tuple[str, ...]:
    names = []
    for fmt in (FMT_INT8, FMT_FP8_CHANNEL, FMT_FP8_BLOCK):
        scales = ("float32", "bfloat16") if fmt == FMT_FP8_BLOCK else ("float32",)
        for tiles in GEMM_TILES:
            for cfg in gemm_configs(fmt, tiles):
                for out in OUT_TYPES:
                    for scale in scales:
                        names.append(gemm_instance(fmt, tiles, out, scale, cfg))
    return tuple(names)


# Schedules the tuning sweep (bench/sweep_w8a8.py) times beside the shipped ones: compiled only
# when the sweep loads the "w8a8_gemm_sweep" family (bf16 output, fp32 scales).
SWEEP_CFGS = (
    GemmCfg(1, 4, 0, 1), GemmCfg(1, 2, 0, 1), GemmCfg(1, 2, 0, 2), GemmCfg(1, 2, 0, 3), GemmCfg(1, 1, 1, 2),
    GemmCfg(1, 2, 1, 1), GemmCfg(2, 2, 0, 1), GemmCfg(2, 1, 1, 1), GemmCfg(2, 1, 0, 3),
    GemmCfg(4, 1, 0, 2), GemmCfg(4, 2, 0, 1), GemmCfg(8, 1, 0, 1),
    GemmCfg(stages=2), GemmCfg(stages=3), GemmCfg(stages=4),
)


def sweep_cfgs(tiles: int, packed: bool = False) -> tuple[GemmCfg, ...]:
    """The sweep's schedules for a tile count; ``packed``: on the tile-major weight."""
    # Static shared memory (4 KB per weight tile and token tile) stays within 48 KB.
    cfgs = tuple(c for c in SWEEP_CFGS if c.m * tiles <= 8 and (not c.stages or tiles == 4))
    if packed:
        return tuple(GemmCfg(c.m, c.unroll, c.pipe, c.min_blocks, c.stages, packed=1) for c in cfgs)
    return cfgs


# Shared-memory staging before the quantizer wait (GemmCfg.pre), swept on tile-major weights at
# 1-16 rows, where the quantizer is a large part of a projection: each base schedule with 1, 2
# or 4 chunks a warp staged, within 200 KB of shared memory a multiprocessor. Compiled only in
# the "w8a8_gemm_pre_sweep" family, timed as whole projections (bench/sweep_w8a8.py --pre).
PRE_SWEEP_BASES = {
    1: (GemmCfg(1, 2, 0, 3), GemmCfg(1, 2, 0, 2), GemmCfg(1, 4, 0, 1), GemmCfg(2, 1, 0, 3), GemmCfg(1, 2, 0, 1),
        # Two or four weight tiles at two CTAs a multiprocessor: fp8's (2, 1, 0, 3) spills.
        GemmCfg(2, 1, 0, 2), GemmCfg(4, 1, 0, 2)),
    2: (GemmCfg(1, 2, 0, 2), GemmCfg(1, 2, 1, 1), GemmCfg(2, 1, 0, 3), GemmCfg(1, 1, 1, 2), GemmCfg(2, 1, 0, 2)),
}


# The ring (pipe 2: every chunk through ``pre`` shared-memory slots, none in register rounds), swept
# beside them: (weight tiles, CTAs a multiprocessor, slots).
RING_SWEEP = {1: ((1, 3, 3), (1, 3, 4), (2, 3, 2), (1, 2, 4), (1, 4, 3)),
              2: ((1, 3, 3), (1, 2, 4), (2, 2, 2), (2, 3, 2), (1, 4, 3))}


def pre_sweep_cfgs(tiles: int) -> tuple[GemmCfg, ...]:
    """Tile-major schedules of the staging sweep for a tile count (1 or 2): every base with
    ``pre`` 0 (the comparison), 1, 2 and 4 where shared memory allows, then the rings."""
    cfgs = []
    for c in PRE_SWEEP_BASES.get(tiles, ()):
        for pre in (0, 1, 2, 4):
            cfg = GemmCfg(c.m, c.unroll, c.pipe, c.min_blocks, 0, packed=1, pre=pre)
            if cfg.smem * c.min_blocks <= 200 * 1024:
                cfgs.append(cfg)
    cfgs += [GemmCfg(m, 1, 2, b, 0, packed=1, pre=slots) for m, b, slots in RING_SWEEP.get(tiles, ())]
    return tuple(cfgs)


def _pre_sweep_instances() -> tuple[str, ...]:
    return tuple(gemm_instance(fmt, tiles, "bfloat16", "float32", cfg)
                 for fmt in (FMT_INT8, FMT_FP8_CHANNEL, FMT_FP8_BLOCK)
                 for tiles in (1, 2) for cfg in pre_sweep_cfgs(tiles))


# The fp8 warpgroup kernel's schedules in the sweep: two warpgroups a CTA with 4-8 stages (8 fill
# the shared memory), or one with 3-4 (two CTAs a multiprocessor); the overlapped form; the decode
# order's 8 warps of chunks split over a cluster of 2 or 4 CTAs a tile.
WGMMA_FP8_SWEEP = (tuple(GemmCfg(stages=s, wg=64, tma=2, f16=2) for s in (4, 6, 8))
                   + tuple(GemmCfg(stages=s, wg=64, tma=2, f16=1) for s in (3, 4))
                   # The next chunk's tokens converted under this chunk's first MMAs.
                   + tuple(GemmCfg(stages=s, wg=64, tma=2, f16=2, overlap=1) for s in (4, 6))
                   + tuple(GemmCfg(stages=4, wg=64, tma=2, f16=2, split=sp) for sp in (2, 4))
                   # Each chunk finished under the next one's first MMAs (three token tiles;
                   # clusters of 2 then fit 3 stages beside their slots).
                   + tuple(GemmCfg(stages=s, wg=64, tma=2, f16=2, overlap=ov) for s in (4, 6) for ov in (2, 3))
                   + (GemmCfg(stages=3, wg=64, tma=2, f16=2, overlap=2, split=2),
                      GemmCfg(stages=4, wg=64, tma=2, f16=2, overlap=2, split=4),
                      # Per channel's overlaps in clusters of 2 (its shipped split schedule runs
                      # without them): the next chunk's tokens early, and both bits.
                      GemmCfg(stages=4, wg=64, tma=2, f16=2, overlap=1, split=2),
                      GemmCfg(stages=3, wg=64, tma=2, f16=2, overlap=3, split=2))
                   )

# The e4m3 warpgroup-MMA prototype (other bits; tokens in MMA order) by 8-token tiles: a token tile
# of 8, 16 or 32 rows in clusters of 4 or 8 CTAs a weight tile (the decode order's warps split
# over them) at 1-32 rows; 64 or 128 tokens unsplit or in clusters of 4 beyond, also with each
# chunk's promotion under the next chunk's MMAs (overlap 2).
# qg 2: its decode form (w8a8_qgmma_decode_kernel, the weight loaded straight into the MMA's
# registers), each warpgroup running 1-8 of the decode order's warps in turn, in clusters of 1-4
# CTAs, its token tiles sized by K at the launch (GemmCfg.decode_smem, within SMEM_LIMIT); K up
# to 8 x 128 x QGMMA_DECODE_MAX_CHUNKS.
QGMMA_DECODE_MAX_CHUNKS = 24
# The dynamic shared memory a Hopper CTA may have.
SMEM_LIMIT = 227 * 1024
QGMMA_SWEEP = {
    tiles: tuple(GemmCfg(stages=s, wg=8 * tiles, tma=2, qg=1, split=sp) for s in (4, 8) for sp in (4, 8))
    # The decode form in clusters of 4, 1 or 2 chunks ahead (NOTES W8A8 v29: clusters of 8 and
    # registers held to more CTAs an SM were slower), and with each warpgroup running 2-8 decode
    # warps in turn, in clusters of 1-4 (fewer, longer CTAs).
    + tuple(GemmCfg(stages=d, wg=8 * tiles, qg=2, split=sp, m=q)
            for sp, q, d in ((4, 1, 1), (4, 1, 2), (4, 2, 2), (2, 2, 1), (2, 2, 2), (2, 4, 2), (1, 2, 2), (1, 4, 2), (1, 8, 2)))
    for tiles in (1, 2)
} | {
    4: (GemmCfg(stages=4, wg=32, tma=2, qg=1, split=8), GemmCfg(stages=6, wg=32, tma=2, qg=1, split=4),
        *(GemmCfg(stages=s, wg=wg, tma=2, qg=1) for wg, s in ((64, 6), (64, 8), (128, 4), (128, 6))),
        GemmCfg(stages=6, wg=64, tma=2, qg=1, split=4), GemmCfg(stages=4, wg=128, tma=2, qg=1, split=4),
        # Each chunk promoted under the next chunk's MMAs.
        GemmCfg(stages=6, wg=64, tma=2, qg=1, overlap=2), GemmCfg(stages=4, wg=128, tma=2, qg=1, overlap=2),
        GemmCfg(stages=6, wg=64, tma=2, qg=1, split=4, overlap=2)),
}


def mma_order_words(k: int):
    """The e4m3 warpgroup prototype's token order (w8a8_qgmma_kernel): for each of the K / 4 words
    of a token row in that order, the word of the row-major row it holds (a numpy index array).
    In each 64-byte half h of a 128-byte chunk, word 16 h + 8 u + 4 e + t holds row-major word
    16 h + 4 t + 2 u + e."""
    import numpy as np

    c, h, u, e, t = np.meshgrid(np.arange(k // 128), np.arange(2), np.arange(2), np.arange(2), np.arange(4),
                                indexing="ij")
    return (32 * c + 16 * h + 4 * t + 2 * u + e).reshape(-1)


def wgmma_sweep_cfgs(fmt: int, tiles: int, packed: bool = False) -> tuple[GemmCfg, ...]:
    """The sweep's warpgroup-MMA schedules for a format and tile count: at 4 tiles, and the fp8
    e4m3 prototype's at every tile count."""
    cfgs = () if fmt == FMT_INT8 else QGMMA_SWEEP[tiles]
    if tiles == 4:
        cfgs = (WGMMA_SWEEP if fmt == FMT_INT8 else WGMMA_FP8_SWEEP) + cfgs
    return tuple(dataclasses.replace(c, packed=int(packed)) for c in cfgs)


def _sweep_instances() -> tuple[str, ...]:
    return tuple(gemm_instance(fmt, tiles, "bfloat16", "float32", cfg)
                 for fmt in (FMT_INT8, FMT_FP8_CHANNEL, FMT_FP8_BLOCK)
                 for tiles in GEMM_TILES for packed in (False, True)
                 for cfg in sweep_cfgs(tiles, packed) + wgmma_sweep_cfgs(fmt, tiles, packed))


# Quantizers of kernels/act_quant.cu: of x itself, and of silu(gate) * up read from a dense FFN's
# stacked [gate | up] projection (the input of its down projection).
QUANT_KINDS = ("int8", "fp8_group", "fp8_row", "int8_rows", "fp8_row_rows", "int8_split", "fp8_row_split")
# The per-token quantizers at 1 to QUANT_ROWS_MIN - 1 rows and K < QUANT_SPLIT_K_BELOW without the
# cluster: each CTA of a row finds the whole row's amax itself ("_split" kinds; GDN_KERNELS_QUANT_SPLIT=0:
# the clustered ones everywhere). Whole projections on the H200 (w8a8_rows1_16_split{0,1}_a077941_h200.md):
# 1-9% faster at K <= 5120, even at K = 6144; at K = 17408 the whole row's amax pass (35 KB a CTA)
# costs 1-3% more than the cluster's exchange.
QUANT_SPLIT = os.environ.get("GDN_KERNELS_QUANT_SPLIT", "1") not in ("", "0")
QUANT_SPLIT_K_BELOW = 8192
# The per-token kinds run as one CTA a row (the "_rows" kernels) from this many rows.
QUANT_ROWS_MIN = 64
ROWS_QUANT_THREADS = 512
SILU_QUANT_KINDS = ("silu_mul_int8", "silu_mul_fp8_group", "silu_mul_fp8_row")


def silu_quant_instance(kind: str, dtype: str) -> str:
    return f"act_quant_{kind}_kernel<{OUT_TYPES[dtype]}, {quant_threads(kind)}>"


def _quant_instances() -> tuple[str, ...]:
    return (tuple(quant_instance(kind, dtype) for kind in QUANT_KINDS for dtype in OUT_TYPES)
            + tuple(silu_quant_instance(kind, dtype) for kind in SILU_QUANT_KINDS for dtype in OUT_TYPES))


FP4_WARPS = 8
# The NVFP4 quantizer (kernels/fp4_quant.cu): an activation row of at least FP4_QUANT_CLUSTER_MIN_K
# values is split over a cluster of FP4_QUANT_CLUSTER CTAs, a shorter one takes one CTA (on the
# H200 the cluster's exchange costs more than it saves below that: bench/NOTES.md, NVFP4 v4); each
# CTA has the fewest FP4_QUANT_THREADS that give every thread at most one 16-block of its slice (up
# to 1024). Weights (many rows, a static scale) take one CTA of the smallest a row. Neither the
# split nor the width changes a bit (the row's amax is a max).
FP4_QUANT_THREADS = (128, 256, 512, 1024)
FP4_QUANT_CLUSTER = 8
FP4_QUANT_CLUSTER_MIN_K = 8192
FP4_IN_TYPES = {"bfloat16": "__nv_bfloat16", "float16": "__half", "float32": "float"}


def fp4_gemm_instance(tiles: int, out: str) -> str:
    # One token tile runs the direct form of the arithmetic, more tiles the conversion-free one
    # (kernels/fp4_mx_gemm.cu: the same bits, each the faster where it is used on the H200).
    kernel = "fp4_mx_gemm_int_kernel" if tiles == 1 else "fp4_mx_gemm_kernel"
    return f"{kernel}<{FP4_WARPS}, {tiles}, {GEMM_UNROLL[tiles]}, {OUT_TYPES[out]}>"


# Tile-major NVFP4 GEMM (fp4_tiled_gemm_kernel): 4-token groups a CTA, and for each group count
# its schedule (unroll: chunks in flight a warp; arith: the arithmetic's form, FP4_ARITH plus its
# flags; min_blocks: CTAs a multiprocessor the registers must allow, the launch bounds' second
# argument, 0 for ptxas's own choice). No field changes an output bit. Picked from
# bench/results/sweep_nvfp4_*.md.
FP4_ARITH = {"direct": 0, "conv_free": 1, "magic_sum": 2}
FP4_ARITH_IMAD = 4  # the decode's shifts and the B masks as integer multiplies (FMA pipe)
FP4_ARITH_PIN = 8  # the decode tables held in registers instead of copied before every prmt
FP4_ARITH_PREFETCH = 16  # the next chunks' loads issued before the current ones are computed
FP4_ARITH_EARLY = 32  # the first chunks' weight loads issued before the quantizer wait
FP4_ARITH_MASKED = 64  # B operands read pre-masked from the quantizer's masked operand form
FP4_ARITH_L2_FIRST = 128  # the first wave's CTAs prefetch their whole tile into L2 before the wait
# The few-token form (one group; kernels/fp4_mx_gemm.cu, few_token_stream): the MMA's columns carry
# 4 consecutive chunks of one token (TOK1, slices of 1 row) or 2 of two tokens (TOK2, at most 2 rows)
# instead of 4 tokens, so each thread converts and scales only its own chunk's block sums.
FP4_ARITH_TOK1 = 256
FP4_ARITH_TOK2 = 512
# The weight's next chunks (unroll of them a warp) in flight in a shared-memory ring, by cp.async.
FP4_ARITH_RING = 1024
# Two 16-row weight tiles a CTA, the activation operands loaded once for both (register rounds).
FP4_ARITH_TWO_TILES = 2048
FP4_TILED_GROUPS = (1, 2, 4, 8)
FP4_TILED_SCHEDULE = {1: (1, 10, 4), 2: (1, 1, 0), 4: (1, 10, 2), 8: (1, 10, 1)}
# Weights by size (N * K values) take these instead where given (sweep_nvfp4_tiles_92a497d_h200.md):
# "small", at most FP4_TILED_SMALL_MAX values: the first wave's CTAs prefetch their tiles into L2
# before the quantizer wait, so the whole weight streams while the quantizer runs (on larger
# weights the prefetches delay the demand loads: slower); "large", at least FP4_TILED_LARGE_MIN
# values: B operands pre-masked by the quantizer gain at 1-4 rows (on smaller weights the
# quantizer's doubled operand costs about what the GEMM saves; at 8+ rows the doubled operand
# leaves L1); "long", a large weight of K >= FP4_TILED_LONG_K: the large schedules, but the
# few-token form at 1 row (below), and at 9-16 rows the weight's next two chunks a warp in flight in
# a shared-memory ring (FP4_ARITH_RING; sweep_nvfp4_ring_7e50a8f_h200.md: 53.0 against 62.0 us on
# [5120, 17408] at 16 rows; slower on the other shapes and row counts). A large weight of
# K < FP4_TILED_LONG_K at 5-8 rows takes two weight tiles a CTA (FP4_ARITH_TWO_TILES: the two
# token groups' activation operands loaded once for both; sweep_nvfp4_m2_f4435c8_h200.md, whole
# projection at 8 rows: [16384, 5120] 24.9 against 26.2 us, [34816, 5120] 48.7 against 49.4; at
# 1-4 rows +2 to +4% there). Weights of N <= 5120 (160 tile pairs or fewer, under two CTAs a
# multiprocessor) lose 14-36% with it. "wide", a weight between small and large of
# N >= FP4_TILED_WIDE_N (at least 256 tile pairs: two CTAs a multiprocessor), takes two tiles at
# 1-4 rows, where its short K makes the per-CTA costs weigh ([12288, 2048] in the same sweep: 8.64
# against 8.91 us at 1 row, 8.70 / 8.86 at 2, 8.72 / 9.18 at 4); the other base weight measured,
# [5120, 6144], loses 14-26% with it. At 5-8 rows it keeps the base schedule: the H200 sweep had
# two tiles at 10.85 against 11.29 us at 8 rows, but A/B runs of the shipped class on an H100
# (nvfp4_ab_wide_*_{80efcce,d5eb00e}_h100.json, three runs) had it 10.5-10.8% slower there, while
# -3.5 to -4.7% at 1-4 rows.
FP4_TILED_BY_SIZE = {"small": {1: (1, 138, 4), 2: (1, 138, 2), 4: (1, 138, 2)}, "base": {},
                     "wide": {1: (1, 2058, 3)},
                     "large": {1: (1, 74, 4), 2: (1, 2058, 2)}, "long": {1: (1, 74, 4), 4: (2, 1034, 2)}}
FP4_TILED_SMALL_MAX = 1 << 23
FP4_TILED_LARGE_MIN = 1 << 25
FP4_TILED_LONG_K = 8192
FP4_TILED_WIDE_N = 8192
# Slices of 1 and 2 rows take the few-token form where given here, by size class and rows
# (sweep_nvfp4_few_20049a8_h200.md: at 1 row, with its first round requested before the
# quantizer wait, 3-5% faster on [2048, 4096], [5120, 6144] and [5120, 17408], even on
# [12288, 2048], 2-4% slower on [34816, 5120] and [16384, 5120]; at 2 rows within -3% to +12%).
# Since that round is requested by loads ptxas keeps before the wait (sweep_nvfp4_7dab117_h200.md)
# the small weight takes it without the L2 prefetch of its first wave (5.1 against 5.3 us).
FP4_TILED_FEW_BY_SIZE = {"small": {1: (1, 298, 3)}, "base": {1: (1, 298, 3)}, "wide": {}, "large": {},
                         "long": {1: (1, 298, 3)}}
# Schedules the tile-major sweep compares (bench/sweep_nvfp4.py): the base schedule
# (FP4_TILED_SCHEDULE) first. A min_blocks of 0 leaves the register count to ptxas.
# At 4 groups the two-tile schedules (FP4_ARITH_TWO_TILES) are those that compile without local
# memory (one CTA a multiprocessor, 186-248 registers): ncu of the shipped (1, 10, 2) at 16 rows
# on [34816, 5120] (profile_nvfp4_8647a5d.log) has the L1 at 92% of its throughput, 79% hits, the
# activation operands re-read for every 16 weight rows; two tiles read them once for 32.
FP4_TILED_SWEEP = {
    1: ((1, 10, 4), (1, 74, 4), (1, 138, 4), (1, 202, 4), (1, 202, 5), (1, 42, 4), (1, 106, 4),
        (2, 1034, 4), (3, 1034, 4), (4, 1034, 4), (3, 1098, 4), (4, 1098, 4),
        (1, 2058, 3), (1, 2122, 3), (1, 2090, 3)),
    2: ((1, 1, 0), (1, 129, 3), (1, 10, 2), (1, 138, 2), (1, 42, 2), (3, 1025, 0), (3, 1034, 2), (4, 1034, 2),
        (1, 2049, 0), (1, 2058, 2)),
    4: ((1, 10, 2), (1, 138, 2), (1, 1, 0), (1, 42, 2), (2, 1034, 2), (4, 1034, 2),
        (1, 2058, 1), (1, 2057, 1), (1, 2050, 1), (1, 2049, 1), (1, 2049, 0), (1, 2122, 1), (1, 2090, 1)),
    8: ((1, 10, 1), (1, 138, 1), (1, 1, 0), (1, 9, 0), (1, 42, 1), (2, 1034, 1), (4, 1034, 1)),
}
# Few-token schedules the sweep adds at 1 and 2 rows.
FP4_TILED_FEW_SWEEP = {
    1: ((1, 266, 3), (1, 266, 2), (1, 298, 3), (1, 330, 3), (1, 394, 3), (1, 426, 3)),
    2: ((1, 522, 4), (1, 522, 3), (1, 554, 4), (1, 586, 4), (1, 650, 4)),
}


def fp4_groups(rows: int) -> int:
    """4-token groups a tile-major NVFP4 CTA takes at this row count."""
    return 1 if rows <= 4 else 2 if rows <= 8 else 4 if rows <= 16 else 8


def fp4_tiled_size(n: int, k: int) -> str:
    """The size class of an [n, k] weight for the tile-major NVFP4 schedules (FP4_TILED_BY_SIZE)."""
    values = n * k
    if values <= FP4_TILED_SMALL_MAX:
        return "small"
    if values < FP4_TILED_LARGE_MIN:
        return "wide" if n >= FP4_TILED_WIDE_N else "base"
    return "long" if k >= FP4_TILED_LONG_K else "large"


def fp4_schedule_tokens(schedule: tuple[int, int, int]) -> int:
    """Rows a slice may have for a few-token schedule (1 or 2); 0 for the others."""
    arith = schedule[1]
    return 1 if arith & FP4_ARITH_TOK1 else 2 if arith & FP4_ARITH_TOK2 else 0


def fp4_masked_rows() -> int:
    """Rows of the largest slice any shipped or swept tile-major schedule reads in the masked
    operand form (FP4_ARITH_MASKED): the workspace holds the second copy for that many rows only."""
    scheds = [(g, s) for table in FP4_TILED_BY_SIZE.values() for g, s in table.items()]
    scheds += [(g, s) for g, ss in FP4_TILED_SWEEP.items() for s in ss]
    rows = [4 * g for g, s in scheds if s[1] & FP4_ARITH_MASKED]
    few = [s for table in FP4_TILED_FEW_BY_SIZE.values() for s in table.values()]
    few += [s for ss in FP4_TILED_FEW_SWEEP.values() for s in ss]
    rows += [fp4_schedule_tokens(s) for s in few if s[1] & FP4_ARITH_MASKED]
    return max(rows, default=0)


def fp4_tiled_schedule(groups: int, size: str) -> tuple[int, int, int]:
    """The shipped schedule of the tile-major NVFP4 GEMM at this group count and size class."""
    return FP4_TILED_BY_SIZE[size].get(groups, FP4_TILED_SCHEDULE[groups])


def fp4_slice_schedule(rows: int, size: str) -> tuple[int, int, int]:
    """The shipped schedule that runs a slice of this many rows (the few-token one where given)."""
    return FP4_TILED_FEW_BY_SIZE[size].get(rows) or fp4_tiled_schedule(fp4_groups(rows), size)


def fp4_tiled_smem(schedule: tuple[int, int, int]) -> int:
    """Dynamic shared memory of a tile-major NVFP4 schedule in bytes: its ring (FP4_ARITH_RING), 1.5 KB
    a chunk (two 512-byte code pieces and a lane's 16 scale bytes each) a slot and warp."""
    unroll, arith, _ = schedule
    return FP4_WARPS * unroll * 3 * 512 if arith & FP4_ARITH_RING else 0


def fp4_tiled_weight_tiles(schedule: tuple[int, int, int]) -> int:
    """16-row weight tiles a CTA of a tile-major NVFP4 schedule (FP4_ARITH_TWO_TILES: 2)."""
    return 2 if schedule[1] & FP4_ARITH_TWO_TILES else 1


def fp4_tiled_instance(groups: int, out: str, schedule: tuple[int, int, int] | None = None) -> str:
    unroll, arith, min_blocks = schedule or FP4_TILED_SCHEDULE[groups]
    return f"fp4_tiled_gemm_kernel<{FP4_WARPS}, {groups}, {unroll}, {arith}, {min_blocks}, {OUT_TYPES[out]}>"


def _fp4_gemm_instances() -> tuple[str, ...]:
    scheds = [(g, fp4_tiled_schedule(g, size)) for g in FP4_TILED_GROUPS for size in FP4_TILED_BY_SIZE]
    scheds += [(1, s) for table in FP4_TILED_FEW_BY_SIZE.values() for s in table.values()]
    return (tuple(fp4_gemm_instance(t, o) for t in GEMM_TILES for o in OUT_TYPES)
            + tuple(dict.fromkeys(fp4_tiled_instance(g, o, s) for g, s in scheds for o in OUT_TYPES)))


def _fp4_sweep_instances() -> tuple[str, ...]:
    shipped = set(_fp4_gemm_instances())
    names = [fp4_tiled_instance(g, "bfloat16", s) for g in FP4_TILED_GROUPS for s in FP4_TILED_SWEEP[g][1:]]
    names += [fp4_tiled_instance(1, "bfloat16", s) for ss in FP4_TILED_FEW_SWEEP.values() for s in ss]
    return tuple(dict.fromkeys(n for n in names if n not in shipped))


@functools.lru_cache(maxsize=None)
def fp4_quant_shape(k: int) -> tuple[int, int]:
    """(threads a CTA, CTAs a row) of the NVFP4 activation quantizer for rows of k values."""
    cluster = FP4_QUANT_CLUSTER if k >= FP4_QUANT_CLUSTER_MIN_K else 1
    per_cta = -(-(k // 16) // cluster)
    return next((t for t in FP4_QUANT_THREADS if t >= per_cta), FP4_QUANT_THREADS[-1]), cluster


def fp4_quant_instance(dtype: str, threads: int, cluster: int) -> str:
    return f"fp4_quant_kernel<{FP4_IN_TYPES[dtype]}, {threads}, {cluster}>"


# The weight quantizer's instance (float32 input, one CTA a row).
FP4_WEIGHT_QUANT = ("float32", FP4_QUANT_THREADS[0], 1)


def _fp4_quant_instances() -> tuple[str, ...]:
    return (tuple(fp4_quant_instance(d, t, c) for d in ("bfloat16", "float16") for t in FP4_QUANT_THREADS
                  for c in (1, FP4_QUANT_CLUSTER))
            + (fp4_quant_instance(*FP4_WEIGHT_QUANT),))


@dataclass(frozen=True)
class Family:
    """One kernel file and the template instances compiled from it."""

    source: str
    instances: tuple[str, ...]
    # Instances whose ptxas report must show no stack frame and no spills (the compile gate).
    hot: tuple[str, ...]


FAMILIES: dict[str, Family] = {
    "act_quant": Family("act_quant.cu", _quant_instances(), _quant_instances()),
    "w8a8_gemm": Family("w8a8_gemm.cu", _gemm_instances(), _gemm_instances()),
    "w8a8_gemm_sweep": Family("w8a8_gemm.cu", _sweep_instances(), ()),
    "w8a8_gemm_pre_sweep": Family("w8a8_gemm.cu", _pre_sweep_instances(), ()),
    "fp4_quant": Family("fp4_quant.cu", _fp4_quant_instances(), _fp4_quant_instances()),
    "fp4_mx_gemm": Family("fp4_mx_gemm.cu", _fp4_gemm_instances(), _fp4_gemm_instances()),
    "fp4_mx_gemm_sweep": Family("fp4_mx_gemm.cu", _fp4_sweep_instances(), ()),
}


def subset_family(family: str, instances) -> str:
    """The name of a family of ``family``'s source compiled with only these of its instances
    (registered on first use), so that a sweep of a few schedules compiles only those."""
    names = tuple(dict.fromkeys(instances))
    missing = set(names) - set(FAMILIES[family].instances)
    if missing:
        raise ValueError(f"not instances of {family}: {sorted(missing)}")
    key = f"{family}[{hashlib.sha1(chr(0).join(names).encode()).hexdigest()[:10]}]"
    FAMILIES.setdefault(key, Family(FAMILIES[family].source, names, ()))
    return key


def family_source(family: str) -> str:
    return (kernel_dir() / FAMILIES[family].source).read_text()


class Kernel:
    """A compiled kernel function launched through the driver with a packed argument buffer.

    ``fmt`` is a :mod:`struct` format of the kernel's parameters in order, with native alignment
    (``P`` pointer, ``q`` long long, ``i`` int, ``f`` float), so one ``pack_into`` call lays them
    out as the kernel expects. Launching needs no Python object per argument and no CuPy stream
    object: the stream is the raw handle.
    """

    _CU_LAUNCH_PARAM_END = 0
    _CU_LAUNCH_PARAM_BUFFER_POINTER = 1
    _CU_LAUNCH_PARAM_BUFFER_SIZE = 2

    def __init__(self, ptr: int, fmt: str, name: str, smem: int = 0):
        self.ptr = ptr
        self.name = name
        self.smem = smem
        # A 64-byte aligned parameter (a tensor map, "128s") is placed by the compiler on an
        # aligned address of the parameter bank, not an aligned offset: lay such arguments out at
        # the offsets the driver reports.
        self._struct = struct.Struct(_driver_layout(ptr, fmt) if "s" in fmt else "@" + fmt)
        self._local = threading.local()

    def _buffers(self):
        bufs = getattr(self._local, "bufs", None)
        if bufs is None:
            size = self._struct.size
            args = ctypes.create_string_buffer(max(size, 8))
            nbytes = ctypes.c_size_t(size)
            extra = (ctypes.c_void_p * 5)(
                self._CU_LAUNCH_PARAM_BUFFER_POINTER,
                ctypes.addressof(args),
                self._CU_LAUNCH_PARAM_BUFFER_SIZE,
                ctypes.addressof(nbytes),
                self._CU_LAUNCH_PARAM_END,
            )
            bufs = self._local.bufs = (args, nbytes, extra, ctypes.addressof(extra))
        return bufs

    def launch(self, grid: tuple[int, int, int], block: int, stream: int, *args) -> None:
        buf, _, _, extra_addr = self._buffers()
        self._struct.pack_into(buf, 0, *args)
        _driver_launch(self.ptr, grid[0], grid[1], grid[2], block, 1, 1, self.smem, stream, 0, extra_addr)

    def launch_dependent(self, grid: tuple[int, int, int], block: int, stream: int, *args) -> None:
        """Launch with programmatic dependent launch: the kernel may start while the preceding
        kernel of the stream runs, and must call ``pdl_wait`` before it reads that kernel's
        output (kernels/include/gdn/ptx.cuh)."""
        if stream == 0 or not PDL_ENABLED:
            # The legacy default stream synchronises with every other stream: launch plainly.
            self.launch(grid, block, stream, *args)
            return
        buf, _, _, extra_addr = self._buffers()
        self._struct.pack_into(buf, 0, *args)
        _pdl_launch(self.ptr, grid, block, self.smem, stream, extra_addr)


_FMT_ITEM = re.compile(r"(\d*)([a-zA-Z])")


def param_info_fn():
    """cuFuncGetParamInfo (CUDA 12.4+): a kernel parameter's offset and size."""
    size_p = ctypes.POINTER(ctypes.c_size_t)
    return driver_fn("cuFuncGetParamInfo", ctypes.c_void_p, ctypes.c_size_t, size_p, size_p)


def _driver_layout(func: int, fmt: str) -> str:
    """A standard-size :mod:`struct` format of ``fmt``'s items ("P" as 8 bytes) at the parameter
    offsets the driver reports for ``func`` (cuFuncGetParamInfo), padding between them."""
    fn = param_info_fn()
    out, pos = ["="], 0
    for i, (count, code) in enumerate(_FMT_ITEM.findall(fmt)):
        item = f"{count}{'Q' if code == 'P' else code}"
        off, size = ctypes.c_size_t(), ctypes.c_size_t()
        err = fn(ctypes.c_void_p(func), i, ctypes.byref(off), ctypes.byref(size))
        if err or off.value < pos or size.value != struct.calcsize("=" + item):
            raise RuntimeError(f"kernel parameter {i} ({item}): driver reports offset {off.value}, size {size.value} "
                               f"(CUresult {err}); expected at or after {pos}, size {struct.calcsize('=' + item)}")
        out.append(f"{off.value - pos}x" if off.value > pos else "")
        out.append(item)
        pos = off.value + size.value
    return "".join(out)


class _LaunchAttr(ctypes.Structure):
    # CUlaunchAttribute: id, padding to 8 bytes, a 64-byte value union.
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int * 16)]


class _LaunchConfig(ctypes.Structure):
    _fields_ = [
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("shared_mem", ctypes.c_uint),
        ("stream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(_LaunchAttr)),
        ("num_attrs", ctypes.c_uint),
    ]


_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6
_pdl_state = threading.local()
_LAUNCH_EX = None


def _driver_launch(*args) -> None:
    """cuLaunchKernel through CuPy's driver binding (bound on first use, then called directly)."""
    global _driver_launch
    from cupy_backends.cuda.api import driver

    _driver_launch = driver.launchKernel
    driver.launchKernel(*args)


@functools.cache
def driver_fn(name: str, *argtypes):
    """The CUDA driver entry point ``name`` through ctypes, returning a CUresult, its argument
    conversions declared once. Raises OSError without a driver, AttributeError when this driver
    lacks the entry point."""
    fn = getattr(ctypes.CDLL("libcuda.so.1"), name)
    fn.argtypes = list(argtypes)
    fn.restype = ctypes.c_int
    return fn


def _pdl_launch(func: int, grid, block: int, smem: int, stream: int, extra_addr: int) -> None:
    # One launch configuration per (grid, block, smem, stream), built once per thread: a call only
    # looks it up and calls the driver.
    global _LAUNCH_EX
    if _LAUNCH_EX is None:
        _LAUNCH_EX = driver_fn("cuLaunchKernelEx", *[ctypes.c_void_p] * 4)
    try:
        configs = _pdl_state.configs
    except AttributeError:
        configs = _pdl_state.configs = {}
    key = (grid, block, smem, stream)
    entry = configs.get(key)
    if entry is None:
        if len(configs) > 4096:
            configs.clear()
        attr = _LaunchAttr()
        attr.id = _CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value[0] = 1
        cfg = _LaunchConfig()
        cfg.grid[0], cfg.grid[1], cfg.grid[2] = grid
        cfg.block[0], cfg.block[1], cfg.block[2] = block, 1, 1
        cfg.shared_mem = smem
        cfg.stream = stream
        cfg.attrs = ctypes.pointer(attr)
        cfg.num_attrs = 1
        entry = configs[key] = (ctypes.addressof(cfg), cfg, attr)
    err = _LAUNCH_EX(entry[0], func, None, extra_addr)
    if err:
        raise RuntimeError(f"cuLaunchKernelEx failed with CUresult {err}")


class DeviceModules:
    """The compiled families of one device, loaded once and kept for the process."""

    def __init__(self, device_id: int):
        import cupy

        self.device_id = device_id
        with cupy.cuda.Device(device_id) as dev:
            cc = int(dev.compute_capability)
        self.compute_capability = cc
        self.arch = arch_for(cc)
        self._modules = {}
        self._kernels = {}
        self._lock = threading.Lock()

    def module(self, family: str):
        import cupy

        with self._lock:
            mod = self._modules.get(family)
            if mod is None:
                fam = FAMILIES[family]
                with cupy.cuda.Device(self.device_id):
                    mod = cupy.RawModule(
                        code=family_source(family),
                        options=compile_options(self.arch),
                        name_expressions=list(fam.instances),
                    )
                    mod.compile()
                self._modules[family] = mod
            return mod

    def is_loaded(self, family: str) -> bool:
        """Whether ``family`` has been compiled and loaded on this device."""
        with self._lock:
            return family in self._modules

    def kernel(self, family: str, name: str, fmt: str, smem: int = 0) -> Kernel:
        """The kernel ``name`` of ``family``, launched with ``smem`` bytes of dynamic shared
        memory (allowed here, once, beyond the 48 KB that dynamic and static memory may take
        together by default)."""
        key = (family, name)
        k = self._kernels.get(key)
        if k is None:
            import cupy

            mod = self.module(family)
            with cupy.cuda.Device(self.device_id):
                fn = mod.get_function(name)
                if smem:
                    fn.max_dynamic_shared_size_bytes = smem
                k = Kernel(fn.kernel.ptr, fmt, name, smem)
            self._kernels[key] = k
        return k


_DEVICES: dict[int, DeviceModules] = {}
_DEVICES_LOCK = threading.Lock()


def device_modules(device_id: int) -> DeviceModules:
    """The per-process, per-device module cache."""
    with _DEVICES_LOCK:
        mods = _DEVICES.get(device_id)
        if mods is None:
            mods = _DEVICES[device_id] = DeviceModules(device_id)
        return mods
