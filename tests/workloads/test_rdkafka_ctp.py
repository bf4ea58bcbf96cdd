"""Consume-transform-produce (workloads/rdkafka_ctp.py) on real Apache Kafka, end to end on
namespace hosts: transformers in one group read the test topic read-committed and, in each
transaction, send records made of what they read to the output topic and commit the group's
offsets with them, aborting some on purpose, under kills of the transaction coordinator; then
the final read of both topics and the checker's exactly-once judgement. One short run in the
default suite (CPU is shared), as the transactional workload's own."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from checkers.exitcodes import UserError
from control import kafka_install
from harness.config import load_config
from harness.runner import run_test
from harness.system import system_of
from harness.test import Test
from workloads.history import read_history

RUN = ["system.kind=kafka", "nodes=4", "time_limit=15", "nemesis.interval=4",
       "nemesis.duration=3", "workload.final_read_timeout=60", "workload.rate=100",
       "workload.kind=txn", "workload.consumers=2", "workload.transformers=2",
       "nemesis.faults=['kill']", "nemesis.targets=txn-coordinator",
       "checker.allow=['stale-read']"]


def test_transformers_need_the_transactional_workload(tmp_path):
    test = Test.of(load_config(None, ["system.kind=kafka", "workload.transformers=1"]), tmp_path)
    with pytest.raises(UserError, match="workload.transformers needs transactions"):
        system_of(test)


@pytest.mark.netns
@pytest.mark.fuse
def test_each_input_record_is_transformed_exactly_once_through_the_group(tmp_path):
    version = "4.2.1"
    if not kafka_install.is_installed(version):
        pytest.fail(f"Kafka {version} is not installed: `make bootstrap` resolves it")
    config = load_config(None, [*RUN, f"kafka.version={version}", "seed=2"])
    run_dir = run_test(Test.of(config, tmp_path))
    ops = read_history(run_dir / "history.jsonl")
    results = json.loads((run_dir / "results.json").read_text())
    assert results["valid"] is True, results["anomalies"]
    partitions = config["topic"]["partitions"]
    assert sorted(results["stats"]["complete_partitions"]) == list(range(2 * partitions))

    outputs = [op for op in ops if op["f"] == "send" and "sources" in op
               and op["type"] != "invoke"]
    kinds = Counter(op["type"] for op in outputs)
    assert kinds["ok"] > 5, f"the transformers should have committed: {kinds}"
    assert any(op.get("error") == "aborted-on-purpose" for op in outputs)
    assert all(op["partition"] >= partitions for op in outputs), "outputs in the output topic"

    # the committed output, as the final reads found it, made each input it names once
    final = {(op["partition"], v) for op in ops if op["f"] == "final-poll"
             and op["type"] == "ok" and op["complete"] for _, v in op["records"]}
    made = Counter((p, v) for op in outputs if (op["partition"], op["value"]) in final
                   for p, _, v in op["sources"])
    assert made and max(made.values()) == 1, made.most_common(3)
    aborted = [op for op in outputs if op["type"] == "fail"]
    assert not any((op["partition"], op["value"]) in final for op in aborted)
    # and an aborted batch was transformed again: its inputs are in the committed output
    again = {(p, v) for op in aborted for p, _, v in op["sources"]}
    assert again & set(made), "an aborted batch's records should have been committed later"

    once = results["stats"]["transactions"]["exactly_once"]
    assert once["lost"] == 0 and once["duplicated"] == 0 and once["inputs"] == len(made), once
    assert any(op["f"] == "start-kill" for op in ops), "a kill of the coordinator started"
