"""A check's transactional part: run on a history whose parts carry `mop`, merged into the
results the per-partition checks gave (checkers/check.py calls it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from checkers.txn.analysis import EXAMPLES, NAMES_FOUND, Findings, analyse
from checkers.txn.ops import has_transactions, load
from runformat.run_config import RunConfig

BUDGET_S = 300.0


def transactional(history: Path, config: RunConfig, budget_s: float = BUDGET_S
                  ) -> Findings | None:
    """The transactional findings, or None for a history without transactions. The run's
    `[checker] ww_deps` asks for write-write dependencies from offsets (off by default)."""
    if not has_transactions(history):
        return None
    findings = analyse(load(history), budget_s, config.ww_deps)
    if not config.ww_deps:
        findings.notes.append(
            "write cycles (G0, G0-process, G0-realtime) not judged: offsets do not order "
            "concurrent Kafka transactions' writes; [checker] ww_deps = true infers them")
    return findings


def drop_witnessed(unread: pd.DataFrame, findings: Findings,
                   complete: set[int] | frozenset[int]) -> pd.DataFrame:
    """Acknowledged records that no ok poll returned but a failed or crashed transaction's
    poll did: the broker returned them, so they are not lost (nor unconfirmed). A partition
    whose final read completed keeps its verdict: that read is the log's final state."""
    seen = {(k, v) for k, _, v in findings.witnessed}
    if not seen or unread.empty:
        return unread
    keep = [p in complete or (p, v) not in seen
            for p, v in zip(unread["partition"].astype(int), unread["value"].astype(int),
                            strict=True)]
    return unread[keep].reset_index(drop=True)


def merge(results: dict[str, Any], findings: Findings, allow: list[str]) -> None:
    """Add the findings to the results: counts add up, examples fill up to EXAMPLES. A
    search that ran out of time leaves the verdict unknown (with a note) unless something
    already makes it invalid."""
    anomalies = results["anomalies"]
    for name, (count, examples) in findings.found.items():
        entry = anomalies.setdefault(name, {"count": 0, "examples": []})
        entry["count"] += count
        entry["examples"] = (entry["examples"] + examples)[:EXAMPLES]
    if any(a["count"] and name not in allow for name, a in anomalies.items()):
        results["valid"] = False
    elif not findings.complete and results["valid"] is True:
        results["valid"] = "unknown"
    results["notes"] = list(results.get("notes", [])) + findings.notes
    stats = results.setdefault("stats", {})
    stats["checked"] = list(dict.fromkeys([*stats.get("checked", []), *NAMES_FOUND]))
    stats["transactions"] = findings.stats
