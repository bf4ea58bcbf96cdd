"""General linearizability checker: Wing & Gong / Lowe search with memoisation and
P-compositionality, for register, cas-register, append-register and kv histories.

    from checkers.linear import check_file
    verdict = check_file("history.jsonl", "cas-register", budget_s=60)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkers.linear.check import Runner, check, run_local
from checkers.linear.history import UNKNOWN, HistoryError, Operation, pair, pair_events
from checkers.linear.importers import read_events
from checkers.linear.models import (
    KV,
    AppendRegister,
    CASRegister,
    Model,
    Partition,
    Register,
    make_model,
)
from checkers.linear.search import Budget, SearchResult, search

__all__ = [
    "KV", "UNKNOWN", "AppendRegister", "Budget", "CASRegister", "HistoryError", "Model",
    "Operation", "Partition", "Register", "Runner", "SearchResult", "check", "check_file",
    "make_model", "pair", "pair_events", "read_events", "run_local", "search",
]


def check_file(path: str | Path, model: str | Model, *, budget_s: float | None = None,
               max_states: int | None = None, runner: Runner = run_local) -> dict[str, Any]:
    """Read, pair and check a history file (.jsonl, .edn or .txt)."""
    m = make_model(model) if isinstance(model, str) else model
    ops = pair(read_events(path))
    return check(ops, m, Budget.of(budget_s, max_states), runner)
