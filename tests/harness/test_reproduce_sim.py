"""`harness reproduce` of a simulated run folder: simulated again (same seed, same faults),
never sent to real hosts the run did not have."""

from __future__ import annotations

import json

from harness.config import load_config
from harness.reproduce import reproduce
from harness.sim_run import as_simulated
from harness.simulate import simulate_test
from harness.test import Test


def test_a_simulated_run_is_reproduced_in_the_simulator(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_RESULTS", str(tmp_path))
    config = as_simulated(load_config("fast", [
        "nodes=4", "time_limit=10", "seed=3", "workload.acks='1'",
        "nemesis.faults=['kill', 'partition']", "nemesis.interval=2", "nemesis.duration=2",
        "checker.spark_min_ops=100000000"]))  # checked in process: no Spark session to wait for
    original = simulate_test(Test.of(config, tmp_path))
    assert reproduce(original) == 0, capsys.readouterr().out
    assert "same anomalies occurred" in capsys.readouterr().out
    again = next(p for p in original.parent.iterdir() if p.is_dir() and p != original)
    assert json.loads((again / "test.json").read_text())["config"]["hosts"]["provider"] == "sim"
    started = [f for f in _faults(original) if f["started_s"] is not None]
    assert started, "the original run must have injected faults to replay"
    assert [(f["kind"], f["resolved"]) for f in _faults(again)] == \
        [(f["kind"], f["resolved"]) for f in started]


def _faults(run_dir) -> list[dict]:
    return json.loads((run_dir / "schedule.json").read_text())["faults"]
