"""The tables clustered by Kafka partition, as the native checks read them: a share of the
partitions (a Spark task's) reads only its own row groups, and a share too big on clustered
tables is not tried again in more shares (checkers/spark_native.py); on tables in history
order it is, unless it held one partition alone."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from checkers import ingest as ingest_mod
from checkers import native_checks, spark_native
from checkers.ingest import ingest

pytestmark = pytest.mark.native
EXAMPLES = 3


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """The benchmark's generator (3 partitions, injected anomalies), ingested in row groups
    of 1,000 rows: tens of row groups per partition."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from checker_throughput import generate

    work = tmp_path_factory.mktemp("layout")
    generate(work / "history.jsonl", 30_000)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ingest_mod, "ROW_GROUP", 1000)
        mp.setattr(ingest_mod, "BUFFERED", 2500)
        ing = ingest(work / "history.jsonl", work / "clustered")
    assert ing.path == "native"
    return ing


def _row_groups(path: Path, partition: int | None = None) -> int:
    """Row groups of a table (of one partition, by their statistics, when given)."""
    meta = pq.ParquetFile(path).metadata
    if partition is None:
        return meta.num_row_groups
    col = meta.schema.names.index("partition")
    return sum(1 for i in range(meta.num_row_groups)
               if (s := meta.row_group(i).column(col).statistics).has_min_max
               and s.min == s.max == partition)


def _may_hold(path: Path, share: tuple[int, int]) -> int:
    """Row groups whose partition statistics do not rule out share r/k (share 0 also reads
    those with rows without a partition)."""
    meta = pq.ParquetFile(path).metadata
    col = meta.schema.names.index("partition")
    r, k = share
    n = 0
    for i in range(meta.num_row_groups):
        s = meta.row_group(i).column(col).statistics
        nulls = s.null_count > 0 and r == 0
        n += nulls or (s.has_min_max and any(p % k == r for p in range(s.min, s.max + 1)))
    return n


def _in_history_order(ing, out: Path) -> tuple[Path, Path]:
    """The same rows as one table in history order, 1,000 rows per row group: the layout
    before the clustering, where every row group holds every partition."""
    out.mkdir()
    paths = []
    for src in (ing.ops_path, ing.reads_path):
        t = pq.read_table(src)
        t = t.take(pc.sort_indices(t, [("index", "ascending"), ("pos", "ascending")]
                                   if "pos" in t.column_names else [("index", "ascending")]))
        pq.write_table(t, out / src.name, row_group_size=1000)
        paths.append(out / src.name)
    assert not spark_native.clustered(*paths)
    return paths[0], paths[1]


@pytest.fixture(scope="module")
def ordered(tables, tmp_path_factory) -> tuple[Path, Path]:
    return _in_history_order(tables, tmp_path_factory.mktemp("ordered") / "tables")


@pytest.fixture
def tries(monkeypatch) -> list[int]:
    """The shares of each native try spark_native.run makes (each one real)."""
    shares: list[int] = []
    run_once = spark_native._run
    monkeypatch.setattr(spark_native, "_run",
                        lambda *a: shares.append(a[-1].shares) or run_once(*a))
    return shares


def _least_limit(ops: Path, reads: Path, share: tuple[int, int] = (0, 1)) -> int:
    """The least --memory-limit that `share` checks within, one partition at a time on every
    core, as a Spark task checks it (spark_native._check_one)."""
    lo, hi = 1000, 1 << 34
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            native_checks.check_share(ops, reads, "all", EXAMPLES, share, at_once=1,
                                      memory_limit=mid)
            hi = mid
        except native_checks.ShareTooBigError:
            lo = mid
    return hi


def test_a_share_reads_only_the_row_groups_of_its_partitions(tables):
    assert spark_native.clustered(tables.ops_path, tables.reads_path)
    total = _row_groups(tables.ops_path) + _row_groups(tables.reads_path)
    outs = [native_checks.check_share(tables.ops_path, tables.reads_path, "all", EXAMPLES,
                                      (p, 3), threads=1) for p in range(3)]
    for p, out in enumerate(outs):
        mine = _row_groups(tables.ops_path, p) + _row_groups(tables.reads_path, p)
        # share 0 also counts the rows without a partition (the nemesis's)
        nemesis = _row_groups(tables.ops_path) - sum(_row_groups(tables.ops_path, q)
                                                     for q in range(3)) if p == 0 else 0
        assert out["row_groups_read"] == mine + nemesis < total / 2
    assert sum(o["row_groups_read"] for o in outs) == total


def test_clustered_and_history_ordered_tables_check_alike(tables, ordered):
    """histcheck still reads tables written before the clustering (each share reading them
    whole), with the same results, for every share and for the whole."""
    ops, reads = ordered
    for share in [(0, 1), (0, 2), (1, 2)]:
        a = native_checks.check_share(tables.ops_path, tables.reads_path, "all", EXAMPLES,
                                      share, threads=1)
        b = native_checks.check_share(ops, reads, "all", EXAMPLES, share, threads=2)
        assert b.pop("row_groups_read") == _may_hold(ops, share) + _may_hold(reads, share)
        a.pop("row_groups_read")
        assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@pytest.mark.spark
def test_each_spark_task_reads_only_its_share(tables, ordered, spark):
    """Two tasks over clustered tables read every row group once between them; over the
    same rows in history order each reads every row group that holds any of its partitions
    (most of them: together far more than the tables hold)."""
    how = spark_native.Plan(2, 1 << 40)
    clustered, took = spark_native.run(spark, tables.ops_path, tables.reads_path, "all",
                                       EXAMPLES, how)
    assert took == how
    assert clustered["row_groups_read"] == (_row_groups(tables.ops_path)
                                            + _row_groups(tables.reads_path))
    ops, reads = ordered
    in_order, _ = spark_native.run(spark, ops, reads, "all", EXAMPLES, how)
    assert in_order["row_groups_read"] == sum(_may_hold(t, (r, 2)) for t in (ops, reads)
                                             for r in range(2)) > 1.5 * (_row_groups(ops)
                                                                         + _row_groups(reads))
    whole = native_checks.check_share(tables.ops_path, tables.reads_path, "all", EXAMPLES)
    for out in (clustered, in_order):
        out.pop("row_groups_read")
    whole.pop("row_groups_read")
    assert clustered == in_order == whole


def test_the_footers_estimate_what_the_memory_limit_stops_by(tables, ordered):
    """`histcheck --estimate` reads no row: each wave's memory by the estimate the memory
    limit stops by, a partition's completed operations taken as half its operations' rows.
    The generator completes every invocation, so the biggest wave's estimate is exactly the
    least limit a task checks within; tables in history order give no estimate."""
    waves = native_checks.estimate(tables.ops_path, tables.reads_path, at_once=1)
    assert len(waves) == 3 and waves == sorted(waves, reverse=True)
    assert waves[0] == _least_limit(tables.ops_path, tables.reads_path)
    one_partition = native_checks.estimate(tables.ops_path, tables.reads_path, (1, 2))
    assert len(one_partition) == 1 and one_partition[0] in waves
    assert native_checks.estimate(*ordered, at_once=1) is None


def _histcheck(ops: Path, reads: Path, *flags: str, descriptors: int | None = None,
               **env: str) -> subprocess.CompletedProcess:
    """histcheck run directly on two threads (for what check_share does not pass: its
    environment, a limit on its open descriptors)."""
    import resource

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (descriptors, descriptors))

    cmd = [native_checks.binary(), str(ops), str(reads), "--acks", "all", "--examples",
           str(EXAMPLES), "--threads", "2", *flags]
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env},
                          preexec_fn=limited if descriptors is not None else None)


def _checked_loading_ahead(tables, memory_limit: int | None) -> tuple[dict, int]:
    """histcheck's output with one partition a wave, and the waves it loaded while the wave
    before was checked (HISTCHECK_TIMES says)."""
    limit = ["--memory-limit", str(memory_limit)] if memory_limit is not None else []
    done = _histcheck(tables.ops_path, tables.reads_path, "--at-once", "1", *limit,
                      HISTCHECK_TIMES="1")
    ahead = re.search(r"(\d+) of 3 waves loaded ahead", done.stderr)
    assert done.returncode == 0 and ahead, done.stderr
    return json.loads(done.stdout), int(ahead[1])


def test_a_wave_loads_while_the_one_before_is_checked_where_both_fit(tables):
    """The next partition loads while one is checked (a core idles through part of its
    checks) only where both fit the memory limit by the footers' estimate; the output is the
    one thread's either way. The twin: at the least limit the check fits in, nothing loads
    ahead."""
    waves = native_checks.estimate(tables.ops_path, tables.reads_path, at_once=1)
    one = native_checks.check_share(tables.ops_path, tables.reads_path, "all", EXAMPLES,
                                    threads=1)
    expected = {None: 2, waves[0] + waves[1]: 2, waves[0] + waves[1] - 1: 1, waves[0]: 0}
    for limit, ahead in expected.items():
        out, loaded_ahead = _checked_loading_ahead(tables, limit)
        assert (limit, loaded_ahead) == (limit, ahead)
        assert out == one


def test_row_groups_are_read_one_descriptor_at_a_time(tables, ordered):
    """histcheck reads a row group at a time (so no batch spans two dictionaries), opening
    each one's reader as the one before is done: tables of many row groups check within a
    descriptor limit far below their count (tables in history order: one wave, every row
    group). The twin: the limit does bite, below what the program needs to start."""
    groups = sum(_row_groups(p) for p in ordered)
    few = _histcheck(*ordered, descriptors=24)
    assert groups > 2 * 24 and few.returncode == 0, few.stderr
    assert json.loads(few.stdout) == json.loads(_histcheck(*ordered).stdout)
    too_few = _histcheck(*ordered, descriptors=3)  # stdin, stdout, stderr: no table opens
    assert too_few.returncode != 0


@pytest.mark.parametrize("cores, partitions, one_machine, expected", [
    (2, 3, True, 1),     # the benchmark's 10M on local[2]: uneven shares
    (2, 4, True, 2),     # two a core: histcheck's own rule for partitions at once
    (2, 3, False, 2),    # a cluster: every executor's cores
    (2, None, True, 2),  # not clustered: nothing tells the partitions before loading
    (1, 1, True, 1),
])
def test_shares_are_one_a_core_but_one_for_few_partitions_on_one_machine(
        cores, partitions, one_machine, expected):
    assert spark_native.shares(cores, partitions, one_machine) == expected


@pytest.mark.spark
def test_the_plan_on_one_machine_counts_the_partitions_from_the_footers(tables, ordered,
                                                                         spark):
    """local[2] and the 3-partition tables: one task on every core with both tasks' memory;
    the same rows in history order (no partition told by the footers): a task a core."""
    cores = spark.sparkContext.defaultParallelism
    one = spark_native.plan(spark, tables.ops_path, tables.reads_path)
    per_core = spark_native.plan(spark, *ordered)
    assert (cores, one.shares, per_core.shares) == (2, 1, 2)
    assert abs(one.budget - 2 * per_core.budget) < 1 << 30  # the available memory moves


@pytest.mark.spark
def test_the_plan_of_tables_histcheck_cannot_read_is_a_task_a_core(tables, spark, tmp_path):
    """The plan counts the partitions through `histcheck --estimate`; where that fails, the
    plan does not: the check goes on as it did before the plan read the tables (its own try
    of histcheck fails the same way, within spark_checks.run's fallback to the SQL plans)."""
    bad = tmp_path / "ops.parquet"
    bad.write_bytes(b"not a table")
    assert spark_native.plan(spark, bad, tables.reads_path).shares == 2
    with pytest.raises(native_checks.NativeCheckError):
        native_checks.estimate(bad, tables.reads_path)


@pytest.mark.spark
def test_a_share_too_big_on_clustered_tables_is_not_tried_in_more_shares(tables, spark,
                                                                          tries):
    """On clustered tables a task holds one partition at a time, so too big means one
    partition is, and the footers tell before any row is read: one task with both tasks'
    memory (one partition at a time in all) is tried at once, never more shares."""
    tiny = spark_native.Plan(2, 1000)
    with pytest.raises(native_checks.ShareTooBigError):
        spark_native.run(spark, tables.ops_path, tables.reads_path, "all", EXAMPLES, tiny)
    assert tries == [1]
    tries.clear()
    # the least memory limit one task needs, taking the partitions one at a time
    hi = _least_limit(tables.ops_path, tables.reads_path)
    # each of two tasks short of it, the two budgets together enough: one try, one task
    out, took = spark_native.run(spark, tables.ops_path, tables.reads_path, "all",
                                 EXAMPLES, spark_native.Plan(2, hi * 3 // 4))
    assert (tries, took) == ([1], spark_native.Plan(1, hi * 3 // 4 * 2))
    whole = native_checks.check_share(tables.ops_path, tables.reads_path, "all", EXAMPLES)
    assert out == whole


@pytest.mark.spark
def test_shares_that_fit_by_the_footers_are_tried_as_planned(tables, spark, tries):
    """The must-fail twin of the test above: at the least budget each task checks within,
    the first plan's two tasks run."""
    hi = _least_limit(tables.ops_path, tables.reads_path)
    out, took = spark_native.run(spark, tables.ops_path, tables.reads_path, "all",
                                 EXAMPLES, spark_native.Plan(2, hi))
    assert (tries, took) == ([2], spark_native.Plan(2, hi))
    out.pop("row_groups_read")
    whole = native_checks.check_share(tables.ops_path, tables.reads_path, "all", EXAMPLES)
    whole.pop("row_groups_read")
    assert out == whole


def test_a_task_too_big_on_clustered_tables_is_tried_once_more_in_one_task(tables):
    """Where the footers did not tell (an executor with more cores than the driver reckons
    its memory otherwise), a share too big on clustered tables is tried once more in one task
    with every task's budget; from one task, not at all."""
    too_big = native_checks.ShareTooBigError("share 1/2 needs more than 1000 bytes")
    paths = (tables.ops_path, tables.reads_path)
    assert spark_native._second_try(too_big, spark_native.Plan(2, 1000), *paths) == \
        spark_native.Plan(1, 2000)
    with pytest.raises(native_checks.ShareTooBigError):
        spark_native._second_try(too_big, spark_native.Plan(1, 2000), *paths)


@pytest.mark.spark
def test_a_too_big_share_of_one_partition_in_history_order_is_not_tried_again(ordered,
                                                                               spark, tries):
    """Tables in history order, 3 partitions in 3 shares: whichever task stops first held
    one partition alone, which any number of shares would hold whole within the same
    budget; so run stops after one try (the SQL plans check) and says why."""
    ops, reads = ordered
    with pytest.raises(native_checks.ShareTooBigError,
                       match=r"needs more than 1000 bytes, and holds partition \d alone") as e:
        spark_native.run(spark, ops, reads, "all", EXAMPLES, spark_native.Plan(3, 1000))
    assert tries == [3]
    r, k = e.value.share
    assert k == 3 and spark_native.partitions_held((r, k), ops, reads) == {r}


@pytest.mark.spark
def test_a_too_big_share_of_two_partitions_in_history_order_is_tried_in_more_shares(
        tables, ordered, spark, tries):
    """The must-fail twin of the test above: 3 partitions in 2 shares, within a budget that
    each partition fits but not partitions 0 and 2 together. Share 0 stops, and the second
    try, in MAX_SHARES_PER_CORE times as many shares (one partition each), checks."""
    ops, reads = ordered
    budget = max(_least_limit(ops, reads, (p, 3)) for p in range(3))
    with pytest.raises(native_checks.ShareTooBigError):  # partitions 0 and 2 together
        native_checks.check_share(ops, reads, "all", EXAMPLES, (0, 2), at_once=1,
                                  memory_limit=budget)
    assert spark_native.partitions_held((0, 2), ops, reads) == {0, 2}
    out, took = spark_native.run(spark, ops, reads, "all", EXAMPLES,
                                 spark_native.Plan(2, budget))
    more = 2 * spark_native.MAX_SHARES_PER_CORE
    assert (tries, took) == ([2, more], spark_native.Plan(more, budget))
    whole = native_checks.check_share(tables.ops_path, tables.reads_path, "all", EXAMPLES)
    out.pop("row_groups_read")
    whole.pop("row_groups_read")
    assert out == whole
