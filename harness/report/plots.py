"""Matplotlib PNGs for the reports (Agg canvas through Figure: no pyplot global state)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from control.files import atomic_output
from harness.report.events import EventSummary
from harness.report.faults import FaultWindow
from harness.report.loss import LossTable
from harness.report.scan import OUTCOMES, HistorySummary

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

OUTCOME_COLORS = {"ok": "tab:green", "fail": "tab:red", "info": "tab:orange"}
FAULT_COLORS = ("#f4a6a6", "#a6c8f4", "#c9a6f4", "#f4dca6", "#a6f4c5", "#d0d0d0")
MAX_BINS = 600  # throughput / loss histograms: at most this many bars, whatever the run length
MAX_PARTITION_PANELS = 12
DPI = 100


def _figure(height: float = 3.2, width: float = 10.0, bottom_in: float = 0.55) -> Figure:
    # Matplotlib is imported here, when a plot is drawn: it is a second of every `harness`
    # command's start, and most never draw.
    from matplotlib.figure import Figure

    # Fixed margins in inches: a layout engine would cost more than drawing the plot itself.
    fig = Figure(figsize=(width, height), dpi=DPI)
    fig.subplots_adjust(left=0.8 / width, right=1 - 0.7 / width, bottom=bottom_in / height,
                        top=1 - 0.4 / height, hspace=0.15)
    return fig


def _save(fig: Figure, out: Path) -> Path:
    # Written beside and renamed into place: a symlink planted at the name is replaced,
    # never written through (savefig itself would follow it).
    with atomic_output(out) as f:
        fig.savefig(f, format="png")
    return out


def shade_faults(ax: Axes, faults: Sequence[FaultWindow]) -> None:
    """Shade each fault window, one colour and one legend entry per fault kind."""
    colors: dict[str, str] = {}
    for window in faults:
        first = window.kind not in colors
        color = colors.setdefault(window.kind, FAULT_COLORS[len(colors) % len(FAULT_COLORS)])
        ax.axvspan(window.start_s, max(window.end_s, window.start_s + 1e-3), color=color,
                   alpha=0.35, lw=0, label=f"fault: {window.kind}" if first else None)


def latency_plot(summary: HistorySummary, out: Path) -> Path | None:
    """Send latency scatter, one colour per outcome, fault windows shaded; None if no sends."""
    if not any(sample.points for sample in summary.latency.values()):
        return None
    fig = _figure(3.6)
    ax = fig.add_subplot()
    shade_faults(ax, summary.faults)
    for outcome in OUTCOMES:
        sample = summary.latency[outcome]
        if not sample.points:
            continue
        pts = np.asarray(sample.points)
        shown = f" (sample of {sample.seen:,})" if sample.seen > len(sample.points) else ""
        ax.scatter(pts[:, 0], pts[:, 1], s=3, alpha=0.5, color=OUTCOME_COLORS[outcome],
                   label=f"{outcome}: {sample.seen:,}{shown}", rasterized=True)
    ax.set_yscale("log")
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("send latency (ms)")
    ax.set_title("Acknowledgement latency by outcome")
    ax.legend(loc="upper left", fontsize="small", markerscale=3)
    return _save(fig, out)


def _bin_width(span_s: float) -> int:
    return max(1, int(np.ceil(span_s / MAX_BINS)))


def throughput_plot(summary: HistorySummary, out: Path) -> Path | None:
    """Send completions per second by outcome; None if the history has no sends."""
    if not summary.throughput:
        return None
    last = max(summary.throughput)
    width = _bin_width(last + 1)
    counts = np.zeros((last // width + 1, len(OUTCOMES)))
    for second, per_outcome in summary.throughput.items():
        counts[second // width] += per_outcome
    starts = np.arange(counts.shape[0]) * width
    fig = _figure()
    ax = fig.add_subplot()
    shade_faults(ax, summary.faults)
    for i, outcome in enumerate(OUTCOMES):
        if counts[:, i].any():
            ax.step(starts, counts[:, i] / width, where="post", color=OUTCOME_COLORS[outcome],
                    label=outcome)
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("sends / s")
    ax.set_title("Throughput" + (f" ({width} s bins)" if width > 1 else ""))
    ax.legend(loc="upper left", fontsize="small")
    return _save(fig, out)


def loss_plot(loss: LossTable, faults: Sequence[FaultWindow], end_s: float,
              out: Path) -> Path | None:
    """Lost / unseen records by acknowledgement time; None if there are none with a time."""
    times = {k: v for k, v in loss.ack_times_s.items() if len(v)}
    if not times:
        return None
    span = max(end_s, max(float(v.max()) for v in times.values())) + 1
    width = _bin_width(span)
    edges = np.arange(0, span + width, width)
    fig = _figure()
    ax = fig.add_subplot()
    shade_faults(ax, faults)
    bottom = np.zeros(len(edges) - 1)
    for kind, values in sorted(times.items()):
        counts, _ = np.histogram(values, bins=edges)
        ax.bar(edges[:-1], counts, width=width, bottom=bottom, align="edge",
               label=f"{kind}: {len(values):,}")
        bottom += counts
    ax.set_xlabel("acknowledged at (s since start)")
    ax.set_ylabel(f"records per {width} s")
    ax.set_title("Lost / unseen acknowledged records over time")
    ax.legend(loc="upper left", fontsize="small")
    return _save(fig, out)


def partitions_plot(events: EventSummary, faults: Sequence[FaultWindow], end_s: float,
                    out: Path) -> Path | None:
    """Per partition: ISR and ELR sizes (steps) and the leader (dots on a second axis)."""
    keys = sorted(events.partitions, key=_partition_sort_key)[:MAX_PARTITION_PANELS]
    if not keys:
        return None
    fig = _figure(1.9 * len(keys) + 0.6)
    axes = fig.subplots(len(keys), 1, sharex=True, squeeze=False)[:, 0]
    leader_axes = []
    for ax, key in zip(axes, keys, strict=True):
        series = events.partitions[key]
        times = series.times + [max(end_s, series.times[-1])]
        shade_faults(ax, faults)
        ax.step(times, series.isr + series.isr[-1:], where="post", color="tab:blue",
                label="ISR size")
        ax.step(times, series.elr + series.elr[-1:], where="post", color="tab:purple",
                label="ELR size")
        ax.set_ylabel(key, fontsize="small")
        ax.set_ylim(bottom=-0.3)
        leader_ax = ax.twinx()
        leader_axes.append(leader_ax)
        leaders = [np.nan if lead is None else lead for lead in series.leaders]
        leader_ax.plot(series.times, leaders, "o", color="black", ms=3, label="leader id")
        none_times = [t for t, lead in zip(series.times, series.leaders, strict=True)
                      if lead is None]
        leader_ax.plot(none_times, [0] * len(none_times), "x", color="red", ms=5,
                       label="no leader")
        leader_ax.set_ylabel("leader", fontsize="small")
        leader_ax.set_ylim(bottom=-0.5)
    axes[0].set_title(f"Leader changes and ISR/ELR sizes ({len(events.partitions)} partitions"
                      + (f", first {len(keys)} shown" if len(keys) < len(events.partitions)
                         else "") + ")")
    handles, labels = axes[0].get_legend_handles_labels()
    leader_handles, leader_labels = leader_axes[0].get_legend_handles_labels()
    axes[0].legend(handles + leader_handles, labels + leader_labels, loc="upper left",
                   fontsize="x-small", ncol=4)
    axes[-1].set_xlabel("time since start (s)")
    return _save(fig, out)


def _partition_sort_key(key: str) -> tuple[str, int, str]:
    topic, _, number = key.rpartition("-")
    return (topic, int(number), "") if number.isdigit() else (key, 0, key)


def trend_plot(series: dict[str, list[tuple[str, float]]], title: str, ylabel: str,
               out: Path) -> Path | None:
    """One line per config over nights (x = night labels in order); None if no data."""
    nights = sorted({night for points in series.values() for night, _ in points})
    if not nights:
        return None
    position = {night: i for i, night in enumerate(nights)}
    fig = _figure(3.6, bottom_in=1.0)  # room for the slanted night labels
    ax = fig.add_subplot()
    markers = "osD^v<>"  # configs with equal counts overlap: tell them apart by marker
    for i, (name, points) in enumerate(sorted(series.items())):
        xs = [position[night] for night, _ in points]
        ax.plot(xs, [value for _, value in points], markers[i % len(markers)] + "-",
                label=name, alpha=0.8)
    ax.set_xticks(range(len(nights)), nights, rotation=30, ha="right", fontsize="x-small")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    highest = max((value for points in series.values() for _, value in points), default=0)
    ax.set_ylim(bottom=0, top=max(1.0, highest * 1.1))
    ax.legend(loc="upper left", fontsize="small")
    return _save(fig, out)


def campaign_plot(cells: Sequence[dict], out: Path) -> Path | None:
    """Lost records per cell, one bar per cell coloured by outcome; None if nothing finished."""
    done = [c for c in cells if c.get("lost") is not None]
    if not done:
        return None
    colors = {"ok": "tab:green", "regression": "tab:red", "expected-loss": "tab:purple",
              "detected-no-loss": "tab:blue", "not-detected": "tab:orange", "unknown": "tab:gray"}
    fig = _figure(0.28 * len(done) + 1.2, bottom_in=0.5)
    fig.subplots_adjust(left=0.3)
    ax = fig.add_subplot()
    ys = np.arange(len(done))
    ax.barh(ys, [c["lost"] for c in done],
            color=[colors.get(c.get("outcome"), "tab:gray") for c in done])
    ax.set_yticks(ys, [c["id"] for c in done], fontsize="x-small")
    ax.invert_yaxis()
    ax.set_xlabel("lost acknowledged records")
    ax.set_title("Lost records per cell (green ok, red regression, purple expected loss, "
                 "orange not detected)", fontsize="small")
    return _save(fig, out)
