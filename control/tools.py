"""Where the programs `make bootstrap` builds are found: histingest and histcheck (the
checkers' native programs, native/histingest) and toxiproxy-server (docs/toxiproxy.md).

They are installed beside this interpreter, in .venv/bin, where the harness looks first; then
on the PATH. `$HARNESS_TOOLS`, a folder, replaces .venv/bin: another build of them (a changed
native/histingest, built with `cargo build --target-dir ...`), or an empty folder to run as a
machine without Go or Rust would (the checkers then take their Python and Spark paths, and a
toxic fault is refused at the start)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

TOOLS_ENV = "HARNESS_TOOLS"


def tools_dir() -> Path:
    """The folder looked in first: $HARNESS_TOOLS, else the one beside this interpreter."""
    return Path(os.environ.get(TOOLS_ENV) or Path(sys.prefix) / "bin")


def find_tool(name: str) -> str | None:
    """The program `name` from tools_dir(), else from the PATH; None when neither has it."""
    beside = tools_dir() / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)
