"""The run report: gather a run folder's pieces and render report.html with its plots.

Every piece is optional: a missing or unreadable file becomes a note on the page, because a
report is most needed exactly when a run went wrong.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import pyarrow as pa

from checkers import templating
from checkers.txn.draw import cycle_svg, is_cycle
from control.files import write_text_atomic
from control.kafka import EMBEDDED_ONLY, WEAKNESS_DEFAULTS
from harness.report import plots
from harness.report.events import EventSummary, summarise_events
from harness.report.incidents import Incident, build_incidents, detail_windows, read_records
from harness.report.lag import lag_plot, unseen_plot
from harness.report.loss import LossTable, read_loss
from harness.report.outcome import LOSS_ANOMALIES, RunOutcome, parse_results
from harness.report.scan import HistorySummary, scan_history
from harness.report.story import RunLines, build_story
from harness.report.timeline import (
    DETAIL_MARGIN_NS,
    TimelineData,
    TimelineFold,
    timeline_json,
    write_timeline,
)
from runformat import Event, Tally, last_time, read_events
from runformat.run_config import RunConfig

TABLE_CAP = 200  # rows of any one table on the page
EXAMPLES_CAP = 20  # examples shown per anomaly
EXAMPLE_CHARS = 2000  # one example's JSON is cut beyond this

# (label, table, key): the settings that decide whether acknowledged data can be lost.
KEY_SETTINGS = (
    ("acks", "workload", "acks"),
    ("enable.idempotence", "workload", "idempotence"),
    ("replication factor", "topic", "replication_factor"),
    ("min.insync.replicas", "system", "min.insync.replicas"),
    ("eligible.leader.replicas.enable (ELR)", "system", "eligible.leader.replicas.enable"),
    ("flush.messages", "system", "flush.messages"),
    ("flush.ms", "system", "flush.ms"),
    ("unclean.recovery.strategy", "system", "unclean.recovery.strategy"),
    ("unclean.leader.election.enable", "system", "unclean.leader.election.enable"),
    ("replica.truncation", "system", "replica.truncation"),
    ("unclean.shutdown.detection", "system", "unclean.shutdown.detection"),
    ("isr.update", "system", "isr.update"),
    ("nodes", None, "nodes"),
    ("partitions", "topic", "partitions"),
    ("time limit (s)", None, "time_limit"),
    ("seed", None, "seed"),
    ("faults", "nemesis", "faults"),
    ("fault interval / duration (s)", "nemesis", ("interval", "duration")),
    ("send rate (/s)", "workload", "rate"),
)

RAW_FILES = ("history.jsonl", "schedule.json", "events.jsonl", "test.json", "results.json",
             "loss.parquet")


def environment() -> jinja2.Environment:
    env = templating.environment("harness.report")  # escaping, as for every page
    env.filters["num"] = _num
    env.filters["cell"] = _cell
    env.filters["details"] = _details
    env.filters["utc"] = _utc
    return env


def _num(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def _cell(value: Any) -> str:
    """A table cell: lists joined, None blank, structures as compact JSON."""
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        return ", ".join(_cell(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, default=str, sort_keys=True)
    if isinstance(value, float):
        return f"{value:.3f}"
    return _num(value)


def _utc(unix: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(unix))


def _details(event: dict[str, Any]) -> str:
    """An event's own fields, without the ones every event has."""
    skip = ("time", "ts", "host", "node", "kind")
    return " ".join(f"{k}={_cell(v)}" for k, v in sorted(event.items()) if k not in skip)


@dataclass
class RunPage:
    """Everything run.html shows; filled piece by piece, each failure becoming a note."""

    run_dir: Path
    notes: list[str] = field(default_factory=list)
    test: dict[str, Any] | None = None
    results: dict[str, Any] | None = None
    outcome: RunOutcome | None = None
    history: HistorySummary | None = None
    events: EventSummary | None = None
    loss: LossTable | None = None
    schedule: Any = None
    plots: dict[str, str | None] = field(default_factory=dict)
    incidents: list[Incident] = field(default_factory=list)
    timeline: str | None = None  # timeline.html, when written
    # What the one pass over each file kept for the pieces built from it later.
    event_list: list[Event] = field(default_factory=list)
    loss_records: list[dict[str, Any]] | None = None
    timeline_data: TimelineData | None = None


def _read_json(page: RunPage, name: str) -> Any:
    path = page.run_dir / name
    if not path.is_file():
        page.notes.append(f"{name} is missing.")
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        page.notes.append(f"{name} could not be read: {exc}")
        return None


def _load(page: RunPage) -> None:
    test = _read_json(page, "test.json")
    page.test = test if isinstance(test, dict) else None
    page.results = _read_json(page, "results.json")
    if page.results is not None:
        try:
            page.outcome = parse_results(page.results, "results.json")
        except ValueError as exc:
            page.notes.append(str(exc))
            page.results = None
    if page.results is None:
        page.notes.append("No checker results yet: run `harness check` on this folder.")
    page.schedule = _read_json(page, "schedule.json")
    _load_events(page)
    _load_loss(page)
    _load_history(page)


def _load_history(page: RunPage) -> None:
    """One pass over history.jsonl: the summary and the timeline's fold together (its
    full-detail windows come from the loss records, read before)."""
    path = page.run_dir / "history.jsonl"
    if not path.is_file():
        page.notes.append("history.jsonl is missing: no latency, throughput or fault timeline.")
        return
    windows = detail_windows(page.loss_records or [], DETAIL_MARGIN_NS)
    try:
        fold = TimelineFold(last_time(path), windows)
        page.history = scan_history(path, [fold])
    except OSError as exc:
        page.notes.append(f"history.jsonl could not be read: {exc}")
        return
    page.timeline_data = fold.finish()
    page.notes += page.history.tally.notes()


def _load_events(page: RunPage) -> None:
    path = page.run_dir / "events.jsonl"
    if not path.is_file():
        page.notes.append("events.jsonl is missing: no leader/ISR/ELR timeline.")
        return
    tally = Tally(path.name)
    try:
        page.event_list = read_events(path, tally)
    except OSError as exc:
        page.notes.append(f"events.jsonl could not be read: {exc}")
        return
    page.events = summarise_events(page.event_list)
    page.notes += tally.notes()
    if not page.events.partitions:
        page.notes.append("events.jsonl has no partition-change events.")


def _load_loss(page: RunPage) -> None:
    path = page.run_dir / "loss.parquet"
    if not path.is_file():
        if page.outcome is not None and page.outcome.lost:
            page.notes.append("loss.parquet is missing: lost records have no forensics.")
        return
    try:
        page.loss = read_loss(path, TABLE_CAP)
        page.loss_records = read_records(path)
    except (OSError, pa.ArrowException) as exc:
        page.notes.append(f"loss.parquet could not be read: {exc}")
        page.loss = None


def _make_plots(page: RunPage) -> None:
    out = page.run_dir
    faults = page.history.faults if page.history else []
    end_s = page.history.end_ns / 1e9 if page.history else 0.0
    made = {
        "latency": page.history and plots.latency_plot(page.history, out / "latency.png"),
        "throughput": page.history and plots.throughput_plot(page.history, out / "throughput.png"),
        "loss": page.loss and plots.loss_plot(page.loss, faults, end_s, out / "loss.png"),
        "partitions": page.events and plots.partitions_plot(page.events, faults, end_s,
                                                            out / "partitions.png"),
    }
    for name, path in made.items():
        if path:
            page.plots[name] = path.name
        else:
            page.plots[name] = None
            (out / f"{name}.png").unlink(missing_ok=True)  # a stale plot would mislead


def _acks(page: RunPage) -> str:
    return RunConfig.shown((page.test or {}).get("config")).acks or ""


def _make_incidents_and_timeline(page: RunPage, title: str) -> None:
    """Loss incidents, timeline.html and the lag/unseen plots (issue 15)."""
    out = page.run_dir
    faults = page.history.faults if page.history else []
    end_ns = page.history.end_ns if page.history else 0
    loss_path = out / "loss.parquet"
    if page.loss_records is not None:
        try:
            page.incidents = build_incidents(page.loss_records, page.event_list, faults,
                                             _acks(page), end_ns)
        except (KeyError, TypeError, ValueError) as exc:
            page.notes.append(f"loss incidents could not be built: {exc}")
    for name in ("lag", "unseen"):
        page.plots[name] = None
    data = page.timeline_data
    if data is None:
        (out / "timeline.html").unlink(missing_ok=True)
        return
    payload = timeline_json(data, page.event_list, faults, [i.to_json() for i in page.incidents],
                            loss_path if page.loss is not None else None)
    write_timeline(out / "timeline.html", title, payload,
                   environment().get_template("timeline.html").render)
    page.timeline = "timeline.html"
    for name, fn in (("lag", lag_plot), ("unseen", unseen_plot)):
        path = fn(data, faults, out / f"{name}.png")
        page.plots[name] = path.name if path else None
        if not path:
            (out / f"{name}.png").unlink(missing_ok=True)


def _story_lines(page: RunPage) -> RunLines | None:
    """What the report's passes read of this run, for its story when it is the minimal run."""
    if page.history is None:
        return None
    return RunLines(page.event_list, page.history.nemesis, page.history.first_op_ns)


def _system_row(config: RunConfig) -> tuple[str, str]:
    if config.system_kind != "kafka":
        return ("system", "embedded (replication/)")
    return ("system", f"Apache Kafka {_cell(config.kafka_version)} (KRaft)")


def _config_rows(config: RunConfig) -> list[tuple[str, str]]:
    rows = [_system_row(config)]
    kafka = rows[0][1].startswith("Apache Kafka")
    # On Kafka the embedded system's own switches do not apply (control.kafka refuses them)
    skipped = set(EMBEDDED_ONLY) | set(WEAKNESS_DEFAULTS) if kafka else {"idempotence"}
    for label, table, key in KEY_SETTINGS:
        if table in ("system", "workload") and key in skipped:
            continue
        keys = key if isinstance(key, tuple) else (key,)
        values = [config.setting(table, k) for k in keys]
        shown = " / ".join("(default)" if v is None else _cell(v) for v in values)
        rows.append((label, shown))
    return rows


def _anomalies(results: dict[str, Any]) -> list[dict[str, Any]]:
    entries = []
    for name, entry in sorted((results.get("anomalies") or {}).items()):
        entry = entry if isinstance(entry, dict) else {}
        examples = entry.get("examples") or []
        shown = [_example(e) for e in examples[:EXAMPLES_CAP]]
        entries.append({"name": name, "count": entry.get("count", 0), "examples": shown,
                        "example_total": len(examples), "loss": name in LOSS_ANOMALIES,
                        "cycles": [cycle_svg(e) for e in examples[:EXAMPLES_CAP]
                                   if is_cycle(e)]})
    return entries


def _example(example: Any) -> str:
    text = json.dumps(example, default=str, sort_keys=True)
    return text if len(text) <= EXAMPLE_CHARS else text[:EXAMPLE_CHARS] + " …(cut)"


def _summary_line(page: RunPage) -> str:
    if page.outcome is None:
        return "not checked yet"
    lost = page.loss.total if page.loss else page.outcome.lost
    others = page.outcome.other_anomalies
    other = ", ".join(f"{k} {v:,}" for k, v in sorted(others.items())) or "none"
    return f"lost acknowledged records: {lost:,}; other anomalies: {other}"


def _links(run_dir: Path) -> list[tuple[str, str]]:
    links = [(name, name) for name in RAW_FILES if (run_dir / name).exists()]
    nodes = run_dir / "nodes"
    if nodes.is_dir():
        for host in sorted(p for p in nodes.iterdir() if p.is_dir()):
            for log in sorted(p for p in host.iterdir() if p.is_file()):  # logs, node events
                links.append((f"{host.name}/{log.name}", log.relative_to(run_dir).as_posix()))
            if (host / "data").is_dir():
                links.append((f"{host.name}/data/", f"nodes/{host.name}/data/"))
    return links


def _schedule_rows(schedule: Any) -> tuple[list[str], list[dict[str, Any]], int]:
    """schedule.json as a table when it is a list of objects (or holds one under a key)."""
    if isinstance(schedule, dict):
        lists = [v for v in schedule.values() if isinstance(v, list)]
        schedule = lists[0] if len(lists) == 1 else None
    if not isinstance(schedule, list) or not all(isinstance(e, dict) for e in schedule):
        return [], [], 0
    columns: list[str] = []
    for entry in schedule[:TABLE_CAP]:
        columns += [k for k in entry if k not in columns]
    return columns, schedule[:TABLE_CAP], len(schedule)


def render_run(run_dir: Path) -> Path:
    """(Re)write `run_dir`/report.html and its PNGs; returns the HTML path."""
    page = RunPage(run_dir)
    _load(page)
    _make_plots(page)
    test = page.test or {}
    title = f"{test.get('name', run_dir.parent.name)} / {run_dir.name}"
    _make_incidents_and_timeline(page, title)
    config = test.get("config") if isinstance(test.get("config"), dict) else {}
    columns, schedule, schedule_total = _schedule_rows(page.schedule)
    html = environment().get_template("run.html").render(
        # the minimal reproduction (harness shrink), if any
        story=build_story(run_dir, _story_lines(page)),
        page=page,
        title=title,
        verdict=page.outcome.verdict if page.outcome else "not checked",
        summary=_summary_line(page),
        config_rows=_config_rows(RunConfig.shown(config)),
        config_json=json.dumps(config, indent=2, sort_keys=True, default=str),
        argv=" ".join(str(a) for a in test.get("argv") or []),
        anomalies=_anomalies(page.results) if page.results else [],
        stats=(page.results or {}).get("stats") or {},
        checker_notes=(page.results or {}).get("notes") or [],
        lost_summary=(page.results or {}).get("lost") or {},
        schedule_columns=columns,
        schedule_rows=schedule,
        schedule_total=schedule_total,
        links=_links(run_dir),
        table_cap=TABLE_CAP,
        results_index="../../index.html" if (run_dir / "../../index.html").is_file() else None,
    )
    out = run_dir / "report.html"
    write_text_atomic(out, html)
    return out
