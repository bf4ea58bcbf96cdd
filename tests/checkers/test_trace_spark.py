"""The trace check on Spark (checkers/trace_spark.py) against the single-process one
(checkers/trace.py): the same violations, evaluation counts, events and undecided invariants,
on simulated runs of several partitions (whose events.jsonl and history.jsonl have the form
of a real run's) with faults that break the protocol, and with none broken. Uses the
session-wide local Spark of tests/checkers/conftest.py."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from checkers.trace import check_run, findings
from checkers.trace_spark import check_run_spark
from harness.campaign_spec import load_spec
from harness.sim_run import as_simulated, simulate_into
from harness.test import Test
from runformat.run_config import RunConfig

ROOT = Path(__file__).resolve().parents[2]


def simulated_trace(folder: Path, config_name: str, seed: int, partitions: int) -> dict:
    """A 15 s simulated run of a validation cell over `partitions` partitions, as a trace only
    (its invariants.jsonl removed, so the checkers replay events.jsonl)."""
    _, cells = load_spec(ROOT / "campaigns" / "validation.toml")
    config = copy.deepcopy(next(c.resolved for c in cells if c.config == config_name))
    config["topic"]["partitions"] = partitions
    config["time_limit"] = 15
    config["seed"] = seed
    config = as_simulated(config)
    simulate_into(Test.of(config, folder, check=False), folder, keep_going=True)
    (folder / "invariants.jsonl").unlink()
    return RunConfig.of(config)


def summary(report) -> tuple:
    violations = sorted((v["name"], v["partition"], v["time"], v["detail"]) for v in report.violations)
    return violations, report.checks, report.events, sorted(report.undecided), report.notes


@pytest.mark.parametrize("config_name, seed, expect_violations", [
    ("unclean-election", 1, True), ("safe", 1, False)])
def test_spark_replays_each_partition_as_the_single_process_check_does(
        tmp_path, spark, config_name, seed, expect_violations):
    config = simulated_trace(tmp_path, config_name, seed, partitions=3)
    single = check_run(tmp_path, config)
    on_spark = check_run_spark(spark, tmp_path, config)
    assert single is not None and on_spark is not None
    assert summary(on_spark) == summary(single)
    assert bool(single.violations) == expect_violations
    assert sum(single.checks.values()) > 0


def test_findings_say_where_the_trace_was_checked(tmp_path, spark):
    config = simulated_trace(tmp_path, "local-first-isr", 2, partitions=2)
    here = findings(tmp_path, config)
    there = findings(tmp_path, config, spark=spark)
    assert here[0] == there[0] and here[0]
    assert here[2]["source"] == "trace" and there[2]["source"] == "trace-spark"
    assert "on Spark, a task per partition" in there[1][-1]


def test_no_events_no_trace(tmp_path, spark):
    assert check_run_spark(spark, tmp_path, RunConfig(topic="chaos", partitions=1)) is None
