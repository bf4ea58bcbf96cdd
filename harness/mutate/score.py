"""A mutation campaign: which mutants the simulated search kills, and which the unit tests do.

Each mutant is searched cell by cell (a campaign cell's config and nemesis mix), in blocks of
seeds. The unmutated code, the baseline, goes first through each cell's seeds, once per
campaign: its rows are what every mutant's same seeds are judged against (the differential
oracle, harness/mutate/oracle.py). A task is one mutant and one block, run by a child process
(harness/mutate/child.py) that stops at the block's first killing seed; the tasks of a round
(every mutant still alive, the next block) run on local threads that wait on those children,
or as Spark tasks (`spark_master`, one job of one task per mutant and block, `jobs` at a
time). So a mutant killed at its third seed costs one block, and only survivors run every
seed.

Outcomes: killed (a safety kill: anomalies or invariants the baseline's same seed lacks; a
loss-excess kill: far more lost than the baseline's same seed; or a liveness kill: the
baseline's seed answered, the mutant's raised, acknowledged nothing or stayed unknown; with
its cell, seed and the wall time spent on the mutant until then),
crashed (the mutated module did not import: not counted in the score), timed-out (a block
ran past its time), survived. The unit tests (`tests/replication`, in-process tests only) run
separately on the survivors, or on every mutant (`unit_tests="all"`)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.mutate.child import PARENT, ROOT
from harness.mutate.oracle import (
    KNOWN,
    LOSS_EXCESS,
    judge,
    kinds,
    loss_frequency,
    lossy,
    lost_any,
    served,
)
from harness.mutate.zygote import Forked, Zygote

if TYPE_CHECKING:  # not imported here: a zygote's children import the protocol after the mutant
    from harness.config import TestConfig

Proc = subprocess.Popen | Forked  # a child: started afresh, or forked by the zygote

# Tests of the protocol that run in this process; the process tests start brokers as
# programs of their own, which would load the original module, not the mutant.
UNIT_TESTS = ("tests/replication", "--ignore=tests/replication/test_replication_process.py",
              "--hypothesis-seed=0")
BASELINE = "(unmutated)"  # the twin: the unmutated code under the same cells and seeds


@dataclass
class Cell:
    name: str
    config: TestConfig  # simulated; a task carries its record(), the child loads it back


@dataclass
class Result:
    """What a campaign learnt of one mutant (or of the unmutated code, BASELINE)."""

    id: str
    outcome: str = "alive"  # killed | crashed | timed-out | survived (alive while searched)
    by: list[str] = field(default_factory=list)  # what the killing seed had that the baseline's lacked
    kind: str | None = None  # of a kill: "safety", "loss-excess" or "liveness" (oracle.py)
    cell: str | None = None
    seed: int | None = None
    seeds_run: int = 0
    unknown: int = 0  # seeds whose verdict was neither valid nor invalid
    # where the seeds differ from the baseline's without a kill (counts of shared anomalies);
    # of the baseline itself, its invalid seeds
    notes: list[str] = field(default_factory=list)
    loaded: bool | None = None  # whether the simulation imported the mutated module at all
    # how often the changed code itself ran over the seeds judged, and in how many of them
    # (the child's probe, mutants.py); None: not recorded (the baseline, an older campaign)
    reached: int | None = None
    seeds_reached: int | None = None
    # per lossy cell, the seeds where only the mutant lost records and where only the baseline
    # did: [mutant, baseline], what `settle` tests for a loss-frequency kill
    lone_losses: dict[str, list[int]] = field(default_factory=dict)
    wall_s: float = 0.0  # spent on this mutant by the harness, up to its kill
    error: str | None = None
    unit: str | None = None  # killed | survived | error | None (not run)
    unit_failed: list[str] = field(default_factory=list)
    unit_wall_s: float = 0.0


class Children:
    """The child processes this process runs now, so that an interrupt (Ctrl-C, SIGTERM) can
    end them all at once: each is the leader of a process group of its own (it and whatever it
    starts, histcheck), killed whole; once stopped, no task starts another. A `group()` is a
    subset that can be stopped on its own (a mutant's lanes, once one of them killed it); its
    children are this registry's too, so an interrupt ends them as well."""

    def __init__(self, parent: Children | None = None) -> None:
        self._lock = threading.Lock()
        self._running: set[Proc] = set()
        self._parent = parent
        self.stopped = False

    def group(self) -> Children:
        return Children(self)

    @property
    def halted(self) -> bool:
        return self.stopped or (self._parent is not None and self._parent.halted)

    def start(self, launch: Callable[[], Proc]) -> Proc | None:
        with self._lock:  # a stop in between would miss a child started after it
            if self.stopped:
                return None
            proc = self._parent.start(launch) if self._parent else launch()
            if proc is not None:
                self._running.add(proc)
            return proc

    def forget(self, proc: Proc) -> None:
        with self._lock:
            self._running.discard(proc)
        if self._parent is not None:
            self._parent.forget(proc)

    def stop_all(self) -> None:
        with self._lock:
            self.stopped = True
            running = list(self._running)
        for proc in running:
            kill_group(proc)


def kill_group(proc: Proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # it ended on its own meanwhile
        pass


CHILDREN = Children()  # of this process: a Spark worker process has its own
ZYGOTE = "HARNESS_MUTATE_ZYGOTE"  # "0": start each child afresh instead of forking it
_zygote: Zygote | None = None  # this process's (harness/mutate/zygote.py), started on first use
_zygote_lock = threading.Lock()


def _launch(env: Mapping[str, str]) -> Proc:
    """A child: forked by this process's zygote (the libraries imported already), or, with
    the zygote switched off or gone, started afresh (python -m harness.mutate.child)."""
    global _zygote
    if os.environ.get(ZYGOTE, "1") != "0":
        with _zygote_lock:
            if _zygote is None or _zygote.proc.poll() is not None:
                _zygote = Zygote(env)
        try:
            return _zygote.fork()
        except OSError as e:
            print(f"[mutate] the zygote failed ({e}): starting the child afresh", file=sys.stderr)
    return subprocess.Popen([sys.executable, "-m", "harness.mutate.child"], cwd=ROOT, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def run_child(job: Mapping[str, Any], timeout: float,
              children: Children = CHILDREN) -> dict[str, Any]:
    """One job in a fresh child process; its answer, or {"timeout": True} / {"error": ...}, or
    {"stopped": True} once an interrupt stopped the campaign (CHILDREN.stop_all) or its
    `children` group was stopped. The child's scratch folders go in one of this process's,
    removed here: a child killed (a race's losing lane, a timeout) cannot remove its own."""
    scratch = tempfile.mkdtemp(prefix="harness-mutate-")
    try:
        return _run_child_in({**job, "scratch": scratch}, timeout, children)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run_child_in(job: Mapping[str, Any], timeout: float, children: Children) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), PARENT: str(os.getpid())}
    proc = children.start(lambda: _launch(env))
    if proc is None:
        return {"stopped": True}
    try:
        out, err = proc.communicate(json.dumps(job), timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        proc.communicate()
        return {"timeout": True}
    finally:
        children.forget(proc)
    if children.halted:
        return {"stopped": True}
    lines = out.strip().splitlines()
    if proc.returncode not in (0, None) or not lines:  # None: forked, the zygote reaps it
        how = "ended" if proc.returncode is None else f"exited with {proc.returncode}"
        return {"error": f"the child {how} without an answer: {err.strip()[-800:]}"}
    return json.loads(lines[-1])


def search_task(task: Mapping[str, Any]) -> dict[str, Any]:
    """A mutant and a block of seeds of one cell (a Spark task or a local thread's), with the
    baseline's rows of those seeds (none for the baseline's own task)."""
    started = time.perf_counter()
    answer = run_child(child_job(task), task["timeout"])
    return {**answer, "mutant": task["mutant"], "cell": task["cell"],
            "wall_s": time.perf_counter() - started}


def child_job(task: Mapping[str, Any]) -> dict[str, Any]:
    """A search task's job for the child: it stops at a seed only by the rule the parent
    judges the seed by, so the job carries the cell's kinds as well as the baseline's rows."""
    mutant = None if task["mutant"] == BASELINE else task["mutant"]
    return {"mutant": mutant, "config": task["config"], "seeds": task["seeds"],
            "baseline": task.get("baseline", {}), "cell_kinds": task.get("cell_kinds", [])}


def unit_task(task: Mapping[str, Any]) -> dict[str, Any]:
    mutant = None if task["mutant"] == BASELINE else task["mutant"]
    started = time.perf_counter()
    answer = run_child({"mutant": mutant, "pytest": list(task["pytest"])}, task["timeout"])
    return {**answer, "mutant": task["mutant"], "wall_s": time.perf_counter() - started}


Runner = Callable[[Callable[[dict], dict], list[dict]], Iterable[dict]]


def _as_done(fn: Callable[[dict], dict], tasks: list[dict], jobs: int,
             stop: Callable[[], None]) -> Iterable[dict]:
    """Each task's answer as soon as it is done (an answer names its mutant: order is moot).
    On an interrupt, `stop` ends the tasks running and no queued one starts, so the pool's
    threads are done within moments, not after every task left."""
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(fn, t) for t in tasks]
        try:
            for done in as_completed(futures):
                yield done.result()
        except (KeyboardInterrupt, GeneratorExit):  # GeneratorExit: the interrupt came in the
            for f in futures:                       # caller's loop body, which dropped us
                f.cancel()
            stop()
            raise


def local_runner(jobs: int) -> Runner:
    """Tasks on `jobs` threads, each waiting on its child process."""
    return lambda fn, tasks: _as_done(fn, tasks, jobs, CHILDREN.stop_all)


def spark_runner(master: str, jobs: int) -> Runner:
    """Each task a Spark job of one task, `jobs` of them at a time from as many threads (Spark
    schedules concurrent jobs of one context): results come as each task ends, and a long
    task holds up no other, as it would in one RDD collected at once. An interrupt cancels
    every job: Spark kills their Python workers, whose children die with them (child.py)."""
    from checkers.spark import get_session  # pyspark's import is slow

    # Spark's Python workers must import this checkout's harness.mutate, not whichever one
    # the environment has installed: they inherit PYTHONPATH from the JVM, hence from here.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    sc = get_session(master).sparkContext

    def one(fn: Callable[[dict], dict], task: dict) -> dict:
        return sc.parallelize([task], 1).map(fn).collect()[0]

    return lambda fn, tasks: _as_done(lambda task: one(fn, task), tasks, jobs,
                                      sc.cancelAllJobs)


def blocks(seeds: Sequence[int], size: int) -> list[list[int]]:
    return [list(seeds[i:i + size]) for i in range(0, len(seeds), size)]


def _record(result: Result, answer: Mapping[str, Any],
            baseline: Mapping[int, Mapping[str, Any]]) -> None:
    """Fold one block's answer into its mutant's result, each row judged against the
    baseline's row of its seed (`baseline`, by seed) and the kinds of its cell."""
    cell_kinds = kinds(baseline.values())
    counts_lone_losses = lossy(cell_kinds)
    result.wall_s += answer["wall_s"]
    if answer.get("timeout"):
        result.outcome, result.cell = "timed-out", answer["cell"]
        return
    if "error" in answer:  # the mutated module did not import, or the job was bad
        result.outcome, result.error = "crashed", answer["error"]
        return
    result.loaded = bool(result.loaded) or answer.get("loaded", True)
    for row in answer["rows"]:
        result.seeds_run += 1
        result.unknown += row["valid"] not in KNOWN
        _count_reached(result, row)
        base = baseline.get(row["seed"])
        if base is not None and counts_lone_losses:
            _count_lone_loss(result, answer["cell"], row, base)
        verdict = judge(row, base, cell_kinds)
        where = f"{answer['cell']} seed {row['seed']}"
        if verdict.kind == LOSS_EXCESS:  # the first one kills, at the end (`settle`), unless a
            if result.kind is None:      # later seed gives a safety or liveness kill
                result.kind, result.by = verdict.kind, verdict.why
                result.cell, result.seed = answer["cell"], row["seed"]
            continue
        if verdict.kind is not None:
            result.outcome, result.kind, result.by = "killed", verdict.kind, verdict.why
            result.cell, result.seed, result.error = answer["cell"], row["seed"], row["error"]
            return
        if verdict.differs:
            result.notes.append(f"{where}: {', '.join(verdict.differs)}")


def _count_lone_loss(result: Result, cell: str, row: Mapping[str, Any],
                     base: Mapping[str, Any]) -> None:
    """Count a seed of a lossy cell where exactly one of the mutant and the baseline lost."""
    mine, theirs = lost_any(row), lost_any(base)
    if served(row) and served(base) and mine != theirs:
        result.lone_losses.setdefault(cell, [0, 0])[theirs] += 1


def _count_reached(result: Result, row: Mapping[str, Any]) -> None:
    """Add a seed's count of the changed code's runs (a row from before the probe has none)."""
    if row.get("reached") is None:
        return
    result.reached = (result.reached or 0) + row["reached"]
    result.seeds_reached = (result.seeds_reached or 0) + (row["reached"] > 0)


def ran(result: Result) -> str:
    """Whether, and how often, a mutant's changed code ran, in words ("" if not recorded). A
    survivor whose change never ran is a gap in the cells' coverage, not an equivalent
    mutant: no seed could have told it from the original."""
    if result.reached is None:
        return ""
    if result.reached == 0:
        return f"its changed code never ran in {result.seeds_run} seeds"
    return (f"its changed code ran {result.reached} times, in {result.seeds_reached} of "
            f"{result.seeds_run} seeds")


def _record_baseline(result: Result, answer: Mapping[str, Any],
                     rows: dict[int, dict[str, Any]]) -> None:
    """Keep the baseline's rows of a block (the cache every mutant is judged against); its
    result notes its invalid seeds, and it fails (crashed, timed out) when a seed did not
    serve: then the cell is broken on its own and liveness kills would be meaningless."""
    result.wall_s += answer["wall_s"]
    if answer.get("timeout") or "error" in answer:
        result.outcome = "timed-out" if answer.get("timeout") else "crashed"
        result.cell, result.error = answer["cell"], answer.get("error")
        return
    for row in answer["rows"]:
        rows[row["seed"]] = row
        result.seeds_run += 1
        result.unknown += row["valid"] not in KNOWN
        where = f"{answer['cell']} seed {row['seed']}"
        if row["valid"] is False:  # what a loss-excess kill is measured against, too
            result.notes.append(f"{where}: {', '.join(sorted(row['anomalies']))}; lost "
                                f"{row.get('lost', 0)} for {row['acked']} acknowledged")
        if not served(row) and row["valid"] != "unknown":
            result.outcome, result.cell, result.seed = "crashed", answer["cell"], row["seed"]
            result.error = row["error"] or "nothing acknowledged"


def _tasks(ids: Sequence[str], cell: Cell, chunk: list[int], seed_timeout: float,
           baseline: Mapping[int, Mapping[str, Any]]) -> list[dict]:
    return [{"mutant": i, "cell": cell.name, "config": cell.config.record(), "seeds": chunk,
             "timeout": 20 + seed_timeout * len(chunk),
             "baseline": {str(s): baseline[s] for s in chunk if s in baseline},
             "cell_kinds": sorted(kinds(baseline.values()))} for i in ids]


def search_all(ids: Sequence[str], cells: Sequence[Cell], seeds: Sequence[int], runner: Runner,
               *, block: int = 10, seed_timeout: float = 30.0,
               on_result: Callable[[Result], None] | None = None) -> dict[str, Result]:
    """The baseline through each cell's seeds (once), then every mutant, round by round."""
    results = {i: Result(i) for i in [BASELINE, *ids]}
    base = results[BASELINE]
    for cell in cells:
        rows: dict[int, dict[str, Any]] = {}
        chunks = blocks(seeds, block)
        for answer in runner(search_task, [t for chunk in chunks
                                           for t in _tasks([BASELINE], cell, chunk,
                                                           seed_timeout, {})]):
            _record_baseline(base, answer, rows)
        for chunk in chunks:
            alive = [r.id for r in results.values() if r.outcome == "alive" and r.id != BASELINE]
            for answer in runner(search_task, _tasks(alive, cell, chunk, seed_timeout, rows)):
                result = results[answer["mutant"]]
                _record(result, answer, rows)
                if result.outcome != "alive" and on_result is not None:
                    on_result(result)
    for result in results.values():
        if result.outcome == "alive":
            settle(result)
            if on_result is not None:
                on_result(result)
    return results


def settle(result: Result) -> None:
    """A mutant alive after every seed: killed by its first loss excess, if it had one, else by
    a lossy cell's loss frequency, if one passes the test."""
    for cell, (mine, theirs) in sorted(result.lone_losses.items()):
        why = loss_frequency(mine, theirs) if result.kind is None else None
        if why is not None:
            result.kind, result.by, result.cell = LOSS_EXCESS, [why], cell
    result.outcome = "killed" if result.kind == LOSS_EXCESS else "survived"


def unit_test_all(results: Mapping[str, Result], which: str, runner: Runner, *,
                  pytest_args: Sequence[str] = UNIT_TESTS, timeout: float = 600.0) -> None:
    """The unit tests on the survivors (and the baseline), or on every counted mutant."""
    if which == "none":
        return
    chosen = [r.id for r in results.values()
              if r.id == BASELINE or r.outcome == "survived"
              or (which == "all" and r.outcome in ("killed", "timed-out"))]
    tasks = [{"mutant": i, "pytest": list(pytest_args), "timeout": timeout} for i in chosen]
    for answer in runner(unit_task, tasks):
        result = results[answer["mutant"]]
        result.unit_wall_s = answer["wall_s"]
        if "exit" in answer and answer["exit"] in (0, 1):
            result.unit = "killed" if answer["exit"] == 1 else "survived"
            result.unit_failed = answer["failed"]
        else:
            result.unit = "error"
            result.unit_failed = [answer.get("error") or f"timed out or exit {answer.get('exit')}"]
