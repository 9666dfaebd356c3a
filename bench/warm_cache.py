"""Compile kernel families into CuPy's on-disk cache, one process a family, all at once.

CuPy compiles a family as one NVRTC call on one CPU core, so a cold run of the tests pays each
family's compile in turn; compiling them side by side first (same sources, options and instance
lists as the library's own loads, so the same cache entries) leaves the tests only the cache
reads. Prints each family's compile time.

    CUPY_CACHE_DIR=/tmp/cache python bench/warm_cache.py [FAMILY ...]   (default: every family)
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

_ONE = ("import sys, time; from gdn_kernels import _build; t = time.perf_counter(); "
        "_build.device_modules(0).module(sys.argv[1]); print(f'{sys.argv[1]} {time.perf_counter() - t:.1f} s')")


def main(argv: list[str]) -> int:
    from gdn_kernels import _build

    families = argv or list(_build.FAMILIES)
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", _ONE, fam], cwd=ROOT) for fam in families]
    failed = [fam for fam, p in zip(families, procs) if p.wait() != 0]
    print(f"{len(families)} families in {time.perf_counter() - t0:.1f} s" + (f", failed: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
