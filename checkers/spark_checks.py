"""The anomaly checks on Spark (see definitions.py), two ways.

The native checks in Spark tasks (checkers/spark_native.py), each task one share of the Kafka
partitions, when the shares fit in memory: the fast way. Else the SQL plans below, which
scale past memory: no Python runs per row, every check is a plan of joins, aggregations and
windows over the Parquet tables written by ingest.py, and only counts, capped examples and
the (normally small) set of acked-but-unread records come back to the driver. `run` picks.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from checkers import native_checks, spark_native
from checkers.definitions import EXAMPLE_ORDER, EXAMPLES, READ_FS, findings
from checkers.native_checks import NativeCheckError
from checkers.spark import say
from checkers.verdict import CheckOutput, exact_frame

P = "partition"
INFO_READ = "info-sends-read"  # a statistic, counted in the same job as the anomalies
# Below this many probes, range conditions are broadcast joins; above, window scans.
RANGE_JOIN_MAX = 10_000
# ... and below this many offset bins over all the probes: a gap can be as wide as the offsets
# (a read from 0 whose first record is at 2^53 covers 2^43 bins), so it may be too many.
RANGE_JOIN_BINS = 1_000_000
# Intermediate tables that are small in a healthy history (failed sends, candidate losses,
# inconsistent offsets) are counted first and broadcast when at most this many rows, so the
# large side of their joins is scanned instead of shuffled. Above it they are shuffled. None of
# them has more rows than both tables together (each is a filter of the ops, of the cells, or a
# join on a key the other side holds once), so within a history of at most this many rows they
# are broadcast uncounted: nine Spark jobs fewer, a few seconds of a small history's check.
BROADCAST_MAX = 1_000_000
# Width of the offset bins that range conditions (poll-skip, skipped stale reads) join on.
OFFSET_BIN = 1024
# Time buckets for the stale-read scan: the running maximum is computed per (partition,
# bucket) in parallel, then carried across buckets through a table of one row per bucket.
TIME_BUCKETS = 64
JUMP = ["process", P, "index", "pos", "prev_op", "expected", "offset"]


def summarise(
    found: dict[str, tuple[DataFrame, list[str]]], examples: int = EXAMPLES
) -> dict[str, tuple[int, list]]:
    """Count every anomaly and take its first examples in ONE Spark job.

    Per-action overhead dominates small histories, so all anomaly plans are unioned into
    (name, sort keys, JSON payload) rows and ranked by one window per name.
    """
    parts = []
    for name, (df, order) in found.items():
        keys = [F.col(c).cast("long") for c in order]
        keys += [F.lit(0).cast("long")] * (3 - len(keys))
        payload = F.to_json(F.struct(*df.columns), {"ignoreNullFields": "false"})
        parts.append(
            df.select(
                F.lit(name).alias("name"),
                *[k.alias(f"k{i}") for i, k in enumerate(keys)],
                payload.alias("payload"),
            )
        )
    rows = parts[0]
    for part in parts[1:]:
        rows = rows.unionByName(part)
    rank = Window.partitionBy("name").orderBy("k0", "k1", "k2")
    rows = (
        rows.withColumn("n", F.count("*").over(Window.partitionBy("name")))
        .withColumn("rn", F.row_number().over(rank))
        .filter(F.col("rn") <= examples)
        .orderBy("name", "rn")
        .collect()
    )
    out: dict[str, tuple[int, list]] = {name: (0, []) for name in found}
    for r in rows:
        out[r["name"]] = (r["n"], out[r["name"]][1] + [json.loads(r["payload"])])
    return out


def _isin(col: Column, values) -> Column:
    values = list(values)
    return col.isin(values) if values else F.lit(False)


def tune(spark: SparkSession, input_bytes: int) -> None:
    """Size shuffles to the input: small histories are dominated by per-stage overhead."""
    cores = spark.sparkContext.defaultParallelism
    small = input_bytes < (4 << 20)
    partitions = 1 if small else max(2 * cores, min(8 * cores, input_bytes // (64 << 20)))
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    spark.conf.set("spark.sql.adaptive.enabled", str(not small).lower())


class SparkChecks:
    def __init__(self, spark: SparkSession, ops_path: Path, reads_path: Path, acks: str) -> None:
        self.ops = spark.read.parquet(str(ops_path))
        self.reads = spark.read.parquet(str(reads_path))
        self._cached: list[DataFrame] = []
        rows = sum(pq.ParquetFile(path).metadata.num_rows for path in (ops_path, reads_path))
        self._all_small = rows <= BROADCAST_MAX
        self.polls: DataFrame | None = None
        self.top_offset: int | None = None
        self.sends = sends = self.ops.filter(F.col("f") == "send")
        self.acked = sends.filter((F.col("type") == "ok") & F.col("offset").isNotNull()).select(
            P,
            "value",
            "offset",
            "process",
            F.col("index").alias("ack_index"),
            F.col("time").alias("ack_time"),
            "invoke_time",
            "node",
            "epoch",
            F.coalesce(F.col("acks"), F.lit(acks)).alias("acks"),
        )
        # The final state of each partition is its last ok final-poll (definitions.py): one op
        # index per partition, small enough to inline into the plans as a literal set.
        final = self.ops.filter((F.col("f") == "final-poll") & (F.col("type") == "ok"))
        last = final.filter(F.col(P).isNotNull()).groupBy(P).agg(F.max("index").alias("i"))
        self.last_final = {r[P]: r["i"] for r in last.collect()}
        # One row per distinct (partition, offset, value) anyone saw, with its ack if acked,
        # whether any read returned it and whether the final state holds it; most checks
        # start here.
        no_long, no_bool = F.lit(None).cast("long"), F.lit(None).cast("boolean")
        in_final = _isin(F.col("index"), self.last_final.values())
        obs = self.reads.select(
            P, "offset", "value", F.lit(True).alias("is_read"), in_final.alias("is_final"),
            "index", no_long.alias("ack_time"), no_bool.alias("acks_all"),
        )  # fmt: skip
        obs = obs.unionByName(
            self.acked.select(
                P, "offset", "value", F.lit(False).alias("is_read"),
                F.lit(False).alias("is_final"), F.col("ack_index").alias("index"), "ack_time",
                (F.col("acks") == "all").alias("acks_all"),
            )  # fmt: skip
        )
        # Hash-partitioned by (partition, offset), which the cache keeps: grouping the cells
        # by offset (inconsistent-offsets) then needs no second shuffle.
        cells = obs.repartition(P, "offset").groupBy(P, "offset", "value").agg(
            F.max("is_read").alias("read"),
            F.max("is_final").alias("in_final"),
            F.min("index").alias("first_op"),
            F.min(F.when(~F.col("is_read"), F.col("index"))).alias("ack_op"),
            F.min("ack_time").alias("ack_time"),
            F.max("acks_all").alias("acks_all"),
        )
        # present: in the final state where the partition has one, else read by anyone.
        has_final = _isin(F.col(P), self.last_final.keys())
        present = F.when(has_final, F.col("in_final")).otherwise(F.col("read"))
        self.cells = self._keep(cells.withColumn("present", present))
        self.read_set = self.cells.filter("read").select(P, "value")
        # Completed sends that are not acked with an offset (acks=0, info): normally few.
        # Their offsets are learned from reads (definitions.py), and an info send counts
        # (committed, with an offset) only once some read returned its value.
        done = sends.filter(F.col("type").isin("ok", "info"))
        self.done = done
        other = done.filter((F.col("type") != "ok") | F.col("offset").isNull()).select(
            "index", P, "value", "type", "offset", "process", "time", "invoke_time",
            "node", "epoch", F.coalesce(F.col("acks"), F.lit(acks)).alias("acks"),
        )  # fmt: skip
        read_min = (
            self.cells.filter("read")
            .join(other.select(P, "value").distinct(), [P, "value"], "left_semi")
            .groupBy(P, "value")
            .agg(F.min("offset").alias("read_offset"))
        )
        committed = (F.col("type") == "ok") | F.col("read_offset").isNotNull()
        self.other = self._small(
            other.join(read_min, [P, "value"], "left")
            .withColumn("committed", committed)
            .withColumn("resolved", F.when(committed, F.coalesce("offset", "read_offset")))
        )
        self._unread: DataFrame | None = None
        self._behind_df: DataFrame | None = None
        self._time_range: tuple[int, int] | None = None

    def _keep(self, df: DataFrame) -> DataFrame:
        self._cached.append(df.cache())
        return df

    def _small(self, df: DataFrame) -> DataFrame:
        """Cache df; hint a broadcast when it is small enough (BROADCAST_MAX), counting it
        only when the history is not."""
        self._keep(df)
        return F.broadcast(df) if self._all_small or df.count() <= BROADCAST_MAX else df

    def release(self) -> None:
        for df in self._cached:
            df.unpersist()
        self._cached.clear()

    # -- per-anomaly plans -------------------------------------------------------------

    def _multi(self, keys: list[str], inner: list[str], name: str) -> DataFrame:
        """Cells sharing `keys` with another cell, the others collected as `name`.

        The shared keys are found with a narrow aggregation and (normally few) broadcast,
        so the wide cells are scanned, never shuffled."""
        multi = self._small(self.cells.groupBy(*keys).count().filter("count > 1").drop("count"))
        return (
            self.cells.join(multi, keys, "left_semi")
            .groupBy(*keys)
            .agg(F.sort_array(F.collect_list(F.struct(*inner))).alias(name))
        )

    def inconsistent_offsets(self) -> DataFrame:
        """Cached: stale_read joins the reads against these offsets."""
        return self._keep(self._multi([P, "offset"], ["value", "first_op"], "values"))

    def duplicate(self) -> DataFrame:
        return self._multi([P, "value"], ["offset", "first_op"], "offsets")

    def unread(self) -> DataFrame:
        """Committed sends missing from the final state of their partition (by value); cached.

        Where a final read completed, that is its last `final-poll`: a record read by
        consumers earlier and later truncated away is lost too (it was below the HWM, hence
        committed). Elsewhere: committed sends whose value no read of the partition returned.
        Candidates of the acked sends come from the cached cells (normally few), so the acked
        and read sets are never shuffled against each other; the other committed sends
        (acks=0, info) are few and broadcast."""
        if self._unread is not None:
            return self._unread
        cand = self.cells.filter(F.col("ack_op").isNotNull() & ~F.col("present"))
        cand = self._small(cand.select(P, "value", "offset"))
        present = self.cells.filter("present")
        # the same value present at another offset is not missing (definitions.py: by value)
        elsewhere = present.select(P, "value").join(cand.select(P, "value"), [P, "value"],
                                                    "left_semi")  # fmt: skip
        keys = cand.join(elsewhere, [P, "value"], "left_anti")
        max_read = present.groupBy(P).agg(F.max("offset").alias("max_read_offset"))
        acked = self.acked.join(keys, [P, "value", "offset"], "left_semi")
        other = self.other.filter("committed")
        other_present = present.select(P, "value").join(F.broadcast(other.select(P, "value")),
                                                        [P, "value"], "left_semi")
        other = other.join(other_present, [P, "value"], "left_anti").select(
            P, "value", F.col("resolved").alias("offset"), "process",
            F.col("index").alias("ack_index"), F.col("time").alias("ack_time"), "invoke_time",
            "node", "epoch", "acks",
        )  # fmt: skip
        self._unread = self._small(
            acked.unionByName(other).join(F.broadcast(max_read), P, "left")
        )
        return self._unread

    def known(self) -> DataFrame:
        """(partition, k): offsets of the records known to exist, without the records the
        loss check reports (definitions.py: poll-skip)."""
        lost = self.unread().select(P, "offset", "value").filter(F.col("offset").isNotNull())
        return (
            self.cells.join(F.broadcast(lost), [P, "offset", "value"], "left_anti")
            .select(P, F.col("offset").alias("k"))
        )

    def _max_known_in(self, probes: DataFrame, lo: str, hi: str) -> DataFrame:
        """Probes (partition, lo, hi, ...) with `skipped_offset`: the highest known offset in
        [lo, hi], kept only where there is one. Few probes: binned broadcast range join;
        many: a sorted window scan of the known offsets and the probes together."""
        cols = probes.columns
        if self._binnable(probes, lo, hi):
            hits = self._in_ranges(self.known(), probes, lo, hi)
            return hits.groupBy(*cols).agg(F.max("k").alias("skipped_offset"))
        known = self.known().distinct().select(P, "k", F.lit(0).alias("kind_order"))
        marks = probes.select("*", F.col(hi).alias("k"), F.lit(1).alias("kind_order"))
        w = Window.partitionBy(P).orderBy("k", "kind_order").rowsBetween(
            Window.unboundedPreceding, Window.currentRow
        )
        known_k = F.when(F.col("kind_order") == 0, F.col("k"))
        ev = known.unionByName(marks, allowMissingColumns=True)
        ev = ev.withColumn("skipped_offset", F.last(known_k, ignorenulls=True).over(w))
        return ev.filter(
            (F.col("kind_order") == 1) & (F.col("skipped_offset") >= F.col(lo))
        ).select(*cols, "skipped_offset")

    def read_steps(self) -> DataFrame:
        """Reads that break the per-process sequence, with the offset they should have had."""
        expected = F.when(
            (F.col("pos") == 0) & F.col("from_offset").isNotNull(), F.col("from_offset")
        ).otherwise(F.col("prev_offset") + 1)
        return self._keep(
            self.reads.select(
                "index", "process", P, "offset", "value", "pos", "from_offset", "invoke_time",
                "prev_op", expected.alias("expected"),
            )  # fmt: skip
            .filter(F.col("offset") != F.col("expected"))
        )

    @staticmethod
    def _inside(internal: bool) -> Column:
        """Steps between two records of one poll (int-) or across polls."""
        return (F.col("pos") > 0) if internal else (F.col("pos") == 0)

    def nonmonotonic_poll(self, steps: DataFrame, internal: bool) -> DataFrame:
        return steps.filter((F.col("offset") < F.col("expected")) & self._inside(internal)).select(
            "process", P, F.col("index").alias("op"), "prev_op", "expected", "offset", "value"
        )

    def poll_skip(self, steps: DataFrame, internal: bool) -> DataFrame:
        jumps = steps.filter((F.col("offset") > F.col("expected")) & self._inside(internal))
        probes = jumps.select(*JUMP, (F.col("offset") - 1).alias("hi"))
        return self._max_known_in(probes, "expected", "hi").select(
            "process", P, F.col("index").alias("op"), "prev_op", "expected", "offset",
            "skipped_offset",
        )  # fmt: skip

    def send_steps(self) -> DataFrame:
        """Each completed send with the one before it from the same process to the same
        partition, both with known offsets; `internal` when both are parts of one operation.
        Offsets not on the ops come from the (broadcast) resolved other sends."""
        other = F.broadcast(self.other.select("index", F.col("resolved").alias("r")))
        prev = F.broadcast(self.other.select(F.col("index").alias("prev_send_op"),
                                             F.col("resolved").alias("pr"),
                                             F.lit(True).alias("p_other")))
        own = F.when(F.col("type") == "ok", F.col("offset"))  # info: only once committed
        internal = F.col("txn").isNotNull() & (F.col("txn") == F.col("prev_send_txn"))
        # An ok send above its predecessor's own offset, in another operation, is in order
        # whatever is learned from reads (the predecessor's offset is its own or unknown):
        # only the rest (normally few) need the joins.
        maybe = (
            own.isNull() | F.col("prev_send_offset").isNull()
            | (F.col("offset") <= F.col("prev_send_offset")) | internal
        )  # fmt: skip
        steps = (
            self.done.filter(F.col("prev_send_op").isNotNull() & maybe)
            .select("index", "process", P, "type", "offset", "txn", "prev_send_op",
                    "prev_send_offset", "prev_send_txn")
            .join(other, "index", "left")
            .join(prev, "prev_send_op", "left")
            .select(
                "index", "process", P, "prev_send_op",
                F.coalesce(own, F.col("r")).alias("resolved"),
                F.when(F.col("p_other"), F.col("pr")).otherwise(F.col("prev_send_offset"))
                .alias("prev_offset"),
                internal.alias("internal"),
            )
        )
        return self._small(
            steps.filter(F.col("resolved").isNotNull() & F.col("prev_offset").isNotNull())
        )

    def nonmonotonic_send(self, steps: DataFrame, internal: bool) -> DataFrame:
        return steps.filter(
            (F.col("resolved") <= F.col("prev_offset")) & (F.col("internal") == internal)
        ).select(
            "process", P, F.col("index").alias("op"), F.col("resolved").alias("offset"),
            F.col("prev_send_op").alias("prev_op"), "prev_offset",
        )  # fmt: skip

    def int_send_skip(self, steps: DataFrame) -> DataFrame:
        jumps = steps.filter(F.col("internal") & (F.col("resolved") > F.col("prev_offset") + 1))
        probes = jumps.select(
            "process", P, "index", "resolved", "prev_send_op", "prev_offset",
            (F.col("prev_offset") + 1).alias("lo"), (F.col("resolved") - 1).alias("hi"),
        )  # fmt: skip
        return self._max_known_in(probes, "lo", "hi").select(
            "process", P, F.col("index").alias("op"), F.col("resolved").alias("offset"),
            F.col("prev_send_op").alias("prev_op"), "prev_offset", "skipped_offset",
        )  # fmt: skip

    def _committed_sends(self) -> DataFrame:
        """Committed sends with their offsets (acked, or learned from reads), without the
        records the loss check reports: the sends that realtime send order is about."""
        lost = F.broadcast(self.unread().select(F.col("ack_index").alias("index")))
        acked = self.acked.select(
            F.col("ack_index").alias("index"), P, F.col("ack_time").alias("time"),
            "invoke_time", F.col("offset").alias("resolved"), F.lit("ok").alias("type"),
        )  # fmt: skip
        other = self.other.filter(F.col("committed") & F.col("resolved").isNotNull()).select(
            "index", P, "time", "invoke_time", "resolved", "type"
        )
        return acked.unionByName(other).join(lost, "index", "left_anti")

    def _visible(self) -> DataFrame:
        """Records read by someone and acked with acks=all: a later read must see them."""
        return self.cells.filter(F.col("read") & F.col("ack_op").isNotNull() & F.col("acks_all"))

    def _behind(self) -> DataFrame:
        """Polls whose HWM (hwm-behind) and committed sends whose offset (realtime send
        order) are behind the highest offset acknowledged before they began; cached.

        Both need the same thing, a running maximum over each partition's time of the
        offsets acked so far, of two sets of acks (visible records for polls, committed sends
        for sends): ONE scan computes both maxima over the union of both sets' events and
        both kinds of probes, so the second check costs no second sort of the history."""
        if self._behind_df is not None:
            return self._behind_df
        none = F.lit(None).cast("long")
        events = self._visible().select(
            P, F.col("ack_time").alias("t"), F.col("offset").alias("h"), none.alias("r")
        ).unionByName(
            self._committed_sends().filter(F.col("type") == "ok").select(
                P, F.col("time").alias("t"), none.alias("h"), F.col("resolved").alias("r")
            )
        )
        polls = self._polls().filter(F.col("hwm").isNotNull()).select(
            P, F.col("invoke_time").alias("t"), F.col("index").alias("op"), "process", "hwm",
            F.col("invoke_offset").alias("from_offset"), none.alias("offset"),
            F.lit(True).alias("is_poll"),
        )  # fmt: skip
        sends = self._committed_sends().filter(F.col("invoke_time").isNotNull()).select(
            P, F.col("invoke_time").alias("t"), F.col("index").alias("op"),
            F.lit(None).cast("string").alias("process"), none.alias("hwm"),
            none.alias("from_offset"), F.col("resolved").alias("offset"),
            F.lit(False).alias("is_poll"),
        )  # fmt: skip
        scanned = self._max_before(events, polls.unionByName(sends), ["h", "r"])
        poll_behind = (F.col("hwm") <= F.col("h")) & (
            F.col("from_offset").isNull() | (F.col("from_offset") <= F.col("h"))
        )
        latest = F.when(F.col("is_poll"), F.col("h")).otherwise(F.col("r"))
        self._behind_df = self._small(
            scanned.filter(F.when(F.col("is_poll"), poll_behind).otherwise(F.col("r") > F.col("offset")))
            .withColumn("latest", latest)
            .drop("h", "r")
        )
        return self._behind_df

    def realtime_send_order(self) -> DataFrame:
        """Committed sends that landed below a send acknowledged before they were invoked:
        per partition, the highest offset acknowledged before each send's invocation is a
        running maximum over time (the scan shared with hwm-behind stale reads: _behind)."""
        behind = self._behind().filter(~F.col("is_poll"))
        events = self._committed_sends().filter(F.col("type") == "ok")
        # the example: the latest-acknowledged send at that offset acked before the invoke
        earlier = events.select(
            P, F.col("resolved").alias("latest"),
            F.struct(F.col("time").alias("at"), F.col("index").alias("op")).alias("a"),
        )  # fmt: skip
        proc = self.done.select(F.col("index").alias("op"), F.col("process").alias("proc"))
        return (
            earlier.join(behind, [P, "latest"])
            .filter(F.col("a.at") < F.col("t"))
            .groupBy("op", P, "t", "offset", "latest")
            .agg(F.max("a").alias("a"))
            .join(proc, "op")
            .select(
                F.col("proc").alias("process"), P, "op", "offset",
                F.col("t").alias("invoke_time"), F.col("a.op").alias("earlier_op"),
                F.col("latest").alias("earlier_offset"), F.col("a.at").alias("earlier_ack_time"),
            )
        )  # fmt: skip

    def _max_before(self, events: DataFrame, probes: DataFrame, values: list[str]) -> DataFrame:
        """Probes (partition, t, ...) with, for each column v of `values`, the highest v of
        the events (partition, t, *values) at a time strictly before the probe's. Computed
        per (partition, time bucket) in parallel, each bucket seeded with the maxima of the
        buckets before it."""
        bucket = self._bucket()
        ev = events.select(P, "t", *values, bucket, F.lit(1).alias("kind_order"))
        pr = probes.select("*", bucket, F.lit(0).alias("kind_order"))
        per_bucket = ev.groupBy(P, "b").agg(*[F.max(v).alias(v) for v in values],
                                            F.lit(1).alias("k"))
        wanted = pr.select(P, "b").distinct().select("*", F.lit(0).alias("k"))
        before = Window.partitionBy(P).orderBy("b", "k").rowsBetween(
            Window.unboundedPreceding, Window.currentRow
        )
        carry = wanted.unionByName(per_bucket, allowMissingColumns=True)
        for v in values:
            carry = carry.withColumn(f"c_{v}", F.max(v).over(before))
        carry = carry.filter(F.col("k") == 0).select(P, "b", *[f"c_{v}" for v in values])
        # probes sort before events at the same instant: strictly before
        w = Window.partitionBy(P, "b").orderBy("t", "kind_order").rowsBetween(
            Window.unboundedPreceding, Window.currentRow
        )
        both = ev.unionByName(pr, allowMissingColumns=True)
        for v in values:
            both = both.withColumn(v, F.max(v).over(w))
        both = both.filter(F.col("kind_order") == 0).join(F.broadcast(carry), [P, "b"], "left")
        for v in values:
            both = both.withColumn(v, F.greatest(F.col(f"c_{v}"), F.col(v)))
        return both.drop("kind_order", "b", *[f"c_{v}" for v in values])

    def aborted_read(self) -> DataFrame:
        failed = self.sends.filter(
            (F.col("type") == "fail") & F.col("value").isNotNull() & F.col(P).isNotNull()
        ).select(P, "value", F.col("index").alias("fail_op"), "error")
        failed = self._small(failed)
        done = self.done.select(P, "value")
        failed = failed.join(done.join(failed.select(P, "value"), [P, "value"], "left_semi"),
                             [P, "value"], "left_anti")  # fmt: skip
        return (
            self.cells.filter("read")
            .join(failed, [P, "value"])
            .select(P, "offset", "value", F.col("first_op").alias("read_op"), "fail_op", "error")
        )

    def stale_read(self, steps: DataFrame, inconsistent: DataFrame) -> DataFrame:
        visible = self._visible()
        missed = F.struct("offset", "value", "ack_op", "ack_time").alias("missed")
        parts = [self._stale_hwm(visible)]
        if not inconsistent.isEmpty():
            parts.append(self._stale_other_value(visible, inconsistent))
        gaps = steps.filter(
            (F.col("offset") > F.col("expected"))
            & ((F.col("pos") > 0) | F.col("from_offset").isNotNull())
        )
        if not gaps.isEmpty():
            parts.append(self._stale_skipped(visible, gaps, missed))
        stale = parts[0]
        for p in parts[1:]:
            stale = stale.unionByName(p)
        # One row per read op: the lowest missed offset is its example; where two acked
        # values at that offset were missed (inconsistent offsets), the earlier ack.
        w = Window.partitionBy("op").orderBy(F.col("missed.offset"), "kind", F.col("missed.ack_op"))
        return stale.withColumn("rn", F.row_number().over(w)).filter("rn = 1").drop("rn")

    def _polls(self) -> DataFrame:
        """The ok reads with the columns stale-read needs; cached, three checks use them."""
        if self.polls is None:
            ok = F.col("f").isin(*READ_FS) & (F.col("type") == "ok")
            self.polls = self._keep(
                self.ops.filter(ok & F.col("invoke_time").isNotNull()).select(
                    "index", "process", P, "invoke_time", "invoke_offset", "hwm"
                )
            )
        return self.polls

    def _bucket(self) -> Column:
        """The time bucket `b` of a row's time `t`: TIME_BUCKETS equal spans of the
        history's time range (looked up once). Any split is correct: buckets only let the
        running maxima be computed in parallel."""
        if self._time_range is None:
            lo, hi = self.ops.agg(F.min("time"), F.max("time")).first()
            self._time_range = (lo or 0, hi or 0)
        lo, hi = self._time_range
        width = max(1, (hi - lo) // TIME_BUCKETS + 1)
        return F.floor((F.col("t") - F.lit(lo)) / F.lit(width)).alias("b")

    def _stale_hwm(self, visible: DataFrame) -> DataFrame:
        """Polls whose reported HWM is at or below an acked record visible before they began
        (the running maximum of _behind)."""
        behind = self._behind().filter(F.col("is_poll"))
        # the example: the visible record at that offset acked before the poll began
        v = visible.select(
            P, F.col("offset").alias("latest"),
            F.struct("offset", "value", "ack_op", "ack_time").alias("m"),
        )  # fmt: skip
        return (
            v.join(behind, [P, "latest"])
            .filter(F.col("m.ack_time") < F.col("t"))
            .groupBy("op", "process", P, "t", "from_offset", "hwm")
            .agg(F.max("m").alias("missed"))
            .select(
                "op", "process", P, F.col("t").alias("invoke_time"), "from_offset", "hwm",
                F.lit("hwm-behind").alias("kind"), "missed",
            )  # fmt: skip
        )

    def _stale_other_value(self, visible: DataFrame, inconsistent: DataFrame) -> DataFrame:
        hits = self.reads.join(inconsistent.select(P, "offset"), [P, "offset"], "left_semi")
        v = visible.select(
            P,
            "offset",
            F.col("value").alias("sent_value"),
            "ack_op",
            "ack_time",
        )
        polls = self._polls().select(F.col("index"), "hwm")
        return (
            hits.join(v, [P, "offset"])
            .filter((F.col("value") != F.col("sent_value")) & (F.col("invoke_time") > F.col("ack_time")))
            .join(polls, "index")
            .select(
                F.col("index").alias("op"),
                "process",
                P,
                "invoke_time",
                "from_offset",
                "hwm",
                F.lit("other-value").alias("kind"),
                F.struct(
                    "offset", F.col("sent_value").alias("value"), "ack_op", "ack_time"
                ).alias("missed"),
            )
        )

    def _stale_skipped(self, visible: DataFrame, gaps: DataFrame, missed: Column) -> DataFrame:
        g = gaps.select(
            P,
            F.col("expected").alias("lo"),
            (F.col("offset") - 1).alias("hi"),
            F.col("index").alias("op"),
            "process",
            "invoke_time",
            "from_offset",
        )
        first = self._first_visible_at_or_after(visible, g, missed)
        polls = self._polls().select(F.col("index").alias("op"), "hwm")
        return (
            first.filter(
                (F.col("next.offset") <= F.col("hi"))
                & (F.col("next.ack_time") < F.col("invoke_time"))
            )
            .join(polls, "op")
            .select(
                "op", "process", P, "invoke_time", "from_offset", "hwm",
                F.lit("skipped").alias("kind"), F.col("next").alias("missed"),
            )
        )  # fmt: skip

    def _first_visible_at_or_after(
        self, visible: DataFrame, g: DataFrame, missed: Column
    ) -> DataFrame:
        """Each gap row of g with `next`: the lowest visible acked record at offset >= lo."""
        if self._binnable(g, "lo", "hi"):
            sends = visible.select(P, F.col("offset").alias("k"), missed)
            hits = self._in_ranges(sends, g, "lo", "hi")
            return hits.groupBy(*g.columns).agg(F.min("missed").alias("next"))
        sends = visible.select(P, F.col("offset").alias("lo"), F.lit(1).alias("kind_order"), missed)
        # Scan downwards so the frame only grows (an unbounded-following frame is quadratic).
        w = Window.partitionBy(P).orderBy(F.desc("lo"), F.desc("kind_order")).rowsBetween(
            Window.unboundedPreceding, Window.currentRow
        )
        ev = sends.unionByName(g.withColumn("kind_order", F.lit(0)), allowMissingColumns=True)
        ev = ev.withColumn("next", F.last("missed", ignorenulls=True).over(w))
        return ev.filter(F.col("kind_order") == 0).select(*g.columns, "next")

    def _bins(self, lo: str, hi: str) -> tuple[Column, Column]:
        """The first and last offset bins of a probe's range [lo, hi], clipped to the offsets
        that exist (empty where first > last)."""
        if self.top_offset is None:
            self.top_offset = self.cells.agg(F.max("offset")).first()[0] or 0
        first = F.greatest(F.col(lo), F.lit(0))
        last = F.least(F.col(hi), F.lit(self.top_offset))
        return F.floor(first / OFFSET_BIN), F.when(first <= last, F.floor(last / OFFSET_BIN))

    def _binnable(self, probes: DataFrame, lo: str, hi: str) -> bool:
        """Few probes over few offset bins: the binned broadcast join; else the window scan."""
        first, last = self._bins(lo, hi)
        n, bins = probes.agg(F.count(F.lit(1)), F.sum((last - first + 1).cast("double"))).first()
        return n <= RANGE_JOIN_MAX and (bins or 0) <= RANGE_JOIN_BINS

    def _in_ranges(self, rows: DataFrame, probes: DataFrame, lo: str, hi: str) -> DataFrame:
        """rows (partition, k, ...) joined to the few probes (partition, lo, hi, ...) whose
        range holds k. Each probe is exploded into the fixed-width offset bins its range
        covers (clipped to the offsets that exist) and broadcast, so every row is matched by
        an equi-join on (partition, bin) against the handful of probes in its bin only."""
        first, last = self._bins(lo, hi)
        probes = probes.filter(last.isNotNull()).withColumn("bin", F.explode(F.sequence(first, last)))
        rows = rows.withColumn("bin", F.floor(F.col("k") / OFFSET_BIN))
        hit = (F.col("k") >= F.col(lo)) & (F.col("k") <= F.col(hi))
        return rows.join(F.broadcast(probes), [P, "bin"]).filter(hit).drop("bin")

    # -- evidence about the run as a whole -------------------------------------------

    def complete_partitions(self) -> set[int]:
        """Partitions with a final-poll that read up to the high watermark it reported."""
        final = self.ops.filter((F.col("f") == "final-poll") & (F.col("type") == "ok"))
        last = (
            self.reads.filter(F.col("f") == "final-poll")
            .groupBy("index")
            .agg(F.max("offset").alias("max_off"))
        )
        complete = (
            F.col("hwm").isNull()
            | (F.col("hwm") <= 0)
            | (F.col("max_off") + 1 >= F.col("hwm"))
            | (F.col("max_off").isNull() & (F.col("invoke_offset") >= F.col("hwm")))
        )
        rows = (
            final.join(last, "index", "left")
            .filter(complete & F.col(P).isNotNull())
            .select(P)
            .distinct()
            .collect()
        )
        return {r[P] for r in rows}

    def info_read(self) -> DataFrame:
        """Indeterminate sends that were read (so they count as committed)."""
        info = self._small(self.sends.filter(F.col("type") == "info").select("index", P, "value"))
        hits = self.read_set.join(info.select(P, "value"), [P, "value"], "left_semi")
        return info.join(hits, [P, "value"], "left_semi").select("index")

    def stats(self, info_sends_read: int) -> dict:
        rows = (
            self.ops.groupBy("f", "type", P)
            .agg(F.count("*").alias("n"), F.sum("n_records").alias("records"))
            .collect()
        )
        by: dict[str, int] = {}
        acked: dict[str, int] = {}
        for r in rows:
            key = f"{r['f']}:{r['type']}"
            by[key] = by.get(key, 0) + r["n"]
            if key == "send:ok":
                acked[str(r[P])] = r["n"]
        return {
            "ops": sum(by.values()),
            "ops_by_f_type": dict(sorted(by.items())),
            "reads": sum(r["records"] or 0 for r in rows),
            "acked_by_partition": dict(sorted(acked.items(), key=lambda kv: int(kv[0]))),
            "info_sends_read": info_sends_read,
        }


def run(
    spark: SparkSession, ops_path: Path, reads_path: Path, acks: str, examples: int = EXAMPLES,
    *, plan: str = "auto",
) -> CheckOutput:
    """Check both tables on `spark`: with the native checks in Spark tasks (plan "native",
    checkers/spark_native.py) or with the SQL plans below ("sql"); "auto" takes the native
    tasks, and the SQL plans when those cannot check (a share past its memory limit, or
    histcheck not built)."""
    if plan not in ("auto", "native", "sql"):
        raise ValueError(f"plan: {plan!r}")
    if plan != "sql":
        how = spark_native.plan(spark, ops_path, reads_path)
        if how is None:
            if plan == "native":
                raise NativeCheckError("histcheck is not built (make bootstrap builds it)")
            say("histcheck is not built: the SQL plans check")
        else:
            started = time.perf_counter()
            try:
                raw, took = spark_native.run(spark, ops_path, reads_path, acks, examples, how)
                say(f"native checks in {took.shares} Spark tasks, each within "
                    f"{took.budget >> 20} MiB, reading {raw['row_groups_read']} row groups")
                return native_checks.to_output(raw)
            except NativeCheckError as e:
                if plan == "native":
                    raise
                say(f"native checks not run ({e}; {time.perf_counter() - started:.1f}"
                                 " s); the SQL plans check instead")
    return _run_sql(spark, ops_path, reads_path, acks, examples)


def _run_sql(spark: SparkSession, ops_path: Path, reads_path: Path, acks: str,
             examples: int) -> CheckOutput:
    tune(spark, ops_path.stat().st_size + reads_path.stat().st_size)
    c = SparkChecks(spark, ops_path, reads_path, acks)
    try:
        plans = findings(c)
        found = summarise(
            {name: (df, list(EXAMPLE_ORDER[name])) for name, df in plans.items()}
            | {INFO_READ: (c.info_read(), ["index"])},
            examples,
        )
        info_read = found.pop(INFO_READ)[0]
        return CheckOutput(
            anomalies=found,
            unread=exact_frame(c.unread().toArrow()),  # toPandas rounds past 2^53
            complete_partitions=c.complete_partitions(),
            stats=c.stats(info_read),
        )
    finally:
        c.release()  # a long-lived session (tests, serve) must not accumulate cached tables
