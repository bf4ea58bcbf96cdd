"""One mutant's work, in a process of its own: `python -m harness.mutate.child` reads one job
(JSON on stdin), loads the mutated module in place of the original, and answers one JSON
object on stdout.

    {"mutant": ID | null, "config": RECORD, "seeds": [...], "baseline": {SEED: row},
     "cell_kinds": [...]}                                      -> {"rows": [...]}
    {"mutant": ID, "steps": [[CELL, SEED], ...], "configs": {CELL: RECORD},
     "baseline": {CELL: {SEED: row}}, "cell_kinds": {CELL: [...]}}
                                                -> {"rows": [...]} (each with its "cell")
    {"mutant": ID | null, "pytest": [ARGS...]}                 -> {"exit": N, "failed": [...]}

A RECORD is a cell's simulated TestConfig.record(), loaded back typed (TestConfig.load) once the
mutant is installed: the config crosses the process boundary in that one form.

The mutated source is served by an import hook installed before anything imports the
protocol, with the original file's path as its `__file__` (tracebacks name the real file),
and no bytecode is written: the checkout and its __pycache__ stay as they are. A search's
seeds run one after another in this process (harness.simulate.search, CPython), a mutant's
stopping at its first seed the differential oracle calls a kill against the baseline's row of
that seed (harness/mutate/oracle.py); a null mutant runs the unmutated code, the baseline every
kill is measured against, over every seed."""

from __future__ import annotations

import ctypes
import importlib.abc
import importlib.util
import io
import json
import os
import signal
import sys
import tempfile
from contextlib import redirect_stdout
from pathlib import Path
from types import ModuleType
from typing import Any

from harness.mutate.mutants import PROBE, Mutant, Probe, mutant
from harness.mutate.oracle import decisive

ROOT = Path(__file__).resolve().parent.parent.parent
PARENT = "HARNESS_MUTATE_PARENT"  # the pid of the process that started this child
PR_SET_PDEATHSIG = 1  # linux/prctl.h


class _MutantLoader(importlib.abc.Loader):
    """Runs the mutant's probed source, its probe given as a global: the protocol module
    imports nothing to count with."""

    def __init__(self, m: Mutant, origin: str, probe: Probe) -> None:
        self.mutant, self.origin, self.probe = m, origin, probe

    def exec_module(self, module: ModuleType) -> None:
        module.__dict__[PROBE] = self.probe
        exec(compile(self.mutant.probed, self.origin, "exec", dont_inherit=True), module.__dict__)


class _MutantFinder(importlib.abc.MetaPathFinder):
    """Finds the one mutated module before the path finder would find the original."""

    def __init__(self, m: Mutant, probe: Probe) -> None:
        self.mutant, self.probe = m, probe

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.mutant.module:
            return None
        origin = str(ROOT / self.mutant.path)
        return importlib.util.spec_from_file_location(
            fullname, origin, loader=_MutantLoader(self.mutant, origin, self.probe))


def install(mutant_id: str, probe: Probe) -> Mutant:
    """Serve `mutant_id`'s source for its module from now on in this process, its changed
    code counted by `probe` each time it runs."""
    m = mutant(ROOT, mutant_id)
    if m.module in sys.modules:
        raise RuntimeError(f"{m.module} was imported before the mutant could replace it")
    sys.dont_write_bytecode = True
    sys.meta_path.insert(0, _MutantFinder(m, probe))
    return m


def search_rows(record: dict[str, Any], seeds: list[int], baseline: dict[str, dict] | None,
                cell_kinds: list[str], probe: Probe | None = None) -> list[dict]:
    """The seeds' rows: a mutant's up to and including its first kill against `baseline`
    (rows by seed, as JSON keys them) and the kinds the baseline shows in the cell
    (oracle.judge); the baseline's own (None) all of them. `record` is the cell's
    TestConfig.record(), loaded back typed here. With the mutant's `probe`, each row says
    how often the changed code ran in its seed ("reached"; the checks' own calls of the
    mutated module included)."""
    # after install(): both import the protocol (the config the nodes' settings)
    from harness.config import TestConfig
    from harness.simulate import search

    config = TestConfig.load(record, source="the job's config")

    rows = []
    for seed in seeds:  # one at a time: search's stop_after counts only failing seeds
        before = probe.hits if probe else 0
        row = search(config, [seed], jobs=1, stop_after=1, interpreter="cpython").rows[0]
        if probe is not None:
            row["reached"] = probe.hits - before
        rows.append(row)
        if baseline is not None and decisive(row, baseline.get(str(seed)), cell_kinds):
            break
    return rows


def step_rows(job: dict[str, Any], probe: Probe | None = None) -> list[dict]:
    """A raced mutant's block of steps (harness/mutate/race.py), each a cell and a seed: their
    rows, each naming its cell, up to and including the first kill."""
    rows = []
    for cell, seed in job["steps"]:
        rows.extend({**row, "cell": cell} for row in search_rows(
            job["configs"][cell], [seed], job["baseline"].get(cell, {}),
            job["cell_kinds"].get(cell, []), probe))
        if decisive(rows[-1], job["baseline"].get(cell, {}).get(str(seed)),
                    job["cell_kinds"].get(cell, [])):
            break
    return rows


def unit_tests(args: list[str]) -> dict[str, Any]:
    """pytest on `args` in this process: its exit code and the tests that failed."""
    import pytest

    out = io.StringIO()
    with redirect_stdout(out):
        code = pytest.main([*args, "-q", "-x", "-rf", "-p", "no:cacheprovider"])
    failed = [line.split(" ", 2)[1] for line in out.getvalue().splitlines()
              if line.startswith("FAILED ")]
    return {"exit": int(code), "failed": failed}


def run(job: dict[str, Any]) -> dict[str, Any]:
    if job.get("scratch"):  # the parent's folder, which it removes however this child ends
        tempfile.tempdir = job["scratch"]
    probe = m = None
    if job.get("mutant"):
        probe = Probe()
        m = install(job["mutant"], probe)
    if "pytest" in job:
        return unit_tests(job["pytest"])
    if "steps" in job:
        rows = step_rows(job, probe)
    else:
        rows = search_rows(job["config"], job["seeds"], job.get("baseline", {}) if m else None,
                           job.get("cell_kinds", []), probe)
    # whether the search imported the mutated module at all: one it never imports (a
    # module the simulator does not run) cannot be killed by it; and how often the changed
    # code itself ran (each row's "reached"): one that never runs cannot be killed either
    return {"rows": rows, "loaded": m is None or m.module in sys.modules,
            "reached": probe.hits if probe else None}


def die_with_parent() -> None:
    """Be killed when the process that started this child ends, however it ends: a campaign
    killed outright, or a Spark worker killed when its job is cancelled, leaves no child
    searching on for minutes with no one to read its answer (the parent's own interrupt
    kills its children's process groups: harness/mutate/score.py)."""
    parent = os.environ.get(PARENT)
    if parent is None or not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != int(parent):  # it ended before prctl could watch it
        os._exit(1)


def main() -> None:
    die_with_parent()
    job = json.loads(sys.stdin.read())
    answers = sys.stdout
    sys.stdout = sys.stderr  # whatever the run prints; stdout carries only the answer
    try:
        answer = run(job)
    except Exception as e:  # the mutant's module failed to import, or the job was bad
        answer = {"error": f"{type(e).__name__}: {e}"}
    answers.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main()
