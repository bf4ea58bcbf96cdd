"""Per-partition leader / ISR / ELR series from the run's merged events.jsonl."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from runformat import Event

# Event kinds worth listing in the report's event table (everything else is routine).
NOTABLE_KINDS = ("unclean-election", "unclean-recovery", "truncate", "broker-fenced",
                 "log-recovery")


@dataclass
class PartitionSeries:
    times: list[float] = field(default_factory=list)  # seconds since run start
    leaders: list[int | None] = field(default_factory=list)
    epochs: list[int | None] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    elr: list[int] = field(default_factory=list)

    @property
    def leader_changes(self) -> int:
        return sum(1 for a, b in zip(self.leaders, self.leaders[1:], strict=False) if a != b)


@dataclass
class EventSummary:
    partitions: dict[str, PartitionSeries] = field(default_factory=dict)  # "topic-partition"
    counts: dict[str, int] = field(default_factory=dict)  # kind -> events
    notable: list[dict[str, Any]] = field(default_factory=list)
    notable_total: int = 0


def summarise_events(events: Iterable[Event], notable_cap: int = 200) -> EventSummary:
    """The series and counts of events.jsonl's events (read once: runformat.read_events)."""
    summary = EventSummary()
    for event in events:
        _feed(summary, event, notable_cap)
    return summary


def _feed(summary: EventSummary, event: dict[str, Any], notable_cap: int) -> None:
    kind = str(event.get("kind", "?"))
    summary.counts[kind] = summary.counts.get(kind, 0) + 1
    if kind == "partition-change":
        key = f"{event.get('topic', '?')}-{event.get('partition', '?')}"
        series = summary.partitions.setdefault(key, PartitionSeries())
        series.times.append(event["time"] / 1e9)
        series.leaders.append(event.get("leader"))
        series.epochs.append(event.get("leader_epoch"))
        series.isr.append(len(event.get("isr") or []))
        series.elr.append(len(event.get("elr") or []))
    elif kind in NOTABLE_KINDS:
        summary.notable_total += 1
        if len(summary.notable) < notable_cap:
            summary.notable.append(event)


def truncated(ev: dict[str, Any]) -> str:
    """What a truncation removed: "offsets A-B", or "from offset A on" when the event does not
    say where the log ended (Kafka's logs do not: docs/kafka.md)."""
    end = ev.get("from_offset")
    if not isinstance(end, int):
        return f"from offset {ev.get('to_offset')} on"
    return f"offsets {ev.get('to_offset')}-{end - 1}"
