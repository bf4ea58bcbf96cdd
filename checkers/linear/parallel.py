"""Checking the partitions of a history in parallel on Spark.

P-compositionality makes each partition (a key of a kv history) an independent search, so
they are spread over the cluster as an RDD of partitions, one search per element. The
search is the Python WGL search, not a DataFrame scan: it is branchy, per-partition work.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import partial

from checkers.linear.check import Runner, run_local
from checkers.linear.models import Partition
from checkers.linear.search import Budget, SearchResult, search
from checkers.spark import get_session

_SLICES_PER_CORE = 4  # smaller tasks balance uneven partitions better


def _search_all(items: Iterable[tuple[int, Partition]], budget: Budget
                ) -> Iterator[tuple[int, SearchResult]]:
    for i, part in items:
        yield i, search(part.ops, part.model, budget)


def spark_runner(master: str | None = None) -> Runner:
    """A Runner that searches partitions on Spark (``master`` as checkers.spark resolves it).

    A single partition is searched in this process: there is nothing to spread, and it
    saves starting a JVM.
    """

    def run(parts: list[Partition], budget: Budget) -> list[SearchResult]:
        if len(parts) < 2:
            return run_local(parts, budget)
        sc = get_session(master).sparkContext
        # biggest first, so the long searches start early and the short ones fill in
        order = sorted(range(len(parts)), key=lambda i: -len(parts[i].ops))
        slices = min(len(parts), sc.defaultParallelism * _SLICES_PER_CORE)
        rdd = sc.parallelize([(i, parts[i]) for i in order], slices)
        found = dict(rdd.mapPartitions(partial(_search_all, budget=budget)).collect())
        return [found[i] for i in range(len(parts))]

    return run
