"""Reading a whole history.jsonl back as a list, for the tests' assertions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import runformat
from runformat import Tally


def read_history(path: str | Path, allow_torn_tail: bool = True) -> list[dict[str, Any]]:
    """Parse history.jsonl (runformat's reader). A last line cut short by a crash (no
    newline, not valid JSON) is dropped when `allow_torn_tail`; any other bad line is an
    error naming file and line."""
    path = Path(path)
    tally = Tally(str(path))
    ops: list[dict[str, Any]] = list(runformat.history(path, tally))
    if tally.malformed or (tally.torn and not allow_torn_tail):
        raise ValueError(tally.named[0])
    return ops
