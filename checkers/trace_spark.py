"""The trace check of checkers/trace.py on Spark: each topic-partition replayed in a task of its own.

A long run's trace (events.jsonl with history.jsonl) is replayed partition by partition: the
replay of one partition reads only that partition's lines and a little state all partitions
share -- which brokers run and are registered, which are fenced, the controller's batches
(a batch spans partitions), the nemesis's kills and power losses. So each line goes to the
partition it names, and a line that names none, or that the controller wrote, goes to every
partition. Each task sorts its lines into the single-process order (time, node events before
operations at the same instant, file order), and replays them with a `TraceChecker` that
evaluates its partition alone; the host -> broker map, which the single-process replay learns
from any line, is collected first and given to each task. The result is the single-process
check's (tests/checkers/test_trace_spark.py holds the two to equality on simulated runs).

Lines are read by Spark from the run folder, so every executor must see it (one machine, or
a shared file system, as for the history check). A history line is parsed only if the replay
uses it: ok operations that name a partition, and the nemesis's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from checkers.trace import VIEW_EVENTS, TraceChecker, TraceReport, noted, trace_settings
from runformat.jsonl import event_line, history_line
from runformat.run_config import RunConfig

Key = tuple[str, int]
EVENTS, OPERATIONS = 0, 1  # the single-process merge's order at equal times


def check_run_spark(spark: Any, run_dir: Path, config: RunConfig) -> TraceReport | None:
    """checkers.trace.check_run on `spark`; None without events.jsonl."""
    events = run_dir / "events.jsonl"
    if not events.is_file():
        return None
    settings = trace_settings(config)
    topic = settings.pop("topic")
    sc = spark.sparkContext
    event_lines = sc.textFile(str(events.resolve())).zipWithIndex()
    survey = event_lines.mapPartitions(_survey).collect()
    count = sum(s["events"] for s in survey)
    views = any(s["views"] for s in survey)
    hosts: dict[str, int] = {}
    for s in survey:
        for host, broker in s["hosts"]:
            hosts.setdefault(host, broker)
    partitions = config.partitions or 0
    keys = sorted({(topic, p) for p in range(partitions)}
                  | {tuple(k) for s in survey for k in s["keys"]})
    if not keys:
        return noted(TraceReport(undecided=TraceChecker(views=views).report.undecided, events=count))
    index = {k: i for i, k in enumerate(keys)}
    lines = event_lines.flatMap(lambda x: _route(EVENTS, x, keys))
    history = run_dir / "history.jsonl"
    if history.is_file():
        ops = sc.textFile(str(history.resolve())).zipWithIndex()
        lines = lines.union(ops.flatMap(lambda x: _route(OPERATIONS, x, keys)))
    replayed = (lines
                .repartitionAndSortWithinPartitions(len(keys), lambda k: index[k[0]])
                .mapPartitions(lambda rows: _replay(rows, topic, settings, views, hosts))
                .collect())
    report = TraceReport(undecided=TraceChecker(views=views).report.undecided, events=count)
    found = []
    for kind, value in replayed:
        if kind == "checks":
            for name, n in value.items():
                report.checks[name] = report.checks.get(name, 0) + n
        else:
            found.append(value)
    found.sort(key=lambda v: (v[0], v[1]))
    report.violations = [v for _order, _i, v in found]
    return noted(report)


def _survey(rows: Iterable[tuple[str, int]]) -> Iterator[dict[str, Any]]:
    """What the replay needs before it starts, from a slice of events.jsonl."""
    keys: set[Key] = set()
    hosts: set[tuple[str, int]] = set()
    events = 0
    views = False
    for line, _i in rows:
        e = event_line(line)
        if e is None:
            continue
        events += 1
        views = views or e.get("kind") == VIEW_EVENTS
        if "topic" in e and "partition" in e:
            keys.add((e["topic"], e["partition"]))
        if isinstance(e.get("node"), int) and isinstance(e.get("host"), str):
            hosts.add((e["host"], e["node"]))
    yield {"keys": sorted(keys), "hosts": sorted(hosts), "events": events, "views": views}


def _route(source: int, row: tuple[str, int], keys: list[Key]) -> list[tuple[tuple, str]]:
    """((partition, time, source, line number), line) for each partition the line concerns."""
    line, i = row
    if source == OPERATIONS and '"type": "invoke"' in line and '"nemesis"' not in line:
        return []  # an invocation: the replay reads completions only
    obj = history_line(line) if source == OPERATIONS else event_line(line)
    if obj is None:  # a line the single-process check skips (runformat's policy)
        return []
    order = (obj["time"], source, i)
    if source == OPERATIONS:
        if obj.get("process") == "nemesis":
            return [((k, *order), line) for k in keys]
        if obj.get("type") != "ok" or "partition" not in obj:
            return []
        own = next((k for k in keys if k[1] == obj["partition"]), None)
        return [((own, *order), line)] if own is not None else []
    if "topic" in obj and "partition" in obj and obj.get("node") != "controller":
        return [(((obj["topic"], obj["partition"]), *order), line)]
    return [((k, *order), line) for k in keys]


def _replay(rows: Iterable[tuple[tuple, str]], topic: str, settings: dict[str, Any], views: bool,
            hosts: dict[str, int]) -> Iterator[tuple[str, Any]]:
    """One task's partitions, each in the single-process order: its violations, each with the
    place of the line that showed it, and its evaluation counts."""
    checker: TraceChecker | None = None
    current: Key | None = None
    seen = 0

    def flush() -> Iterator[tuple[str, Any]]:
        assert checker is not None
        report = checker.finish()
        for v in report.violations[seen:]:
            yield "violation", ((float("inf"),), current, v)
        yield "checks", report.checks

    for (key, *order), line in rows:
        if key != current:
            if checker is not None:
                yield from flush()
            checker = TraceChecker(views=views, only=key, **settings)
            checker.host_broker.update(hosts)
            current, seen = key, 0
        if order[1] == EVENTS:
            checker.event(event_line(line))
        else:
            checker.operation(history_line(line), topic)
        for v in checker.report.violations[seen:]:
            yield "violation", (tuple(order), current, v)
        seen = len(checker.report.violations)
    if checker is not None:
        yield from flush()

