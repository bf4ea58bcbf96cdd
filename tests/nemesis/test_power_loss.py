"""Page-cache loss in real runs (lazyfs under every host's data directory):

- the last-replica-standing sequence (KIP-966; Jack Vanlightly's post on it) -- the followers
  stall until the ISR has shrunk to the leader, then the leader loses power -- loses
  acknowledged records when ELR is disabled, and loses none with ELR or with flush.messages=1;
- power-cycling one broker at a time with the default asynchronous flush loses nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkers.check import check_path
from harness.config import load_config
from harness.runner import run_test
from harness.test import Plan, Test

pytestmark = [pytest.mark.netns, pytest.mark.fuse]

BASE = ["nodes=4", "time_limit=24", "workload.final_read_timeout=60", "nemesis.faults=['power-loss', 'pause']"]

# Followers of partition 0 stop (SIGSTOP) long enough to be fenced, so the ISR shrinks to the
# leader; the leader then loses power; the followers come back while it is still down.
LAST_REPLICA_STANDING = [
    {"id": 0, "kind": "pause", "start_s": 4.0, "duration_s": 8.0,
     "target": {"select": "followers", "partition": 0, "pick": 1}},
    {"id": 1, "kind": "power-loss", "start_s": 9.0, "duration_s": 6.0,
     "target": {"select": "last-isr-member", "partition": 0, "pick": 2}},
]


def _run(tmp_path, sets: list[str], plan=None) -> tuple[dict, list[dict], Path]:
    config = load_config("fast", [*BASE, *sets])
    run_dir = run_test(Test.of(config, tmp_path, plan=Plan.scripted(plan)))
    results = json.loads((run_dir / "results.json").read_text())
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    history = (run_dir / "history.jsonl").read_text()
    assert '"start-power-loss"' in history, "the power loss must have happened"
    return results, events, run_dir


def _loss(results: dict) -> int:
    return sum(results["anomalies"].get(k, {}).get("count", 0) for k in ("lost-write", "unseen"))


def test_last_replica_standing_loses_acknowledged_records_without_elr(tmp_path):
    results, events, run_dir = _run(tmp_path, ["system.eligible.leader.replicas.enable=false"], LAST_REPLICA_STANDING)
    assert results["valid"] is False
    assert _loss(results) > 0, f"expected lost acknowledged records, got {results['anomalies']}"
    assert any(e["kind"] == "truncate" and e["removed"] > 0 for e in events), \
        "the followers must have truncated to the returning leader's shorter log"
    # the single-process reference reads this real, lossy history exactly as Spark did
    reference = check_path(run_dir, backend="reference")
    assert reference["anomalies"] == results["anomalies"]
    assert reference["lost"]["count"] == results["lost"]["count"]


def test_last_replica_standing_with_elr_loses_nothing(tmp_path):
    results, events, _ = _run(tmp_path, [], LAST_REPLICA_STANDING)
    assert _loss(results) == 0, results["anomalies"]
    assert any(e["kind"] == "partition-change" and e["elr"] for e in events), "the ELR must have been used"


# Slow (32 s): the default run keeps the must-fail case and its ELR twin above.
@pytest.mark.slow
def test_last_replica_standing_with_fsync_per_message_loses_nothing(tmp_path):
    results, _, _ = _run(tmp_path, ["system.eligible.leader.replicas.enable=false", "system.flush.messages=1"],
                      LAST_REPLICA_STANDING)
    assert _loss(results) == 0, results["anomalies"]


@pytest.mark.slow
def test_power_cycling_one_broker_at_a_time_loses_nothing(tmp_path):
    results, _, _ = _run(tmp_path, ["time_limit=60", "nemesis.faults=['power-loss']", "nemesis.targets=random",
                                 "nemesis.interval=4", "nemesis.duration=4"])
    assert _loss(results) == 0, results["anomalies"]
