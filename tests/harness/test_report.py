"""Run reports rendered from run folders written in the real formats (docs/architecture.md, formats.md).

`write_run_folder` simulates a small run with a kill of broker 1: sends acknowledged by broker 1
during the kill window are truncated away (lost-write, or unseen when nothing later was read),
and results.json / loss.parquet are derived from that simulated history the way the checker
defines them. The campaign and serve tests reuse it.
"""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.report import report_path
from harness.report.faults import FaultTracker
from harness.report.scan import scan_history

NS = 1_000_000_000
PARTITIONS = 3
KILL = (3 * NS, 5 * NS)  # broker 1 (host n2) is down
PARTITION_FAULT = (6 * NS, 7 * NS + NS // 2)


def _config(seed: int, acks: str) -> dict[str, Any]:
    return {
        "name": "report-test", "nodes": 4, "time_limit": 10, "seed": seed,
        "topic": {"name": "chaos", "partitions": PARTITIONS, "replication_factor": 3},
        "system": {"min.insync.replicas": 2, "eligible.leader.replicas.enable": True},
        "workload": {"acks": acks, "rate": 60, "producers": 4, "consumers": 1},
        "nemesis": {"faults": ["kill", "partition"], "interval": 3, "duration": 2},
        "checker": {"allow": []},
    }


class _History:
    def __init__(self) -> None:
        self.ops: list[dict[str, Any]] = []

    def add(self, **op: Any) -> None:
        op["index"] = len(self.ops)
        self.ops.append(op)


def _simulate(sends: int, lose: bool) -> tuple[_History, list[dict[str, Any]], set[int]]:
    """History ops, per-record facts of acknowledged sends, and the values lost."""
    hist = _History()
    acked: list[dict[str, Any]] = []
    lost: set[int] = set()
    logs: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    nemesis = [(KILL[0], "start-kill", {"nodes": ["n2"]}), (KILL[1], "stop-kill", {"nodes": ["n2"]}),
               (PARTITION_FAULT[0], "start-partition", {"isolate": ["n3"]}),
               (PARTITION_FAULT[1], "stop-partition", None)]
    process = {w: w for w in range(4)}
    step = 10 * NS // sends
    for value in range(sends):
        t = value * step
        while nemesis and nemesis[0][0] <= t:
            at, f, v = nemesis.pop(0)
            hist.add(time=at, process="nemesis", type="info", f=f, value=v)
        worker, partition = value % 4, value % PARTITIONS
        proc = process[worker]
        hist.add(time=t, process=proc, type="invoke", f="send", partition=partition, value=value)
        leader = 1 if partition == 0 and not KILL[0] <= t < KILL[1] else 2 + partition % 2
        done = t + (2 + value % 7) * 1_000_000
        if value % 97 == 5:
            hist.add(time=done + 3 * NS, process=proc, type="info", f="send", partition=partition,
                     value=value, error="timeout")
            process[worker] = proc + 4
            continue
        if value % 53 == 7:
            hist.add(time=done, process=proc, type="fail", f="send", partition=partition,
                     value=value, error="NOT_ENOUGH_REPLICAS")
            continue
        offset = len(logs[partition])
        logs[partition].append(value)
        # With acks=1 the records broker 1 acknowledged just before the kill never reached a
        # follower: the new leader truncates them away.
        doomed = lose and partition == 0 and KILL[0] - NS <= t < KILL[0]
        if doomed:
            lost.add(value)
        hist.add(time=done, process=proc, type="ok", f="send", partition=partition, value=value,
                 offset=offset, node=leader, epoch=1 if t < KILL[0] else 2)
        acked.append({"value": value, "partition": partition, "offset": offset, "ack_time": done,
                      "node": leader, "epoch": 1 if t < KILL[0] else 2})
    end = 11 * NS
    for partition, values in logs.items():
        records = [[o, v] for o, v in enumerate(values) if v not in lost]
        hist.add(time=end, process=100 + partition, type="invoke", f="final-poll",
                 partition=partition, offset=0)
        hist.add(time=end + NS // 10, process=100 + partition, type="ok", f="final-poll",
                 partition=partition, records=records, hwm=len(values))
    return hist, acked, lost


def _events(lose: bool) -> list[dict[str, Any]]:
    events = []
    for p in range(PARTITIONS):
        leader = 1 + p % 3
        events.append({"time": NS // 10, "host": "n1", "node": "controller", "kind": "partition-change",
                       "topic": "chaos", "partition": p, "leader": leader, "leader_epoch": 1,
                       "partition_epoch": 1, "isr": [1, 2, 3], "elr": [], "last_known_elr": [],
                       "reason": "create"})
    events.append({"time": KILL[0] + NS // 2, "host": "n1", "node": "controller",
                   "kind": "broker-fenced", "broker": 1, "reason": "session-timeout"})
    events.append({"time": KILL[0] + NS // 2, "host": "n1", "node": "controller",
                   "kind": "partition-change", "topic": "chaos", "partition": 0, "leader": 2,
                   "leader_epoch": 2, "partition_epoch": 2, "isr": [2, 3], "elr": [1],
                   "last_known_elr": [], "reason": "fence"})
    if lose:
        events.append({"time": KILL[1] + NS // 5, "host": "n2", "node": 1, "kind": "truncate",
                       "topic": "chaos", "partition": 0, "from_offset": 40, "to_offset": 30,
                       "removed": 10, "reason": "leader-epoch"})
    events.append({"time": KILL[1] + NS, "host": "n1", "node": "controller",
                   "kind": "partition-change", "topic": "chaos", "partition": 0, "leader": 2,
                   "leader_epoch": 2, "partition_epoch": 3, "isr": [1, 2, 3], "elr": [],
                   "last_known_elr": [], "reason": "expand"})
    for e in events:
        e["ts"] = 1_790_000_000 + e["time"] / NS
    return sorted(events, key=lambda e: e["time"])


def _loss_rows(acked: list[dict[str, Any]], lost: set[int]) -> list[dict[str, Any]]:
    last_read = {}
    for a in acked:
        if a["value"] not in lost:
            last_read[a["partition"]] = max(last_read.get(a["partition"], -1), a["offset"])
    rows = []
    for a in acked:
        if a["value"] in lost:
            kind = "lost-write" if last_read.get(a["partition"], -1) > a["offset"] else "unseen"
            rows.append({**a, "kind": kind, "faults": ["kill of n2 (started 0.4 s after the ack)"],
                         "isr_at_ack": "[1, 2, 3]", "leader_changes": "[]",
                         "truncations": "[]", "storage": "truncated/lost", "on_disk_at": [],
                         "explanation": "acknowledged by broker 1 at acks=1, truncated at epoch 2"})
    return rows


def write_run_folder(run_dir: Path, *, seed: int = 0, sends: int = 600, lose: bool = True,
                     name: str = "report-test", with_results: bool = True) -> Path:
    """Write a complete run folder (see the module docstring) and return it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    hist, acked, lost = _simulate(sends, lose)
    config = _config(seed, "1" if lose else "all")
    config["name"] = name
    (run_dir / "test.json").write_text(json.dumps({
        "name": name, "seed": seed, "argv": ["harness", "run", "--seed", str(seed)],
        "versions": {"python": "3.11"}, "started_at": 1_790_000_000.0, "config": config}))
    with (run_dir / "history.jsonl").open("w") as fh:
        for op in sorted(hist.ops, key=lambda o: o["time"]):
            fh.write(json.dumps(op) + "\n")
    (run_dir / "schedule.json").write_text(json.dumps({"format": 1, "params": {"seed": seed}, "faults": [
        {"id": 0, "kind": "kill", "start_s": 3.0, "duration_s": 2.0,
         "target": {"select": "leader", "partition": 0, "pick": 7}, "after": None,
         "resolved": {"nodes": ["n2"]}, "started_s": 3.0, "ended_s": 5.0, "outcome": "ok",
         "error": None},
        {"id": 1, "kind": "partition", "start_s": 6.0, "duration_s": 1.5,
         "target": {"shape": "isolate", "pick": 9}, "after": None,
         "resolved": {"isolate": ["n3"]}, "started_s": 6.0, "ended_s": 7.5, "outcome": "ok",
         "error": None}]}))
    with (run_dir / "events.jsonl").open("w") as fh:
        for e in _events(lose):
            fh.write(json.dumps(e) + "\n")
    for host in ("n1", "n2"):
        (run_dir / "nodes" / host / "data").mkdir(parents=True, exist_ok=True)
        (run_dir / "nodes" / host / "node.log").write_text(f"{host} started\n")
    if with_results:
        _write_results(run_dir, _loss_rows(acked, lost))
    return run_dir


def _write_results(run_dir: Path, rows: list[dict[str, Any]]) -> None:
    anomalies: dict[str, Any] = {}
    for kind in ("lost-write", "unseen"):
        mine = [r for r in rows if r["kind"] == kind]
        if mine:
            anomalies[kind] = {"count": len(mine), "examples": [
                {k: r[k] for k in ("value", "partition", "offset")} for r in mine[:8]]}
    (run_dir / "results.json").write_text(json.dumps({
        "valid": not rows, "anomalies": anomalies, "stats": {"sends-ok": 1},
        "notes": ["simulated"], "lost": {"count": len(rows), "file": "loss.parquet"}}))
    schema = pa.schema([("value", pa.int64()), ("partition", pa.int32()), ("offset", pa.int64()),
                        ("ack_time", pa.int64()), ("node", pa.int32()), ("epoch", pa.int32()),
                        ("kind", pa.string()), ("faults", pa.list_(pa.string())),
                        ("isr_at_ack", pa.string()), ("leader_changes", pa.string()),
                        ("truncations", pa.string()), ("storage", pa.string()),
                        ("on_disk_at", pa.list_(pa.string())), ("explanation", pa.string())])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), run_dir / "loss.parquet")


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


def test_report_of_a_run_with_lost_records(tmp_path: Path) -> None:
    run = write_run_folder(tmp_path / "report-test" / "20260101T000000-s0")
    lost = pq.read_table(run / "loss.parquet")
    assert lost.num_rows > 0
    out = report_path(run)
    assert out == run / "report.html"
    text = _text(out.read_text())
    # Verdict and one-line summary come first.
    assert text.index("invalid") < text.index("Configuration")
    assert f"lost acknowledged records: {lost.num_rows:,}; other anomalies: none" in text
    # The configuration that matters.
    assert "acks 1" in text and "min.insync.replicas 2" in text
    assert "replication factor 3" in text and "unclean.recovery.strategy (default)" in text
    # Fault timeline from the history's nemesis operations.
    assert "kill 3.000 5.000 2.000" in text and "partition 6.000 7.500" in text
    # Forensics of each lost record.
    first = lost.sort_by("ack_time").to_pylist()[0]
    assert f"{first['value']} 0 {first['offset']}" in text
    assert "truncated at epoch 2" in text and "truncated/lost" in text
    assert "More columns in loss.parquet : faults, leader_changes, truncations" in text
    assert "isolate-leader" not in text and "outcome" in text  # schedule.json as a table
    # Anomalies with examples, events, and links to the raw files.
    assert "lost-write" in text and '"partition": 0' in text
    assert "truncate" in text and "removed=10" in text
    html = out.read_text()
    for href in ("history.jsonl", "schedule.json", "events.jsonl", "nodes/n2/node.log",
                 "latency.png", "throughput.png", "loss.png", "partitions.png"):
        assert f'href="{href}"' in html or f'src="{href}"' in html, href
        assert (run / href).is_file(), href
    assert "http" not in html.replace("http-equiv", "")  # nothing fetched from the network


def test_report_without_results_or_events(tmp_path: Path) -> None:
    run = write_run_folder(tmp_path / "r" / "20260101T000000-s1", with_results=False)
    (run / "events.jsonl").unlink()
    text = _text(report_path(run).read_text())
    assert "not checked" in text and "run `harness check` on this folder" in text
    assert "events.jsonl is missing" in text
    assert not (run / "partitions.png").exists() and (run / "latency.png").is_file()


def test_report_of_an_empty_folder_with_only_a_broken_test_json(tmp_path: Path) -> None:
    (tmp_path / "test.json").write_text("{not json")
    text = _text(report_path(tmp_path).read_text())
    assert "test.json could not be read" in text and "history.jsonl is missing" in text


def test_report_names_malformed_lines_and_bad_results(tmp_path: Path) -> None:
    run = write_run_folder(tmp_path / "r" / "x")
    with (run / "history.jsonl").open("a") as fh:
        fh.write('{"time": 5, "f": "send", "type": \n')
    lines = len((run / "history.jsonl").read_text().splitlines())
    (run / "results.json").write_text(json.dumps({"valid": "maybe"}))
    text = _text(report_path(run).read_text())
    assert f"history.jsonl line {lines}: invalid JSON" in text
    assert "`valid` is 'maybe'" in text


def test_report_names_a_torn_line_of_any_operation(tmp_path: Path) -> None:
    """Every line is parsed, so a crash's torn poll invoke is named like any other torn tail."""
    run = write_run_folder(tmp_path / "r" / "x")
    with (run / "history.jsonl").open("a") as fh:
        fh.write('{"index": 999999, "time": 5, "process": "c0", "type": "invoke", "f": "po')
    text = _text(report_path(run).read_text())
    assert "history.jsonl: the last line is cut short (a crash mid-write); skipped" in text


def test_report_not_a_run_folder(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="neither a run folder"):
        report_path(tmp_path)


def test_loss_table_caps_with_counts(tmp_path: Path) -> None:
    run = write_run_folder(tmp_path / "r" / "x", sends=9000)
    total = pq.read_table(run / "loss.parquet").num_rows
    assert total > 200
    assert f"showing 200 of {total:,}" in _text(report_path(run).read_text())


def test_latency_sample_is_bounded(tmp_path: Path) -> None:
    run = write_run_folder(tmp_path / "r" / "x", sends=3000)
    summary = scan_history(run / "history.jsonl", sample_cap=100)
    assert summary.sends["ok"] > 100
    assert len(summary.latency["ok"].points) == 100
    assert summary.latency["ok"].seen == summary.sends["ok"]
    assert sum(sum(c) for c in summary.throughput.values()) == sum(summary.sends.values())


def _windows(ops: list[tuple[int, str, str, Any]], end: int = 100) -> tuple[list, int]:
    tracker = FaultTracker()
    for time, kind, f, value in ops:
        tracker.feed({"time": time, "type": kind, "f": f, "process": "nemesis", "value": value})
    return ([(w.kind, w.start_ns, w.end_ns, w.healed) for w in tracker.windows(end)],
            tracker.unmatched_stops)


def test_fault_pairs_invoke_and_completion_records() -> None:
    n2 = {"nodes": ["n2"]}
    assert _windows([(1, "invoke", "start-kill", n2), (2, "info", "start-kill", n2),
                     (5, "invoke", "stop-kill", n2), (6, "info", "stop-kill", n2),
                     (7, "info", "stop-pause", None), (8, "info", "start-partition", None)],
                    end=10) == ([("kill", 1, 6, True), ("partition", 8, 10, False)], 1)


def test_overlapping_faults_of_one_kind_and_the_final_heal() -> None:
    a, b = {"nodes": ["n2"]}, {"nodes": ["n3"]}
    assert _windows([(1, "info", "start-pause", a), (2, "info", "start-pause", b),
                     (3, "info", "stop-pause", b), (4, "info", "start-kill", a),
                     (9, "info", "stop-all", {"healed": True})]) == (
        [("pause", 1, 9, True), ("pause", 2, 3, True), ("kill", 4, 9, True)], 0)


def test_the_report_reads_each_file_once(tmp_path: Path, monkeypatch) -> None:
    import runformat.jsonl

    run = write_run_folder(tmp_path / "r" / "x")
    (run / "minimal.json").write_text("{}")  # its story reads the same files: not again
    reads: list[str] = []
    objects = runformat.jsonl._objects

    def counted(path, *args, **kwargs):
        reads.append(Path(path).name)
        return objects(path, *args, **kwargs)

    monkeypatch.setattr(runformat.jsonl, "_objects", counted)
    text = _text(report_path(run).read_text())
    assert sorted(reads) == ["events.jsonl", "history.jsonl"]
    assert "Minimal reproduction" in text  # the story was told, from the same pass


def test_report_draws_a_transactional_cycle(tmp_path: Path) -> None:
    run = write_run_folder(tmp_path / "r" / "20260101T000000-s1")
    results = json.loads((run / "results.json").read_text())
    results["valid"] = False
    results["anomalies"]["G1c"] = {"count": 1, "examples": [{
        "type": "G1c", "cycle": [{"txn": 2}, {"txn": "<i>3</i>"}, {"txn": 2}],
        "steps": [{"type": "wr", "key": 0, "value": 5}, {"type": "wr", "key": 1, "value": 6}]}]}
    (run / "results.json").write_text(json.dumps(results))
    html = report_path(run).read_text()
    section = html[html.index('id="a-G1c"'):]
    assert section.count("<svg") == 1 and "wr 0: 5" in section
    assert "<i>3</i>" not in html and "T&lt;i&gt;3&lt;/i&gt;" in section
