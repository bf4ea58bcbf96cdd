"""The DuckDB implementation of the checks (tests/support/duck_checks.py, the benchmark's second
single-process baseline) is held to the pandas reference's exact results: every anomaly
scenario at once, and a workload-shaped history with injected anomalies."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from histories import merge
from support import duck_checks
from test_checker_anomalies import SCENARIOS

from checkers import reference
from checkers.ingest import ingest
from checkers.verdict import CheckOutput, classify_unread, records


def _same(d: CheckOutput, r: CheckOutput) -> None:
    assert json.loads(json.dumps(d.anomalies)) == json.loads(json.dumps(r.anomalies))
    assert records(classify_unread(d)) == records(classify_unread(r))
    assert d.complete_partitions == r.complete_partitions
    assert d.stats == r.stats


def test_duckdb_and_reference_agree_exactly_on_every_scenario(tmp_path):
    run = merge([s() for s in SCENARIOS]).write(tmp_path / "zoo")
    ing = ingest(run / "history.jsonl", run / "parquet")
    uncapped = 1_000_000
    d = duck_checks.run(ing.ops_path, ing.reads_path, "all", uncapped)
    r = reference.run(ing.ops_path, ing.reads_path, "all", uncapped)
    _same(d, r)
    found = {name for name, (n, _) in d.anomalies.items() if n}
    assert found == {name for name, (n, _) in r.anomalies.items() if n}
    assert len(found) >= 10  # the zoo holds nearly every anomaly


def test_duckdb_finds_the_injected_anomalies_of_a_workload_shaped_history(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from checker_throughput import generate, summary

    g = generate(tmp_path / "history.jsonl", 120_000)
    ing = ingest(tmp_path / "history.jsonl", tmp_path / "pq")
    d = duck_checks.run(ing.ops_path, ing.reads_path, "all")
    r = reference.run(ing.ops_path, ing.reads_path, "all")
    _same(d, r)
    assert summary(d) == g.injected
