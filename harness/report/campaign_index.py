"""Index pages: one per campaign folder (the matrix), and results/index.html (all campaigns,
trends over nights, recent runs). Links are relative so the pages work from file:// too."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from control.files import check_trusted_parents, write_text_atomic
from harness.report import plots
from harness.report.detection import EVIDENCE, WITH_INVARIANTS, detection_times
from harness.report.differential import compare, systems_of, table
from harness.report.nightly import compare_nights
from harness.report.outcome import read_outcome
from harness.report.render import environment, render_run

TREND_NIGHTS = 30  # nights shown in the trend plots
RECENT_RUNS = 50
_RUN_DIR = re.compile(r"\d{8}T\d{6}-s\d+")
_STAMP = re.compile(r"(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})")


def _read_state(folder: Path) -> dict[str, Any]:
    path = folder / "campaign.json"
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read campaign state: {exc}") from None
    if not isinstance(state, dict) or not isinstance(state.get("cells"), list):
        raise ValueError(f"{path}: not a campaign state (no `cells` list)")
    return state


def _night_label(stamp: str) -> str:
    m = _STAMP.fullmatch(stamp)
    return f"{m[1]}-{m[2]}-{m[3]} {m[4]}:{m[5]}:{m[6]}" if m else stamp


@dataclass
class Matrix:
    configs: list[tuple[str, str]] = field(default_factory=list)  # (name, expect)
    columns: list[tuple[str, float]] = field(default_factory=list)  # (nemesis, time limit)
    cells: dict[tuple[str, str, float], list[dict[str, Any]]] = field(default_factory=dict)


def build_matrix(folder: Path, cells: list[dict[str, Any]]) -> Matrix:
    matrix = Matrix()
    for cell in cells:
        config = (_row(cell), cell["expect"])
        column = (cell["nemesis"], cell["time_limit"])
        if config not in matrix.configs:
            matrix.configs.append(config)
        if column not in matrix.columns:
            matrix.columns.append(column)
        report = f"{cell['run_dir']}/report.html" if cell.get("run_dir") else None
        shown = {**cell, "report": report if report and (folder / report).is_file() else None}
        matrix.cells.setdefault((_row(cell), *column), []).append(shown)
    return matrix


def _row(cell: dict[str, Any]) -> str:
    """A matrix row: the config, on its system in a campaign across systems."""
    return f"{cell['config']} @ {cell['system']}" if cell.get("system") else cell["config"]


def _counts(cells: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for cell in cells:
        key = str(cell.get("outcome") or cell.get("status"))
        counts[key] = counts.get(key, 0) + 1
    return counts


def render_campaign(folder: Path) -> Path:
    """(Re)write `folder`/index.html from its campaign.json; returns its path."""
    state = _read_state(folder)
    cells = state["cells"]
    groups = compare(folder, cells)
    results_index = folder / "../../../index.html"
    plot = plots.campaign_plot(cells, folder / "lost.png")
    html = environment().get_template("campaign.html").render(
        title=f"Campaign {state.get('name', folder.parent.name)} / {folder.name}",
        state=state,
        verdict=state.get("verdict") or "pending",
        counts=_counts(cells),
        matrix=build_matrix(folder, cells),
        detections=detection_times(cells),
        evidence=detection_times(cells, EVIDENCE),
        invariants=detection_times(cells, WITH_INVARIANTS),
        notable=[c for c in cells if c.get("outcome") in ("regression", "not-detected", "error",
                                                          "unknown")],
        results_index="../../../index.html" if results_index.is_file() else None,
        plot=plot.name if plot else None,
        nightly=compare_nights(folder),
        groups=groups,
        systems=systems_of(groups),
        weakness_table={(r.config, r.system): r for r in table(groups)},
        configs=list(dict.fromkeys(g.config for g in groups)),
    )
    out = folder / "index.html"
    write_text_atomic(out, html)
    return out


def refresh_campaign(folder: Path) -> Path:
    """`harness report` on a campaign folder: missing run reports, the index, results/index."""
    for cell in _read_state(folder)["cells"]:
        run_dir = folder / cell["run_dir"] if cell.get("run_dir") else None
        if run_dir and run_dir.is_dir() and not (run_dir / "report.html").is_file():
            render_run(run_dir)
    if folder.parent.parent.name == "campaigns":
        write_results_index(folder.parents[2])
    return render_campaign(folder)


def _campaigns(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    found = []
    for path in sorted((root / "campaigns").glob("*/*/campaign.json")):
        try:
            found.append((path.parent, _read_state(path.parent)))
        except ValueError:
            continue  # a half-created or foreign folder is not a campaign to list
    return found


def _trend_series(nights: list[tuple[Path, dict[str, Any]]]) -> tuple[dict, dict]:
    lost: dict[str, list[tuple[str, float]]] = {}
    anomalies: dict[str, list[tuple[str, float]]] = {}
    for folder, state in nights[-TREND_NIGHTS:]:
        label = _night_label(folder.name)
        per_config: dict[str, list[int]] = {}
        for cell in state["cells"]:
            if cell.get("status") != "done" or cell.get("lost") is None:
                continue
            totals = per_config.setdefault(cell["config"], [0, 0])
            totals[0] += cell["lost"]
            totals[1] += sum(n for k, n in (cell.get("anomalies") or {}).items()
                             if k not in ("lost-write", "unseen"))
        for config, (lost_n, other_n) in per_config.items():
            lost.setdefault(config, []).append((label, lost_n))
            anomalies.setdefault(config, []).append((label, other_n))
    return lost, anomalies


def _trend_plots(root: Path, campaigns: list[tuple[Path, dict[str, Any]]]) -> list[dict]:
    by_name: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for folder, state in campaigns:
        by_name.setdefault(folder.parent.name, []).append((folder, state))
    trends = []
    for name, nights in sorted(by_name.items()):
        lost, other = _trend_series(nights)
        base = root / "campaigns" / name
        made = [plots.trend_plot(lost, f"{name}: lost acknowledged records per night",
                                 "lost records", base / "trend-lost.png"),
                plots.trend_plot(other, f"{name}: other anomalies per night", "anomalies",
                                 base / "trend-anomalies.png")]
        trends.append({"name": name, "nights": len(nights),
                       "images": [p.relative_to(root).as_posix() for p in made if p]})
    return trends


def _recent_runs(root: Path) -> list[dict[str, Any]]:
    runs = []
    for test in root.iterdir() if root.is_dir() else ():
        if test.name in ("campaigns", "latest") or not test.is_dir() or test.is_symlink():
            continue
        runs += [p for p in test.iterdir() if p.is_dir() and _RUN_DIR.fullmatch(p.name)]
    runs.sort(key=lambda p: (p.name.split("-s")[0], p.parent.name), reverse=True)
    shown = []
    for run in runs[:RECENT_RUNS]:
        outcome = read_outcome(run)
        report = run / "report.html"
        shown.append({"name": run.parent.name, "run": run.name, "outcome": outcome,
                      "report": report.relative_to(root).as_posix() if report.is_file() else None})
    return shown


def write_results_index(root: Path) -> Path:
    """(Re)write `root`/index.html: campaigns newest first, trend plots, recent runs."""
    root.mkdir(parents=True, exist_ok=True)
    check_trusted_parents(root / "index.html")  # the root and above: root's or ours, not loose
    campaigns = _campaigns(root)
    rows = [{"name": folder.parent.name, "stamp": folder.name,
             "started": _night_label(folder.name), "state": state,
             "counts": _counts(state["cells"]),
             "lost": sum(c.get("lost") or 0 for c in state["cells"]),
             "link": (folder / "index.html").relative_to(root).as_posix()
             if (folder / "index.html").is_file() else None}
            for folder, state in campaigns]
    rows.sort(key=lambda r: (r["stamp"], r["name"]), reverse=True)
    html = environment().get_template("results.html").render(
        title="Chaos test results", campaigns=rows, trends=_trend_plots(root, campaigns),
        runs=_recent_runs(root), recent_cap=RECENT_RUNS)
    out = root / "index.html"
    write_text_atomic(out, html)
    return out
