"""Read the checker's loss.parquet: a capped table for display plus times for the plot."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

# Shown in this order when present; the checker's verbose JSON columns (leader_changes,
# truncations, ...) stay in the parquet file, which the page links to.
COLUMNS = ("value", "partition", "offset", "ack_time", "node", "epoch", "kind", "isr_at_ack",
           "storage", "on_disk", "on_disk_at", "faults", "explanation")


@dataclass
class LossTable:
    total: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)  # the first `cap`, by ack time
    columns: list[str] = field(default_factory=list)
    other_columns: list[str] = field(default_factory=list)  # in the file, not on the page
    ack_times_s: dict[str, np.ndarray] = field(default_factory=dict)  # kind -> times


def read_loss(path: Path, cap: int = 200) -> LossTable:
    """Read `path`; known columns missing from the file are simply not shown."""
    table = pq.ParquetFile(path).read()  # not read_table: its pyarrow.dataset import costs 0.25-0.85 s
    result = LossTable(total=table.num_rows)
    shown = [c for c in COLUMNS if c in table.column_names]
    if "explanation" in shown and "faults" in shown:
        shown.remove("faults")  # the checker's explanation already names the faults
    result.columns = shown
    result.other_columns = [c for c in table.column_names if c not in shown]
    if "ack_time" in table.column_names and table.num_rows:
        table = table.take(pc.sort_indices(table, sort_keys=[("ack_time", "ascending")]))
    kinds = (pc.cast(table.column("kind"), "string") if "kind" in table.column_names
             else pa.array(["lost"] * table.num_rows, pa.string()))
    for entry in pc.value_counts(kinds).to_pylist():
        result.by_kind[str(entry["values"])] = int(entry["counts"])
    if "ack_time" in table.column_names:
        seconds = _seconds(table.column("ack_time"))
        for kind in result.by_kind:
            mask = pc.fill_null(pc.equal(kinds, kind), False).to_numpy(zero_copy_only=False)
            chosen = seconds[mask]
            result.ack_times_s[kind] = chosen[~np.isnan(chosen)]
    result.rows = table.slice(0, cap).select(result.columns).to_pylist()
    return result


def _seconds(column: pa.ChunkedArray) -> np.ndarray:
    # ack_time is the history's clock: integer ns since the run started (nulls become NaN).
    return pc.cast(column, pa.float64()).to_numpy(zero_copy_only=False) / 1e9
