"""`harness reproduce RUN_DIR`: run a test again from its folder -- same config, seed and
workload, the recorded nemesis schedule replayed at its recorded times against the nodes it
hit -- and say whether the same anomalies occurred."""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from checkers.exitcodes import Exit, UserError
from control.files import check_regular_file
from harness import store
from harness.campaign import run_cell
from harness.config import typed, validate, with_sets, with_values
from harness.minimal import Minimal, load_minimal
from harness.report.outcome import LOSS_ANOMALIES
from harness.runner import run_test
from harness.sim_run import as_simulated, simulate_into
from harness.simulate import simulate_test
from harness.system_spec import SystemSpec, on_system
from harness.test import Plan, Test
from nemesis.roles import longest_wait, role_entries
from nemesis.schedule import load_schedule, plan_entries, replay_plan


def _anomalies(run_dir: Path) -> dict[str, int]:
    path = run_dir / "results.json"
    if not path.exists():
        return {}
    results = json.loads(path.read_text())
    return {name: a["count"] for name, a in results.get("anomalies", {}).items()}


def reproduce(run_dir: Path) -> int:
    run_dir = Path(run_dir)
    if not (run_dir / "test.json").exists() or not (run_dir / "schedule.json").exists():
        print(f"harness reproduce: {run_dir} is not a run folder (needs test.json and schedule.json)",
              file=sys.stderr)
        return Exit.ERROR
    config = validate(store.read_test_json(run_dir)["config"], source=str(run_dir / "test.json"))
    test = Test.of(config, store.default_results_dir(), argv=sys.argv, plan=Plan.replayed(run_dir))
    # a simulated run is simulated again (the same seed and faults: the same run); the
    # real hosts it never had are not asked for
    new_dir = simulate_test(test) if test.config.hosts.provider == "sim" else run_test(test)
    before, after = _anomalies(run_dir), _anomalies(new_dir)
    print(f"original:   {run_dir}  anomalies {before or 'none'}")
    print(f"reproduced: {new_dir}  anomalies {after or 'none'}")
    same = set(before) == set(after)
    print("same anomalies occurred" if same else "the anomalies differ")
    print(new_dir / "report.html")
    return 0 if same else 1


def reproduce_schedule(path: Path, minimal: Minimal, times: int = 1,
                       system: SystemSpec | None = None, sets: Sequence[str] = ()) -> int:
    """`harness reproduce --schedule minimal.json --times N [--system S]`: run a minimal
    reproduction (from `harness shrink`) N times -- its config and seed, its schedule at its
    times -- and say how often the same anomaly class occurred. Without a system it runs on
    real hosts against the nodes it hit; with one, the config is moved onto that system and
    each fault is aimed at the part its node played (nemesis.roles), cast again at run time.
    `minimal` is the file as harness.minimal.load_minimal read it."""
    config, entries, doc = minimal
    if system is None:
        hosts = dict(doc.get("real_hosts") or {"provider": "netns"})
        config = validate({**config, "hosts": hosts}, source=str(path))
    else:
        config, notes = on_system(config, system, doc.get("real_hosts"))
        entries = by_role(doc, Path(path))
        config, more = room_for_waits(config, entries)
        notes += more
        for note in notes:
            print(f"on {system.label}: {note}", flush=True)
    if sets:
        config = with_sets(config, sets)
    wanted = doc.get("anomaly")
    # an acknowledged record lost is the finding, whether a consumer had read it first
    # (lost-write) or nobody ever did (unseen): a slower system may show the other one
    label = " or ".join(LOSS_ANOMALIES) if wanted in LOSS_ANOMALIES else wanted
    classes = LOSS_ANOMALIES if wanted in LOSS_ANOMALIES else (wanted,)
    hits, runs = 0, []
    for i in range(max(1, times)):
        new_dir = run_cell(typed(config), store.default_results_dir(), Plan.scripted(entries), sys.argv)
        found = _anomalies(new_dir)
        count = sum(found.get(c, 0) for c in classes)
        hits += bool(count)
        runs.append(new_dir)
        print(f"run {i + 1}/{times}: {new_dir}  {label} {count}  "
              f"anomalies {found or 'none'}", flush=True)
    where = system.label if system else "real"
    print(f"{label} occurred in {hits}/{len(runs)} {where} run(s) of {path}")
    return 0 if hits else 1


def by_role(doc: dict, path: Path) -> list[dict]:
    """A minimal reproduction's schedule by role: as `harness shrink` wrote it, else learnt by
    simulating it once more (a few seconds; the replay is exact) and reading who played what."""
    if doc.get("by_role") is not None:
        return plan_entries(doc["by_role"], str(path))
    config, entries = validate(doc["config"], source=str(path)), plan_entries(doc["schedule"], str(path))
    with tempfile.TemporaryDirectory(prefix="harness-roles-") as scratch:
        test = Test.of(as_simulated(config), Path(scratch), plan=Plan.scripted(entries))
        simulate_into(test, Path(scratch), keep_going=True)
        found = role_entries(load_schedule(Path(scratch) / "schedule.json").faults)
    if not found:
        raise UserError(f"{path}: none of its faults started when it was simulated again")
    return found


def plan_file(path: Path) -> list[dict]:
    """`harness run --plan FILE`: the faults of a minimal.json (or its folder) or of any run's
    schedule.json, each aimed at the part its node played; a schedule recorded before roles
    were, by its planned (symbolic) targets at its realised times."""
    path = Path(path)
    if path.is_dir():
        path = path / ("minimal.json" if (path / "minimal.json").is_file() else "schedule.json")
    if path.name != "schedule.json":
        _, _, doc = load_minimal(path)
        return by_role(doc, path)
    try:
        schedule = load_schedule(check_regular_file(path))
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {path}: {e}") from None
    return role_entries(schedule.faults) or replay_plan(schedule, concrete=False)


def with_plan_faults(config: dict, entries: list[dict], source: str) -> dict:
    """The config with nemesis.faults set to the kinds the plan holds (what the hosts must be
    prepared for: the lossy filesystem, Toxiproxy), said when it changes."""
    kinds = sorted({e["kind"] for e in entries})
    if sorted(typed(config).nemesis.faults) != kinds:
        print(f"nemesis.faults = {kinds} (the kinds {source} holds)", flush=True)
    out, notes = room_for_waits(with_values(config, {"nemesis.faults": kinds}, source), entries)
    for note in notes:
        print(note, flush=True)
    return out


def room_for_waits(config: dict, entries: list[dict]) -> tuple[dict, list[str]]:
    """The config with a longer time limit when faults may wait for a role to be held or a
    partition state (nemesis.roles, nemesis.until): the run must not end while they wait."""
    waits = sum(longest_wait(e["target"]) for e in entries)
    if not waits:
        return config, []
    limit = typed(config).time_limit
    note = (f"time_limit {limit:g} -> {limit + waits:g} s: the plan's faults "
            f"may wait up to {waits:g} s for the ISR to shrink")
    return with_values(config, {"time_limit": limit + waits},
                       "the time limit made room for a role's wait"), [note]
