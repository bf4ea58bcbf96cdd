"""The minimal reproductions only Apache Kafka can run (campaigns/minimal/kafka/): schedules
written by hand from real Kafka runs whose workload the simulator cannot run (transactions,
consumer groups), so `harness shrink` could not cut them and tests/simulation/
test_minimal_corpus.py cannot replay them. What is checked here is that each is a plan
`harness reproduce --schedule FILE [--system kafka:V]` takes as it is: a Kafka config, every
fault aimed by role, its schedule by role given (no simulation to learn it), a loss class
named. Their real runs are in docs/kafka.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.minimal import load_minimal
from harness.reproduce import by_role

KAFKA_ONLY = Path(__file__).resolve().parents[2] / "campaigns" / "minimal" / "kafka"
FILES = sorted(KAFKA_ONLY.glob("*.json"))


def test_there_is_a_kafka_only_reproduction():
    assert [p.stem for p in FILES] == ["ctp-outage", "ctp-power-one", "ctp-txn-outage"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_a_kafka_only_reproduction_is_a_plan_by_role_on_kafka(path):
    config, entries, doc = load_minimal(path)
    assert config["system"]["kind"] == "kafka" and config["workload"]["kind"] == "txn"
    assert entries and all(set(e["target"]) == {"roles"} for e in entries)
    assert by_role(doc, path) == entries  # read from the file: nothing simulated
    assert doc["anomaly"] in ("lost-write", "unseen")
    # the workload runs until the last fault has healed
    assert max(e["start_s"] + e["duration_s"] for e in entries) <= config["time_limit"]
