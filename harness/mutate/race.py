"""A mutant's cells raced: `harness mutate --lanes N` (docs/mutation.md, "Racing a mutant's cells").

The round-by-round search (score.search_all) takes a mutant through every seed of its first
cell before the first seed of the next, so a mutant that only the third cell kills, at its
first seed, costs the 20 seeds of the two cells before. Here each mutant's seeds of every cell
are put in one order, seed by seed (seed 1 of every cell, then seed 2 of every cell, ...),
and dealt to N lanes (step k to lane k mod N), each lane a sequence of children run one after
another (blocks of `block` steps) while the other lanes run beside it. The first lane that
ends the mutant (a safety or liveness kill, a time-out, a module that does not import) stops
the others: their children are killed at once.

Each kill is still reproducible alone: a (mutant, cell, seed) is one simulation whatever ran
beside it (`harness mutate --mutant ID --cell CELL --seeds S-S`). Which lane ends first is a
matter of timing, so a mutant that two lanes would kill may be reported with either kill."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from harness.mutate.oracle import decisive, kinds
from harness.mutate.score import (
    BASELINE,
    CHILDREN,
    Cell,
    Result,
    Runner,
    _record,
    _record_baseline,
    _tasks,
    blocks,
    run_child,
    search_task,
    settle,
)

Step = tuple[str, int]  # (cell, seed)


def interleaved(cells: Sequence[str], seeds: Sequence[int]) -> list[Step]:
    """Every cell's seeds, seed by seed: a kill at seed s of any cell comes after s rounds."""
    return [(cell, seed) for seed in seeds for cell in cells]


def dealt(steps: Sequence[Step], lanes: int) -> list[list[Step]]:
    """Step k to lane k mod `lanes`: each lane keeps the seed-by-seed order."""
    return [list(steps[i::lanes]) for i in range(lanes) if steps[i::lanes]]


def race_tasks(ids: Sequence[str], cells: Sequence[Cell], seeds: Sequence[int],
               baselines: Mapping[str, Mapping[int, dict]], *, lanes: int, block: int,
               seed_timeout: float) -> list[dict]:
    plan = [blocks(lane, block) for lane in dealt(interleaved([c.name for c in cells], seeds),
                                                  lanes)]
    shared = {"lanes": plan, "seed_timeout": seed_timeout,
              "configs": {c.name: c.config.record() for c in cells},
              "baseline": {c: {str(s): row for s, row in rows.items()}
                           for c, rows in baselines.items()},
              "cell_kinds": {c: sorted(kinds(rows.values())) for c, rows in baselines.items()}}
    return [{"mutant": i, **shared} for i in ids]


def race_task(task: Mapping[str, Any]) -> dict[str, Any]:
    """One mutant's lanes at once (a local thread's task or a Spark task's): each lane's
    answers in the order they came, and the wall time from the start to the end of the race
    (the first lane that ended the mutant, or the last lane's end)."""
    group = CHILDREN.group()
    answers: list[dict] = []
    lock = threading.Lock()

    def lane(plan: list[list[Step]]) -> None:
        for steps in plan:
            answer = run_child(step_job(task, steps), 20 + task["seed_timeout"] * len(steps),
                               group)
            with lock:
                answers.append({**answer, "cell": steps[0][0]})
            if ends(answer, task):
                group.stop_all()
                return
            if "rows" not in answer:  # stopped by another lane or by an interrupt
                return

    started = time.perf_counter()
    threads = [threading.Thread(target=lane, args=(p,), daemon=True) for p in task["lanes"]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"mutant": task["mutant"], "answers": answers, "wall_s": time.perf_counter() - started}


def step_job(task: Mapping[str, Any], steps: list[Step]) -> dict[str, Any]:
    """The child's job for a block of steps: the configs and baseline rows of their cells."""
    used = {cell for cell, _ in steps}
    return {"mutant": task["mutant"], "steps": [list(s) for s in steps],
            "configs": {c: task["configs"][c] for c in used},
            "baseline": {c: task["baseline"].get(c, {}) for c in used},
            "cell_kinds": {c: task["cell_kinds"].get(c, []) for c in used}}


def ends(answer: Mapping[str, Any], task: Mapping[str, Any]) -> bool:
    """Whether a block's answer decides the mutant: it timed out or did not import, or its last
    row is a kill by the child's own rule (it stops there)."""
    if answer.get("stopped"):
        return False
    if "rows" not in answer:
        return True
    rows = answer["rows"]
    if not rows:
        return False
    last = rows[-1]
    base = task["baseline"].get(last["cell"], {}).get(str(last["seed"]))
    return decisive(last, base, task["cell_kinds"].get(last["cell"], []))


def record_race(result: Result, answer: Mapping[str, Any],
                baselines: Mapping[str, Mapping[int, dict]]) -> None:
    """Fold a race's answers into its mutant's result, in the order they came: every row
    judged against the baseline's row of its cell and seed, up to the first that decides."""
    for part in answer["answers"]:
        if result.outcome != "alive" or part.get("stopped"):
            continue
        if "rows" not in part:  # a time-out or a module that does not import
            _record(result, {**part, "wall_s": 0.0}, {})
            continue
        for row in part["rows"]:
            _record(result, {**part, "rows": [row], "cell": row["cell"], "wall_s": 0.0},
                    baselines.get(row["cell"], {}))
            if result.outcome != "alive":
                break
    result.wall_s = answer["wall_s"]


def race_all(ids: Sequence[str], cells: Sequence[Cell], seeds: Sequence[int], runner: Runner,
             *, lanes: int = 2, block: int = 10, seed_timeout: float = 30.0,
             on_result: Callable[[Result], None] | None = None,
             baseline_runner: Runner | None = None) -> dict[str, Result]:
    """The baseline through every cell's seeds (its blocks on `baseline_runner`, else on
    `runner`), then each mutant raced on `runner` (`jobs` mutants at a time, each on `lanes`
    children)."""
    results = {i: Result(i) for i in [BASELINE, *ids]}
    baselines: dict[str, dict[int, dict]] = {c.name: {} for c in cells}
    tasks = [t for c in cells for chunk in blocks(seeds, block)
             for t in _tasks([BASELINE], c, chunk, seed_timeout, {})]
    for answer in (baseline_runner or runner)(search_task, tasks):
        _record_baseline(results[BASELINE], answer, baselines[answer["cell"]])
    planned = race_tasks(ids, cells, seeds, baselines, lanes=lanes, block=block,
                         seed_timeout=seed_timeout)
    for answer in runner(race_task, planned):
        result = results[answer["mutant"]]
        record_race(result, answer, baselines)
        _decided(result, on_result)
    _decided(results[BASELINE], on_result)
    return results


def _decided(result: Result, on_result: Callable[[Result], None] | None) -> None:
    if result.outcome == "alive":
        settle(result)
    if on_result is not None:
        on_result(result)
