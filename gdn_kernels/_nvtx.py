"""NVTX ranges around dispatches, switched on by GDN_KERNELS_NVTX=1 (off: one bool test)."""

from __future__ import annotations

import os

ENABLED = os.environ.get("GDN_KERNELS_NVTX", "0") not in ("", "0")


def push(name: str) -> None:
    from cupy.cuda import nvtx

    nvtx.RangePush(name)


def pop() -> None:
    from cupy.cuda import nvtx

    nvtx.RangePop()
