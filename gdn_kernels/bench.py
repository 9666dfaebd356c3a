"""Timing harness shared by ``python -m gdn_kernels`` and ``bench/``.

Every timing is a CUDA-graph replay: one graph launches the measured call once per copy of the
weight, the copies together several times the L2, so each call reads its weight from HBM; the
median over replays, divided by the calls a replay makes, is the time of one call. Inputs are
random, never zeros. The floor of a case is its weight bytes (values and scales) over the copy
bandwidth measured in the same process.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

L2_ROTATE_FACTOR = 4
# The GDN and FFN projection shapes [N, K] the benchmarks, sweeps and schedule tests run over.
MODEL_SHAPES = [(12288, 2048), (2048, 4096), (16384, 5120), (5120, 6144), (34816, 5120), (5120, 17408)]


@dataclass
class Record:
    """One benchmark case: the JSON record of bench/results."""

    format: str
    N: int
    K: int
    rows: int
    us: float
    floor_us: float
    weight_bytes: int
    gbps: float
    ratio_floor: float
    peers: dict = field(default_factory=dict)  # name -> microseconds (e.g. cublas_bf16_us)
    max_ulp: float | None = None
    max_rel_err: float | None = None

    def flat(self) -> dict:
        d = asdict(self)
        peers = d.pop("peers")
        d.update(peers)
        if "cublas_bf16_us" in peers:
            d["ratio_cublas_bf16"] = self.us / peers["cublas_bf16_us"]
        return d


def device_info() -> dict:
    import cupy

    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    return {
        "name": props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
        "sm_count": props["multiProcessorCount"],
        "l2_bytes": props["l2CacheSize"],
        "compute_capability": dev.compute_capability,
        "driver": cupy.cuda.runtime.driverGetVersion(),
        "runtime": cupy.cuda.runtime.runtimeGetVersion(),
    }


def commit_hash() -> str:
    """The source commit: GDN_KERNELS_COMMIT when set (a copied tree has no .git), else git's."""
    if os.environ.get("GDN_KERNELS_COMMIT"):
        return os.environ["GDN_KERNELS_COMMIT"]
    try:
        root = Path(__file__).resolve().parent.parent
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "") if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def copy_bandwidth(nbytes: int = 2 << 30, reps: int = 20) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes written."""
    import cupy

    src = cupy.random.random(nbytes // 8, dtype=cupy.float64)
    dst = cupy.empty_like(src)
    stream = cupy.cuda.Stream(non_blocking=True)
    times = []
    with stream:
        for i in range(reps + 3):
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(stream)
            cupy.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, src.nbytes,
                                          cupy.cuda.runtime.memcpyDeviceToDevice, stream.ptr)
            end.record(stream)
            end.synchronize()
            if i >= 3:
                times.append(cupy.cuda.get_elapsed_time(start, end) * 1e-3)
    del src, dst
    return 2 * nbytes / float(np.median(times))


def rotation_count(weight_bytes: int, l2_bytes: int) -> int:
    """Copies of a weight that together exceed L2_ROTATE_FACTOR times the L2."""
    return max(2, -(-L2_ROTATE_FACTOR * l2_bytes // max(weight_bytes, 1)) + 1)


def time_graph(launches, stream, replays: int = 50, warmup: int = 5) -> float:
    """Median microseconds of one call: ``launches`` (a list of zero-argument callables that
    enqueue work on ``stream``) are captured into one graph, replayed, and the time divided by
    their number."""
    import cupy

    with stream:
        for f in launches:  # eager warm-up: module load, handles, lazy initialisation
            f()
    stream.synchronize()
    stream.begin_capture()
    try:
        for f in launches:
            f()
    finally:
        graph = stream.end_capture()
    graph.upload(stream)
    for _ in range(warmup):
        graph.launch(stream)
    times = []
    for _ in range(replays):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        graph.launch(stream)
        end.record(stream)
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) * 1e3 / len(launches))
    return float(np.median(times))


def cublas_bf16_launcher(x_ptr: int, w_ptr: int, out_ptr: int, rows: int, n: int, k: int, stream):
    """out[rows, N] = x[rows, K] . w[N, K]^T in bf16 through cublasGemmEx (fp32 compute), on
    ``stream`` (a CuPy stream): the returned callable enqueues one product and can be captured."""
    from gdn_kernels import _blas

    def launch():
        _blas.gemm_xwt(x_ptr, k, w_ptr, k, rows, n, k, out_ptr, n, stream.ptr, "bfloat16")

    return launch


def write_results(records: list[Record], name: str, meta: dict, outdir: Path) -> tuple[Path, Path]:
    """Write ``name``.json (meta + one record a case) and ``name``.md (a table) under outdir."""
    outdir.mkdir(parents=True, exist_ok=True)
    js = outdir / f"{name}.json"
    md = outdir / f"{name}.md"
    js.write_text(json.dumps({"meta": meta, "records": [r.flat() for r in records]}, indent=1))
    lines = [
        f"# {name}",
        "",
        f"device: {meta.get('device', {}).get('name')}, commit {meta.get('commit')}, "
        f"copy bandwidth {meta.get('copy_bw_tbs', 0):.2f} TB/s, {meta.get('date')}",
        "",
        "| format | N | K | rows | us | GB/s | x floor | floor us | peers (us) | x cuBLAS bf16 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        peers = ", ".join(f"{k.removesuffix('_us')} {v:.1f}" for k, v in r.peers.items())
        rc = r.us / r.peers["cublas_bf16_us"] if "cublas_bf16_us" in r.peers else float("nan")
        lines.append(
            f"| {r.format} | {r.N} | {r.K} | {r.rows} | {r.us:.2f} | {r.gbps:.0f} | {r.ratio_floor:.2f} | "
            f"{r.floor_us:.2f} | {peers} | {rc:.2f} |"
        )
    md.write_text("\n".join(lines) + "\n")
    return js, md


def base_meta() -> dict:
    return {
        "device": device_info(),
        "commit": commit_hash(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "host": platform.node(),
        "env": {k: v for k, v in os.environ.items() if k.startswith("GDN_KERNELS_")},
    }


def run_meta(layout: str | None = None) -> tuple[dict, float]:
    """A benchmark run's metadata (:func:`base_meta`, the measured copy bandwidth and the weight
    layout timed, where one is) and that bandwidth in bytes/s, announced on the run's first line."""
    meta = base_meta()
    bw = copy_bandwidth()
    meta["copy_bw_tbs"] = bw / 1e12
    if layout is not None:
        meta["layout"] = layout
    print(f"device {meta['device']['name']}, copy bandwidth {bw / 1e12:.2f} TB/s, commit {meta['commit']}", flush=True)
    return meta, bw


def random_w8a8_weight(fmt, n: int, k: int, seed: int, layout: str = "rows"):
    """A random device weight of a W8A8 format (random bytes, NaN-free for e4m3, random scales),
    in the row-major or the tile-major (``"tiles16"``) layout."""
    import cupy

    from gdn_kernels.weights import W8a8Weight, WeightFormat, scale_shape

    fmt = WeightFormat(fmt)
    rs = cupy.random.RandomState(seed)
    if fmt is WeightFormat.INT8:
        q = rs.randint(-127, 128, (n, k), dtype=cupy.int8).view(cupy.uint8)
    else:
        # Magnitudes up to 0x7e (448), a random sign: never the NaN codes 0x7f / 0xff.
        q = (rs.randint(0, 0x7F, (n, k), dtype=cupy.uint8) | (rs.randint(0, 2, (n, k), dtype=cupy.uint8) << 7))
    s = (rs.random_sample(scale_shape(fmt, n, k), dtype=cupy.float32) * 0.01 + 1e-4).astype(cupy.float32)
    w = W8a8Weight.from_pointers(q.data.ptr, s.data.ptr, n, k, format=fmt, owner=(q, s))
    return w.tile_major() if layout == "tiles16" else w


def check_w8a8_sample(w, x_bits: np.ndarray, y_bits: np.ndarray, cols: np.ndarray) -> tuple[float, float]:
    """Compare sampled output columns with the references: (max ulp, max relative error).

    x_bits [rows, K] and y_bits [rows, N] are bf16 bit patterns on the host.
    """
    import cupy
    import ml_dtypes

    from gdn_kernels import _quantize, _ptr, reference as ref
    from gdn_kernels.weights import WeightFormat

    x = x_bits.view(ml_dtypes.bfloat16)
    q_all = _quantize.cupy_view(_ptr.DevArray(w.qweight, (w.n, w.k), (w.k, 1), "uint8"))
    q = q_all[cupy.asarray(cols)].get()
    strides = (w.scale_shape[-1], 1) if len(w.scale_shape) == 2 else (1,)
    s = _quantize.cupy_view(_ptr.DevArray(w.scale, w.scale_shape, strides, "float32")).get()
    y = y_bits[:, cols].view(ml_dtypes.bfloat16)
    if w.format is WeightFormat.INT8:
        qx, sx = ref.quantize_int8_rows(x)
        acc = np.rint(qx.astype(np.float64) @ q.view(np.int8).astype(np.float64).T).astype(np.int64)
        y_ref = ref.w8a8_int8_epilogue(acc, sx, s[cols], ml_dtypes.bfloat16)
        a = y_ref.view(np.uint16).astype(np.int32)
        b = y.view(np.uint16).astype(np.int32)
        ordered = lambda v: np.where(v & 0x8000, 0x8000 - v, v)  # noqa: E731
        ulp = float(np.abs(ordered(a) - ordered(b)).max())
        y64 = y_ref.astype(np.float64)
    else:
        q8 = q.view(ml_dtypes.float8_e4m3fn)
        if w.format is WeightFormat.FP8_BLOCK:
            qx, sx = ref.quantize_fp8_groups(x)
            # The sampled columns come from many 128-row scale blocks.
            y64 = _fp8_block_cols(qx, sx, q8, s, cols)
        else:
            qx, sx = ref.quantize_fp8_rows(x)
            y64 = ref.fp8_channel_proj_f64(qx, sx, q8, s[cols])
        ulp = float("nan")
    err = np.abs(y.astype(np.float64) - y64)
    rel = float(np.max(err) / max(np.max(np.abs(y64)), 1e-30))
    return ulp, rel


def _fp8_block_cols(qx, sx, q8, s, cols):
    xd = qx.astype(np.float64)
    wd = q8.astype(np.float64)
    kb = xd.shape[1] // 128
    out = np.zeros((xd.shape[0], len(cols)))
    for b in range(kb):
        part = xd[:, b * 128:(b + 1) * 128] @ wd[:, b * 128:(b + 1) * 128].T
        out += part * sx[:, b:b + 1].astype(np.float64) * s[cols // 128, b][None, :].astype(np.float64)
    return out


def _case_buffers(n: int, k: int, max_rows: int, l2_bytes: int, seed: int):
    """The inputs a benchmark case shares between its projection and cuBLAS bf16, on the current
    stream: x [max_rows, k] random bf16 bits (by truncation: never zero), out [max_rows, n], bf16
    weight copies for cuBLAS that together exceed the L2 rotation, their output, and the output
    columns whose values are checked against the reference."""
    import cupy

    rs = cupy.random.RandomState(seed + 1000)
    x = (rs.standard_normal((max_rows, k), dtype=cupy.float32).view(cupy.uint32) >> 16).astype(cupy.uint16)
    out = cupy.empty((max_rows, n), cupy.uint16)
    wb = [(rs.standard_normal((n, k), dtype=cupy.float32).view(cupy.uint32) >> 16).astype(cupy.uint16)
          for _ in range(rotation_count(2 * n * k, l2_bytes))]
    out_bf16 = cupy.empty((max_rows, n), cupy.uint16)
    cols = np.random.default_rng(seed).choice(n, min(n, 96), replace=False)
    return x, out, wb, out_bf16, cols


def bench_w8a8_case(ctx, fmt, n: int, k: int, rows_list, copy_bw: float, l2_bytes: int, *,
                    peers=None, seed: int = 0, replays: int = 50, layout: str = "tiles16") -> list[Record]:
    """Time ``ctx.proj`` (activation quantization included) on a random weight [n, k] of ``fmt``
    in ``layout`` at each row count, beside cuBLAS bf16 and any ``peers`` (callables taking
    (fmt, n, k, rows, nrot) and returning {name_us: microseconds}). A case whose sampled output
    fails its check is raised, never reported."""
    import cupy

    from gdn_kernels.weights import WeightFormat

    fmt = WeightFormat(fmt)
    stream = cupy.cuda.Stream(non_blocking=True)
    # Every CuPy operation of the case (inputs, poison) runs on the measured stream, in order
    # with the projections.
    with stream:
        return _bench_w8a8_case(ctx, fmt, n, k, rows_list, copy_bw, l2_bytes, stream, peers, seed, replays, layout)


def _bench_w8a8_case(ctx, fmt, n, k, rows_list, copy_bw, l2_bytes, stream, peers, seed, replays, layout):
    import cupy

    from gdn_kernels.weights import WeightFormat

    # The sampled check reads the row-major weight (check_w8a8_sample); the timed weights are in
    # ``layout`` (a tile-major weight keeps its row-major source alive: same bytes, reordered).
    rows_first = random_w8a8_weight(fmt, n, k, seed)
    first = rows_first.tile_major() if layout == "tiles16" else rows_first
    nrot = rotation_count(first.nbytes, l2_bytes)
    weights = [first] + [random_w8a8_weight(fmt, n, k, seed + 1 + i, layout) for i in range(nrot - 1)]
    x, out, wb, out_bf16, cols = _case_buffers(n, k, max(rows_list), l2_bytes, seed)
    records = []
    for rows in rows_list:
        out.fill(0xFFFF)
        assert ctx.proj(first, x.data.ptr, k, rows, out.data.ptr, n, stream.ptr, dtype="bfloat16")
        stream.synchronize()
        ulp, rel = check_w8a8_sample(rows_first, x[:rows].get(), out[:rows].get(), cols)
        if fmt is WeightFormat.INT8 and not ulp <= 1:
            raise AssertionError(f"int8 [{n}, {k}] rows {rows}: {ulp} ulp from the reference")
        if not rel <= 2e-2:
            raise AssertionError(f"{fmt.value} [{n}, {k}] rows {rows}: relative error {rel:.3g}")
        launches = [
            (lambda w=w: ctx.proj(w, x.data.ptr, k, rows, out.data.ptr, n, stream.ptr, dtype="bfloat16"))
            for w in weights
        ]
        us = time_graph(launches, stream, replays)
        blas = [cublas_bf16_launcher(x.data.ptr, w.data.ptr, out_bf16.data.ptr, rows, n, k, stream) for w in wb]
        peer_us = {"cublas_bf16_us": time_graph(blas, stream, replays)}
        for peer in peers or ():
            peer_us.update(peer(fmt.value, n, k, rows, nrot))
        floor = first.nbytes / copy_bw * 1e6
        records.append(Record(fmt.value, n, k, rows, us, floor, first.nbytes, first.nbytes / us * 1e-3,
                              us / floor, peer_us, None if np.isnan(ulp) else ulp, rel))
    del weights, wb
    cupy.get_default_memory_pool().free_all_blocks()
    return records


def w8a8_gemm_launcher(ctx, w, rows: int, out_ptr: int, ldc: int, stream_ptr: int, cfg, family: str = "w8a8_gemm_sweep",
                       x_ptr: int | None = None, tiles: int | None = None):
    """A callable that launches the W8A8 GEMM of ``w`` with schedule ``cfg`` (an
    ``_build.GemmCfg``), writing bf16 ``out``: for the schedule sweep and the tests that every
    schedule gives the same bits. Without ``x_ptr`` it runs only the GEMM, on the activations
    already in ``ctx``'s workspace; with it (bf16 [rows, K], row stride K) the whole projection
    as ``ctx.proj`` launches it: the quantizer, then the GEMM programmatically dependent on it.
    ``tiles``: 8-token tiles a CTA (default ``_build.gemm_tiles(rows)``); fewer put the rows on
    more CTAs along the grid's x (each reading its weight tiles again)."""
    from gdn_kernels import _build
    from gdn_kernels.w8a8 import _FMT

    tiles = _build.gemm_tiles(rows) if tiles is None else tiles
    name = _build.gemm_instance(_FMT[w.format], tiles, "bfloat16", w.scale_dtype, cfg)
    kern = ctx.modules.kernel(family, name, cfg.args, cfg.smem)
    if cfg.qg == 2:
        # The e4m3 decode form asks only for the token tiles this K needs (the kernel allows the most).
        smem = cfg.decode_smem(w.k)
        if smem > cfg.smem:
            raise ValueError(f"{name}: K {w.k} needs {smem} bytes of shared memory, more than {cfg.smem}")
        kern = _build.Kernel(kern.ptr, cfg.args, name, smem)
    xq, xs = ctx.workspace
    grid = cfg.grid(rows, w.n, tiles)
    maps = ctx.tma_maps(w, cfg)

    def launch():
        kern.launch(grid, cfg.threads, stream_ptr, *maps, w.qweight, w.scale, xq, xs, out_ptr, ldc, w.n, w.k, rows)

    def launch_proj():
        ctx.quantize_activations(w, x_ptr, w.k, rows, stream_ptr)
        kern.launch_dependent(grid, cfg.threads, stream_ptr, *maps, w.qweight, w.scale, xq, xs, out_ptr, ldc, w.n,
                              w.k, rows)

    return launch if x_ptr is None else launch_proj


def tokens_to_mma_order(ctx, rows: int, k: int) -> None:
    """Put the quantized tokens of ``ctx``'s workspace ([rows, K] at row stride K) in the order
    the e4m3 warpgroup prototype reads (``_build.mma_order_words``), in place; for the sweep and
    the prototype's test (no shipped kernel reads that order)."""
    import cupy

    from gdn_kernels import _build

    mem = cupy.cuda.UnownedMemory(ctx.workspace[0], rows * k, ctx)
    words = cupy.ndarray((rows, k // 4), cupy.uint32, cupy.cuda.MemoryPointer(mem, 0))
    words[...] = words[:, cupy.asarray(_build.mma_order_words(k))]


def random_nvfp4_weight(n: int, k: int, seed: int):
    """A random device NVFP4 weight: all 16 codes, positive normal e4m3 block scales."""
    import cupy

    from gdn_kernels.nvfp4 import Nvfp4Weight

    rs = cupy.random.RandomState(seed)
    packed = rs.randint(0, 256, (n, k // 2), dtype=cupy.uint8)
    scale = rs.randint(0x08, 0x70, (n, k // 16), dtype=cupy.uint8)
    return Nvfp4Weight.from_pointers(packed.data.ptr, scale.data.ptr, n, k, 1e-3, owner=(packed, scale))


def check_nvfp4_sample(w, x_bits: np.ndarray, y_bits: np.ndarray, cols: np.ndarray) -> float:
    """Max relative error of sampled output columns against the float64 reference."""
    import cupy
    import ml_dtypes

    from gdn_kernels import _ptr, _quantize, reference as ref

    x = x_bits.view(ml_dtypes.bfloat16)
    c = cupy.asarray(cols)
    packed = _quantize.cupy_view(_ptr.DevArray(w.packed, (w.n, w.k // 2), (w.k // 2, 1), "uint8"))[c].get()
    scale = _quantize.cupy_view(_ptr.DevArray(w.scale, (w.n, w.k // 16), (w.k // 16, 1), "uint8"))[c].get()
    xp, xs, xgs = ref.quantize_nvfp4_rows(x)
    y64 = ref.nvfp4_proj_f64(xp, xs, xgs, packed, scale.view(ml_dtypes.float8_e4m3fn), np.float32(w.scale2))
    y = y_bits[:, cols].view(ml_dtypes.bfloat16).astype(np.float64)
    return float(np.max(np.abs(y - y64)) / max(np.max(np.abs(y64)), 1e-30))


def bench_nvfp4_case(ctx, n: int, k: int, rows_list, copy_bw: float, l2_bytes: int, *, peers=None,
                     seed: int = 0, replays: int = 50, layout: str = "tiles16") -> list[Record]:
    """As :func:`bench_w8a8_case` for the NVFP4 projection (``ctx`` an Nvfp4Ctx) on weights in
    ``layout`` (checked against the float64 reference from the plain bytes); ``peers`` take
    (plain weights, rows, x_ptr, stream) and return {name_us: microseconds}."""
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        first = random_nvfp4_weight(n, k, seed)
        nrot = rotation_count(first.nbytes, l2_bytes)
        weights = [first] + [random_nvfp4_weight(n, k, seed + 1 + i) for i in range(nrot - 1)]
        timed = [w.tile_major() for w in weights] if layout == "tiles16" else weights
        x, out, wb, out_bf16, cols = _case_buffers(n, k, max(rows_list), l2_bytes, seed)
        records = []
        for rows in rows_list:
            out.fill(0xFFFF)
            assert ctx.proj(timed[0], x.data.ptr, k, rows, out.data.ptr, n, stream.ptr, dtype="bfloat16")
            stream.synchronize()
            rel = check_nvfp4_sample(first, x[:rows].get(), out[:rows].get(), cols)
            if not rel <= 1e-2:
                raise AssertionError(f"nvfp4 [{n}, {k}] rows {rows}: relative error {rel:.3g}")
            launches = [(lambda w=w: ctx.proj(w, x.data.ptr, k, rows, out.data.ptr, n, stream.ptr, dtype="bfloat16"))
                        for w in timed]
            us = time_graph(launches, stream, replays)
            blas = [cublas_bf16_launcher(x.data.ptr, w.data.ptr, out_bf16.data.ptr, rows, n, k, stream) for w in wb]
            peer_us = {"cublas_bf16_us": time_graph(blas, stream, replays)}
            for peer in peers or ():
                peer_us.update(peer(weights, rows, x.data.ptr, stream, replays))
            floor = first.nbytes / copy_bw * 1e6
            records.append(Record("nvfp4", n, k, rows, us, floor, first.nbytes, first.nbytes / us * 1e-3,
                                  us / floor, peer_us, None, rel))
        del weights, timed, wb
    cupy.get_default_memory_pool().free_all_blocks()
    return records
