"""Consume-transform-produce (workloads/rdkafka_ctp.py) on real Apache Kafka, end to end on
namespace hosts: transformers in one group read the test topic read-committed and, in each
transaction, send records made of what they read to the output topic and commit the group's
offsets with them, aborting some on purpose, under kills of the transaction coordinator; then
the final read of both topics and the checker's exactly-once judgement. One short run without
faults in the default suite (CPU is shared); the same under kills of the transaction
coordinator, under kills of the group coordinator, and the must-fail twins on real Kafka, run
with -m slow."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime
from pathlib import Path

import confluent_kafka as ck
import pytest
from support.history import read_history

from checkers.exitcodes import UserError
from control import kafka_install
from harness.config import load_config
from harness.runner import run_test
from harness.system import system_of
from harness.test import Test
from runformat.jsonl import read_events
from workloads.rdkafka_ctp import Batch, TransformingTxnWorkload

RUN = ["system.kind=kafka", "nodes=4", "time_limit=15", "nemesis.interval=4",
       "nemesis.duration=3", "workload.final_read_timeout=60", "workload.rate=100",
       "workload.kind=txn", "workload.consumers=2", "workload.transformers=2",
       "nemesis.faults=['kill']", "nemesis.targets=txn-coordinator",
       "checker.allow=['stale-read']"]


def _installed(version: str) -> None:
    if not kafka_install.is_installed(version):
        pytest.fail(f"Kafka {version} is not installed: `make bootstrap` resolves it")


def test_transformers_need_the_transactional_workload(tmp_path):
    test = Test.of(load_config(None, ["system.kind=kafka", "workload.transformers=1"]), tmp_path)
    with pytest.raises(UserError, match="workload.transformers needs transactions"):
        system_of(test)


@pytest.mark.netns
@pytest.mark.fuse
@pytest.mark.parametrize("faults", [
    pytest.param("[]", id="quiet"),
    # kills of the transaction coordinator often stall the transformers for most of so short
    # a run (docs/kafka.md, "Consume-transform-produce"): the verdict is what is held then
    pytest.param("['kill']", id="coordinator-kills", marks=pytest.mark.slow)])
def test_each_input_record_is_transformed_exactly_once_through_the_group(tmp_path, faults):
    _installed("4.2.1")
    config = load_config(None, [*RUN, "kafka.version=4.2.1", "seed=2",
                                f"nemesis.faults={faults}"])
    run_dir = run_test(Test.of(config, tmp_path))
    ops = read_history(run_dir / "history.jsonl")
    results = json.loads((run_dir / "results.json").read_text())
    assert results["valid"] is True, results["anomalies"]
    partitions = config["topic"]["partitions"]
    assert sorted(results["stats"]["complete_partitions"]) == list(range(2 * partitions))

    outputs = [op for op in ops if op["f"] == "send" and "sources" in op
               and op["type"] != "invoke"]
    assert all(op["partition"] >= partitions for op in outputs), "outputs in the output topic"
    # the committed output, as the final reads found it, made each input it names once
    final = {(op["partition"], v) for op in ops if op["f"] == "final-poll"
             and op["type"] == "ok" and op["complete"] for _, v in op["records"]}
    made = Counter((p, v) for op in outputs if (op["partition"], op["value"]) in final
                   for p, _, v in op["sources"])
    assert made and max(made.values()) == 1, made.most_common(3)
    aborted = [op for op in outputs if op["type"] == "fail"]
    assert not any((op["partition"], op["value"]) in final for op in aborted)
    once = results["stats"]["transactions"]["exactly_once"]
    assert once["lost"] == 0 and once["duplicated"] == 0 and once["inputs"] == len(made), once
    # the transformers caught up with the input after the heal: every input was judged
    assert once["past_position"] == 0, once
    if faults != "[]":
        assert any(op["f"] == "start-kill" for op in ops), "a kill of the coordinator started"
        return
    kinds = Counter(op["type"] for op in outputs)
    assert kinds["ok"] > 20, f"the transformers should have committed: {kinds}"
    # each transformer's fourth transaction was aborted, and that batch transformed again (a
    # later planned abort may come as the run ends)
    planned = [op for op in aborted if op.get("error") == "aborted-on-purpose"]
    first = {c: min(op["txn"] for op in planned if op["client"] == c)
             for c in {op["client"] for op in planned}}
    assert len(first) == 2, planned
    again = {(p, v) for op in planned if op["txn"] == first[op["client"]]
             for p, _, v in op["sources"]}
    assert again <= set(made), "the first aborted batches should have been committed later"


class _NoGoingBack(TransformingTxnWorkload):
    """A transformer that forgets to seek back after an abort: the aborted batch's records
    are never transformed again, while the next commit moves the group's offsets past them."""

    def _rewind(self, consumer: ck.Consumer, batch: Batch) -> None:
        return None


class _GoingBackTooFar(TransformingTxnWorkload):
    """A transformer that seeks back to the start of the partition after an abort: what
    committed transactions had already transformed is transformed and committed again."""

    def _rewind(self, consumer: ck.Consumer, batch: Batch) -> None:
        super()._rewind(consumer, {p: [[0, 0]] for p in batch})


@pytest.mark.netns
@pytest.mark.fuse
@pytest.mark.slow
@pytest.mark.parametrize(("broken", "anomaly"), [(_NoGoingBack, "lost-output"),
                                                 (_GoingBackTooFar, "duplicate-output")])
def test_a_transformer_that_breaks_exactly_once_is_caught(tmp_path, monkeypatch, broken,
                                                          anomaly):
    """The twins of the run above on real Kafka, without faults: the checker must find the
    input records the broken transformer left without output, or made output of twice."""
    _installed("4.2.1")
    monkeypatch.setattr("harness.system.TransformingTxnWorkload", broken)
    config = load_config(None, [*RUN, "kafka.version=4.2.1", "seed=2", "nemesis.faults=[]"])
    run_dir = run_test(Test.of(config, tmp_path))
    results = json.loads((run_dir / "results.json").read_text())
    assert results["valid"] is False
    found = results["anomalies"][anomaly]
    assert found["count"] > 0, results["anomalies"]
    # each example is an input record a planned abort held: the broken step came after it
    ops = read_history(run_dir / "history.jsonl")
    aborted = {(p, v) for op in ops if op["f"] == "send" and "sources" in op
               and op.get("error") == "aborted-on-purpose" for p, _, v in op["sources"]}
    if anomaly == "lost-output":
        assert {(x["partition"], x["value"]) for x in found["examples"]} <= aborted


def _exactly_once_run(config: dict, tmp_path) -> tuple:
    """Run it; assert a valid verdict with the transformers' output exactly once; return the
    run folder and the faults that started."""
    run_dir = run_test(Test.of(config, tmp_path))
    results = json.loads((run_dir / "results.json").read_text())
    assert results["valid"] is True, results["anomalies"]
    once = results["stats"]["transactions"]["exactly_once"]
    assert once["lost"] == 0 and once["duplicated"] == 0 and once["committed"] > 0, once
    faults = json.loads((run_dir / "schedule.json").read_text())["faults"]
    return run_dir, [f for f in faults if f["outcome"] == "ok"]


@pytest.mark.netns
@pytest.mark.fuse
@pytest.mark.slow
def test_exactly_once_through_the_group_under_kills_of_its_coordinator(tmp_path):
    """Kills aimed at the group coordinator (targets = "group-coordinator"): each one hits the
    node then leading the transformers' `__consumer_offsets` partition, and the transformers'
    output is still exactly once."""
    _installed("4.2.1")
    config = load_config(None, [*RUN, "kafka.version=4.2.1", "seed=3",
                                "nemesis.targets=group-coordinator"])
    _, started = _exactly_once_run(config, tmp_path)
    assert started, "a kill of the group coordinator started"
    for f in started:
        coordinator = [n for n, role in f["roles"].items() if role == "group-coordinator"]
        assert coordinator == f["resolved"]["nodes"], f


@pytest.mark.netns
@pytest.mark.fuse
@pytest.mark.slow
def test_exactly_once_while_the_group_coordinator_is_cut_off_from_the_transaction_one(tmp_path):
    """Partitions aimed at the group coordinator (targets = "group-coordinator"): each cuts it
    off from the transaction coordinator, or, where one broker is both, from the other
    brokers (nemesis/kinds/partition.py, GROUP_SHAPE), as the roles recorded then say; the
    cut is seen in the brokers' ISRs while it lasts, and the output is still exactly once.
    The fast profile's 2 s ISR lag, so that a cut of a few seconds shows."""
    _installed("4.2.1")
    config = load_config("fast", [*RUN, "kafka.version=4.2.1", "seed=1", "time_limit=20",
                                  "nemesis.faults=['partition']", "nemesis.duration=5",
                                  "nemesis.targets=group-coordinator"])
    run_dir, cuts = _exactly_once_run(config, tmp_path)
    assert cuts, "a partition between the coordinators started"
    for f in cuts:
        assert f["resolved"]["grudge"] == _between_coordinators(f["roles"]), f
    ops = read_history(run_dir / "history.jsonl")
    starts = [op for op in ops if op["f"] == "start-partition"]
    stops = [op for op in ops if op["f"] == "stop-partition"]
    isrs = [e for e in read_events(run_dir / "events.jsonl") if e["kind"] == "partition-change"]
    began = json.loads((run_dir / "test.json").read_text())["started_at"]
    for start, stop in zip(starts, stops, strict=True):
        grudge, end = start["value"]["grudge"], stop["time"] + 2e9
        # an ISR shrinks only while its leader takes writes, and a cut may stop them all (one
        # broker coordinating both): the observed topic's ISRs, else the brokers' logs
        seen = any(_cut_off(e, grudge) for e in _in_force(isrs, start["time"], end))
        assert seen or _logged_cut(run_dir / "nodes", grudge, began + start["time"] / 1e9,
                                   began + end / 1e9), grudge


def _between_coordinators(roles: dict[str, str]) -> dict[str, list[str]]:
    """The grudge the roles recorded call for: the two coordinators drop each other, or one
    broker coordinating both drops every other broker (and they it)."""
    group = next(n for n, r in roles.items() if r == "group-coordinator")
    txn = [n for n, r in roles.items() if r == "txn-coordinator"]
    others = txn or sorted(n for n, r in roles.items() if r not in ("group-coordinator",
                                                                     "controller"))
    return {group: others, **{n: [group] for n in others}}


_SHRINK = re.compile(r"^\[(\S+)\] INFO \[Partition \S+ broker=(\d+)\] Shrinking ISR from "
                     r"([\d,]+) to ([\d,]+)\.")


def _logged_cut(nodes: Path, grudge: dict[str, list[str]], start: float, end: float) -> bool:
    """Whether a broker on one side of the grudge logged, between the wall-clock times start
    and end, an ISR shrink of a partition it leads that took out exactly the brokers it drops."""
    for node, drops in grudge.items():
        dropped = {int(n[1:]) - 1 for n in drops}
        for line in (nodes / node / "node.log").read_text(errors="replace").splitlines():
            m = _SHRINK.match(line)
            if m is None:
                continue
            at = datetime.fromisoformat(m[1]).timestamp()
            gone = {int(b) for b in m[3].split(",")} - {int(b) for b in m[4].split(",")}
            if start <= at <= end and gone == dropped:
                return True
    return False


def _in_force(isrs: list[dict], start: int, end: int) -> list[dict]:
    """The observed partition states in force at some time in [start, end] (the history's
    clock): each partition's last before start (a cut right after another finds the ISR
    still shrunk), and every one observed within."""
    last: dict[tuple[str, int], dict] = {}
    within = []
    for e in isrs:  # in time order
        if e["time"] <= start:
            last[e["topic"], e["partition"]] = e
        elif e["time"] <= end:
            within.append(e)
    return [*last.values(), *within]


def _cut_off(event: dict, grudge: dict[str, list[str]]) -> bool:
    """Whether an observed partition state has a leader on one side of the grudge and, in its
    ISR, exactly the replicas it does not drop (broker b is node n<b+1>): on a loaded machine
    an ISR may shrink by itself for a moment (a quiet run here had such shrinks in its first
    3 s), so the very shape of the cut is asked for, not any shrink."""
    node = f"n{event['leader'] + 1}" if event["leader"] is not None else None
    if node not in grudge:
        return False
    dropped = {int(n[1:]) - 1 for n in grudge[node]}
    return set(event["isr"]) == set(event["replicas"]) - dropped


@pytest.mark.netns
@pytest.mark.fuse
@pytest.mark.slow
def test_exactly_once_while_the_group_coordinator_is_cut_off_from_the_clients(tmp_path):
    """Cuts from the clients aimed at the group coordinator (client-partition, targets =
    "group-coordinator"): each drops what the clients' host sends to that broker's listener
    and what it answers (nemesis/client_partition.py), on the node the roles recorded as the
    coordinator then; the cut is seen in the coordinator's own log, which expires the members
    it no longer hears from (6 s sessions, cuts of about 8 s) while it goes on coordinating,
    and the output is still exactly once."""
    _installed("4.2.1")
    config = load_config("fast", [*RUN, "kafka.version=4.2.1", "seed=1", "time_limit=20",
                                  "nemesis.faults=['client-partition']", "nemesis.duration=8",
                                  "nemesis.targets=group-coordinator"])
    run_dir, cuts = _exactly_once_run(config, tmp_path)
    assert cuts, "a cut of the group coordinator from the clients started"
    for f in cuts:
        assert f["resolved"]["nodes"] == [n for n, r in f["roles"].items()
                                          if r == "group-coordinator"], f
    ops = read_history(run_dir / "history.jsonl")
    starts = [op for op in ops if op["f"] == "start-client-partition"]
    stops = [op for op in ops if op["f"] == "stop-client-partition"]
    began = json.loads((run_dir / "test.json").read_text())["started_at"]
    expired = []
    for start, stop in zip(starts, stops, strict=True):
        [(node, cut)] = start["value"]["lost"].items()  # apply()'s details, by node
        assert start["value"]["nodes"] == [node] and cut["port"] == 9092, start
        expired.append(_expired_members(run_dir / "nodes" / node, began + start["time"] / 1e9,
                                        began + (stop["time"] + 2e9) / 1e9))
    assert any(expired), "the coordinator expired no member while it was cut off"


_EXPIRED = re.compile(r"^\[(\S+)\] INFO .*removing member (\S+) on heartbeat expiration")


def _expired_members(node: Path, start: float, end: float) -> list[str]:
    """The members the broker on `node` expired between the wall-clock times start and end:
    their heartbeats stopped reaching it."""
    out = []
    for line in (node / "node.log").read_text(errors="replace").splitlines():
        m = _EXPIRED.match(line)
        if m and start <= datetime.fromisoformat(m[1]).timestamp() <= end:
            out.append(m[2])
    return out
