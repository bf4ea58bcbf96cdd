"""The native checks (checkers/native_checks.py) as Spark tasks: each task runs `histcheck`
on one share of the Kafka partitions, the driver merges the shares.

The SQL plans of spark_checks.py hold nothing in memory per row and so scale to histories
larger than the cluster's memory; this path is several times faster (docs/checkers.md) but
holds each share's rows in its task's memory. So each task gets a memory limit,
TASK_MEMORY_FRACTION of this machine's available memory divided among the tasks that run at
once, and `histcheck` stops as it loads once its rows would pass it (ShareTooBigError).

On tables clustered by partition (what ingest.py writes: each row group of one partition), each
task reads only its share's row groups and checks its partitions one at a time (`at_once=1`),
so a task holds one partition's rows at most (two where both fit its budget: the next loads
while one is checked). Each task may use every core of its machine (its
partition's two tables load at once and its checks run in two groups): while all tasks run they
share the cores, and once some are done the rest use the cores they leave. On one machine (a
local master) with fewer than two partitions a core, one task checks them all on every core
(`shares`): the shares would be uneven (3 partitions in 2 tasks at 10M operations), and one
`histcheck` loading each partition while it checks the one before fills the cores better than
two uneven tasks (docs/checkers.md). Too big then means one partition is, and more
shares would not help. Fewer do: the check is tried once more in one task with the whole
budget, the partitions one after the other (the 100M-operation history of the benchmark, 3
partitions of some 10 GB each, is checked so on a 23 GB machine: two at once would not fit).
The footers tell before a row is read (`histcheck --estimate`: each partition's rows from the
row groups' statistics, priced as the memory limit prices them), so when they say a partition
would pass a task's budget the first try is not made: the one task is tried at once. On other
tables (written before the clustering) each task reads both tables whole and holds its whole
share, so the check is tried once more in MAX_SHARES_PER_CORE times as many shares (a history
of many partitions fits that way), unless the share that stopped (the one Spark reports: its
task failed first) held one partition alone: that partition's share would hold it whole again
within the same budget, so there is no second try (the driver reads the tables' partition
column to know, stopping at a second partition of that share). When the share that stopped held
two or more, the second try is made even if one of them alone is too big: which share stops
first is a race, and where it held several nothing tells whether each alone fits. If it is
still too big, or there was no second try, spark_checks.run leaves the check to the SQL plans,
as it does when a task cannot run `histcheck` (not built on that executor); each said on
stderr.

The tasks read the tables from the same paths as Spark's own readers, so the tables must be
where every executor sees them (as for the SQL plans: the checker's scratch folder on one
machine, shared storage on a cluster).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from checkers import native_checks
from checkers.native_checks import NativeCheckError, ShareTooBigError
from checkers.spark import LOST_DRIVER, say, task_failure

# Of the memory available on this machine, what the concurrent tasks' rows may take (the
# rest: Spark's JVMs, about 4.5 GB for the driver at 100M operations, and the page cache).
TASK_MEMORY_FRACTION = 0.7
# The second try's shares per core, on tables not clustered by partition: there each share
# reads both tables whole (keeping only its rows), and shares past the number of partitions
# are empty, so more only add reading.
MAX_SHARES_PER_CORE = 8


@dataclass
class Plan:
    shares: int
    budget: int  # bytes each task's rows may take


def _available_memory() -> int:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def plan(spark: SparkSession, ops_path: Path, reads_path: Path) -> Plan | None:
    """The shares of `shares` and their memory limit, TASK_MEMORY_FRACTION of the available
    memory among them; None when the driver has no histcheck."""
    if native_checks.binary() is None:
        return None
    sc = spark.sparkContext
    cores = sc.defaultParallelism
    try:
        waves = native_checks.estimate(ops_path, reads_path, at_once=1)  # one a partition
    except NativeCheckError:
        waves = None  # the tasks' own runs of histcheck say why, and the SQL plans check
    n = shares(cores, len(waves) if waves is not None else None, sc.master.startswith("local"))
    return Plan(n, int(_available_memory() * TASK_MEMORY_FRACTION) // n)


def shares(cores: int, partitions: int | None, one_machine: bool) -> int:
    """One share per core, but one share alone on one machine when the tables are clustered
    and hold fewer than two partitions a core (histcheck's own rule for partitions at once):
    its waves then fill the cores, where tasks of uneven shares leave one idle."""
    if one_machine and partitions is not None and partitions < 2 * cores:
        return 1
    return cores


def clustered(*tables: Path) -> bool:
    """Whether every row group of `tables` holds one Kafka partition's rows, or only rows
    without one, by its statistics (from the files' footers: nothing else is read)."""
    for path in tables:
        meta = pq.ParquetFile(path).metadata
        col = meta.schema.names.index("partition")
        for i in range(meta.num_row_groups):
            st = meta.row_group(i).column(col).statistics
            if st is None or not st.has_null_count:
                return False
            one = st.has_min_max and st.min == st.max and st.null_count == 0
            if not (one or (not st.has_min_max and st.null_count > 0)):
                return False
    return True


def warm_up(spark: SparkSession) -> None:
    """One task a core, each in a Python worker that imports this module (pyarrow, pyspark,
    native_checks): what the first native check of a session would otherwise start on its
    way (about 3.5 s of it on 2 cores, docs/checkers.md). checkers.check has it done while the
    history is ingested, and again every 30 s until the check takes the session
    (checkers.spark.SessionAhead): Spark stops workers idle for a minute. A failure is said
    and left: the check's own tasks report theirs."""
    sc = spark.sparkContext
    n = sc.defaultParallelism
    try:
        sc.parallelize(range(n), n).map(_ready).collect()
    except Exception as e:  # Py4JJavaError: the worker's reason, not the JVM's trace
        say(f"Spark's Python workers were not started ahead: {task_failure(e)[:200]}")


def _ready(_: int) -> bool:
    return True  # unpickling this function in the worker imported the module


def _check_one(share: tuple[int, int], ops: str, reads: str, acks: str, examples: int,
               budget: int) -> dict[str, Any]:
    return native_checks.check_share(Path(ops), Path(reads), acks, examples, share,
                                     memory_limit=budget, at_once=1)


def run(spark: SparkSession, ops_path: Path, reads_path: Path, acks: str, examples: int,
        how: Plan) -> tuple[dict[str, Any], Plan]:
    """The merged raw output of the tasks (native_checks.merge), and the plan it took: `how`,
    else (a share too big) one share with every task's budget on clustered tables, and
    MAX_SHARES_PER_CORE times as many shares on others; ShareTooBigError when the second
    try could not fit either, or when there was no second try to make. On clustered tables
    whose footers already say a partition would pass a task's budget, the first try is not
    made: the one share with every task's budget is tried at once."""
    how = _fitting(how, ops_path, reads_path)
    try:
        return _run(spark, ops_path, reads_path, acks, examples, how), how
    except ShareTooBigError as e:
        more = _second_try(e, how, ops_path, reads_path)
        return _run(spark, ops_path, reads_path, acks, examples, more), more


def _fitting(how: Plan, ops_path: Path, reads_path: Path) -> Plan:
    """`how`, or one share with every task's budget when the footers say the biggest
    partition's rows would pass a task's budget: its task would stop partway through loading
    it (some 15 s at 100M operations) before the second try. The estimate is histcheck's own,
    with a partition's completed operations taken as half its operations' rows (an upper
    bound); the one task still stops by the rows it loads, so nothing is refused by it."""
    if how.shares == 1:
        return how
    waves = native_checks.estimate(ops_path, reads_path, at_once=1)
    if not waves or max(waves) <= how.budget:
        return how
    say(f"a partition needs some {max(waves) >> 20} MiB, past a task's {how.budget >> 20} MiB: "
        "one task checks the partitions one after the other")
    return Plan(1, how.budget * how.shares)


def _second_try(e: ShareTooBigError, how: Plan, ops_path: Path, reads_path: Path) -> Plan:
    """The plan to try once more after `how` stopped with `e`; raises it again (saying why)
    when no plan could fit where `how` did not."""
    if clustered(ops_path, reads_path):
        if how.shares == 1:
            raise e  # one partition alone is too big
        return Plan(1, how.budget * how.shares)
    held = partitions_held(e.share, ops_path, reads_path) if e.share else None
    if held is not None and len(held) == 1:
        # in any number of shares, that partition's share holds it whole within this budget
        raise ShareTooBigError(f"{e}, and holds partition {held.pop()} alone: more shares "
                               "would not split it") from None
    return Plan(how.shares * MAX_SHARES_PER_CORE, how.budget)


def partitions_held(share: tuple[int, int], *tables: Path) -> set[int]:
    """The Kafka partitions p of `tables` in `share` (r, k): p mod k == r, as histcheck's
    --share takes them; reads only the partition column, and stops at two (enough to know
    whether more shares could split the share)."""
    r, k = share
    found: set[int] = set()
    for path in tables:
        for batch in pq.ParquetFile(path).iter_batches(columns=["partition"]):
            found.update(p for p in pc.unique(batch.column(0)).to_pylist()
                         if p is not None and p % k == r)
            if len(found) > 1:
                return found
    return found


def _run(spark: SparkSession, ops_path: Path, reads_path: Path, acks: str, examples: int,
         how: Plan) -> dict[str, Any]:
    sc = spark.sparkContext
    rdd = sc.parallelize([(r, how.shares) for r in range(how.shares)], how.shares)
    task = partial(_check_one, ops=str(ops_path), reads=str(reads_path), acks=acks,
                   examples=examples, budget=how.budget)
    try:
        outs = rdd.map(task).collect()
    except LOST_DRIVER:
        raise  # the driver, not a task: checkers.spark.driver_watched says whether it died
    except Exception as e:  # a task failed: keep the worker's reason, not the JVM's trace
        why = task_failure(e)[:500]
        raise (ShareTooBigError if "ShareTooBigError" in why else NativeCheckError)(why) from None
    return native_checks.merge(outs, examples)
