"""Minimal reproductions: shrink a failing run to the few faults (and the small workload) that
still produce its anomaly, in the deterministic simulator.

    harness shrink RUN_DIR [--budget 300|80c] [--tries k]

The run's realised schedule (schedule.json: the times the faults really started, the nodes they
really hit) becomes a scripted plan with fixed targets, so dropping or shortening one fault never
re-aims another. Each candidate (config + plan entries) is simulated with one seed and checked
in-process (checkers.reference); it is kept when the target anomaly class (the first of the
original results.json's classes, loss classes first) recurs. Outcomes are cached by candidate.

Phases, each keeping the last accepted candidate: ddmin over the faults; the workload (shorter
time limit, fewer producers, one partition, lower rate, fewer consumers: early, as a smaller
workload makes every later candidate cheaper); shorter faults; faults moved earlier; the
workload again; and ddmin over the faults once more.

A real-host run is mapped into the simulator the same way; as timing differs, the mapped
schedule is tried with `tries` seeds (seed, seed+1, ...), the reproduction probability is
reported, and the first seed that reproduces is shrunk.

Output: a minimal run folder (simulated by the same path as `harness simulate --replay`, so the
replay is byte for byte the same) holding minimal.json, and shrunk.json in the original folder
pointing at it."""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from checkers.check import check_path
from checkers.definitions import ANOMALIES
from checkers.exitcodes import UserError
from control.files import write_json_atomic
from harness import store
from harness.config import TestConfig, typed, validate, with_sets, with_values
from harness.minimal import FORMAT, MINIMAL
from harness.report import report_path
from harness.sim_run import SIM, simulate_into, simulated, with_seed
from harness.simulate import say, simulate_test
from harness.test import Plan, Test
from nemesis.kinds import lookup
from nemesis.roles import role_entries
from nemesis.schedule import load_schedule, replay_plan

SHRUNK = "shrunk.json"
# Loss classes first: a run that lost acknowledged records is shrunk for that loss.
LOSS_CLASSES = ("lost-write", "unseen", "inconsistent-offsets")
MIN_DURATION_S = 0.25


# ---- delta debugging --------------------------------------------------------------------------

def ddmin(items: Sequence[Any], fails: Callable[[list[Any]], bool]) -> list[Any]:
    """Zeller's ddmin: a 1-minimal sublist of `items` (order kept) on which `fails` still holds
    (removing any single element makes it pass). `fails(items)` is assumed to hold."""
    current = list(items)
    n = 2
    while len(current) >= 2:
        chunks = _split(current, n)
        reduced = False
        for chunk in chunks:  # a subset alone
            if fails(chunk):
                current, n, reduced = chunk, 2, True
                break
        if not reduced and n > 2:  # a complement (with n == 2 the complements are the subsets)
            for i in range(len(chunks)):
                rest = [x for j, c in enumerate(chunks) if j != i for x in c]
                if fails(rest):
                    current, n, reduced = rest, max(n - 1, 2), True
                    break
        if not reduced:
            if n >= len(current):
                break
            n = min(len(current), 2 * n)
    if len(current) == 1 and fails([]):
        return []
    return current


def _split(items: list[Any], n: int) -> list[list[Any]]:
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        if end > start:
            out.append(items[start:end])
        start = end
    return out


# ---- candidates -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Candidate:
    config: TestConfig  # simulated
    entries: tuple[Mapping[str, Any], ...]

    def key(self) -> str:
        return json.dumps({"c": self.config.record(), "e": self.entries}, sort_keys=True,
                          default=str)

    @property
    def faults(self) -> int:
        return len(self.entries)


@dataclass
class Outcome:
    classes: dict[str, int]
    sends: int  # send operations attempted (records the workload offered)
    acked: int
    wall_s: float


def target_class(results: Mapping[str, Any]) -> str | None:
    """The anomaly class to preserve: loss classes first, then the checker's order."""
    present = {k for k, v in (results.get("anomalies") or {}).items()
               if (v or {}).get("count", 1)}
    order = list(LOSS_CLASSES) + [a for a in ANOMALIES if a not in LOSS_CLASSES]
    for name in order + sorted(present - set(order)):
        if name in present:
            return name
    return None


def clean_entries(entries: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], ...]:
    """Entries sorted by start, each "after" kept only while the fault it names is there."""
    ids = {e["id"] for e in entries}
    out = []
    for e in sorted(entries, key=lambda e: (e["start_s"], e["id"])):
        d = {k: copy.deepcopy(v) for k, v in e.items() if k != "after"}
        if e.get("after") is not None and e["after"] in ids:
            d["after"] = e["after"]
        out.append(d)
    return tuple(out)


def fault_end(entries: Sequence[Mapping[str, Any]]) -> float:
    return max((e["start_s"] + e["duration_s"] for e in entries), default=0.0)


class Budget:
    """Seconds ("300", "300s") or candidates ("80c") of simulation; None: unlimited."""

    def __init__(self, text: str | None) -> None:
        self.seconds = self.candidates = None
        if text:
            t = text.strip().lower()
            if t.endswith("c"):
                self.candidates = int(t[:-1])
            else:
                self.seconds = float(t.rstrip("s"))
        self.started = time.perf_counter()
        self.used = 0

    def exhausted(self) -> bool:
        if self.candidates is not None and self.used >= self.candidates:
            return True
        return self.seconds is not None and time.perf_counter() - self.started >= self.seconds


class Evaluator:
    """Simulates and checks candidates (cached), keeping the target class as the predicate.

    With `against` (`--set`-style items, e.g. the weakness's switch at its safe value) the
    predicate is differential: the class must recur with the candidate's config AND not with
    `against` applied to it, same seed and schedule. Without it a schedule that loses data
    under any setting (every replica losing power at once, with asynchronous flush) would be
    a "minimal reproduction" of any weakness."""

    def __init__(self, target: str, budget: Budget, scratch: Path | None = None,
                 bar: Any = None, against: Sequence[str] = ()) -> None:
        self.target = target
        self.against = tuple(against)
        self.budget = budget
        self.scratch = scratch
        self.cache: dict[str, Outcome] = {}
        self.bar = bar
        self.simulated = 0
        self.cache_hits = 0

    def outcome(self, cand: Candidate) -> Outcome | None:
        key = cand.key()
        if key in self.cache:
            self.cache_hits += 1
            return self.cache[key]
        if self.budget.exhausted():
            return None
        self.budget.used += 1
        self.simulated += 1
        folder = Path(tempfile.mkdtemp(prefix="shrink-", dir=self.scratch))
        started = time.perf_counter()
        try:
            test = Test.of(cand.config, folder, plan=Plan.scripted(cand.entries), check=False)
            store.write_test_json(folder, test.config, ["harness", "shrink"], 0.0)
            result = simulate_into(test, folder, keep_going=True)
            results = check_path(folder, backend="native")
            classes = {k: int(v.get("count", 0) or 0)
                       for k, v in (results.get("anomalies") or {}).items()}
            classes = {k: v for k, v in classes.items() if v}
            stats = result.stats
            out = Outcome(classes, sum(int(stats.get(k, 0)) for k in
                                       ("send-ok", "send-fail", "send-info")),
                          int(stats.get("send-ok", 0)), time.perf_counter() - started)
        except Exception as e:  # a candidate that breaks the simulation does not reproduce
            say(f"candidate failed to simulate: {type(e).__name__}: {e}")
            out = Outcome({}, 0, 0, time.perf_counter() - started)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        self.cache[key] = out
        if self.bar is not None:
            self.bar.update(1)
        return out

    def fails(self, cand: Candidate) -> bool:
        if not self._shows(cand):
            return False
        return not self.against or self._shows(self.twin(cand)) is False

    def twin(self, cand: Candidate) -> Candidate:
        return Candidate(typed(with_sets(cand.config.record(), self.against, "--against")),
                         cand.entries)

    def _shows(self, cand: Candidate) -> bool | None:
        """Whether the target class occurs; None once the budget ran out before simulating."""
        out = self.outcome(cand)
        return None if out is None else self.target in out.classes


# ---- the shrinker -------------------------------------------------------------------------------

@dataclass
class ShrinkResult:
    original: Path
    target: str
    seed: int
    before: Candidate
    after: Candidate
    before_outcome: Outcome
    after_outcome: Outcome
    wall_s: float
    simulated: int
    cache_hits: int
    tries: list[dict[str, Any]] = field(default_factory=list)
    minimal_dir: Path | None = None
    budget_exhausted: bool = False
    against: tuple[str, ...] = ()
    real_hosts: dict[str, Any] | None = None  # the original's [hosts], when it ran on hosts


class Shrinker:
    def __init__(self, ev: Evaluator, start: Candidate, log: Callable[[str], None] = say) -> None:
        self.ev = ev
        self.best = start
        self.log = log

    def _try(self, cand: Candidate, what: str) -> bool:
        if cand.key() == self.best.key():
            return False
        if self.ev.fails(cand):
            self.best = cand
            out = self.ev.cache[cand.key()]
            self.log(f"accepted ({what}): {cand.faults} fault(s), {out.sends} records, "
                     f"{self.ev.target} {out.classes.get(self.ev.target)}")
            return True
        return False

    def with_entries(self, entries: Sequence[Mapping[str, Any]],
                     config: TestConfig | None = None) -> Candidate:
        return Candidate(config if config is not None else self.best.config,
                         clean_entries(entries))

    def drop_faults(self) -> None:
        config = self.best.config

        def fails(subset: list[Mapping[str, Any]]) -> bool:
            return self._try(Candidate(config, clean_entries(subset)),
                             f"ddmin, faults {[e['id'] for e in subset]}") or \
                self.ev.fails(Candidate(config, clean_entries(subset)))

        kept = ddmin(list(self.best.entries), fails)
        self.best = Candidate(config, clean_entries(kept))

    def shorten(self) -> None:
        for fid in [e["id"] for e in self.best.entries]:
            while True:
                entry = next(e for e in self.best.entries if e["id"] == fid)
                d = entry["duration_s"]
                if d <= MIN_DURATION_S or self.ev.budget.exhausted():
                    break
                shorter = max(MIN_DURATION_S, round(d / 2, 3))
                changed = [dict(e, duration_s=shorter) if e["id"] == fid else e
                           for e in self.best.entries]
                if not self._try(self.with_entries(changed), f"fault {fid} lasts {shorter} s"):
                    break

    def move_earlier(self) -> None:
        entries = list(self.best.entries)
        if not entries:
            return
        # The whole schedule earlier, so the first fault starts 1 s into the workload.
        first = entries[0]["start_s"]
        for start in (1.0, round((1.0 + first) / 2, 3)):
            if start < first - 0.05:
                shift = first - start
                moved = [dict(e, start_s=round(e["start_s"] - shift, 6)) for e in entries]
                if self._try(self.with_entries(moved), f"schedule {shift:.1f} s earlier"):
                    break
        # Then each later fault (and those after it) closer to the one before.
        for i in range(1, len(self.best.entries)):
            for _ in range(3):
                entries = list(self.best.entries)
                gap = entries[i]["start_s"] - entries[i - 1]["start_s"]
                if gap <= 0.5 or self.ev.budget.exhausted():
                    break
                shift = round(gap / 2, 3)
                moved = entries[:i] + [dict(e, start_s=round(e["start_s"] - shift, 6))
                                       for e in entries[i:]]
                if not self._try(self.with_entries(moved),
                                 f"fault {entries[i]['id']} {shift} s earlier"):
                    break

    def _config_try(self, changes: Mapping[str, Any], what: str) -> bool:
        """The best candidate with dotted settings changed ({"workload.rate": 50}), validated."""
        config = typed(with_values(self.best.config.record(), changes, f"shrink: {what}"))
        return self._try(Candidate(config, self.best.entries), what)

    def workload(self) -> None:
        end = fault_end(self.best.entries)
        limits = sorted({math.ceil(end) + 1, math.ceil(end) + 3, math.ceil(end) + 8})
        for limit in limits:
            if limit < self.best.config.time_limit and self._config_try({"time_limit": limit},
                                                                    f"time limit {limit} s"):
                break
        for producers in (1, 2, 4, 8):
            if producers < self.best.config.workload.producers and self._config_try(
                    {"workload.producers": producers}, f"{producers} producer(s)"):
                break
        if self.best.config.topic.partitions > 1:
            self._config_try({"topic.partitions": 1}, "1 partition")
        rate = self.best.config.workload.rate
        for frac in (8, 4, 2):
            lower = max(1, int(rate // frac))
            if lower < rate and self._config_try({"workload.rate": lower}, f"rate {lower}/s"):
                break
        if self.best.config.workload.consumers > 1:
            self._config_try({"workload.consumers": 1}, "1 consumer")

    def run(self) -> Candidate:
        self.drop_faults()
        self.workload()  # early: a smaller workload makes every later candidate cheaper
        self.shorten()
        self.move_earlier()
        self.workload()  # the faults now end earlier: a shorter time limit may do
        if self.best.faults > 1:
            self.drop_faults()
        return self.best


# ---- from a run folder --------------------------------------------------------------------------

def _results(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "results.json"
    if not path.exists():
        raise UserError(f"{run_dir} has no results.json: check it first (`harness check`)")
    return json.loads(path.read_text())


def start_candidate(run_dir: Path) -> tuple[Candidate, dict[str, Any] | None, list[str]]:
    """The run's config (simulated) and realised schedule as a scripted candidate; the
    [hosts] table of its real hosts (None for a simulated run); notes (fault kinds the
    simulator cannot apply are left out)."""
    test = store.read_test_json(run_dir)
    config = validate(test["config"], source=str(run_dir / "test.json"))
    hosts = typed(config).hosts
    real_hosts = None if hosts.provider == SIM else hosts.placement()
    entries = replay_plan(load_schedule(run_dir / "schedule.json"))
    notes: list[str] = []
    kept = [e for e in entries if lookup(e["kind"]).simulated]
    if len(kept) < len(entries):
        notes.append(f"left out {len(entries) - len(kept)} fault(s) the simulator cannot apply")
    kinds = [f for f in typed(config).nemesis.faults if lookup(f).simulated]
    config = with_values(config, {"nemesis.faults": kinds}, "the simulated faults")
    return Candidate(simulated(typed(config)), clean_entries(kept)), real_hosts, notes


def shrink(run_dir: Path, *, budget: str | None = None, tries: int | None = None,
           results_root: Path | None = None, argv: Sequence[str] = ("harness", "shrink"),
           log: Callable[[str], None] = say, against: Sequence[str] = ()) -> ShrinkResult:
    run_dir = Path(run_dir)
    started = time.perf_counter()
    target = target_class(_results(run_dir))
    if target is None:
        raise UserError(f"{run_dir}: results.json reports no anomaly: nothing to shrink")
    start, real_hosts, notes = start_candidate(run_dir)
    real = real_hosts is not None
    for note in notes:
        log(note)
    seed = start.config.seed
    tries = tries or (5 if real else 1)
    bar = tqdm(unit="candidate", file=sys.stderr, disable=not sys.stderr.isatty(), leave=False)
    ev = Evaluator(target, Budget(budget), bar=bar, against=against)
    if against:
        ev.twin(start)  # a bad --against item fails here, before any simulation
    log(f"shrinking {run_dir} for {target}: {start.faults} fault(s)"
        f"{' mapped from a real run' if real else ''}"
        f"{' and not with ' + ' '.join(against) if against else ''}")
    # Reproduce first: the same seed (a simulated run), or `tries` seeds (timing differs).
    attempts = []
    chosen = None
    for k in range(tries):
        cand = Candidate(with_seed(start.config, seed + k), start.entries)
        ok = ev.fails(cand)
        attempts.append({"seed": seed + k, "reproduced": ok,
                         "classes": (ev.cache.get(cand.key()) or Outcome({}, 0, 0, 0)).classes})
        if ok and chosen is None:
            chosen = cand
            if not real:
                break
    hits = sum(a["reproduced"] for a in attempts)
    log(f"reproduced {target} in {hits}/{len(attempts)} seed(s)")
    if chosen is None:
        bar.close()
        also = f", or it also did with {' '.join(against)}" if against else ""
        raise UserError(f"the schedule of {run_dir} did not reproduce {target} in the simulator "
                        f"with {len(attempts)} seed(s){also}; try more with --tries")
    before_outcome = ev.cache[chosen.key()]
    shrinker = Shrinker(ev, chosen, log)
    best = shrinker.run()
    bar.close()
    result = ShrinkResult(run_dir, target, best.config.seed, chosen, best,
                          before_outcome, ev.cache[best.key()], 0.0, ev.simulated,
                          ev.cache_hits, attempts, budget_exhausted=ev.budget.exhausted(),
                          against=tuple(against), real_hosts=real_hosts)
    result.minimal_dir = write_minimal(result, results_root or run_dir.parent.parent, argv)
    result.wall_s = time.perf_counter() - started
    _write_pointers(result)
    return result


def minimal_config(config: TestConfig) -> TestConfig:
    if config.name.endswith("-minimal"):
        return config
    return replace(config, name=f"{config.name}-minimal")


def write_minimal(result: ShrinkResult, results_root: Path, argv: Sequence[str]) -> Path:
    """The minimal run folder, simulated exactly as `harness simulate --replay` does."""
    config = minimal_config(result.after.config)
    test = Test.of(config, results_root, argv=list(argv), plan=Plan.scripted(result.after.entries))
    run_dir = simulate_test(test, backend="native", keep_going=True)
    doc = minimal_document(result, config)
    # the same faults aimed by the part each node played: what `reproduce --system` runs
    doc["by_role"] = role_entries(load_schedule(run_dir / "schedule.json").faults)
    write_json_atomic(run_dir / MINIMAL, doc)
    return run_dir


def minimal_document(result: ShrinkResult, config: TestConfig) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "seed": config.seed,
        "anomaly": result.target,
        "config": config.record(),
        "schedule": [dict(e) for e in result.after.entries],
        "original": str(result.original.resolve()),
        "real_hosts": result.real_hosts,  # where `harness reproduce --schedule` runs it (default netns)
        # the settings under which the same seed and schedule do not show the anomaly
        "against": list(result.against),
        "shrink": {
            "faults_before": result.before.faults, "faults_after": result.after.faults,
            "records_before": result.before_outcome.sends,
            "records_after": result.after_outcome.sends,
            "anomaly_before": result.before_outcome.classes.get(result.target),
            "anomaly_after": result.after_outcome.classes.get(result.target),
            "candidates_simulated": result.simulated, "cache_hits": result.cache_hits,
            "budget_exhausted": result.budget_exhausted,
            "reproduction": result.tries,
        },
    }


def _write_pointers(result: ShrinkResult) -> None:
    assert result.minimal_dir is not None
    path = result.minimal_dir / MINIMAL
    doc = json.loads(path.read_text())
    doc["shrink"]["wall_s"] = round(result.wall_s, 1)
    write_json_atomic(path, doc)
    write_json_atomic(result.original / SHRUNK, {
        "format": FORMAT, "minimal_dir": os.path.relpath(result.minimal_dir, result.original),
        "minimal_json": os.path.relpath(path, result.original), "anomaly": result.target,
        **{k: doc["shrink"][k] for k in ("faults_before", "faults_after", "records_before",
                                          "records_after", "wall_s")}})
    try:  # the reports again, now that there is a story to tell
        report_path(result.minimal_dir)
        report_path(result.original)
    except Exception as e:
        say(f"report failed: {e}")
