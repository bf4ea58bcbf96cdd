"""Tests in the simulated world (simulation/): one seed into a run folder, many seeds as a
search, and the determinism self-check.

A simulated run writes the same run folder as a real one (test.json with "hosts": "sim",
history.jsonl, schedule.json, events.jsonl, results.json, report.html), so `harness check`,
`harness report` and campaign indexes read it unchanged. Its faults come from the same
planner, are aimed by the same target resolution against live metadata and applied by the
same `FaultKind`s, through the simulated world's verbs. Same seed, config and code: the same
bytes in history.jsonl, events.jsonl and schedule.json.

A search simulates each seed in a scratch folder, checks it with the single-process checker
(checkers.reference: a small history costs less to check in-process than to ship to Spark),
keeps one summary row per seed, and re-runs each failing seed into a real run folder, checked
there by the configured checker (Spark), which must agree."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from checkers.check import check_path
from checkers.exitcodes import UserError
from checkers.spark import get_session
from control.files import owned_dir, write_json_atomic
from harness import pypy, store
from harness.config import TestConfig
from harness.pypy import INTERPRETERS, PYPY_MIN_SEEDS_PER_WORKER, PypyError, PypySimulator
from harness.sim_run import simulate_into, simulated, with_seed
from harness.test import Test
from harness.verdict import verdict_step
from runformat.effects import CORRUPTS_DISK, LOSES_UNSYNCED, effects_of
from runformat.jsonl import history_line, records

DETERMINISM_FILES = ("history.jsonl", "events.jsonl", "schedule.json")


def say(msg: str) -> None:
    print(f"[harness] {msg}", file=sys.stderr, flush=True)


def simulate_test(test: Test, *, backend: str = "spark", keep_going: bool = False,
                  spark_min_ops: int | None = None) -> Path:
    """One simulated run into a new run folder under the test's results root, checked (with
    `backend`; `spark_min_ops` as checkers.check.check_path takes it) and reported like a
    real run. Returns the folder."""
    test = replace(test, config=simulated(test.config))
    run_dir = store.new_run(test.results_root, test.config, list(test.argv))
    say(f"run folder {run_dir}")
    result = simulate_into(test, run_dir, keep_going=keep_going)
    say(f"simulated {result.virtual_s:.1f} s in {result.wall_s:.1f} s wall "
        f"({result.speed:.1f}x); workload {result.stats}")
    if test.check:
        verdict_step(run_dir, spark_master=test.config.checker.spark_master, backend=backend,
                     spark_min_ops=spark_min_ops)
    return run_dir


# ---- many seeds -------------------------------------------------------------------------------

@dataclass
class SeedRow:
    """What a search keeps of one seed."""

    seed: int
    valid: Any  # True | False | "unknown" | "error"
    anomalies: dict[str, int] = field(default_factory=dict)
    lost: int = 0
    acked: int = 0
    virtual_s: float = 0.0
    wall_s: float = 0.0
    error: str | None = None
    # the invariants broken before the run's first fault that can lose written data: the
    # mutation oracle's evidence in a cell whose faults lose records on their own
    before_loss: list[str] = field(default_factory=list)


_pypy: PypySimulator | None = None  # this process's PyPy child, kept warm across its seeds
_pypy_broken = False  # "auto" fell back to CPython in this process after the child failed


def _pypy_child(interpreter: str) -> PypySimulator | None:
    """This process's PyPy child (started on first use, or again if it exited), or None: for
    "cpython", for "auto" once it fell back or with no PyPy installed. PypyError if "pypy" finds
    none, or if the child cannot start."""
    global _pypy
    if interpreter == "cpython" or (interpreter == "auto" and _pypy_broken):
        return None
    if _pypy is None or _pypy.proc.poll() is not None:
        python = pypy.binary()
        if python is None:
            if interpreter == "pypy":
                raise PypyError("no PyPy installed (make bootstrap installs it; "
                                f"or set {pypy.ENV_VAR})")
            return None
        _pypy = PypySimulator(python)
        atexit.register(_pypy.close)
    return _pypy


def _simulate_seed_into(cfg: TestConfig, folder: Path, interpreter: str) -> tuple[float, int]:
    """Simulate one seed into `folder` (with keep_going: the row has the loss too), under PyPy
    or in this process; (simulated seconds, acknowledged sends). Under "auto", a child that
    cannot start or dies sends this seed and the rest of this process's to CPython."""
    global _pypy_broken
    try:
        child = _pypy_child(interpreter)
        if child is not None:
            reply = child.simulate(cfg, folder)
            return reply["virtual_s"], int(reply["stats"].get("send-ok", 0))
    except PypyError as e:
        if interpreter == "pypy":
            raise
        _pypy_broken = True
        say(f"PyPy failed ({e}); this worker simulates with {sys.executable} from here on")
        for leftover in DETERMINISM_FILES:  # a dead child's partial files
            (folder / leftover).unlink(missing_ok=True)
    result = simulate_into(Test.of(cfg, folder, check=False), folder, keep_going=True)
    return result.virtual_s, int(result.stats.get("send-ok", 0))


def simulate_seed(config: TestConfig, seed: int, scratch: str | None = None,
                  interpreter: str = "cpython") -> dict:
    """Simulate and check one seed in a scratch folder that is removed afterwards; the summary
    row as a dict (plain data, so it crosses process and Spark boundaries). The simulation
    runs under PyPy when `interpreter` allows it (harness/pypy.py), the check here."""
    folder = Path(tempfile.mkdtemp(prefix=f"sim-s{seed}-", dir=scratch))
    try:
        cfg = with_seed(config, seed)
        store.write_test_json(folder, cfg, ["harness", "simulate"], 0.0)
        started = time.perf_counter()
        virtual_s, acked = _simulate_seed_into(cfg, folder, interpreter)
        results = check_path(folder, backend="native")
        anomalies = {k: int(v.get("count", 0)) for k, v in results.get("anomalies", {}).items()}
        row = SeedRow(seed, results.get("valid"), anomalies,
                      int(results.get("lost", {}).get("count", 0) or 0), acked, virtual_s,
                      time.perf_counter() - started, before_loss=broken_before_loss(folder))
    except Exception as e:  # one broken seed is a row of its own, never the end of a search
        row = SeedRow(seed, "error", error=f"{type(e).__name__}: {e}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return asdict(row)


def broken_before_loss(folder: Path) -> list[str]:
    """The invariants a simulated run folder broke before its first fault that can lose
    written data (unsynced writes, or a disk's contents), all it broke if none came. Until
    then the run was the safe configuration's, whatever its mix."""
    first = _first_loss_ns(folder / "history.jsonl")
    path = folder / "invariants.jsonl"
    broken = records(path) if path.is_file() else ()
    return sorted({v["name"] for v in broken if first is None or v["time"] < first})


def _first_loss_ns(history: Path) -> int | None:
    """When the history's first fault that loses unsynced writes or damages a disk started."""
    with history.open("rb") as f:
        for line in f:
            if b'"nemesis"' not in line:  # a cheap pass: the faults are a few lines of many
                continue
            op = history_line(line)
            if op is not None and effects_of(op) & {LOSES_UNSYNCED, CORRUPTS_DISK}:
                return op["time"]
    return None


def _simulate_many(args: tuple[dict[str, Any], list[int], str | None, str]) -> list[dict]:
    """A Spark task: the seeds of one chunk, the config as its record() (loaded back here)."""
    record, seeds, scratch, interpreter = args
    config = TestConfig.load(record, source="the search's config")
    return [simulate_seed(config, s, scratch, interpreter) for s in seeds]


def _simulate_seed_job(record: dict[str, Any], seed: int, scratch: str | None,
                       interpreter: str) -> dict:
    """A worker process's seed: the config crosses the process boundary as its record()."""
    config = TestConfig.load(record, source="the search's config")
    return simulate_seed(config, seed, scratch, interpreter)


def _rows_local(config: TestConfig, seeds: list[int], jobs: int,
                interpreter: str, scratch: str) -> Iterator[dict]:
    """Rows in seed order; at most 2 x jobs seeds in flight, so stopping early wastes little."""
    if jobs <= 1:
        for s in seeds:
            yield simulate_seed(config, s, scratch, interpreter)
        return
    pool = ProcessPoolExecutor(max_workers=jobs)
    window: deque = deque()
    pending = iter(seeds)
    record = config.record()
    try:
        for s in pending:
            window.append(pool.submit(_simulate_seed_job, record, s, scratch, interpreter))
            if len(window) >= 2 * jobs:
                yield window.popleft().result()
        while window:
            yield window.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _rows_spark(config: TestConfig, seeds: list[int], master: str,
                interpreter: str) -> Iterator[dict]:
    """Seeds as an RDD: each task simulates and checks its seeds and returns one row each."""
    spark = get_session(master)
    sc = spark.sparkContext
    slices = max(1, min(len(seeds), sc.defaultParallelism * 4))
    chunks = [seeds[i::slices] for i in range(slices)]
    record = config.record()
    rdd = sc.parallelize([(record, c, None, interpreter) for c in chunks], len(chunks))
    yield from rdd.flatMap(_simulate_many).toLocalIterator()


@dataclass
class SearchSummary:
    runs: int = 0
    failing: list[int] = field(default_factory=list)
    errors: list[int] = field(default_factory=list)
    by_anomaly: Counter = field(default_factory=Counter)
    wall_s: float = 0.0
    virtual_s: float = 0.0
    rows: list[dict] = field(default_factory=list)

    @property
    def runs_per_s(self) -> float:
        return self.runs / self.wall_s if self.wall_s else 0.0


def chosen_interpreter(interpreter: str, seeds: int, jobs: int, stop_after: int | None,
                       spark_master: str | None) -> str:
    """What "auto" means for a search: PyPy (still "auto", so a child that fails falls back)
    for a long local search that does not stop early, or on Spark, where each executor uses
    PyPy if it has one; else CPython. Any other choice stands."""
    if interpreter != "auto" or spark_master:
        return interpreter
    long = stop_after is None and seeds >= PYPY_MIN_SEEDS_PER_WORKER * max(1, jobs)
    return "auto" if long and pypy.binary() is not None else "cpython"


def search(config: TestConfig, seeds: Iterable[int], *, jobs: int = 1,
           spark_master: str | None = None, stop_after: int | None = None,
           on_row: Callable[[dict], None] | None = None,
           interpreter: str = "auto") -> SearchSummary:
    """Simulate and check every seed (locally on `jobs` processes, or on Spark); stop once
    `stop_after` seeds failed. `interpreter`: what simulates, "cpython" (this process),
    "pypy" (a PyPy child per worker: harness/pypy.py) or "auto" (see `chosen_interpreter`);
    the checks stay on this interpreter."""
    if interpreter not in INTERPRETERS:
        raise UserError(f"interpreter must be one of {', '.join(INTERPRETERS)}, got {interpreter!r}")
    if interpreter == "pypy" and pypy.binary() is None:
        raise UserError(f"--interpreter pypy: no PyPy installed (make bootstrap installs it, or "
                        f"set {pypy.ENV_VAR} to one)")
    config = simulated(config)
    seeds = list(seeds)
    interpreter = chosen_interpreter(interpreter, len(seeds), jobs, stop_after, spark_master)
    summary = SearchSummary()
    started = time.perf_counter()
    scratch = tempfile.mkdtemp(prefix="harness-search-")  # a killed worker's seeds' folders too
    try:
        _collect(summary, _rows_spark(config, seeds, spark_master, interpreter) if spark_master
                 else _rows_local(config, seeds, jobs, interpreter, scratch), on_row, stop_after)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    summary.wall_s = time.perf_counter() - started
    return summary


def _collect(summary: SearchSummary, rows: Iterator[dict],
             on_row: Callable[[dict], None] | None, stop_after: int | None) -> None:
    for row in rows:
        summary.runs += 1
        summary.rows.append(row)
        summary.virtual_s += row["virtual_s"]
        if row["valid"] == "error":
            summary.errors.append(row["seed"])
        elif row["valid"] is not True:
            summary.failing.append(row["seed"])
            summary.by_anomaly.update(row["anomalies"].keys())
        if on_row is not None:
            on_row(row)
        if stop_after is not None and len(summary.failing) >= stop_after:
            break
    if hasattr(rows, "close"):
        rows.close()


def run_search(test: Test, seeds: Sequence[int], *, jobs: int, spark_master: str | None,
               stop_after: int | None, keep: int = 3, interpreter: str = "auto") -> SearchSummary:
    """`harness simulate --seeds`: the search with a progress bar, then the first `keep`
    failing seeds re-run into run folders and re-checked by the Spark checker."""
    bar = tqdm(total=len(seeds), unit="run", file=sys.stderr, disable=not sys.stderr.isatty(),
               leave=False)
    failures: Counter = Counter()

    def progress(row: dict) -> None:
        if row["valid"] not in (True, "error"):
            failures.update(row["anomalies"].keys())
        bar.update(1)
        bar.set_postfix_str(f"failing runs by anomaly: {dict(failures) or '-'}")
        if not bar.disable:
            return
        if row["valid"] is not True:
            say(f"seed {row['seed']}: valid={row['valid']} {row['anomalies'] or row['error']}")

    summary = search(test.config, seeds, jobs=jobs, spark_master=spark_master,
                     stop_after=stop_after, on_row=progress, interpreter=interpreter)
    bar.close()
    print_summary(summary)
    for seed in sorted(summary.failing)[:keep]:
        row = next(r for r in summary.rows if r["seed"] == seed)
        # keep_going as the search's rows had it, so both checkers judge the same history;
        # on Spark whatever its size: the point is a second, independent implementation
        run_dir = simulate_test(Test.of(replace(test.config, seed=seed), test.results_root,
                                        argv=test.argv), keep_going=True, spark_min_ops=0)
        agreed = _agrees(row, run_dir)
        print(f"seed {seed}: {run_dir / 'report.html'}  Spark checker "
              f"{'agrees' if agreed else 'DISAGREES'} with the in-process check")
    write_search(test, seeds, summary)
    return summary


def _agrees(row: Mapping[str, Any], run_dir: Path) -> bool:
    try:
        results = json.loads((run_dir / "results.json").read_text())
    except (OSError, ValueError):
        return False
    spark = {k for k, v in results.get("anomalies", {}).items() if v.get("count")}
    return results.get("valid") == row["valid"] and spark == set(row["anomalies"])


def print_summary(summary: SearchSummary) -> None:
    print(f"runs {summary.runs} in {summary.wall_s:.1f} s ({summary.runs_per_s:.2f} runs/s, "
          f"{summary.virtual_s / 3600:.2f} simulated hours)")
    print(f"failing {len(summary.failing)}, errors {len(summary.errors)}")
    for name, count in summary.by_anomaly.most_common():
        print(f"  {name}: {count} run(s)")
    if summary.failing:
        print(f"first failing seeds: {', '.join(map(str, sorted(summary.failing)[:10]))}")
    if summary.errors:
        print(f"seeds that crashed: {', '.join(map(str, summary.errors[:10]))}")


def write_search(test: Test, seeds: Sequence[int], summary: SearchSummary) -> Path:
    """results/<name>/search-<stamp>-s<first>-<last>.json: every row, for later analysis."""
    folder = owned_dir(test.results_root / test.config.name)  # as a run's (store)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    path = folder / f"search-{stamp}-s{seeds[0]}-{seeds[-1]}.json"
    write_json_atomic(path, {"config": simulated(test.config).record(), "seeds": [seeds[0], seeds[-1]],
                                   "runs": summary.runs, "wall_s": summary.wall_s,
                                   "failing": summary.failing, "errors": summary.errors,
                                   "by_anomaly": dict(summary.by_anomaly), "rows": summary.rows})
    print(path)
    return path


# ---- determinism ------------------------------------------------------------------------------

def first_divergence(a: Path, b: Path) -> str | None:
    """Where two runs' files first differ ("history.jsonl line 812: ..."), or None."""
    for name in DETERMINISM_FILES:
        la = (a / name).read_text().splitlines() if (a / name).exists() else []
        lb = (b / name).read_text().splitlines() if (b / name).exists() else []
        for i, (x, y) in enumerate(zip(la, lb, strict=False), start=1):
            if x != y:
                return f"{name} line {i}:\n  first:  {x[:300]}\n  second: {y[:300]}"
        if len(la) != len(lb):
            return f"{name}: {len(la)} lines in the first run, {len(lb)} in the second"
    return None


def check_determinism(config: TestConfig, seed: int) -> str | None:
    """Simulate `seed` twice -- here, and in a fresh interpreter with another hash seed (so a
    set iterated in hash order shows), PyPy when installed (as searches simulate, while their
    failing seeds are re-run here) -- and return the first divergence, or None."""
    config = simulated(with_seed(config, seed))
    with tempfile.TemporaryDirectory(prefix=f"det-s{seed}-") as tmp:
        first, second = Path(tmp) / "a", Path(tmp) / "b"
        for folder in (first, second):
            folder.mkdir()
        simulate_into(Test.of(config, first, check=False), first)
        env = {**os.environ, "PYTHONHASHSEED": str(1 + seed % 4_000_000),
               "PYTHONPATH": str(pypy.ROOT)}
        # the searches' own worker (harness/sim_worker.py), given this one job
        job = {"config": config.record(), "folder": str(second), "keep_going": False}
        done = subprocess.run([pypy.binary() or sys.executable, "-m", "harness.sim_worker"],
                              input=json.dumps(job) + "\n", env=env, cwd=pypy.ROOT,
                              capture_output=True, text=True, timeout=3600)
        error = _worker_error(done)
        return f"the second run failed: {error}" if error else first_divergence(first, second)


def _worker_error(done: subprocess.CompletedProcess) -> str | None:
    """What went wrong in a sim_worker child given one job: its crash, or the job's error."""
    if done.returncode != 0 or not done.stdout.strip():
        return done.stderr.strip()[-2000:] or f"exit status {done.returncode}"
    return json.loads(done.stdout.splitlines()[-1]).get("error")
