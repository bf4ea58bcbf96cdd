"""`harness reproduce`: the same config and seed, the recorded faults replayed on the same
nodes at their recorded times, and the anomalies compared."""

from __future__ import annotations

import json

import pytest

from harness.config import load_config
from harness.reproduce import reproduce
from harness.runner import run_test
from harness.test import Test

pytestmark = [pytest.mark.netns, pytest.mark.fuse]


def test_reproduce_replays_the_recorded_schedule(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_RESULTS", str(tmp_path))
    config = load_config("fast", ["nodes=4", "time_limit=12", "seed=5", "nemesis.interval=2",
                                  "nemesis.duration=2", "nemesis.faults=['kill', 'partition']"])
    original = run_test(Test.of(config, tmp_path))
    recorded = json.loads((original / "schedule.json").read_text())
    started = [f for f in recorded["faults"] if f["started_s"] is not None]
    assert started, "the original run must have injected faults to replay"

    assert reproduce(original) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "same anomalies occurred" in out
    replay_dir = next(p for p in original.parent.iterdir() if p.is_dir() and p != original)
    replayed = json.loads((replay_dir / "schedule.json").read_text())["faults"]
    assert [f["kind"] for f in replayed] == [f["kind"] for f in started]
    assert [f["target"] for f in replayed] == [{"fixed": f["resolved"]} for f in started]
    assert [f["resolved"] for f in replayed] == [f["resolved"] for f in started], \
        "the replay hits the same nodes"
