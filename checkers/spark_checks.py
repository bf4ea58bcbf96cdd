"""The anomaly checks as Spark DataFrame joins and window functions (see definitions.py).

No Python runs per row: every check is a plan of joins, aggregations and windows over the
Parquet tables written by ingest.py; only counts, capped examples and the (normally small)
set of acked-but-unread records come back to the driver.
"""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from checkers.definitions import EXAMPLES, READ_FS
from checkers.verdict import CheckOutput

P = "partition"
INFO_READ = "info-sends-read"  # a statistic, counted in the same job as the anomalies
# Below this many probes, range conditions are broadcast joins; above, window scans.
RANGE_JOIN_MAX = 10_000
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


def tune(spark: SparkSession, input_bytes: int) -> None:
    """Size shuffles to the input: small histories are dominated by per-stage overhead."""
    cores = spark.sparkContext.defaultParallelism
    small = input_bytes < (4 << 20)
    partitions = 1 if small else max(2 * cores, min(8 * cores, input_bytes // (16 << 20)))
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    spark.conf.set("spark.sql.adaptive.enabled", str(not small).lower())


class SparkChecks:
    def __init__(self, spark: SparkSession, ops_path: Path, reads_path: Path, acks: str) -> None:
        self.ops = spark.read.parquet(str(ops_path))
        self.reads = spark.read.parquet(str(reads_path))
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
        # One row per distinct (partition, offset, value) anyone saw, with its ack if acked;
        # most checks start here.
        no_long, no_str = F.lit(None).cast("long"), F.lit(None).cast("string")
        obs = self.reads.select(
            P, "offset", "value", F.lit(True).alias("is_read"), "index",
            no_long.alias("ack_time"), no_str.alias("acks"),
        )  # fmt: skip
        obs = obs.unionByName(
            self.acked.select(
                P, "offset", "value", F.lit(False).alias("is_read"),
                F.col("ack_index").alias("index"), "ack_time", "acks",
            )  # fmt: skip
        )
        self.cells = (
            obs.groupBy(P, "offset", "value")
            .agg(
                F.max("is_read").alias("read"),
                F.min("index").alias("first_op"),
                F.min(F.when(~F.col("is_read"), F.col("index"))).alias("ack_op"),
                F.min("ack_time").alias("ack_time"),
                F.max("acks").alias("acks"),
            )
            .cache()
        )
        self.read_set = self.cells.filter("read").select(P, "value")

    # -- per-anomaly plans -------------------------------------------------------------

    def _multi(self, keys: list[str], inner: list[str], name: str) -> DataFrame:
        """Cells sharing `keys` with another cell, the others collected as `name`."""
        multi = self.cells.groupBy(*keys).count().filter("count > 1").drop("count")
        return (
            self.cells.join(multi, keys, "left_semi")
            .groupBy(*keys)
            .agg(F.sort_array(F.collect_list(F.struct(*inner))).alias(name))
        )

    def inconsistent_offsets(self) -> DataFrame:
        return self._multi([P, "offset"], ["value", "first_op"], "values")

    def duplicate(self) -> DataFrame:
        return self._multi([P, "value"], ["offset", "first_op"], "offsets")

    def unread(self) -> DataFrame:
        """Acked sends missing from the final state of their partition.

        Where a final read completed, that is its last `final-poll`: a record read by
        consumers earlier and later truncated away is lost too (it was below the HWM, hence
        committed). Elsewhere: acked sends whose value no read of the partition returned."""
        final = self.ops.filter((F.col("f") == "final-poll") & (F.col("type") == "ok"))
        last_final = final.groupBy(P).agg(F.max("index").alias("index"))
        final_reads = self.reads.join(F.broadcast(last_final.select("index")), "index", "left_semi")
        final_set = final_reads.select(P, "value")
        with_final = last_final.select(P)
        in_final_part = self.acked.join(F.broadcast(with_final), P, "left_semi")
        missing_final = in_final_part.join(final_set, [P, "value"], "left_anti")
        max_final = final_reads.groupBy(P).agg(F.max("offset").alias("max_read_offset"))
        # No final read: narrow down on the cached cells first, so the full acked and read sets
        # are never shuffled against each other.
        cand = self.cells.filter(F.col("ack_op").isNotNull() & ~F.col("read"))
        cand = cand.select(P, "value", "offset").join(F.broadcast(with_final), P, "left_anti")
        elsewhere = self.read_set.join(cand.select(P, "value"), [P, "value"], "left_semi")
        keys = cand.join(elsewhere, [P, "value"], "left_anti")
        max_read = self.reads.groupBy(P).agg(F.max("offset").alias("max_read_offset"))
        never_read = self.acked.join(keys, [P, "value", "offset"], "left_semi").join(
            F.broadcast(max_read), P, "left")
        return missing_final.join(F.broadcast(max_final), P, "left").unionByName(never_read)

    def read_steps(self) -> DataFrame:
        """Reads that break the per-process sequence, with the offset they should have had."""
        expected = F.when(
            (F.col("pos") == 0) & F.col("from_offset").isNotNull(), F.col("from_offset")
        ).otherwise(F.col("prev_offset") + 1)
        return (
            self.reads.select(
                "index", "process", P, "offset", "value", "pos", "from_offset", "invoke_time",
                "prev_op", expected.alias("expected"),
            )  # fmt: skip
            .filter(F.col("offset") != F.col("expected"))
            .cache()
        )

    def nonmonotonic_poll(self, steps: DataFrame) -> DataFrame:
        return steps.filter(F.col("offset") < F.col("expected")).select(
            "process", P, F.col("index").alias("op"), "prev_op", "expected", "offset", "value"
        )

    def poll_skip(self, steps: DataFrame) -> DataFrame:
        jumps = steps.filter(F.col("offset") > F.col("expected"))
        known = self.cells.select(P, F.col("offset").alias("k"))
        if jumps.count() <= RANGE_JOIN_MAX:
            # Few jumps (the normal case): probe them from every known offset, no sort.
            j = F.broadcast(jumps.select(*[c for c in JUMP if c != P], F.col(P).alias("jp")))
            cond = (F.col(P) == F.col("jp")) & (F.col("k") >= F.col("expected"))
            hits = known.join(j, cond & (F.col("k") < F.col("offset")))
            skipped = hits.groupBy(*JUMP).agg(F.max("k").alias("skipped_offset"))
        else:
            w = Window.partitionBy(P).orderBy("k")
            prev = known.distinct().withColumn("prev", F.lag("k").over(w))
            skipped = (
                jumps.select(*JUMP)
                .join(prev.withColumnRenamed("k", "offset"), [P, "offset"])
                .filter(F.col("prev") >= F.col("expected"))
                .withColumnRenamed("prev", "skipped_offset")
            )
        return skipped.select(
            "process", P, F.col("index").alias("op"), "prev_op", "expected", "offset",
            "skipped_offset",
        )  # fmt: skip

    def nonmonotonic_send(self) -> DataFrame:
        acked = self.sends.filter(F.col("type") == "ok")
        return acked.filter(F.col("offset") <= F.col("prev_ack_offset")).select(
            "process", P, F.col("index").alias("op"), "offset",
            F.col("prev_ack_op").alias("prev_op"), F.col("prev_ack_offset").alias("prev_offset"),
        )  # fmt: skip

    def aborted_read(self) -> DataFrame:
        failed = self.sends.filter(F.col("type") == "fail").select(
            "value", F.col("index").alias("fail_op"), "error"
        )
        maybe_done = self.sends.filter(F.col("type").isin("ok", "info")).select("value")
        failed = failed.join(maybe_done, "value", "left_anti")
        return (
            self.cells.filter("read")
            .join(failed, "value")
            .select(P, "offset", "value", F.col("first_op").alias("read_op"), "fail_op", "error")
        )

    def stale_read(self, steps: DataFrame, inconsistent: DataFrame) -> DataFrame:
        visible = self.cells.filter(
            F.col("read") & F.col("ack_op").isNotNull() & (F.col("acks") == "all")
        )
        missed = F.struct("offset", "value", "ack_op", "ack_time").alias("missed")
        parts = [self._stale_hwm(visible, missed), self._stale_other_value(visible, inconsistent)]
        gaps = steps.filter(
            (F.col("offset") > F.col("expected"))
            & ((F.col("pos") > 0) | F.col("from_offset").isNotNull())
        )
        if not gaps.isEmpty():
            parts.append(self._stale_skipped(visible, gaps, missed))
        stale = parts[0]
        for p in parts[1:]:
            stale = stale.unionByName(p)
        # One row per read op: the lowest missed offset is its example.
        w = Window.partitionBy("op").orderBy(F.col("missed.offset"), "kind")
        return stale.withColumn("rn", F.row_number().over(w)).filter("rn = 1").drop("rn")

    def _polls(self) -> DataFrame:
        return self.ops.filter(
            F.col("f").isin(*READ_FS) & (F.col("type") == "ok") & F.col("invoke_time").isNotNull()
        )

    def _stale_hwm(self, visible: DataFrame, missed: Column) -> DataFrame:
        sends = visible.select(
            P, F.col("ack_time").alias("t"), F.lit(1).alias("kind_order"), missed
        )
        polls = self._polls().select(
            P,
            F.col("invoke_time").alias("t"),
            F.lit(0).alias("kind_order"),
            F.col("index").alias("op"),
            "process",
            "hwm",
            F.col("invoke_offset").alias("from_offset"),
        )
        # Polls sort before sends at the same instant: a read must begin strictly after the ack.
        w = Window.partitionBy(P).orderBy("t", "kind_order").rowsBetween(
            Window.unboundedPreceding, Window.currentRow
        )
        ev = sends.unionByName(polls, allowMissingColumns=True)
        ev = ev.withColumn("latest", F.max("missed").over(w))
        off = F.col("latest.offset")
        return ev.filter(
            (F.col("kind_order") == 0)
            & F.col("hwm").isNotNull()
            & (F.col("hwm") <= off)
            & (F.col("from_offset").isNull() | (F.col("from_offset") <= off))
        ).select(
            "op",
            "process",
            P,
            F.col("t").alias("invoke_time"),
            "from_offset",
            "hwm",
            F.lit("hwm-behind").alias("kind"),
            F.col("latest").alias("missed"),
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

    @staticmethod
    def _first_visible_at_or_after(visible: DataFrame, g: DataFrame, missed: Column) -> DataFrame:
        """Each gap row of g with `next`: the lowest visible acked record at offset >= lo."""
        if g.count() <= RANGE_JOIN_MAX:
            sends = visible.select(F.col(P).alias("vp"), F.col("offset").alias("k"), missed)
            cond = (F.col(P) == F.col("vp")) & (F.col("k") >= F.col("lo"))
            hits = sends.join(F.broadcast(g), cond & (F.col("k") <= F.col("hi")))
            return hits.groupBy(*g.columns).agg(F.min("missed").alias("next"))
        sends = visible.select(P, F.col("offset").alias("lo"), F.lit(1).alias("kind_order"), missed)
        # Scan downwards so the frame only grows (an unbounded-following frame is quadratic).
        w = Window.partitionBy(P).orderBy(F.desc("lo"), F.desc("kind_order")).rowsBetween(
            Window.unboundedPreceding, Window.currentRow
        )
        ev = sends.unionByName(g.withColumn("kind_order", F.lit(0)), allowMissingColumns=True)
        ev = ev.withColumn("next", F.last("missed", ignorenulls=True).over(w))
        return ev.filter(F.col("kind_order") == 0).select(*g.columns, "next")

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
        info = self.sends.filter(F.col("type") == "info")
        return info.join(self.read_set, [P, "value"], "left_semi").select("index")

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
    spark: SparkSession, ops_path: Path, reads_path: Path, acks: str, examples: int = EXAMPLES
) -> CheckOutput:
    tune(spark, ops_path.stat().st_size + reads_path.stat().st_size)
    c = SparkChecks(spark, ops_path, reads_path, acks)
    steps = c.read_steps()
    inconsistent = c.inconsistent_offsets()
    found = summarise(
        {
            "inconsistent-offsets": (inconsistent, [P, "offset"]),
            "duplicate": (c.duplicate(), [P, "value"]),
            "nonmonotonic-poll": (c.nonmonotonic_poll(steps), ["op", "offset"]),
            "poll-skip": (c.poll_skip(steps), ["op", "offset"]),
            "nonmonotonic-send": (c.nonmonotonic_send(), ["op"]),
            "aborted-read": (c.aborted_read(), [P, "offset", "value"]),
            "stale-read": (c.stale_read(steps, inconsistent), ["op"]),
            INFO_READ: (c.info_read(), ["index"]),
        },
        examples,
    )
    info_read = found.pop(INFO_READ)[0]
    out = CheckOutput(
        anomalies=found,
        unread=c.unread().toPandas(),
        complete_partitions=c.complete_partitions(),
        stats=c.stats(info_read),
    )
    steps.unpersist()
    c.cells.unpersist()
    return out
