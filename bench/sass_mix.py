"""Opcode mix of kernel instances: compiled with nvcc for sm_90a (the same sources, the same
ptxas as NVRTC's), disassembled with cuobjdump.

    python bench/sass_mix.py FAMILY 'INSTANCE' [...]
    python bench/sass_mix.py fp4_mx_gemm 'fp4_tiled_gemm_kernel<8, 1, 1, 10, 4, __nv_bfloat16>'

For each instance: its instruction count and most frequent opcodes, and those of its main loop
(the longest span closed by a backward branch). Needs nvcc and cuobjdump on the PATH; a machine
without a GPU can take cuobjdump from the `nvidia-cuda-cuobjdump` wheel (its nvidia/cu13/bin).
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

_INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*)")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")


def mix(text: str) -> tuple[int, collections.Counter, collections.Counter]:
    """(instructions, opcode counts, opcode counts of the main loop) of one function's SASS."""
    insns, labels, pending = [], {}, []
    for line in text.splitlines():
        lab = _LABEL.match(line)
        if lab:
            pending.append(lab.group(1))
            continue
        m = _INSN.search(line)
        if m:
            addr = int(m.group(1), 16)
            for name in pending:
                labels[name] = addr
            pending = []
            insns.append((addr, m.group(2), m.group(3)))
    total = collections.Counter(op.split(".")[0] for _, op, _ in insns)
    best = (0, -1)
    for addr, op, rest in insns:
        if not op.startswith("BRA"):
            continue
        t = re.search(r"(\.L_x_\d+)|0x([0-9a-f]+)", rest)
        target = labels.get(t.group(1)) if t and t.group(1) else int(t.group(2), 16) if t else None
        if target is not None and target < addr and addr - target > best[1] - best[0]:
            best = (target, addr)
    loop = collections.Counter(op.split(".")[0] for a, op, _ in insns if best[0] <= a <= best[1])
    return len(insns), total, loop


def main() -> int:
    from gdn_kernels import _build

    family, names = sys.argv[1], sys.argv[2:]
    src = _build.kernel_dir() / _build.FAMILIES[family].source
    refs = ",\n".join(f"  (const void*)&{n}" for n in names)
    with tempfile.TemporaryDirectory() as tmp:
        cu, cubin = Path(tmp) / "inst.cu", Path(tmp) / "inst.cubin"
        cu.write_text(f'#include "{src}"\nconst void* gdn_sass_refs[] = {{\n{refs}\n}};\n')
        subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", "-std=c++17", "-I", str(_build.kernel_dir() / "include"),
                        "-o", str(cubin), str(cu)], check=True)
        text = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    funcs = re.split(r"\n\s*Function : ", text)[1:]
    for f in funcs:
        n, total, loop = mix(f)
        print(f"{f.splitlines()[0].strip()}: {n} instructions; main loop {sum(loop.values())}")
        print("  all:  " + " ".join(f"{op} {c}" for op, c in total.most_common(24)))
        print("  loop: " + " ".join(f"{op} {c}" for op, c in loop.most_common(24)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
