"""timeline.html: an interactive, self-contained per-partition offsets-against-time view.

The report's one streaming pass over history.jsonl (harness.report.scan; bounded memory except the per-partition sets of acked
and seen values used for the unseen count) folds the acknowledged sends and the polls into
BUCKETS time columns per partition (min/max offset and count per column, which is what a
canvas can draw anyway), plus the realtime lag (acknowledged log end minus the furthest
offset any consumer has read, in records; and, as Jepsen's realtime-lag, in seconds: the age
of the oldest acknowledged record past that offset) and the number of acknowledged records not yet seen by any poll
at the end of each column. Full per-operation detail is kept only in the windows around loss
incidents (DETAIL_CAP operations each), so the page stays a few MB for a 10M-op history.
The script is inline: the page opens from file:// with no network.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from control.files import write_text_atomic
from runformat import Op

NS = 1_000_000_000
BUCKETS = 2000
DETAIL_CAP = 20_000  # operations kept at full detail per incident window
DETAIL_TOTAL = 60_000  # and over all windows (the page stays a few MB)
DETAIL_WINDOWS = 20  # the first (biggest) incidents get full detail
LOST_CAP = 50_000
DETAIL_MARGIN_NS = 2 * NS


@dataclass
class Lane:
    """One partition's folded history."""

    ack_lo: list[int]
    ack_hi: list[int]
    ack_n: list[int]
    poll_lo: list[int]
    poll_hi: list[int]
    poll_n: list[int]
    lag: list[int]
    unseen: list[int]
    lag_s: list[float] = field(default_factory=list)  # age of the oldest unread acked record
    # The offsets and ack times of acks, oldest first, in two deques of integers: a tuple
    # per ack would outlive young collections and make the garbage collector walk the heap.
    pending_off: deque[int] = field(default_factory=deque)
    pending_t: deque[int] = field(default_factory=deque)
    ack_end: int = 0
    read_end: int = 0
    # The values acknowledged and seen, as dicts of value -> None, not sets: a dict holding
    # only numbers is not tracked by the garbage collector, while a set is walked at every
    # full collection (on the 1M-op benchmark, its three lanes' sets cost about 0.3 s).
    acked: dict[Any, None] = field(default_factory=dict)
    seen: dict[Any, None] = field(default_factory=dict)
    acked_seen: int = 0
    final: list[list[int]] = field(default_factory=list)  # runs [first, last] of offsets read
    final_t: int = 0
    last_b: int = -1  # the column the lane last reached
    detail_acks: list[list[Any]] = field(default_factory=list)
    detail_polls: list[list[Any]] = field(default_factory=list)

    @classmethod
    def empty(cls, n: int) -> Lane:
        return cls([-1] * n, [-1] * n, [0] * n, [-1] * n, [-1] * n, [0] * n, [0] * n, [0] * n,
                   [0.0] * n)


@dataclass
class TimelineData:
    end_ns: int
    bucket_ns: int
    lanes: dict[int, Lane]


def _runs(offsets: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for o in sorted(offsets):
        if runs and o == runs[-1][1] + 1:
            runs[-1][1] = o
        elif not runs or o > runs[-1][1]:
            runs.append([o, o])
    return runs


class TimelineFold:
    """Folds the ok sends and polls of one pass over history.jsonl (harness.report.scan) into
    per-partition lanes; `windows` are (partition, t0_ns, t1_ns) regions kept at full detail."""

    def __init__(self, end_ns: int, windows: list[tuple[int, int, int]],
                 buckets: int = BUCKETS) -> None:
        end_ns = max(end_ns, 1)
        self.buckets = buckets
        self.width = max(1, -(-end_ns // buckets))
        self.data = TimelineData(end_ns, self.width, {})
        # partition -> its windows still open, in order, as [t0, t1, operations it may keep];
        # a window is dropped when full, and all are once DETAIL_TOTAL are kept.
        self.open: dict[int, list[list[int]]] = {}
        for wp, t0, t1 in windows[:DETAIL_WINDOWS]:
            self.open.setdefault(wp, []).append([t0, t1, DETAIL_CAP])
        self.kept_total = 0

    def feed(self, op: Op) -> None:
        """One ok operation (harness.report.scan feeds only those)."""
        t, p = op["time"], op.get("partition")
        if p.__class__ is not int:
            return
        ln = self.data.lanes.get(p)
        if ln is None:
            ln = self.data.lanes[p] = Lane.empty(self.buckets)
        b = t // self.width
        if b >= self.buckets:
            b = self.buckets - 1
        elif b < 0:
            b = 0
        f = op.get("f")
        if f == "send":
            if not self._ack(ln, p, b, op):
                return
        elif f == "poll":
            self._poll(ln, p, b, op)
        elif f == "final-poll":
            ln.final = _runs([r[0] for r in op.get("records") or []])
            ln.final_t = t
            return
        if ln.last_b != b:  # columns are filled once, when a lane reaches them
            self._advance(ln, b)

    def finish(self) -> TimelineData:
        """The lanes, lag and unseen counts carried to the last column."""
        for ln in self.data.lanes.values():
            self._advance(ln, self.buckets - 1)
        return self.data

    def _ack(self, ln: Lane, p: int, b: int, op: Op) -> bool:
        off = op.get("offset")
        if not isinstance(off, int):
            return False
        lo = ln.ack_lo[b]
        if lo < 0 or off < lo:
            ln.ack_lo[b] = off
        if off > ln.ack_hi[b]:
            ln.ack_hi[b] = off
        ln.ack_n[b] += 1
        if off >= ln.ack_end:
            ln.ack_end = off + 1
        t = op["time"]
        ln.pending_off.append(off)
        ln.pending_t.append(t)
        value, acked = op.get("value"), ln.acked
        if value not in acked:
            acked[value] = None
            if value in ln.seen:
                ln.acked_seen += 1
        if self.open and self._in_window(p, t):
            ln.detail_acks.append([t // 1000, off, value, op.get("node"), op.get("epoch"),
                                   op.get("process")])
        return True

    def _poll(self, ln: Lane, p: int, b: int, op: Op) -> None:
        records = op.get("records") or []
        ln.poll_n[b] += 1
        if not records:
            return
        lo, hi = records[0][0], records[-1][0]
        if ln.poll_lo[b] < 0 or lo < ln.poll_lo[b]:
            ln.poll_lo[b] = lo
        if hi > ln.poll_hi[b]:
            ln.poll_hi[b] = hi
        if hi >= ln.read_end:
            ln.read_end = hi + 1
        # Set algebra, C loops, each as long as the poll: difference with a dict and the
        # intersection of a dict's keys with a smaller set look the small side up in the big.
        new = {rec[1] for rec in records}.difference(ln.seen)
        if new:
            ln.seen.update(dict.fromkeys(new))
            ln.acked_seen += len(ln.acked.keys() & new)
        if self.open and self._in_window(p, op["time"]):
            ln.detail_polls.append([op["time"] // 1000, lo, hi, len(records), op.get("process")])

    def _in_window(self, p: int, t: int) -> bool:
        """Whether the operation is kept at full detail (counting it if so)."""
        windows = self.open.get(p)
        if not windows:
            return False
        for w in windows:
            if w[0] <= t <= w[1]:
                w[2] -= 1
                if not w[2]:
                    windows.remove(w)
                self.kept_total += 1
                if self.kept_total >= DETAIL_TOTAL:
                    self.open.clear()
                return True
        return False

    def _advance(self, ln: Lane, b: int) -> None:
        """Carry lag and unseen forward over the columns up to b (empty ones included)."""
        prev = ln.last_b
        offsets, times = ln.pending_off, ln.pending_t
        # Popped only here, where its head is read: read_end never goes back, so popping late
        # pops what popping at every operation would have.
        while offsets and offsets[0] < ln.read_end:
            offsets.popleft()  # read (or its offset was since read from a new leader)
            times.popleft()
        if prev >= b:
            ln.last_b = b
            return
        lag = ln.ack_end - ln.read_end if ln.ack_end > ln.read_end else 0
        unseen = len(ln.acked) - ln.acked_seen
        oldest = times[0] if times else None
        for k in range(prev + 1, b + 1):
            ln.lag[k] = lag
            ln.unseen[k] = unseen
            ln.lag_s[k] = max(0.0, ((k + 1) * self.width - oldest) / NS) if oldest is not None else 0.0
        ln.last_b = b


def _events_by_partition(events: list[dict[str, Any]]) -> dict[str, Any]:
    parts: dict[int, list[list[Any]]] = {}
    brokers: list[list[Any]] = []
    for e in events:
        kind, t = e.get("kind"), e.get("time", 0) // 1000
        p = e.get("partition")
        if kind == "partition-change" and isinstance(p, int):
            parts.setdefault(p, []).append(["pc", t, e.get("leader"), e.get("leader_epoch"),
                                            e.get("isr"), e.get("elr"), e.get("reason")])
        elif kind == "truncate" and isinstance(p, int):
            parts.setdefault(p, []).append(["tr", t, e.get("node"), e.get("to_offset"),
                                            e.get("from_offset"), e.get("reason")])
        elif kind == "log-recovery" and isinstance(p, int):
            parts.setdefault(p, []).append(["lr", t, e.get("node"), e.get("log_end_offset"),
                                            e.get("reason")])
        elif kind in ("unclean-election", "unclean-recovery") and isinstance(p, int):
            parts.setdefault(p, []).append(["uc", t, e.get("leader"), e.get("leader_epoch"),
                                            kind])
        elif kind in ("broker-fenced", "broker-unfenced"):
            brokers.append([kind.removeprefix("broker-"), t, e.get("broker"), e.get("reason")])
    return {"parts": {str(k): v for k, v in parts.items()}, "brokers": brokers}


def _lost(loss_path: Path | None) -> dict[str, list[list[Any]]]:
    out: dict[str, list[list[Any]]] = {}
    if loss_path is None or not loss_path.is_file():
        return out
    cols = [c for c in ("partition", "offset", "ack_time", "value", "kind")
            if c in pq.read_schema(loss_path).names]
    rows = pq.ParquetFile(loss_path).read(columns=cols).to_pylist()
    stride = max(1, len(rows) // LOST_CAP)
    for r in rows[::stride]:
        if r.get("ack_time") is None or r.get("offset") is None:
            continue
        out.setdefault(str(r.get("partition", 0)), []).append(
            [int(r["ack_time"]) // 1000, int(r["offset"]), r.get("value"), r.get("kind")])
    return out


def timeline_json(data: TimelineData, events: list[dict[str, Any]], faults: list[Any],
                  incidents: list[dict[str, Any]], loss_path: Path | None) -> dict[str, Any]:
    lanes = {}
    for p, ln in sorted(data.lanes.items()):
        lanes[str(p)] = {"ack_lo": ln.ack_lo, "ack_hi": ln.ack_hi, "ack_n": ln.ack_n,
                         "poll_lo": ln.poll_lo, "poll_hi": ln.poll_hi, "poll_n": ln.poll_n,
                         "lag": ln.lag, "lag_s": [round(x, 3) for x in ln.lag_s],
                         "unseen": ln.unseen, "final": ln.final,
                         "final_t": ln.final_t // 1000, "acks": ln.detail_acks,
                         "polls": ln.detail_polls}
    return {"end_us": data.end_ns // 1000, "bucket_us": data.bucket_ns / 1000,
            "lanes": lanes, "events": _events_by_partition(events),
            "faults": [[w.kind, w.start_ns // 1000, (w.end_ns or w.start_ns) // 1000,
                        json.dumps(w.values, default=str)[:200]] for w in faults],
            "lost": _lost(loss_path), "incidents": incidents}


def write_timeline(out: Path, title: str, payload: dict[str, Any], render: Any) -> int:
    """Write timeline.html (render: a jinja template's render); returns its size in bytes."""
    html = render(title=title, data=payload)  # the template escapes it (tojson)
    write_text_atomic(out, html)  # a symlink planted at the name is replaced, not followed
    return len(html.encode())
