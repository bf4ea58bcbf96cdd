"""What ran a benchmark: the interpreter, the CPU and the load average. This project's figures
depend on all three (the same tree ran 1.25-1.38x as fast under a CPython built with PGO as
under one without, docs/simulation.md, "The interpreter"; the VMs here differ by up to 2x
from one another, and from one day to the next), so each benchmark of issue 36 prints this
line before its figures."""

from __future__ import annotations

import contextlib
import os
import platform
import sys


def cpu() -> str:
    """The CPU's model name as the kernel gives it ("AMD EPYC"), else the machine's type."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def what_ran(python: str | None = None) -> str:
    """One line: `python` (default: this process's interpreter, its version and the executable
    a venv was made from), the CPU, its cores and the load average now."""
    if python is None:
        base = getattr(sys, "_base_executable", sys.executable)
        python = f"{platform.python_implementation()} {platform.python_version()} ({base})"
    return f"{python}; {cpu()}, {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}"
