"""Turn check outputs into the results.json verdict (shared by Spark and the reference)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from checkers.definitions import ANOMALIES, EXAMPLES

UNREAD_COLUMNS = [
    "partition", "value", "offset", "process", "ack_index", "ack_time", "invoke_time",
    "node", "epoch", "acks", "max_read_offset",
]  # fmt: skip
UNREAD_INTS = {"partition", "value", "offset", "ack_index", "ack_time", "invoke_time", "epoch",
               "max_read_offset"}


@dataclass
class CheckOutput:
    """What a checker backend found: anomaly (count, examples) plus loss evidence."""

    anomalies: dict[str, tuple[int, list[dict]]]
    unread: pd.DataFrame  # acked sends never read, with their partition's max read offset
    complete_partitions: set[int]
    stats: dict = field(default_factory=dict)


# Arrow's integer types as pandas' nullable integers. By default a column with a null becomes
# float64, which rounds every integer past 2^53: a value sent and read back would no longer
# match itself, and two values would collide (docs/checkers.md, "Exact integers").
_EXACT_INTS = {
    pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(), pa.int32(): pd.Int32Dtype(),
    pa.int64(): pd.Int64Dtype(), pa.uint8(): pd.UInt8Dtype(), pa.uint16(): pd.UInt16Dtype(),
    pa.uint32(): pd.UInt32Dtype(), pa.uint64(): pd.UInt64Dtype(),
}  # fmt: skip


def exact_frame(table: pa.Table) -> pd.DataFrame:
    """`table` in pandas with every integer column exact (nullable), never through float64."""
    return table.to_pandas(types_mapper=_EXACT_INTS.get)


def read_exact(path: Path) -> pd.DataFrame:
    """A Parquet table in pandas with exact integer columns (exact_frame)."""
    return exact_frame(pq.read_table(path))


def exact_rows(rows: list[dict], columns: list[str], ints: set[str]) -> pd.DataFrame:
    """Rows of Python values as a frame whose `ints` columns are nullable Int64: exact, where
    pandas would put a column of ints with a None through float64."""
    return pd.DataFrame({c: pd.array([r.get(c) for r in rows],
                                     dtype="Int64" if c in ints else object) for c in columns})


def py_scalar(x):
    """A plain Python value for JSON: NaN and pandas' NA -> None, integral floats -> int."""
    if x is pd.NA:
        return None
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
    n = int((unread["kind"] == "unconfirmed").sum())
    if missing and n:  # every acknowledged record there was read: nothing is unconfirmed
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
