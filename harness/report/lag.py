"""Jepsen's realtime-lag and unseen views as PNGs, from the timeline's folded lanes.

Lag (per partition, over time): the acknowledged log end minus the furthest offset any
consumer has read, in records, and in seconds (Jepsen's realtime-lag: how long ago the oldest
acknowledged record past that offset was acknowledged). Unseen: acknowledged records no poll has returned yet; a count
that stays up at the end of the run is records the consumers never saw (lost or unseen).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from harness.report.faults import FaultWindow
from harness.report.plots import _figure, _save, shade_faults
from harness.report.timeline import TimelineData

MAX_LINES = 12


def _series(data: TimelineData, attr: str, out: Path, faults: Sequence[FaultWindow],
            title: str, ylabel: str) -> Path | None:
    if not data.lanes:
        return None
    fig = _figure(3.4)
    ax = fig.add_subplot()
    shade_faults(ax, faults)
    x = (np.arange(len(next(iter(data.lanes.values())).lag)) + 1) * data.bucket_ns / 1e9
    for p, lane in sorted(data.lanes.items())[:MAX_LINES]:
        ax.plot(x, getattr(lane, attr), lw=1, label=f"partition {p}")
    ax.set_xlabel("time (s)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.set_xlim(0, data.end_ns / 1e9)
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", fontsize=7, ncol=2)
    return _save(fig, out)


def lag_plot(data: TimelineData, faults: Sequence[FaultWindow], out: Path) -> Path | None:
    """Two panels: records behind, and seconds behind (Jepsen's realtime-lag)."""
    if not data.lanes:
        return None
    fig = _figure(5.6)
    x = (np.arange(len(next(iter(data.lanes.values())).lag)) + 1) * data.bucket_ns / 1e9
    for row, (attr, ylabel) in enumerate((("lag", "records behind"),
                                          ("lag_s", "seconds behind"))):
        ax = fig.add_subplot(2, 1, row + 1)
        shade_faults(ax, faults)
        for p, lane in sorted(data.lanes.items())[:MAX_LINES]:
            ax.plot(x, getattr(lane, attr), lw=1, label=f"partition {p}")
        ax.set_ylabel(ylabel)
        ax.set_xlim(0, data.end_ns / 1e9)
        ax.set_ylim(bottom=0)
        if row == 0:
            ax.set_title("Realtime lag: how far the furthest consumer is behind the "
                         "acknowledged log end")
            ax.legend(loc="upper left", fontsize=7, ncol=2)
            ax.tick_params(labelbottom=False)
    ax.set_xlabel("time (s)")
    return _save(fig, out)


def unseen_plot(data: TimelineData, faults: Sequence[FaultWindow], out: Path) -> Path | None:
    return _series(data, "unseen", out, faults,
                   "Unseen: acknowledged records no poll has returned yet", "records")
