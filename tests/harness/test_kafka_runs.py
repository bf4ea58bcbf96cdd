"""Apache Kafka under the harness, end to end on namespace hosts: real KRaft brokers from the
versions `make bootstrap` resolved, confluent-kafka's workload, the nemesis, the checker and
the report. The fast run is in the default suite; the longer scenarios are marked slow."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from support.history import read_history

from control import kafka_install
from harness.config import load_config
from harness.runner import run_test
from harness.test import Test

pytestmark = [pytest.mark.netns, pytest.mark.fuse]

# Kafka's reads are not linearizable: a restarted or cut-off leader serves fetches with the high
# watermark it has, behind what was acknowledged (docs/kafka.md), which the checker reports as
# a stale read. These tests judge acknowledged records, so stale reads are allowed.
FAST = ["system.kind=kafka", "nodes=4", "time_limit=15", "nemesis.interval=3",
        "nemesis.duration=3", "workload.final_read_timeout=60", "workload.rate=300",
        "checker.allow=['stale-read']"]


def _installed(version: str) -> None:
    if not kafka_install.is_installed(version):
        pytest.fail(f"Kafka {version} is not installed: `make bootstrap` resolves it "
                    f"(control/kafka_install.py)")


def _run(tmp_path: Path, *sets: str) -> tuple[Path, list[dict], dict]:
    config = load_config(None, [*FAST, *sets])
    _installed(config["kafka"]["version"])
    run_dir = run_test(Test.of(config, tmp_path))
    results = json.loads((run_dir / "results.json").read_text())
    return run_dir, read_history(run_dir / "history.jsonl"), results


def _events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def _lost(results: dict) -> dict[str, int]:
    return {k: v["count"] for k, v in results["anomalies"].items() if k in ("lost-write", "unseen")}


def test_a_kafka_run_with_kills_is_checked_and_reported(tmp_path):
    run_dir, ops, results = _run(tmp_path, "kafka.version=4.2.1", "nemesis.faults=['kill']",
                                 "seed=11")
    sends = Counter(op["type"] for op in ops if op["f"] == "send" and op["type"] != "invoke")
    assert sends["ok"] > 300, f"the workload should have made progress: {sends}"
    _delivery_reports_carry_offsets(ops)
    assert any(op["f"] == "poll" and op["type"] == "ok" and op["records"] for op in ops)
    finals = [op for op in ops if op["f"] == "final-poll" and op["type"] == "ok"]
    assert {op["partition"] for op in finals if op["complete"]} == {0, 1, 2}

    kills = [op for op in ops if op["f"] == "start-kill"]
    assert kills, "a kill should have started in 15 s"
    killed = kills[0]["value"]["nodes"][0]
    log = (run_dir / "nodes" / killed / "node.log").read_text(errors="replace")
    assert log.count("Kafka Server started") >= 2, "the killed node was started again"

    events = _events(run_dir)
    observed = [e for e in events if e["kind"] == "partition-change"]
    assert observed and all(e["source"] == "observed" and "time" in e for e in observed)
    assert {e["partition"] for e in observed} == {0, 1, 2}
    assert json.loads((run_dir / "test.json").read_text())["config"]["system"]["kind"] == "kafka"
    assert not _lost(results), results["anomalies"]
    assert set(results["anomalies"]) <= {"duplicate"}, results["anomalies"]
    _duplicates_follow_message_timeouts(ops, results)
    assert any("Apache Kafka" in n for n in results["notes"]), "invariants said to be unchecked"
    assert (run_dir / "report.html").exists()


def _delivery_reports_carry_offsets(ops: list[dict]) -> None:
    """Every acknowledged send has its offset but for a few after a kill: a retry the broker
    answers as a duplicate of what it already wrote is delivered without one (confluent-kafka
    gives None; workloads/rdkafka.py `known_offset`), and the checker learns those from reads."""
    oks = [op for op in ops if op["f"] == "send" and op["type"] == "ok"]
    assert all(op["offset"] >= 0 for op in oks if "offset" in op), "offsets are never negative"
    without = [op for op in oks if "offset" not in op]
    assert len(without) <= len(oks) // 20, f"{len(without)} of {len(oks)} sends had no offset"
    first_kill = min((op["time"] for op in ops if op["f"] == "start-kill"), default=float("inf"))
    assert all(op["time"] > first_kill for op in without), "an offset was missing before a kill"


def _duplicates_follow_message_timeouts(ops: list[dict], results: dict) -> None:
    """librdkafka's idempotent producer bumps its epoch when a message times out and sends
    again, under the new epoch, records a broker may already hold, so the broker cannot tell
    them from new ones (docs/kafka.md, finding 5; confluentinc/librdkafka#4953). A run with
    kills may then hold a record twice; any other duplicate is a finding of its own."""
    twice = _read_twice(ops)
    assert results["anomalies"].get("duplicate", {}).get("count", 0) == len(twice)
    timeouts = [op for op in ops if op["f"] == "send" and op.get("error") == "_MSG_TIMED_OUT"]
    for partition, value in twice:
        sent = _send_of(ops, value)
        assert any(t["partition"] == partition and sent[0] <= t["time"] <= sent[1]
                   for t in timeouts), f"{value} in partition {partition} was written twice " \
            "though no message timed out on that partition while it was being sent"


def _read_twice(ops: list[dict]) -> set[tuple[int, int]]:
    """(partition, value) for every value the final read found at more than one offset."""
    finals = [op for op in ops if op["f"] == "final-poll" and op["type"] == "ok"]
    seen = {(op["partition"], value, offset) for op in finals for offset, value in op["records"]}
    return {k for k, n in Counter((p, v) for p, v, _ in seen).items() if n > 1}


def _send_of(ops: list[dict], value: int) -> tuple[int, int]:
    """The one send of `value`: its invocation's and its completion's times."""
    times = [op["time"] for op in ops if op["f"] == "send" and op.get("value") == value]
    assert len(times) == 2, f"{value} was sent once, invoked and completed: {times}"
    return times[0], times[1]


# Slow (69 s): the default run holds Kafka under kills (above) and every toxic on the embedded
# system (tests/nemesis/test_toxiproxy.py); this is the two together.
@pytest.mark.slow
@pytest.mark.toxiproxy
def test_kafka_behind_toxiproxy_takes_toxics_on_client_and_peer_connections(tmp_path):
    """Every node behind its host's Toxiproxy: clients reach a broker through its proxy "in",
    and a broker's own connections to its peers (the controller, the leaders it fetches from)
    are redirected into its local proxies to them, so a toxic acts on both."""
    run_dir, ops, results = _run(tmp_path, "nemesis.faults=['latency', 'stall']",
                                 "nemesis.targets=leader", "seed=14")
    toxics = [op for op in ops if op["f"] in ("start-latency", "start-stall")]
    assert toxics and all(op["value"]["toxic"]["type"] in ("latency", "timeout") for op in toxics)
    for host in ("n2", "n3", "n4"):
        accepted = [line for line in (run_dir / "nodes" / host / "toxiproxy.log").read_text()
                    .splitlines() if "Accepted client" in line]
        assert any('"name":"to-n1"' in line for line in accepted), \
            f"{host}'s connections to the controller went through its proxy"
        assert any('"name":"in"' in line for line in accepted)
    assert results["valid"] is True and not _lost(results), results["anomalies"]
    sends = Counter(op["type"] for op in ops if op["f"] == "send" and op["type"] != "invoke")
    assert sends["ok"] > 100, f"the workload made progress under the toxics: {sends}"


@pytest.mark.slow
def test_kafka_3_9_loses_nothing_to_single_power_losses(tmp_path):
    """One broker at a time loses power with its page cache (the lossy filesystem under
    log.dirs): with acks=all and min.insync.replicas 2, another replica holds every
    acknowledged record, so nothing is lost."""
    run_dir, ops, results = _run(tmp_path, "kafka.version=3.9.1", "time_limit=25",
                                 "nemesis.faults=['power-loss']", "seed=12")
    losses = [op for op in ops if op["f"] == "start-power-loss"]
    assert losses and any(op["value"].get("lost") for op in losses), "unsynced data was dropped"
    assert "Kafka version: 3.9.1" in (run_dir / "nodes" / "n2" / "node.log").read_text(
        errors="replace")
    assert not _lost(results), results["anomalies"]
    assert {op["partition"] for op in ops if op["f"] == "final-poll" and op.get("complete")} \
        == {0, 1, 2}


@pytest.mark.slow
def test_an_unclean_election_on_kafka_is_an_event(tmp_path):
    """acks=1 with unclean elections allowed, leaders killed: Kafka may lose acknowledged
    records, and its controller's unclean elections are read from its log."""
    run_dir, ops, results = _run(tmp_path, "time_limit=30", "workload.acks=1",
                                 "system.min.insync.replicas=1",
                                 "system.unclean.leader.election.enable=true",
                                 "nemesis.faults=['kill']", "nemesis.targets=leader", "seed=13")
    assert any(op["f"] == "start-kill" for op in ops)
    leaders = {e["leader"] for e in _events(run_dir) if e["kind"] == "partition-change"}
    assert len(leaders - {None}) >= 2, "leaders moved and the watch saw it"
    if _lost(results):  # a loss must be told by an election or truncation Kafka logged
        kinds = {e["kind"] for e in _events(run_dir)}
        assert kinds & {"unclean-election", "truncate"}, kinds
