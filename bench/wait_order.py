"""Which weight requests a decode GEMM issues before its quantizer wait, as compiled.

    python bench/wait_order.py [CUBIN_OR_DIR ...]     (default: $CUPY_CACHE_DIR, the modules CuPy built)

The decode GEMMs ask for their first weight bytes before `griddepcontrol.wait` (SASS: ACQBULK), so
that they stream while the quantizer still runs. ptxas is free to move non-coherent loads across
that wait, and sinks them below it where registers are tight; L2 prefetches (CCTL.E.PF2, UBLKPF)
and cp.async copies (LDGSTS) stay where they are. For each W8A8 decode and NVFP4 tile-major
function this prints, before the wait that precedes its main loop (the last one in program order),
the weight loads (LDG ... CONSTANT), prefetches and cp.async copies against the function's totals.
Needs cuobjdump or nvdisasm on the PATH (a machine without a GPU can take nvdisasm from the
`nvidia-cuda-nvdisasm` wheel, nvidia/cu13/bin).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FUNCS = re.compile(r"(w8a8_gemm_kernel|fp4_tiled_gemm_kernel)")


def cubins(paths: list[str]) -> list[bytes]:
    """The ELF images in the given files (CuPy's cache files hold a hash, then the cubin)."""
    out = []
    for p in paths:
        files = sorted(Path(p).rglob("*")) if Path(p).is_dir() else [Path(p)]
        for f in files:
            if f.is_file():
                data = f.read_bytes()
                at = data.find(b"\x7fELF")
                if at >= 0:
                    out.append(data[at:])
    return out


def disassemble(image: bytes) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(image)
        f.flush()
        if shutil.which("cuobjdump"):
            return subprocess.run(["cuobjdump", "-sass", f.name], capture_output=True, text=True).stdout
        return subprocess.run(["nvdisasm", "-c", f.name], capture_output=True, text=True).stdout


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
    w = waits[-1]
    kinds = {"weight loads": lambda l: "LDG" in l and "CONSTANT" in l,
             "prefetches": lambda l: "CCTL.E.PF" in l or "UBLKPF" in l,
             "cp.async": lambda l: "LDGSTS" in l}
    parts = []
    for k, f in kinds.items():
        idx = [i for i, l in enumerate(lines) if f(l)]
        parts.append(f"{k} {sum(i < w for i in idx)}/{len(idx)}")
    return ", ".join(parts)


def main() -> int:
    paths = sys.argv[1:] or [os.environ.get("CUPY_CACHE_DIR", str(Path.home() / ".cupy" / "kernel_cache"))]
    seen = set()
    for image in cubins(paths):
        for name, lines in functions(disassemble(image)).items():
            if not FUNCS.search(name) or name in seen:
                continue
            seen.add(name)
            dem = subprocess.run(["c++filt", name], capture_output=True, text=True).stdout.strip() or name
            print(f"{dem.split('(')[0]}: before the wait {counts(lines)}")
    print(f"{len(seen)} functions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
