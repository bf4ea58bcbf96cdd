"""Checking a history: prepare it for the model, split it into independent partitions,
search each, and combine the results into one verdict.

Verdict (JSON-friendly)::

    {"valid": true | false | "unknown", "model": NAME, "ops": N, "partitions": P,
     "explored": CONFIGURATIONS, "engine": "in-process" | "spark", "elapsed_s": S,
     "failure": {...} | null,
     "unknown": {"reason": ..., "keys": [...]}   # only when valid is "unknown"
    }

``failure`` describes the smallest failing window found: the op that could not be
linearized, the ops concurrent with it (and whether the model would accept each next), the
last linearized ops before it, the model state there, and the history indices it spans.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from checkers.linear.history import Operation, thaw
from checkers.linear.models import Model, Partition
from checkers.linear.search import UNLIMITED, Budget, Failure, SearchResult, search, searching

# Runs the search over partitions, returning results in the same order (e.g. on Spark).
Runner = Callable[[list[Partition], Budget], list[SearchResult]]


def run_local(parts: list[Partition], budget: Budget, *,
              stop_at_invalid: bool = True) -> list[SearchResult]:
    """Search the partitions in this process, taking turns (a slice of each search in
    round robin), and stop at the first partition found invalid, as Porcupine does: the
    verdict is then known, and a hard key cannot hold up an easy invalid one. The searches
    cut short have verdict unknown (they never show: an invalid key decides the verdict).
    ``stop_at_invalid=False`` searches every partition to the end (``run_local_all``)."""
    if len(parts) == 1:
        return [search(parts[0].ops, parts[0].model, budget)]
    running = {i: searching(p.ops, p.model, budget) for i, p in enumerate(parts)}
    results: dict[int, SearchResult] = {}
    while running:
        for i, gen in list(running.items()):
            try:
                next(gen)
            except StopIteration as done:
                results[i] = done.value
                del running[i]
                if stop_at_invalid and done.value.valid is False:
                    for j in running:
                        results[j] = SearchResult(None, 0, "not searched to the end: another "
                                                           "partition is already invalid")
                    running.clear()
                    break
    return [results[i] for i in range(len(parts))]


def run_local_all(parts: list[Partition], budget: Budget) -> list[SearchResult]:
    """run_local, searching every partition to the end (every invalid key is reported)."""
    return run_local(parts, budget, stop_at_invalid=False)


def check(ops: Sequence[Operation], model: Model, budget: Budget = UNLIMITED,
          runner: Runner = run_local) -> dict[str, Any]:
    """Check paired operations against ``model``; raises HistoryError on bad input."""
    started = time.monotonic()
    prepared = model.prepare(ops)
    parts = model.partition(prepared)
    results = runner(parts, budget) if parts else []
    verdict = combine(model, parts, results)
    verdict["ops"] = len(prepared)
    verdict["engine"] = getattr(runner, "engine", "in-process")  # spark_runner says which
    verdict["elapsed_s"] = round(time.monotonic() - started, 3)
    return verdict


def combine(model: Model, parts: list[Partition], results: list[SearchResult]) -> dict[str, Any]:
    """One verdict from per-partition results: invalid if any is, else unknown if any is."""
    invalid = [(p, r) for p, r in zip(parts, results, strict=True) if r.valid is False]
    unknown = [(p, r) for p, r in zip(parts, results, strict=True) if r.valid is None]
    verdict: dict[str, Any] = {
        "valid": False if invalid else "unknown" if unknown else True,
        "model": model.name,
        "partitions": len(parts),
        "explored": sum(r.explored for r in results),
        "failure": None,
    }
    if invalid:
        part, result = invalid[0]
        assert result.failure is not None  # an invalid search always ends at a return entry
        verdict["failure"] = describe_failure(part, result.failure)
        if part.key is not None:
            verdict["invalid_keys"] = [thaw(p.key) for p, _ in invalid]
    if unknown and not invalid:
        verdict["unknown"] = {"reason": unknown[0][1].reason}
        if unknown[0][0].key is not None:
            verdict["unknown"]["keys"] = [thaw(p.key) for p, _ in unknown]
    return verdict


def describe_failure(part: Partition, failure: Failure) -> dict[str, Any]:
    """The failing window as JSON."""
    model = part.model

    def show(op: Operation, **extra: Any) -> dict[str, Any]:
        return {**op.as_dict(), "text": model.describe_op(op), **extra}

    concurrent = [(op, ok) for op, ok in failure.concurrent if op.id != failure.op.id]
    # the op, what it raced with, and the last op linearized before it
    window = [failure.op] + [op for op, _ in concurrent] + failure.previous[-1:]
    out: dict[str, Any] = {}
    if part.key is not None:
        out["key"] = thaw(part.key)
    out.update({
        "op": show(failure.op),
        "state": model.describe_state(failure.state),
        "linearized": failure.linearized,
        "previous": [show(op) for op in failure.previous],
        "concurrent": [show(op, accepted_next=ok) for op, ok in concurrent],
        "window": {
            "from_index": min(op.invoke_index for op in window),
            "to_index": failure.op.complete_index,
        },
        "explanation": _explain(model, failure, len(concurrent)),
    })
    return out


def _explain(model: Model, failure: Failure, concurrent: int) -> str:
    done = f"{model.describe_op(failure.op)} completed (index {failure.op.complete_index})"
    state = repr(model.describe_state(failure.state))
    if failure.unexplained:
        return (f"{done}, but no op invoked before then can lead from the initial state "
                f"{state} to one that explains it, in any order")
    return (f"after {failure.linearized} linearized ops the state is {state}; {done} but no "
            f"order of the {concurrent} concurrent ops lets it take effect before then")
