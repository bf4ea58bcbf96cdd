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
from checkers.spark import get_session, task_failure

_SLICES_PER_CORE = 4  # smaller tasks balance uneven partitions better

# Histories with fewer ops than this are searched in this process even when Spark is asked
# for: a Spark session costs 15-20 s to start on the 2-core development machine, while the
# in-process search takes seconds at this size (docs/checkers.md: 10k cas-register ops of
# 50 processes in 4.6 s, Porcupine's 50-client kv history in well under a second).
SPARK_MIN_OPS = 50_000


class SparkJobError(RuntimeError):
    """A Spark job of the search failed; the message is the worker's last error line."""


def _spark_failure(e: Exception) -> SparkJobError:
    cause = task_failure(e)
    return SparkJobError(f"the Spark job checking the partitions failed: {cause[:500]}")


def _search_all(items: Iterable[tuple[int, Partition]], budget: Budget
                ) -> Iterator[tuple[int, SearchResult]]:
    for i, part in items:
        yield i, search(part.ops, part.model, budget)


def spark_runner(master: str | None = None, min_ops: int = SPARK_MIN_OPS) -> Runner:
    """A Runner that searches partitions on Spark (``master`` as checkers.spark resolves it).

    A history of a single partition, or of fewer than ``min_ops`` ops in all, is searched
    in this process: there is nothing to spread, or too little to pay for starting a JVM.
    ``min_ops=0`` always uses Spark when there are two partitions or more.

    The workers run this interpreter (checkers.spark sets PYSPARK_PYTHON to
    sys.executable), which imports ``checkers`` from wherever it is installed, so the check
    works from any directory.
    """

    def run(parts: list[Partition], budget: Budget) -> list[SearchResult]:
        if len(parts) < 2 or sum(len(p.ops) for p in parts) < min_ops:
            run.engine = "in-process"  # type: ignore[attr-defined]
            return run_local(parts, budget)
        run.engine = "spark"  # type: ignore[attr-defined]
        sc = get_session(master).sparkContext
        # biggest first, so the long searches start early and the short ones fill in
        order = sorted(range(len(parts)), key=lambda i: -len(parts[i].ops))
        slices = min(len(parts), sc.defaultParallelism * _SLICES_PER_CORE)
        rdd = sc.parallelize([(i, parts[i]) for i in order], slices)
        try:
            found = dict(rdd.mapPartitions(partial(_search_all, budget=budget)).collect())
        except Exception as e:  # Py4JJavaError: keep the worker's reason, not the JVM trace
            raise _spark_failure(e) from None
        return [found[i] for i in range(len(parts))]

    return run
