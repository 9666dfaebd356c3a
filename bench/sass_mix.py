"""Opcode mix of compiled kernels, from the cubins in CuPy's kernel cache (needs cuobjdump).

    CUPY_CACHE_DIR=build/cupy_cache python bench/sass_mix.py MANGLED_NAME [...]

For each kernel (mangled name, as the compile gate's reports give it): the instruction count and
the most frequent opcodes of its SASS, and the opcodes of its hottest loop (the longest block
between a label and a backward branch).
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

_INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*)")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")


def sass(entry: Path, name: str) -> str:
    """SASS of kernel ``name`` in a cache entry (CuPy stores a header before the cubin's ELF)."""
    data = entry.read_bytes()
    elf = data.find(b"\x7fELF")
    if elf < 0 or name.encode() not in data:
        return ""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(data[elf:])
        f.flush()
        r = subprocess.run(["cuobjdump", "-sass", "-fun", name, f.name], capture_output=True, text=True)
    return r.stdout if r.returncode == 0 and "Function" in r.stdout else ""


def mix(text: str) -> tuple[int, collections.Counter, collections.Counter]:
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
    # The longest backward branch spans the main loop's body.
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
    cache = Path(os.environ.get("CUPY_CACHE_DIR", Path.home() / ".cupy" / "kernel_cache"))
    cubins = sorted(p for p in cache.rglob("*") if p.is_file())
    for name in sys.argv[1:]:
        text = next((t for t in (sass(c, name) for c in cubins) if t), "")
        if not text:
            print(f"{name}: not found in {len(cubins)} cubins under {cache}")
            continue
        n, total, loop = mix(text)
        print(f"{name}: {n} instructions; loop {sum(loop.values())}")
        print("  all:  " + " ".join(f"{op} {c}" for op, c in total.most_common(24)))
        print("  loop: " + " ".join(f"{op} {c}" for op, c in loop.most_common(24)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
