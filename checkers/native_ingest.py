"""history.jsonl -> the ops and reads Parquet tables, natively: `histingest`, a Rust program
(native/histingest) that parses the history on every core and writes both tables in one
streaming pass.

This is the fast path of `checkers.ingest.ingest`. It converts a history exactly as the exact
path (`checkers/ingest.py`, `_Converter`) does, or refuses it: any line that path rejects,
or that the native reader cannot type exactly as Python would (a float or an integer past
64 bits in a nemesis value, a duplicate key, a byte-order mark, a lone surrogate, a line past
the exact path's limit), makes it stop with `NativeUnsure`, and the exact path then reads the
history and names each bad line. So a corrupt history is still reported line by line, and
the tables never depend on which path wrote them (tests/checkers/test_checker_ingest.py holds
the two paths to the same tables, on every anomaly scenario and on the benchmark's
generator).

Memory is bounded whatever the history's size: a few 4 MB blocks in flight, the rows
buffered per table while they are clustered by partition (at most BUFFERED of checkers/ingest.py), and the longest line with its records (a final read holds a whole
partition in one line: 15M records, 318 MB of JSON, take about 0.6 GB while it is read).

A torn last line (no newline, not JSON: a crashed run) is skipped as on the exact path; the
native reader says which line it was and the exact path's parser words the note, so the
note is the same on both paths.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path

from control.tools import find_tool

# Where `make bootstrap` installs it (beside the venv's python), else on the PATH
# (control.tools).
BINARY = "histingest"
UNSURE, NO_SPACE = 3, 4  # its exit codes (native/histingest/src/main.rs)


class NativeUnsure(Exception):
    """The native path will not vouch for this history: the exact path must read it."""


def binary(name: str = BINARY) -> str | None:
    """The native program `name` (histingest, histcheck), or None when it is not built
    (control.tools: beside this interpreter or in $HARNESS_TOOLS, else on the PATH)."""
    return find_tool(name)


def native_ingest(history: Path, ops_path: Path, reads_path: Path, max_line: int,
                  partitions: int | None,
                  layout: tuple[int, int] | None = None) -> tuple[int, int, int | None]:
    """Write both tables: (ops, reads, the line number of a torn last line or None), or raise
    NativeUnsure (nothing useful written) when the exact path must read this history.
    `layout` is the exact path's (ROW_GROUP, BUFFERED): the tables' clustering by partition
    (checkers/ingest.py), so that both paths write the same row groups; None: histingest's
    own, the same numbers."""
    program = binary()
    if program is None:
        raise NativeUnsure(f"{BINARY} is not built (make bootstrap builds it)")
    max_partition = 2**31 - 1 if partitions is None else partitions - 1
    cmd = [program, str(history), str(ops_path), str(reads_path),
           "--max-partition", str(max_partition), "--max-line", str(max_line),
           "--threads", str(os.cpu_count() or 1)]
    if layout is not None:
        cmd += ["--row-group", str(layout[0]), "--buffered", str(layout[1])]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    why = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
    if done.returncode == NO_SPACE:  # the environment's error, as on the exact path
        raise OSError(errno.ENOSPC, "No space left on device")
    if done.returncode == UNSURE:
        raise NativeUnsure(f"the native reader stopped: {why[0]:.200}")
    if done.returncode != 0:  # an I/O error, a crash: the exact path reads it, or says why
        raise NativeUnsure(f"the native reader failed: {why[0]:.200}")
    out = json.loads(done.stdout)
    return int(out["ops"]), int(out["reads"]), out["torn_line"]
