"""Entry points: check a run folder or a bare history.jsonl and write results.json."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from checkers import reference, spark_checks
from checkers.definitions import EXAMPLES
from checkers.forensics import forensics
from checkers.ingest import HistoryError, ingest
from checkers.spark import get_session
from checkers.verdict import CheckOutput, classify_unread, records, results_dict

LOSS_EXAMPLE_COLUMNS = [
    "kind", "partition", "offset", "value", "ack_time", "node", "epoch", "storage",
    "on_disk_at", "explanation",
]  # fmt: skip


def locate(path: Path) -> tuple[Path, Path]:
    """(history.jsonl, run folder) for a run folder or a bare history file."""
    path = Path(path)
    history = path / "history.jsonl" if path.is_dir() else path
    if not history.is_file():
        raise FileNotFoundError(f"no history at {history}")
    return history, history.parent


def load_config(run_dir: Path, notes: list[str]) -> dict:
    test_json = run_dir / "test.json"
    if not test_json.exists():
        notes.append("no test.json beside the history: assuming acks=all and no allowed anomalies")
        return {}
    try:
        return json.loads(test_json.read_text()).get("config", {})
    except (json.JSONDecodeError, AttributeError) as e:
        raise ValueError(f"{test_json}: not a valid test.json ({e})") from None


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if hasattr(x, "item"):  # numpy scalars
        x = x.item()
    if isinstance(x, float) and math.isnan(x):
        return None
    return x


def write_results(run_dir: Path, results: dict) -> None:
    tmp = run_dir / "results.json.tmp"
    tmp.write_text(json.dumps(_jsonable(results), indent=2) + "\n")
    tmp.replace(run_dir / "results.json")


def _loss_summary(loss: pd.DataFrame) -> dict:
    return {
        "count": len(loss),
        "by_kind": loss["kind"].value_counts().to_dict(),
        "by_storage": loss["storage"].value_counts().to_dict(),
        "examples": records(loss.head(EXAMPLES)[LOSS_EXAMPLE_COLUMNS]),
        "file": "loss.parquet",
    }


def finish(out: CheckOutput, config: dict, history: Path, ops_path: Path, notes: list[str]) -> dict:
    """Verdict + loss forensics from a backend's output; writes results.json and loss.parquet."""
    run_dir = history.parent
    allow = list(config.get("checker", {}).get("allow", []))
    unread = classify_unread(out)
    results = results_dict(out, unread, allow, notes)
    lost = unread[unread["kind"].isin(["lost-write", "unseen"])]
    topic = config.get("topic", {}).get("name")
    loss = forensics(lost, ops_path, run_dir, topic, results["notes"])
    loss.to_parquet(run_dir / "loss.parquet", index=False)
    results["lost"] = _loss_summary(loss)
    write_results(run_dir, results)
    return results


def check_path(path: Path, spark_master: str | None = None, *, backend: str = "spark") -> dict:
    """Check a run folder or bare history.jsonl; write results.json + loss.parquet beside it.

    backend "reference" runs the single-process pandas checks instead of Spark (for
    comparison and tests; only Spark scales past one machine's memory).
    """
    history, run_dir = locate(path)
    notes: list[str] = []
    config = load_config(run_dir, notes)
    try:
        ing = ingest(history, run_dir / "parquet")
    except HistoryError as e:
        results = {
            "valid": "unknown",
            "anomalies": {},
            "stats": {},
            "notes": [f"history is corrupt, not checked: {e.total} bad line(s)"],
            "errors": e.errors,
            "lost": {},
        }
        write_results(run_dir, results)
        return results
    notes += ing.notes
    acks = str(config.get("workload", {}).get("acks", "all"))
    if backend == "reference":
        out = reference.run(ing.ops_path, ing.reads_path, acks)
    else:
        spark = get_session(spark_master, config.get("checker", {}).get("spark_master"))
        out = spark_checks.run(spark, ing.ops_path, ing.reads_path, acks)
    return finish(out, config, history, ing.ops_path, notes)


def exit_code(results: dict) -> int:
    """0 valid, 1 invalid, 2 unknown (the `harness check` contract)."""
    valid = results.get("valid")
    if valid is True:
        return 0
    if valid is False:
        return 1
    return 2
