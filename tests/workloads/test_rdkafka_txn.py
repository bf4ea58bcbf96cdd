"""The transactional workload (workloads/rdkafka_txn.py) on real Apache Kafka, end to end on
namespace hosts: transactional producers, read-committed consumers per partition and in a
group, read-uncommitted consumers beside them, kills aimed at the transaction coordinator, the
final read, the checker's transactional analysis. One short run by default (CPU is shared);
the other fault mixes aimed at transactions run with -m slow."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from support.history import read_history

from checkers.exitcodes import UserError
from control import kafka_install
from harness.config import load_config
from harness.runner import run_test
from harness.system import system_of
from harness.test import Test

RUN = ["system.kind=kafka", "nodes=4", "time_limit=20", "nemesis.interval=5",
       "nemesis.duration=3", "workload.final_read_timeout=60", "workload.rate=100",
       "workload.kind=txn", "workload.consumers=4", "workload.uncommitted_consumers=2",
       "nemesis.faults=['kill']", "nemesis.targets=txn-coordinator",
       "checker.allow=['stale-read']"]


def test_the_embedded_system_refuses_transactions(tmp_path):
    test = Test.of(load_config(None, ["workload.kind=txn"]), tmp_path)
    with pytest.raises(UserError, match="system.kind=kafka"):
        system_of(test)


# Slow (44-47 s): the default run holds real Kafka's transactions through
# tests/workloads/test_rdkafka_ctp.py (committed whole, exactly once through a group) and the
# transaction checkers on histories of their own, aborted ones read or not
# (tests/checkers/test_txn_consumers.py, test_txn_exactly_once.py).
@pytest.mark.slow
@pytest.mark.netns
@pytest.mark.fuse
@pytest.mark.parametrize("version", ["3.9.1"])
def test_transactions_commit_whole_and_aborted_ones_stay_unread(tmp_path, version):
    if not kafka_install.is_installed(version):
        pytest.fail(f"Kafka {version} is not installed: `make bootstrap` resolves it")
    config = load_config(None, [*RUN, f"kafka.version={version}", "seed=3"])
    run_dir = run_test(Test.of(config, tmp_path))
    ops = read_history(run_dir / "history.jsonl")
    results = json.loads((run_dir / "results.json").read_text())

    sends = [op for op in ops if op["f"] == "send" and op["type"] != "invoke"]
    by_txn: dict[int, list[dict]] = defaultdict(list)
    for op in sends:
        by_txn[op["txn"]].append(op)
    assert all(len({op["type"] for op in parts}) == 1 for parts in by_txn.values())
    kinds = {t: parts[0]["type"] for t, parts in by_txn.items()}
    assert list(kinds.values()).count("ok") > 50, "the workload should have committed"
    assert any(op.get("error") == "aborted-on-purpose" for op in sends)
    assert any(len(parts) > 1 for parts in by_txn.values()), "multi-partition transactions"

    final = {(op["partition"], v) for op in ops if op["f"] == "final-poll"
             and op["type"] == "ok" and op["complete"] for _, v in op["records"]}
    for t, parts in by_txn.items():
        seen = [(op["partition"], op["value"]) in final for op in parts]
        if kinds[t] == "ok":
            assert all(seen), f"committed transaction {t} not read whole: {parts}"
        elif kinds[t] == "fail":
            assert not any(seen), f"aborted transaction {t} read: {parts}"
    group = [op for op in ops if op["f"] == "poll" and op["type"] == "ok" and "offset" not in op]
    assert group, "the consumer group's members polled"
    assert results["stats"]["transactions"]["transactions"] > len(by_txn)
    assert results["valid"] is True, results["anomalies"]
    # the final read waited for open transactions and read each partition whole: what
    # follows its last record are control records (commit and abort markers)
    assert sorted(results["stats"]["complete_partitions"]) == [0, 1, 2], results["notes"]
    assert all(op["hwm"] <= op["log_end"] for op in ops
               if op["f"] == "final-poll" and op["type"] == "ok")
    # read-uncommitted consumers saw aborted records, and that is no anomaly for them
    uncommitted = results["stats"]["transactions"]["read_uncommitted"]
    assert uncommitted["records"] > 0 and uncommitted["aborted"] > 0, uncommitted
    assert_hit_the_coordinator(run_dir)


def assert_hit_the_coordinator(run_dir) -> None:
    """Every fault that started hit the node then leading the transaction log."""
    faults = json.loads((run_dir / "schedule.json").read_text())["faults"]
    started = [f for f in faults if f["outcome"] == "ok"]
    assert started, faults
    for f in started:
        coordinator = [n for n, role in f["roles"].items() if role == "txn-coordinator"]
        hit = f["resolved"].get("nodes") or sorted(f["resolved"]["grudge"])
        assert coordinator and coordinator[0] in hit, f


@pytest.mark.netns
@pytest.mark.fuse
@pytest.mark.slow
@pytest.mark.parametrize(("version", "faults"), [("4.2.1", "partition"),
                                                 ("3.9.1", "pause")])
def test_transactions_under_faults_aimed_at_the_coordinator(tmp_path, version, faults):
    if not kafka_install.is_installed(version):
        pytest.fail(f"Kafka {version} is not installed: `make bootstrap` resolves it")
    config = load_config(None, [*RUN, f"kafka.version={version}", "seed=4",
                                f"nemesis.faults=['{faults}']", "topic.partitions=3"])
    run_dir = run_test(Test.of(config, tmp_path))
    results = json.loads((run_dir / "results.json").read_text())
    assert results["valid"] is True, results["anomalies"]
    assert_hit_the_coordinator(run_dir)
