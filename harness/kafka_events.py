"""Apache Kafka's side of a run's events.jsonl (docs/kafka.md): what the embedded nodes write
as events, learnt from the outside.

- `PartitionWatch` polls every partition's state (leader, epoch, ISR, ELR) through
  DescribeTopicPartitions and records each change as a `partition-change` event of the
  controller (host n1), with `"source": "observed"`: a change shorter than the poll interval
  can be missed, so these are observations, not the controller's log.
- `log_events` reads the nodes' logs for the decisions Kafka logs: unclean elections (the
  controller), truncations (a broker's log cut to an offset) and log recovery after an
  unclean shutdown.

Both give events in the nodes' format (docs/formats.md), with `ts` in wall-clock seconds, so
the runner merges them onto the run clock like any node's events, and the report's
leader/ISR series, the timeline and the loss stories read them unchanged."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from workloads.kafka_admin import KafkaAdminError, describe_partitions

STATE_KEYS = ("leader", "leader_epoch", "isr", "elr", "last_known_elr", "replicas")
# The brokers' and controller's log lines that carry a decision (control.kafka's log layouts
# start every line with `[<ISO time with zone>] LEVEL `).
_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d{4})\] (\w+) (.*)$")
_UNCLEAN = re.compile(r"Setting new leader for topicId (\S+), partition (\d+) to (\d+) using an "
                      r"unclean election")
_TRUNCATE = re.compile(r"\[UnifiedLog partition=(.+)-(\d+), dir=[^\]]*\] Truncating to offset "
                       r"(\d+)")
_BELOW_HWM = re.compile(r"Truncating (.+)-(\d+) to offset (\d+) below high watermark (\d+)")
# A cut log: "Recovering unflushed segment" is logged for every log after any unclean
# shutdown, whether or not anything was cut, so only corruption found counts as a recovery
_RECOVERY = re.compile(r"\[LogLoader partition=(.+)-(\d+), dir=[^\]]*\] Corruption found in "
                       r"segment \S+, truncating to offset (\d+)")


class PartitionWatch:
    """Poll the topic's partition states until stopped; `events` holds every change."""

    def __init__(self, bootstrap: list[str], topic: str, interval_s: float = 0.25) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.interval_s = interval_s
        self.events: list[dict[str, Any]] = []
        self.topic_ids: dict[str, str] = {}  # Kafka's topic id -> name, for the logs
        self._last: dict[int, tuple] = {}

    async def run(self) -> None:
        while True:
            try:
                self.observe(await describe_partitions(self.bootstrap, self.topic), time.time())
            except KafkaAdminError:
                pass  # no broker answered: nothing observed this time
            await asyncio.sleep(self.interval_s)

    def observe(self, states: list[dict[str, Any]], ts: float) -> None:
        for state in states:
            if state.get("topic_id"):
                self.topic_ids[state["topic_id"]] = self.topic
            key = tuple(_hashable(state[k]) for k in STATE_KEYS)
            if self._last.get(state["partition"]) == key:
                continue
            self._last[state["partition"]] = key
            self.events.append({"ts": ts, "node": "controller", "kind": "partition-change",
                                "topic": self.topic, "partition": state["partition"],
                                **{k: state[k] for k in STATE_KEYS}, "source": "observed"})


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _timestamp(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def log_lines(lines: Iterable[str]) -> Iterator[tuple[float, str]]:
    """(epoch seconds, message) of each line in control.kafka's log layout; others skipped."""
    for line in lines:
        if m := _LINE.match(line):
            yield _timestamp(m.group(1)), m.group(3)


def log_events(lines: Iterable[str], node: int | str,
               topic_ids: dict[str, str]) -> Iterator[dict[str, Any]]:
    """The events one node's log records, in the nodes' event format."""
    for ts, message in log_lines(lines):
        if found := _UNCLEAN.search(message):
            yield {"ts": ts, "node": node, "kind": "unclean-election",
                   "topic": topic_ids.get(found.group(1), found.group(1)),
                   "partition": int(found.group(2)), "leader": int(found.group(3)),
                   "leader_epoch": None, "potential_data_loss": True, "source": "log"}
        elif found := _BELOW_HWM.search(message):
            yield {"ts": ts, "node": node, "kind": "truncate", "topic": found.group(1),
                   "partition": int(found.group(2)), "to_offset": int(found.group(3)),
                   "from_offset": None, "hwm": int(found.group(4)),
                   "reason": "below-high-watermark", "source": "log"}
        elif found := _TRUNCATE.search(message):
            yield {"ts": ts, "node": node, "kind": "truncate", "topic": found.group(1),
                   "partition": int(found.group(2)), "to_offset": int(found.group(3)),
                   "from_offset": None, "reason": "kafka", "source": "log"}
        elif found := _RECOVERY.search(message):
            yield {"ts": ts, "node": node, "kind": "log-recovery", "topic": found.group(1),
                   "partition": int(found.group(2)), "truncated_bytes": None,
                   "log_end_offset": int(found.group(3)), "reason": "corruption",
                   "source": "log"}


def node_log_events(path: Path, node: int | str,
                    topic_ids: dict[str, str]) -> list[dict[str, Any]]:
    """log_events of a collected node.log (none when it is missing)."""
    if not path.is_file():
        return []
    with path.open(encoding="utf-8", errors="replace") as f:
        return list(log_events(f, node, topic_ids))
