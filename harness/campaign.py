"""Run a campaign: every cell of the matrix in turn, resumable, within an optional time budget.

State lives in <results>/campaigns/<name>/<YYYYmmddTHHMMSS>/campaign.json, rewritten atomically
after every change, so a campaign killed at any moment (Ctrl-C or SIGKILL) continues with
--resume from the first cell that had not finished; finished cells are never run again.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

from control.files import owned_dir, write_json_atomic
from harness.campaign_spec import Cell, load_spec
from harness.config import TestConfig, require_toxiproxy, typed
from harness.report.campaign_index import render_campaign, write_results_index
from harness.report.detection import (
    EVIDENCE,
    FINISHED_CELLS,
    WITH_INVARIANTS,
    detection_times,
    format_table,
)
from harness.report.differential import compare, format_comparison
from harness.report.nightly import compare_nights, format_summary
from harness.report.outcome import read_outcome
from harness.report.render import render_run
from harness.runner import run_test
from harness.sim_run import SIM
from harness.simulate import simulate_test
from harness.store import default_results_dir
from harness.system_spec import SystemSpec
from harness.test import Plan, Test

FORMAT = 1
STAMP = "%Y%m%dT%H%M%S"
RunTest = Callable[[TestConfig, Path], Path]


class CampaignBusy(ValueError):
    """Another process is running this campaign folder (a user error, like a bad file)."""


def run_cell(config: TestConfig, results_root: Path, plan: Plan | None = None,
             argv: Sequence[str] = ()) -> Path:
    """A cell on real hosts, or in the simulator when its config says hosts.provider = "sim"
    (one campaign may mix both: many simulated seeds, a few real ones). A simulated cell runs
    on past a protocol-invariant violation to its final read, as a real run does, so the
    campaign sees both the violation and any loss it led to. `plan`: the seed's own faults
    unless given (`harness reproduce --system` gives a schedule by role)."""
    test = Test.of(config, results_root, argv=argv, plan=plan)
    if test.config.hosts.provider == SIM:
        return simulate_test(test, keep_going=True)
    return run_test(test)


def classify(expect: str, outcome_valid: Any, lost: int) -> str:
    """A finished, checked cell's outcome against what its config is expected to do. A
    loss-allowed config's run that lost nothing but was invalid (a protocol invariant
    violated, a stale read...) has found the weakness too: `detected-no-loss`."""
    if expect == "no-loss":
        if lost or outcome_valid is False:
            return "regression"
        return "ok" if outcome_valid is True else "unknown"
    if lost:
        return "expected-loss"
    return "detected-no-loss" if outcome_valid is False else "not-detected"


def night_verdict(cells: list[dict[str, Any]]) -> str:
    """regression > errors (a cell could not be run or checked, or is unknown) > pass."""
    outcomes = {c.get("outcome") for c in cells}
    if "regression" in outcomes:
        return "regression"
    if outcomes & {"error", "unknown"}:
        return "errors"
    return "pass"


class Campaign:
    """One campaign folder and its campaign.json; every mutation is saved at once."""

    def __init__(self, folder: Path, state: dict[str, Any]) -> None:
        self.folder = folder
        self.state = state
        self._lock: TextIO | None = None

    @classmethod
    def create(cls, root: Path, name: str, source: Path, cells: list[Cell]) -> Campaign:
        parent = owned_dir(owned_dir(root / "campaigns") / name)  # as results/<name> (store)
        start = time.time()
        for bump in range(1000):
            folder = parent / time.strftime(STAMP, time.gmtime(start + bump))
            try:
                folder.mkdir()  # exclusive: two campaigns never share a folder
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError(f"no free campaign folder name under {parent}")
        state = {"format": FORMAT, "name": name, "source": str(source.resolve()),
                 "created_at": start, "status": "running", "verdict": None, "sessions": [],
                 "cells": [_cell_state(c) for c in cells]}
        return cls(folder, state)

    @classmethod
    def open(cls, folder: Path) -> Campaign:
        path = folder / "campaign.json"
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: cannot read campaign state: {exc}") from None
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise ValueError(f"{path}: not a campaign state of format {FORMAT}")
        return cls(folder, state)

    def lock(self) -> None:
        """Hold an exclusive lock for this process's lifetime (released even by SIGKILL)."""
        self._lock = (self.folder / ".lock").open("w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CampaignBusy(f"{self.folder} is being run by another process") from None

    def unlock(self) -> None:
        if self._lock is not None:
            self._lock.close()  # closing the file releases the flock
            self._lock = None

    def save(self) -> None:
        self.state["verdict"] = night_verdict(self.state["cells"])
        write_json_atomic(self.folder / "campaign.json", self.state)

    @property
    def results_root(self) -> Path:
        return self.folder.parents[2]  # <results>/campaigns/<name>/<stamp>


def _cell_state(cell: Cell) -> dict[str, Any]:
    state = asdict(cell)
    state.update(status="pending", run_dir=None, verdict=None, lost=None, anomalies={},
                 outcome=None, error=None, started_at=None, duration_s=None)
    return state


def newest_unfinished(root: Path, name: str) -> Path | None:
    parent = root / "campaigns" / name
    if not parent.is_dir():
        return None
    for folder in sorted((p for p in parent.iterdir() if p.is_dir()), reverse=True):
        try:
            status = json.loads((folder / "campaign.json").read_text()).get("status")
        except (OSError, ValueError, AttributeError):
            continue
        if status != "finished":
            return folder
    return None


def run_campaign(file: Path, resume: bool = False, time_budget_s: float | None = None,
                 run_test: RunTest | None = None, results_root: Path | None = None,
                 seeds: str | None = None, only: list[str] | None = None,
                 systems: list[SystemSpec] | None = None,
                 spec: tuple[str, list[Cell]] | None = None) -> Path:
    """Run (or with `resume`, continue) the campaign in `file`; returns the campaign folder.
    With `systems`, every cell runs once on each (docs/differential.md). `spec`: what
    `load_spec(file, seeds, only, systems)` returned, when the caller has read it already.

    The last line printed is the path of the campaign's index.html."""
    file = Path(file)
    root = Path(results_root) if results_root is not None else default_results_dir()
    name, cells = spec if spec is not None else load_spec(file, seeds, only, systems)
    if run_test is None:  # before any folder: a toxic cell on a machine without Toxiproxy
        for cell in cells:
            require_toxiproxy(typed(cell.resolved).hosts)
    campaign = _open_or_create(root, name, file, cells, resume)
    if [c["id"] for c in campaign.state["cells"]] != [c.id for c in cells]:
        print(f"note: {file} changed since this campaign started; resuming its own matrix",
              flush=True)
    campaign.lock()
    try:
        return _run_locked(campaign, file, run_test, time_budget_s)
    finally:
        campaign.unlock()


def _run_locked(campaign: Campaign, file: Path, run_test: RunTest | None,
                time_budget_s: float | None) -> Path:
    session = {"started_at": time.time(), "time_budget_s": time_budget_s, "ended_at": None}
    campaign.state["sessions"].append(session)
    campaign.state["status"] = "running"
    for cell in campaign.state["cells"]:
        if cell["status"] not in FINISHED_CELLS:
            cell["status"] = "pending"  # interrupted or skipped by an earlier session's budget
    campaign.save()
    print(f"campaign {campaign.state['name']}: {campaign.folder}", flush=True)
    try:
        _run_cells(campaign, run_test or run_cell, session, time_budget_s)
    except KeyboardInterrupt:
        campaign.state["status"] = "interrupted"
        _finish_session(campaign, session)
        print(f"interrupted; continue with: harness campaign {file} --resume", flush=True)
        raise
    skipped = any(c["status"] == "skipped" for c in campaign.state["cells"])
    campaign.state["status"] = "stopped" if skipped else "finished"
    index = _finish_session(campaign, session)
    _print_summary(campaign)
    print(index, flush=True)
    return campaign.folder


def _open_or_create(root: Path, name: str, file: Path, cells: list[Cell],
                    resume: bool) -> Campaign:
    if resume:
        folder = newest_unfinished(root, name)
        if folder is not None:
            campaign = Campaign.open(folder)
            print(f"resuming {folder}", flush=True)
            return campaign
        print(f"no unfinished campaign {name!r} under {root / 'campaigns'}; starting a new one",
              flush=True)
    return Campaign.create(root, name, file, cells)


def _run_cells(campaign: Campaign, run_test: RunTest, session: dict[str, Any],
               budget: float | None) -> None:
    cells = campaign.state["cells"]
    for number, cell in enumerate(cells, 1):
        if cell["status"] != "pending":
            continue
        if budget is not None and time.time() - session["started_at"] >= budget:
            cell["status"], cell["outcome"] = "skipped", "skipped"
            cell["error"] = f"time budget of {budget:g} s used up"
            campaign.save()
            continue
        print(f"[{number}/{len(cells)}] {cell['id']} ...", flush=True)
        _run_cell(campaign, cell, run_test)
        render_campaign(campaign.folder)
        lost = "" if cell["lost"] is None else f", lost {cell['lost']:,}"
        print(f"[{number}/{len(cells)}] {cell['id']}: {cell['outcome']}{lost}", flush=True)


def _run_cell(campaign: Campaign, cell: dict[str, Any], run_test: RunTest) -> None:
    cell.update(status="running", started_at=time.time(), error=None)
    campaign.save()
    try:
        # Loaded (validated again, then typed): a night resumed after an upgrade may hold
        # configs from an older format. The runner gets the typed config, never the dict.
        config = TestConfig.load(cell["resolved"], source=str(campaign.folder / "campaign.json"))
        run_dir = Path(run_test(config, campaign.results_root))
    except KeyboardInterrupt:
        cell.update(status="pending", started_at=None)
        campaign.save()
        raise
    except Exception as exc:  # one broken run must not end the night
        cell.update(status="error", outcome="error", error=f"{type(exc).__name__}: {exc}",
                    traceback=traceback.format_exc(limit=20))
    else:
        _record_run(campaign, cell, run_dir)
    cell["duration_s"] = round(time.time() - cell["started_at"], 3)
    campaign.save()


def _record_run(campaign: Campaign, cell: dict[str, Any], run_dir: Path) -> None:
    cell["run_dir"] = os.path.relpath(run_dir.resolve(), campaign.folder.resolve())
    outcome = read_outcome(run_dir)
    if not (run_dir / "report.html").is_file():
        render_run(run_dir)
    cell.update(status="done", error=None, verdict=outcome.verdict, anomalies=outcome.anomalies)
    if not outcome.checked:
        cell.update(outcome="error", error=outcome.error)
        return
    cell["lost"] = outcome.lost
    cell["outcome"] = classify(cell["expect"], outcome.valid, outcome.lost)


def refresh_outcomes(folder: Path) -> bool:
    """Re-read every finished cell's outcome from its run's results.json, e.g. after the runs
    were re-checked with `harness check` by a newer checker. Skipped (False) while another
    process runs the campaign."""
    campaign = Campaign.open(folder)
    try:
        campaign.lock()
    except CampaignBusy:
        return False
    try:
        for cell in campaign.state["cells"]:
            run_dir = folder / cell["run_dir"] if cell.get("run_dir") else None
            if cell.get("status") == "done" and run_dir is not None and run_dir.is_dir():
                _record_run(campaign, cell, run_dir)
        campaign.save()
    finally:
        campaign.unlock()
    return True


def _finish_session(campaign: Campaign, session: dict[str, Any]) -> Path:
    session["ended_at"] = time.time()
    campaign.save()
    index = render_campaign(campaign.folder)
    write_results_index(campaign.results_root)
    return index


def _print_summary(campaign: Campaign) -> None:
    cells = campaign.state["cells"]
    counts: dict[str, int] = {}
    for cell in cells:
        counts[str(cell["outcome"])] = counts.get(str(cell["outcome"]), 0) + 1
    print(f"night verdict: {campaign.state['verdict']} ("
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ")", flush=True)
    for cell in cells:
        if cell["outcome"] in ("regression", "not-detected", "error"):
            print(f"  {cell['outcome']}: {cell['id']} {cell.get('error') or ''}".rstrip(),
                  flush=True)
    diff = compare_nights(campaign.folder)
    if diff is not None:
        print(format_summary(diff), flush=True)
    groups = compare(campaign.folder, cells)
    if groups:
        print(format_comparison(groups), flush=True)
    detections = detection_times(cells)
    if detections:
        print("time to detection (campaign time until a run lost acknowledged records, "
              "lost-write/unseen):\n" + format_table(detections), flush=True)
        print("time to detection, counting inconsistent-offsets too (a committed record "
              "read once, then replaced):\n" + format_table(detection_times(cells, EVIDENCE)),
              flush=True)
        print("time to detection, counting protocol-invariant violations too:\n"
              + format_table(detection_times(cells, WITH_INVARIANTS)), flush=True)
