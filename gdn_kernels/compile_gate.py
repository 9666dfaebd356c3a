"""Compile every kernel instance for sm_90a without a GPU, and read the ptxas report.

Uses NVRTC through ``cuda.bindings`` (the ``cuda-bindings`` and ``nvidia-cuda-nvrtc`` wheels):
the compiler CuPy runs at load time, given the same source text and the same options, including
the ones CuPy appends. ``python -m gdn_kernels.compile_gate`` prints one line per instance.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

from gdn_kernels import _build


@dataclass(frozen=True)
class InstanceReport:
    """ptxas facts of one compiled template instance."""

    family: str
    name: str
    mangled: str
    registers: int
    stack_bytes: int
    spill_stores: int
    spill_loads: int
    smem_bytes: int

    @property
    def clean(self) -> bool:
        """No stack frame and no spills: nothing of the hot loop lives in local memory."""
        return self.stack_bytes == 0 and self.spill_stores == 0 and self.spill_loads == 0


class CompileError(RuntimeError):
    pass


def gate_options(arch: str = "sm_90a") -> tuple[str, ...]:
    """The options NVRTC sees at run time on a compute-capability-9.0 device, plus ``-v``.

    CuPy's RawModule passes the options through ``assemble_cupy_compiler_options`` (its include
    directories and the CUDA headers) and then appends its own (CUPY_ADDED_OPTIONS and the
    device's ``-arch``); the gate does the same.
    """
    from cupy._core.core import assemble_cupy_compiler_options

    opts = assemble_cupy_compiler_options(_build.compile_options(arch))
    return tuple(opts) + _build.CUPY_ADDED_OPTIONS + ("-arch=sm_90", "-Xptxas=-v")


def _check(result, what: str) -> None:
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != 0:
        raise CompileError(f"{what} failed: {err}")


def compile_family(family: str, arch: str = "sm_90a") -> list[InstanceReport]:
    """Compile one family with NVRTC; raise CompileError with the log on failure."""
    from cuda.bindings import nvrtc

    fam = _build.FAMILIES[family]
    src = _build.family_source(family).encode()
    err, prog = nvrtc.nvrtcCreateProgram(src, fam.source.encode(), 0, [], [])
    _check(err, "nvrtcCreateProgram")
    try:
        for name in fam.instances:
            _check(nvrtc.nvrtcAddNameExpression(prog, name.encode()), f"add {name}")
        opts = [o.encode() for o in gate_options(arch)]
        res = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        log = log.decode(errors="replace")
        if int(res[0]) != 0:
            raise CompileError(f"{fam.source}: NVRTC failed\n{log}")
        mangled = {}
        for name in fam.instances:
            err, low = nvrtc.nvrtcGetLoweredName(prog, name.encode())
            _check(err, f"lowered name of {name}")
            mangled[low.decode()] = name
        return _parse_report(family, log, mangled)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def _parse_report(family: str, log: str, mangled: dict[str, str]) -> list[InstanceReport]:
    reports = []
    current = None
    frame = None
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            current, frame = m.group(1), None
            continue
        m = _FRAME.search(line)
        if m and current:
            frame = tuple(int(v) for v in m.groups())
            continue
        m = _REGS.search(line)
        if m and current and frame is not None:
            reports.append(
                InstanceReport(
                    family=family,
                    name=mangled.get(current, current),
                    mangled=current,
                    registers=int(m.group(1)),
                    stack_bytes=frame[0],
                    spill_stores=frame[1],
                    spill_loads=frame[2],
                    smem_bytes=int(m.group(2) or 0),
                )
            )
            current = None
    missing = set(mangled) - {r.mangled for r in reports}
    if missing:
        raise CompileError(f"{family}: no ptxas report for {sorted(missing)}")
    return reports


def compile_all(arch: str = "sm_90a") -> list[InstanceReport]:
    reports = []
    for family in _build.FAMILIES:
        reports.extend(compile_family(family, arch))
    return reports


def main() -> int:
    reports = compile_all()
    bad = 0
    for r in reports:
        hot = r.name in _build.FAMILIES[r.family].hot
        flag = "ok" if r.clean or not hot else "LOCAL MEMORY"
        bad += flag != "ok"
        print(
            f"{flag:12s} regs {r.registers:3d} stack {r.stack_bytes:4d} spill {r.spill_stores}/"
            f"{r.spill_loads} smem {r.smem_bytes:6d}  {r.name}"
        )
    spilled = sum(not r.clean for r in reports)
    print(f"{len(reports)} instances compiled for sm_90a; shipped (hot) ones with local memory: {bad}; "
          f"sweep-only ones with local memory (allowed, never shipped): {spilled - bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
