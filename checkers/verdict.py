"""Turn check outputs into the results.json verdict (shared by Spark and the reference)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from checkers.definitions import ANOMALIES, EXAMPLES

UNREAD_COLUMNS = [
    "partition", "value", "offset", "process", "ack_index", "ack_time", "invoke_time",
    "node", "epoch", "acks", "max_read_offset",
]  # fmt: skip


@dataclass
class CheckOutput:
    """What a checker backend found: anomaly (count, examples) plus loss evidence."""

    anomalies: dict[str, tuple[int, list[dict]]]
    unread: pd.DataFrame  # acked sends never read, with their partition's max read offset
    complete_partitions: set[int]
    stats: dict = field(default_factory=dict)


def py_scalar(x):
    """A plain Python value for JSON: NaN -> None, integral floats (pandas' NaN-able ints) -> int."""
    if hasattr(x, "item"):
        x = x.item()
    if isinstance(x, float):
        return None if math.isnan(x) else (int(x) if x.is_integer() else x)
    return x


def records(df: pd.DataFrame) -> list[dict]:
    return [{k: py_scalar(v) for k, v in row.items()} for row in df.to_dict("records")]


def classify_unread(out: CheckOutput) -> pd.DataFrame:
    """Label each acked-but-unread record lost-write, unseen or unconfirmed."""
    u = out.unread.copy()
    passed = u["max_read_offset"].notna() & (u["max_read_offset"] >= u["offset"])
    complete = u["partition"].isin(list(out.complete_partitions))
    u["kind"] = "unconfirmed"
    u.loc[complete, "kind"] = "unseen"
    u.loc[passed, "kind"] = "lost-write"
    return u.sort_values(["partition", "offset", "value"]).reset_index(drop=True)


def _record_examples(u: pd.DataFrame) -> list[dict]:
    cols = ["partition", "offset", "value", "ack_index", "process", "ack_time", "node", "epoch",
            "max_read_offset"]  # fmt: skip
    return records(u.head(EXAMPLES)[cols])


def anomalies_with_loss(out: CheckOutput, unread: pd.DataFrame) -> dict[str, tuple[int, list]]:
    found = dict(out.anomalies)
    for kind in ("lost-write", "unseen"):
        rows = unread[unread["kind"] == kind]
        found[kind] = (len(rows), _record_examples(rows))
    return {name: found[name] for name in ANOMALIES}


def unknown_reasons(out: CheckOutput, unread: pd.DataFrame) -> list[str]:
    reasons = []
    acked = {int(p) for p in out.stats.get("acked_by_partition", {})}
    if not acked:
        reasons.append("no acknowledged sends in the history: nothing to check")
    missing = sorted(acked - out.complete_partitions)
    if missing:
        n = int((unread["kind"] == "unconfirmed").sum())
        reasons.append(
            f"no final-poll read partition(s) {missing} up to its high watermark; "
            f"{n} acknowledged record(s) there were never read and are unconfirmed"
        )
    return reasons


def verdict(found: dict[str, tuple[int, list]], allow: list[str], reasons: list[str]):
    if any(count and name not in allow for name, (count, _) in found.items()):
        return False
    return "unknown" if reasons else True


def add_invariants(results: dict, found: dict[str, tuple[int, list]], notes: list[str],
                   stats: dict, allow: list[str]) -> None:
    """Merge the protocol-invariant violations of a run (checkers.trace.findings) into its
    results: each invariant violated is an anomaly `invariant:<Name>` with its count and
    examples, and one that `allow` does not list makes the run invalid, whatever the history
    shows (a run stopped at its first violation has no final read, hence no loss verdict)."""
    for name, (count, examples) in sorted(found.items()):
        if count:
            results["anomalies"][name] = {"count": count, "examples": examples}
    if any(count and name not in allow for name, (count, _) in found.items()):
        results["valid"] = False
    results["notes"] = list(results.get("notes", [])) + list(notes)
    if stats:
        results.setdefault("stats", {})["invariants"] = stats


def results_dict(
    out: CheckOutput, unread: pd.DataFrame, allow: list[str], notes: list[str]
) -> dict:
    found = anomalies_with_loss(out, unread)
    reasons = unknown_reasons(out, unread)
    return {
        "valid": verdict(found, allow, reasons),
        "anomalies": {
            name: {"count": count, "examples": ex} for name, (count, ex) in found.items() if count
        },
        "allowed": sorted(allow),
        "stats": {
            **out.stats,
            "checked": list(ANOMALIES),
            "unconfirmed": int((unread["kind"] == "unconfirmed").sum()),
            "complete_partitions": sorted(out.complete_partitions),
        },
        "notes": notes + reasons,
    }
