"""The W8A8 activation quantizers alone: microseconds a call (graph replay of back-to-back calls on
one activation buffer, as a projection finds its input: just written, in the L2) per format, K and
row count, with the bytes moved (bf16 read, codes and scales written) as GB/s.

To compare two source trees in one run, run it twice with PYTHONPATH pointing at each (each
tree's kernels/ is compiled on its own) and give each run its --name.

    PYTHONPATH=. python bench/bench_quant.py [--formats int8,fp8_channel,fp8_block] [--k 2048,5120]
        [--rows 1,16,64,256] [--out bench/results] [--name quant_h200]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

KS = (2048, 4096, 5120, 6144, 17408)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--formats", default="int8,fp8_channel,fp8_block")
    ap.add_argument("--k", default=",".join(map(str, KS)))
    ap.add_argument("--rows", default="1,4,16,64,128,256")
    ap.add_argument("--replays", type=int, default=30)
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--name", default="quant_h200")
    args = ap.parse_args()

    import cupy
    import ml_dtypes
    import numpy as np

    import gdn_kernels
    from gdn_kernels import W8a8Ctx, bench

    ks = [int(v) for v in args.k.split(",")]
    rows_list = [int(v) for v in args.rows.split(",")]
    meta = bench.base_meta()
    meta["source"] = str(Path(gdn_kernels.__file__).resolve().parent.parent)
    ctx = W8a8Ctx(max_rows=max(rows_list), max_k=max(ks))
    stream = cupy.cuda.Stream(non_blocking=True)
    rng = np.random.default_rng(0)
    records = []
    for fmt in args.formats.split(","):
        for k in ks:
            w = bench.random_w8a8_weight(fmt, 128, k, seed=1)
            x = cupy.asarray(rng.standard_normal((max(rows_list), k)).astype(ml_dtypes.bfloat16).view(np.uint16))
            for rows in rows_list:
                us = bench.time_graph([lambda: ctx.quantize_activations(w, x.data.ptr, k, rows, stream.ptr)] * 20,
                                      stream, args.replays)
                scales = rows * (k // 128 if fmt == "fp8_block" else 1) * 4
                nbytes = rows * k * 2 + rows * k + scales
                records.append({"format": fmt, "K": k, "rows": rows, "us": us, "gbs": nbytes / us * 1e-3})
                print(f"{fmt} K={k} rows={rows}: {us:.2f} us", file=sys.stderr, flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps({"meta": meta, "records": records}, indent=1))
    lines = [f"# {args.name}", "", f"device {meta['device']['name']}, commit {meta['commit']}, {meta['date']}, "
             f"source {meta['source']}", "", "Quantizer alone, us a call (GB/s of bf16 read + codes and scales written).",
             "", "| format | K | " + " | ".join(f"{r} rows" for r in rows_list) + " |",
             "|---|---|" + "---|" * len(rows_list)]
    for fmt in args.formats.split(","):
        for k in ks:
            cells = [f"{r['us']:.2f} ({r['gbs']:.0f})" for r in records if r["format"] == fmt and r["K"] == k]
            lines.append(f"| {fmt} | {k} | " + " | ".join(cells) + " |")
    (out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
