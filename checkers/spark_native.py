"""The native checks (checkers/native_checks.py) as Spark tasks: each task runs `histcheck`
on one share of the Kafka partitions, the driver merges the shares.

The SQL plans of spark_checks.py hold nothing in memory per row and so scale to histories
larger than the cluster's memory; this path is several times faster (docs/checkers.md) but
holds each share's rows in its task's memory. spark_checks.run takes it when every share
fits TASK_MEMORY_FRACTION of this machine's available memory, divided among the tasks that
run at once, and falls back to the SQL plans otherwise, or when a task cannot run histcheck
(not built on that executor), saying so on stderr.

The tasks read the tables from the same paths as Spark's own readers, so the tables must be
where every executor sees them (as for the SQL plans: the checker's scratch folder on one
machine, shared storage on a cluster).
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from checkers import native_checks
from checkers.native_checks import NativeCheckError
from checkers.spark import task_failure

# Of the memory available on this machine, what the concurrent tasks' rows may take.
TASK_MEMORY_FRACTION = 0.5
# Shares per core at most: more shares than partitions are empty, and each share reads
# both tables whole (keeping only its rows), so more shares only add reading.
MAX_SHARES_PER_CORE = 8


@dataclass
class Plan:
    shares: int
    share_bytes: int  # the largest share's estimated memory
    budget: int  # what each task may hold


def _rows_by_partition(path: Path) -> Counter:
    table = pq.read_table(path, columns=["partition"])
    counts = table.column("partition").value_counts()
    return Counter({v["values"].as_py(): v["counts"].as_py() for v in counts
                    if v["values"].as_py() is not None})


def _available_memory() -> int:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def plan(spark: SparkSession, ops_path: Path, reads_path: Path) -> Plan | None:
    """How many shares the native checks take here, or None when they do not fit (or the
    driver has no histcheck)."""
    if native_checks.binary() is None:
        return None
    ops, reads = _rows_by_partition(ops_path), _rows_by_partition(reads_path)
    weight = {p: ops[p] * native_checks.BYTES_PER_OP + reads[p] * native_checks.BYTES_PER_READ
              for p in ops.keys() | reads.keys()}
    cores = spark.sparkContext.defaultParallelism
    budget = int(_available_memory() * TASK_MEMORY_FRACTION) // cores
    fewest = max(1, min(cores, len(weight)))
    for k in range(fewest, max(fewest, min(len(weight), cores * MAX_SHARES_PER_CORE)) + 1):
        share = Counter()
        for p, w in weight.items():
            share[p % k] += w
        biggest = max(share.values(), default=0)
        if biggest <= budget:
            return Plan(k, biggest, budget)
    return None


def _check_one(share: tuple[int, int], ops: str, reads: str, acks: str,
               examples: int) -> dict[str, Any]:
    return native_checks.check_share(Path(ops), Path(reads), acks, examples, share, threads=1)


def run(spark: SparkSession, ops_path: Path, reads_path: Path, acks: str, examples: int,
        shares: int) -> dict[str, Any]:
    """The merged raw output of `shares` tasks (native_checks.merge)."""
    sc = spark.sparkContext
    rdd = sc.parallelize([(r, shares) for r in range(shares)], shares)
    task = partial(_check_one, ops=str(ops_path), reads=str(reads_path), acks=acks,
                   examples=examples)
    try:
        outs = rdd.map(task).collect()
    except Exception as e:  # Py4JJavaError: keep the worker's reason, not the JVM's trace
        raise NativeCheckError(task_failure(e)[:500]) from None
    return native_checks.merge(outs, examples)


def say(msg: str) -> None:
    print(f"[checker] {msg}", file=sys.stderr, flush=True)
