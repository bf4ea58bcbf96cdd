"""Where a check reads its history and writes its results (checkers/check.py): a run folder's
history.jsonl and results.json, or any X.jsonl and X.results.json beside it. Apart from the
checks, so that `harness check` refuses a history that is not there, a FIFO or another
history's results before it imports Spark and pandas."""

from __future__ import annotations

import json
import os
from pathlib import Path

from checkers.exitcodes import UserError
from control.files import check_regular_file

RUN_HISTORY = "history.jsonl"


def locate(path: Path) -> tuple[Path, Path]:
    """(history.jsonl, run folder) for a run folder or a bare history file."""
    path = Path(path)
    history = path / RUN_HISTORY if path.is_dir() else path
    if history.exists() and not history.is_dir():
        check_regular_file(history)  # a FIFO or a device says what it is, and is never read
    if not history.is_file():
        raise FileNotFoundError(f"no history at {history}")
    return history, history.parent


def output_paths(history: Path) -> tuple[Path, Path]:
    """(results, loss) files of `history`: results.json and loss.parquet for a run folder's
    history.jsonl, else <stem>.results.json and <stem>.loss.parquet beside it."""
    if history.name == RUN_HISTORY:
        return history.parent / "results.json", history.parent / "loss.parquet"
    stem = history.stem or history.name
    return (history.with_name(f"{stem}.results.json"),
            history.with_name(f"{stem}.loss.parquet"))


def refuse_foreign_results(results_path: Path, history: Path) -> None:
    """Raise UserError if `results_path` exists and records another history than `history`
    (a run folder's results.json always belongs to its history.jsonl)."""
    if history.name == RUN_HISTORY or not os.path.lexists(results_path):
        return
    try:
        fd = os.open(results_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            owner = json.loads(f.read(64 << 20)).get("history")
    except (OSError, ValueError, AttributeError, RecursionError):
        owner = None
    if owner != history.name:
        whose = f"the history {owner!r}" if isinstance(owner, str) else "no history of ours"
        raise UserError(f"{results_path} exists and holds the results of {whose}, not of "
                        f"{history.name}: not replacing it (move it away)")
