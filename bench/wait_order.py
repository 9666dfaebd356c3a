"""Which weight loads a decode GEMM issues before its quantizer wait, as ptxas compiled them.

    python bench/wait_order.py [w8a8|nvfp4 ...]     (default: both)

The decode GEMMs request their first round of weight before `griddepcontrol.wait` (SASS:
ACQBULK), so that it streams while the quantizer still runs. ptxas moves non-coherent loads
(ld.global.nc) across that wait as it likes and sinks them below it where registers are tight;
it keeps coherent loads, cp.async copies (LDGSTS) and prefetches where they are. This compiles the
shipped W8A8 decode and NVFP4 tile-major instances with nvcc for sm_90a (the same sources and
ptxas as NVRTC's, as bench/sass_mix.py) and prints, for each, the weight loads (those with the
L2::256B hint, LTC256B), cp.async copies and prefetches before the last wait in program order
against the function's totals. Needs nvcc on the PATH, and cuobjdump there or nvdisasm there or
from the `nvidia-cuda-nvdisasm` wheel (nvidia/cu13/bin; the test extras install it).
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def shipped(path: str) -> list[str]:
    from gdn_kernels import _build
    from gdn_kernels.bench import MODEL_SHAPES

    if path == "nvfp4":
        return [n for n in _build.FAMILIES["fp4_mx_gemm"].instances if "tiled" in n and "bfloat16" in n]
    names = []
    for fmt in (_build.FMT_INT8, _build.FMT_FP8_CHANNEL, _build.FMT_FP8_BLOCK):
        for n, k in MODEL_SHAPES:
            for rows in (1, 2, 4, 8, 16, 24, 32, 48):
                tiles, cfg = _build.gemm_schedule(fmt, rows, n, k, True)
                if not (cfg.wg or cfg.stages):
                    names.append(cfg.name(fmt, tiles, "__nv_bfloat16", "float"))
    return list(dict.fromkeys(names))


def disassembler() -> list[str] | None:
    """cuobjdump -sass from the PATH, else nvdisasm -c from the PATH or the nvdisasm wheel."""
    if shutil.which("cuobjdump"):
        return ["cuobjdump", "-sass"]
    if shutil.which("nvdisasm"):
        return ["nvdisasm", "-c"]
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec else []:
        tool = Path(base) / "cu13" / "bin" / "nvdisasm"
        if tool.is_file():
            return [str(tool), "-c"]
    return None


def sass_of(family: str, names: list[str]) -> str:
    from gdn_kernels import _build

    src = _build.kernel_dir() / _build.FAMILIES[family].source
    refs = ",\n".join(f"  (const void*)&{n}" for n in names)
    with tempfile.TemporaryDirectory() as tmp:
        cu, cubin = Path(tmp) / "inst.cu", Path(tmp) / "inst.cubin"
        cu.write_text(f'#include "{src}"\nconst void* gdn_sass_refs[] = {{\n{refs}\n}};\n')
        subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", "-std=c++17", "-ftz=true", "-I",
                        str(_build.kernel_dir() / "include"), "-o", str(cubin), str(cu)], check=True)
        return subprocess.run(disassembler() + [str(cubin)], capture_output=True, text=True, check=True).stdout


def functions(sass: str) -> dict[str, list[str]]:
    """Mangled name -> instruction lines, from either tool's listing."""
    out, name = {}, None
    for line in sass.splitlines():
        m = re.match(r"\s*Function : (\S+)", line) or re.match(r"\s*\.text\.(\S+):", line)
        if m:
            name = m.group(1)
            out[name] = []
        elif name and "/*" in line:
            out[name].append(line)
    return out


def counts(lines: list[str]) -> str:
    waits = [i for i, l in enumerate(lines) if "ACQBULK" in l]
    if not waits:
        return "no wait"
    kinds = {"weight loads": lambda l: "LDG" in l and "LTC256B" in l,
             "cp.async": lambda l: "LDGSTS" in l,
             "prefetches": lambda l: "CCTL.E.PF" in l or "UBLKPF" in l}
    parts = []
    for kind, match in kinds.items():
        idx = [i for i, l in enumerate(lines) if match(l)]
        parts.append(f"{kind} {sum(i < waits[-1] for i in idx)}/{len(idx)}")
    return ", ".join(parts)


def main() -> int:
    paths = sys.argv[1:] or ["w8a8", "nvfp4"]
    for path in paths:
        family = "fp4_mx_gemm" if path == "nvfp4" else "w8a8_gemm"
        for mangled, lines in functions(sass_of(family, shipped(path))).items():
            name = subprocess.run(["c++filt", mangled], capture_output=True, text=True).stdout.strip()
            print(f"{name.split('(')[0].replace('void ', '')}: before the wait: {counts(lines)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
