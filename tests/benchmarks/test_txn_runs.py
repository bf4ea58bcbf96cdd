"""benchmarks/txn_runs.py's reading of a run: the transaction log's ISR off the brokers' log
lines, and how long of a stall it spent below min.insync.replicas (pure logic on small
inputs written here)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from benchmarks import txn_runs

T0 = datetime.fromisoformat("2026-11-27T12:00:00.000+00:00").timestamp()


def _line(second: float, text: str) -> str:
    when = datetime.fromtimestamp(T0 + second, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    return f"[{when[:-3]}+0000] INFO {text}"  # Kafka's log4j timestamp


def _node_log(tmp_path, lines: list[str]) -> None:
    node = tmp_path / "nodes" / "n2"
    node.mkdir(parents=True)
    (node / "node.log").write_text("\n".join(lines) + "\n")


def test_each_way_kafka_logs_the_transaction_log_isr_is_read(tmp_path):
    _node_log(tmp_path, [
        _line(1, "[Broker id=2] Leader __transaction_state-0 with topic id Some(x) starts at "
                 "leader epoch 1 from offset 9, high watermark 9, ISR [2], adding replicas []"),
        _line(2, "[Partition __transaction_state-0 broker=2] ISR updated to 2,3  and version 6"),
        _line(3, "[Broker id=3] Skipped the become-follower state change for "
                 "__transaction_state-0 with partition registration PartitionRegistration("
                 "replicas=[1, 2, 3], isr=[2, 3, 1], leader=2)"),
        _line(4, "[Broker id=2] Leader chaos-0 with topic id Some(y) starts at ISR [2]"),
    ])
    assert [n for _, n in txn_runs._isr_sizes(tmp_path)] == [1, 2, 3]


def test_the_share_below_min_isr_counts_only_the_stall_s_own_window():
    points = [(T0 + 10, 1), (T0 + 14, 2), (T0 + 20, 1)]  # below from 10 to 14, from 20 on
    assert txn_runs._below_min_isr(points, T0 + 8, T0 + 12) == 2.0
    assert txn_runs._below_min_isr(points, T0 + 11, T0 + 22) == 5.0
    assert txn_runs._below_min_isr(points, T0 + 15, T0 + 19) == 0.0
    assert txn_runs._below_min_isr([], T0, T0 + 5) == 0.0


def test_the_catch_up_is_what_transformers_committed_after_the_heal(tmp_path):
    ops = [{"time": 1_000_000_000, "f": "send", "type": "ok", "txn": 1, "sources": [[0, 1, 5]]},
           {"time": 2_000_000_000, "process": "nemesis", "type": "info", "f": "stop-all"},
           {"time": 3_000_000_000, "f": "send", "type": "ok", "txn": 2,
            "sources": [[0, 2, 6], [0, 3, 7]]},
           {"time": 3_000_000_000, "f": "send", "type": "ok", "txn": 2, "sources": [[1, 0, 8]]},
           {"time": 4_500_000_000, "f": "send", "type": "fail", "txn": 3,
            "sources": [[1, 1, 9]]},
           {"time": 4_000_000_000, "f": "send", "type": "ok", "txn": 9, "value": 3}]
    history = tmp_path / "history.jsonl"
    history.write_text("".join(json.dumps(op) + "\n" for op in ops))
    assert txn_runs._catch_up(history) == {"transactions": 1, "inputs": 3, "seconds": 1.0}
