"""Tests of a part `make bootstrap` may leave out: the native programs (no Rust) and Toxiproxy
(no Go). Such a test carries the part's marker (`native`, `toxiproxy`). It is skipped, with
bootstrap's own words, only when the part's program is missing AND bootstrap wrote that it
skipped the part (.venv/.skipped-<part>); a program missing for any other reason (a broken
build, a deleted file) fails the test as before, so the skip never hides a part claimed to
be built."""

from __future__ import annotations

import sys
from pathlib import Path

from checkers import native_checks, native_ingest
from control import toxiproxy
from control.tools import find_tool

# marker -> (the programs it needs, bootstrap's note when it skipped them)
PARTS = {
    "native": (lambda: native_ingest.binary() and native_checks.binary(), "skipped-native"),
    "toxiproxy": (lambda: find_tool(toxiproxy.BINARY), "skipped-toxiproxy"),
}


def skip_reason(part: str) -> str | None:
    """Why the tests of `part` cannot run on this machine, or None when they must."""
    present, note = PARTS[part]
    if present():
        return None
    written = Path(sys.prefix) / f".{note}"
    return written.read_text().strip() if written.is_file() else None
