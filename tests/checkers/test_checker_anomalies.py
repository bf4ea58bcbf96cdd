"""Every anomaly, positive and negative, on hand-built histories.

All scenarios are merged into one history checked once by Spark (local[2], one shared
session) and once by the single-process reference implementation; the two must agree
exactly, and each scenario's slice of the Spark results is asserted on. Verdicts
(valid/invalid/unknown, allow) go through check_path on each scenario alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from histories import History, merge, scenario_view
from support.tools import skip_reason

from checkers import reference, spark_checks, spark_native
from checkers.check import check_path
from checkers.exitcodes import exit_code
from checkers.ingest import ingest
from checkers.native_checks import NativeCheckError
from checkers.verdict import classify_unread, records


def clean() -> History:
    """Two partitions, two consumers, no anomaly, but every near-miss the checks must allow."""
    h = History()
    h.send(1, 0, 100, 0)
    h.send(1, 0, 101, 1)
    h.send(2, 1, 100, 0)  # the same value in another partition: not a duplicate
    h.send(2, 1, 201, 1)
    h.send(3, 0, 102, type="info")  # indeterminate, later read at offset 2: committed
    h.send(4, 0, 103, type="info")  # indeterminate, never read: not lost
    h.send(5, 0, 104, type="fail", error="NOT_ENOUGH_REPLICAS")  # failed, never read
    h.invoke_poll(8, 1, from_offset=2)  # begins before the ack of offset 2: may miss it
    h.send(2, 1, 202, 2)
    h.complete_poll(8, 1, [], hwm=2)
    h.poll(7, 0, [(0, 100), (1, 101)], from_offset=0, hwm=2)
    h.send(6, 0, 105, 7)  # offsets 3..6 never existed: no skip when a poll jumps to 7
    h.poll(7, 0, [(2, 102), (7, 105)], from_offset=2, hwm=8)
    h.poll(7, 0, [(0, 100)], from_offset=0, hwm=8)  # an explicit seek back is no regression
    h.poll(8, 1, [(0, 100), (1, 201), (2, 202)], from_offset=0, hwm=3)
    h.send(2, 1, 203, 3)
    h.ops[-1]["acks"] = "1"  # acks=1: a read that misses it is not stale
    h.poll(8, 1, [], from_offset=3, hwm=3)
    h.final(9, 0, [(0, 100), (1, 101), (2, 102), (7, 105)])
    h.final(9, 1, [(0, 100), (1, 201), (2, 202), (3, 203)])
    return h


def loss() -> History:
    h = History()
    for off, v in enumerate([10, 11, 12, 13, 14]):
        h.send(1, 0, v, off)
    h.send(2, 0, 15, type="info")  # never read, indeterminate: neither lost nor unseen
    h.final(9, 0, [(0, 10), (1, 11), (3, 13)], hwm=4)
    return h


def inconsistent_duplicate_regression() -> History:
    h = History()
    h.send(1, 0, 10, 0)
    h.send(1, 0, 11, 1)
    h.send(1, 1, 20, 0)
    h.send(1, 1, 21, 1)
    h.send(1, 1, 22, 2)
    h.poll(5, 0, [(0, 10), (1, 99)], from_offset=0, hwm=2)  # offset 1 read as 99, acked as 11
    h.poll(6, 1, [(0, 20), (1, 21), (2, 22), (3, 21)], from_offset=0, hwm=4)  # 21 twice
    h.poll(6, 1, [(2, 22)])  # no seek, yet it goes back from 3 to 2
    h.final(9, 0, [(0, 10), (1, 11)])
    h.final(9, 1, [(0, 20), (1, 21), (2, 22), (3, 21)])
    return h


def regression_within_poll() -> History:
    h = History()
    for off, v in enumerate([10, 11, 12]):
        h.send(1, 0, v, off)
    h.poll(5, 0, [(0, 10), (2, 12), (1, 11)], from_offset=0, hwm=3)
    h.final(9, 0, [(0, 10), (1, 11), (2, 12)])
    return h


def skip_send_aborted() -> History:
    h = History()
    for off, v in enumerate([10, 11, 12, 13]):
        h.send(1, 0, v, off)
    h.send(2, 1, 20, 5)
    h.send(2, 1, 21, 3)  # process 2's second ack on partition 1 gets a lower offset
    h.send(3, 1, 22, type="fail", error="NOT_LEADER")
    h.send(3, 1, 23, 6)
    h.poll(5, 0, [(0, 10), (1, 11)], from_offset=0, hwm=4)
    h.poll(5, 0, [(3, 13)])  # continues from 1 without a seek and skips the existing 2
    h.poll(6, 1, [(3, 21), (4, 22), (5, 20), (6, 23)], from_offset=3, hwm=7)  # 22 had failed
    h.final(9, 0, [(0, 10), (1, 11), (2, 12), (3, 13)])
    h.final(9, 1, [(3, 21), (4, 22), (5, 20), (6, 23)], from_offset=3)
    return h


def stale() -> History:
    h = History()
    h.send(1, 0, 10, 0)
    h.send(1, 0, 11, 1)
    # hwm-behind: begins after offset 1 was acked, reads from 0, claims the log ends at 1
    h.poll(5, 0, [(0, 10)], from_offset=0, hwm=1)
    # skipped: begins after the ack, its records jump from 0 to 2 over the acked 1
    h.send(1, 0, 12, 2)
    h.poll(6, 0, [(0, 10), (2, 12)], from_offset=0, hwm=3)
    h.poll(7, 0, [], from_offset=3, hwm=3)  # starts past every acked offset: not stale
    h.final(9, 0, [(0, 10), (1, 11), (2, 12)])
    return h


def read_then_truncated() -> History:
    """Consumers read 11 and 12 (so they were committed); the log was then cut back to offset
    1 and rewritten, as a returning unclean leader makes its followers do."""
    h = History()
    for off, v in enumerate([10, 11, 12]):
        h.send(1, 0, v, off)
    h.poll(5, 0, [(0, 10), (1, 11), (2, 12)], from_offset=0, hwm=3)
    h.send(1, 0, 30, 1)
    h.final(9, 0, [(0, 10), (1, 30)])
    return h


def wide_skip() -> History:
    """One read jumps over four existing records (several offset bins when binned by 1)."""
    h = History()
    for off in range(6):
        h.send(1, 0, 10 + off, off)
    h.poll(5, 0, [(0, 10), (5, 15)], from_offset=0, hwm=6)
    h.final(9, 0, [(off, 10 + off) for off in range(6)])
    return h


def two_values_missed() -> History:
    """Offset 0 was acked twice (10, then 20 after a truncation) and each was read; a later
    read there returns a third value, so it missed both: its example is the earlier ack."""
    h = History()
    h.send(1, 0, 10, 0)
    h.poll(5, 0, [(0, 10)], from_offset=0, hwm=1)
    h.send(2, 0, 20, 0)
    h.poll(6, 0, [(0, 20)], from_offset=0, hwm=1)
    h.poll(7, 0, [(0, 30)], from_offset=0, hwm=1)
    h.final(9, 0, [(0, 30)])
    return h


def no_final_read() -> History:
    h = History()
    h.send(1, 0, 10, 0)
    h.send(1, 1, 20, 0)
    h.poll(7, 0, [(0, 10)], from_offset=0, hwm=1)
    h.final(9, 0, [(0, 10)])
    return h


def offsets_from_reads() -> History:
    """Sends whose completion names no offset (acks=0, or info) take it from reads: they
    count for send order and for loss."""
    h = History()
    h.send(1, 0, 10, 0)
    h.send(2, 0, 11)  # acks=0: acknowledged without an offset; read at 2
    h.ops[-1]["acks"] = "0"
    h.send(2, 0, 12)  # acks=0, invoked after 11 was acknowledged, read at 1: below it
    h.ops[-1]["acks"] = "0"
    h.send(3, 0, 13, type="info")  # indeterminate, read at 3 (so committed), then lost
    h.send(4, 0, 15)  # acks=0, never read although the final read completed: unseen
    h.ops[-1]["acks"] = "0"
    h.poll(7, 0, [(0, 10), (1, 12), (2, 11), (3, 13)], from_offset=0, hwm=4)
    h.send(1, 0, 14, 4)
    h.final(9, 0, [(0, 10), (1, 12), (2, 11), (4, 14)])  # skips the lost 13: no skip reported
    return h


def sends_of_one_operation() -> History:
    """Two Jepsen-style operations of process 1, each of two sends (one `txn`)."""
    h = History()
    h.invoke_send(2, 0, 21)
    h.operation(1, 7001, [(0, 20, 0), (0, 22, 2)])  # a skip over 21 (process 2's): int-send-skip
    h.complete_send(2, 0, 21, 1)
    h.operation(1, 7002, [(0, 24, 5), (0, 23, 4)])  # the second lands below the first
    h.send(5, 0, 30, type="fail", error="NOT_LEADER")  # failed in partition 0 ...
    h.send(6, 1, 30, 0)  # ... but sent to partition 1 too, and read there: not aborted
    h.final(9, 0, [(0, 20), (1, 21), (2, 22), (4, 23), (5, 24)])
    h.final(9, 1, [(0, 30)])
    return h


def realtime_order() -> History:
    """Process 2's send is invoked after process 1's was acknowledged at offset 3, and lands
    at offset 1."""
    h = History()
    h.send(1, 0, 10, 0)
    h.send(1, 0, 13, 3)
    h.send(2, 0, 11, 1)
    h.send(3, 0, 12, 2)
    h.final(9, 0, [(0, 10), (1, 11), (2, 12), (3, 13)])
    return h


SCENARIOS = [
    clean, loss, inconsistent_duplicate_regression, regression_within_poll,
    skip_send_aborted, stale, no_final_read, read_then_truncated, wide_skip, two_values_missed,
    offsets_from_reads, sends_of_one_operation, realtime_order,
]  # fmt: skip


@pytest.fixture(scope="module")
def zoo(spark, tmp_path_factory):  # noqa: F811
    run = merge([s() for s in SCENARIOS]).write(tmp_path_factory.mktemp("zoo"))
    ing = ingest(run / "history.jsonl", run / "parquet")
    uncapped = 1_000_000
    spark_out = spark_checks.run(spark, ing.ops_path, ing.reads_path, "all", uncapped)
    ref_out = reference.run(ing.ops_path, ing.reads_path, "all", uncapped)
    plans = ("sql",) if skip_reason("native") else ("sql", "native")
    return spark_out, ref_out, ing, {
        plan: spark_checks.run(spark, ing.ops_path, ing.reads_path, "all", uncapped, plan=plan)
        for plan in plans}


def view(zoo, scenario) -> dict[str, list[dict]]:
    return scenario_view(zoo[0], SCENARIOS.index(scenario))


def verdict_of(scenario, tmp_path, config: dict | None = None) -> dict:
    return check_path(scenario().write(tmp_path / "run", config), backend="reference")


@pytest.mark.spark
@pytest.mark.parametrize("plan", ["auto", "sql", pytest.param("native", marks=pytest.mark.native)])
def test_spark_and_reference_agree_exactly(zoo, plan):
    auto, r, _, by_plan = zoo
    s = by_plan.get(plan, auto)
    assert json.loads(json.dumps(s.anomalies)) == json.loads(json.dumps(r.anomalies))
    assert records(classify_unread(s)) == records(classify_unread(r))
    assert s.complete_partitions == r.complete_partitions
    assert s.stats == r.stats
    assert sum(n for n, _ in s.anomalies.values()) > 0  # the zoo does contain anomalies


@contextmanager
def _job_group(spark) -> Iterator[Callable[[], list[str]]]:
    """The names ("count at FILE:LINE") of the Spark jobs started inside the block."""
    context, group = spark.sparkContext, f"test-{uuid.uuid4()}"
    context.setJobGroup(group, "a test's check")
    store = context._jsc.sc().statusStore()
    try:
        yield lambda: [store.job(i).name() for i in context.statusTracker().getJobIdsForGroup(group)]
    finally:
        context._jsc.clearJobGroup()


@pytest.mark.spark
@pytest.mark.parametrize(
    "knobs",
    [
        # window scans instead of binned broadcast range joins; shuffle joins for the tables
        # that are normally small; one time bucket: the stale-read scan carries nothing over
        {"RANGE_JOIN_MAX": -1, "BROADCAST_MAX": -1, "TIME_BUCKETS": 1},
        # binned range joins where every gap wider than one offset spans several bins; about
        # one op per time bucket: the stale-read scan carries everything over
        {"OFFSET_BIN": 1, "TIME_BUCKETS": 100_000},
    ],
    ids=["windows-shuffles-one-bucket", "narrow-bins-many-buckets"],
)
def test_every_join_strategy_agrees_with_the_reference(zoo, spark, monkeypatch, knobs):  # noqa: F811
    """Each strategy the plans choose by size, forced on the zoo (its default choices are
    test_spark_and_reference_agree_exactly's). Two runs hold the five settings, each of which
    forces a path of its own, since a run of the SQL plans on the zoo takes 15-20 s."""
    for knob, value in knobs.items():
        monkeypatch.setattr(spark_checks, knob, value)
    _, r, ing, _ = zoo
    with _job_group(spark) as jobs:
        s = spark_checks.run(spark, ing.ops_path, ing.reads_path, "all", 1_000_000, plan="sql")
    # a history above BROADCAST_MAX rows has its small tables counted before they are broadcast
    assert any(name.startswith("count at") for name in jobs()) == ("BROADCAST_MAX" in knobs)
    assert json.loads(json.dumps(s.anomalies)) == json.loads(json.dumps(r.anomalies))
    assert records(classify_unread(s)) == records(classify_unread(r))
    assert s.stats == r.stats  # info sends read
    for name in ("poll-skip", "int-poll-skip", "stale-read", "inconsistent-offsets", "duplicate",
                 "aborted-read", "int-send-skip", "int-nonmonotonic-send", "realtime-send-order"):
        assert s.anomalies[name][0] > 0


@pytest.mark.spark
def test_clean_history_has_no_anomaly(zoo, tmp_path):
    assert view(zoo, clean) == {}
    res = verdict_of(clean, tmp_path)
    assert res["valid"] is True and exit_code(res) == 0
    assert res["stats"]["info_sends_read"] == 1
    assert res["lost"]["count"] == 0


@pytest.mark.spark
def test_lost_write_before_a_later_read_vs_trailing_unseen(zoo, tmp_path):
    v = view(zoo, loss)
    assert [r["value"] for r in v["lost-write"]] == [12]
    assert [r["value"] for r in v["unseen"]] == [14]
    assert "stale-read" not in v  # lost records are not also stale reads
    assert "int-poll-skip" not in v  # nor skips of the final read that misses them
    res = verdict_of(loss, tmp_path)
    assert res["valid"] is False and exit_code(res) == 1
    assert res["lost"]["count"] == 2


@pytest.mark.spark
def test_inconsistent_offsets_duplicate_nonmonotonic_poll(zoo):
    v = view(zoo, inconsistent_duplicate_regression)
    [inc] = v["inconsistent-offsets"]
    assert (inc["partition"], inc["offset"]) == (0, 1)
    assert sorted(x["value"] for x in inc["values"]) == [11, 99]
    [dup] = v["duplicate"]  # value 20 at offset 0 of partition 1 only: not a duplicate
    assert (dup["partition"], dup["value"]) == (1, 21)
    assert [o["offset"] for o in dup["offsets"]] == [1, 3]
    [nm] = v["nonmonotonic-poll"]
    assert (nm["process"], nm["offset"], nm["expected"]) == ("6", 2, 4)
    # process 5's poll began after offset 1 was acked and returned another value there
    [st] = v["stale-read"]
    assert (st["process"], st["kind"], st["missed"]["value"]) == ("5", "other-value", 11)


@pytest.mark.spark
def test_nonmonotonic_poll_within_one_poll(zoo):
    v = view(zoo, regression_within_poll)
    [nm] = v["int-nonmonotonic-poll"]  # inside one poll: Jepsen's int- variants
    assert (nm["offset"], nm["expected"]) == (1, 3)
    [skip] = v["int-poll-skip"]  # 0 -> 2 jumps over the existing offset 1
    assert skip["skipped_offset"] == 1
    assert "nonmonotonic-poll" not in v and "poll-skip" not in v


@pytest.mark.spark
def test_poll_skip_nonmonotonic_send_aborted_read(zoo):
    v = view(zoo, skip_send_aborted)
    [skip] = v["poll-skip"]
    assert (skip["process"], skip["expected"], skip["offset"], skip["skipped_offset"]) == (
        "5", 2, 3, 2,
    )  # fmt: skip
    [ns] = v["nonmonotonic-send"]
    assert (ns["process"], ns["offset"], ns["prev_offset"]) == ("2", 3, 5)
    [rt] = v["realtime-send-order"]  # 21 was invoked after 20 was acknowledged at 5
    assert (rt["offset"], rt["earlier_offset"]) == (3, 5)
    [ab] = v["aborted-read"]
    assert (ab["partition"], ab["offset"], ab["value"]) == (1, 4, 22)
    assert "stale-read" not in v  # that skip is across polls, not inside one read


@pytest.mark.spark
def test_a_wide_skip_names_the_last_skipped_and_the_first_missed_record(zoo):
    v = view(zoo, wide_skip)
    [skip] = v["int-poll-skip"]
    assert (skip["expected"], skip["offset"], skip["skipped_offset"]) == (1, 5, 4)
    [stale] = v["stale-read"]
    assert (stale["kind"], stale["missed"]["offset"]) == ("skipped", 1)


@pytest.mark.spark
def test_stale_reads(zoo):
    v = view(zoo, stale)
    got = {(e["process"], e["kind"], e["missed"]["offset"]) for e in v["stale-read"]}
    assert got == {("5", "hwm-behind", 1), ("6", "skipped", 1)}


@pytest.mark.spark
def test_a_read_that_missed_two_acked_values_names_the_earlier_ack(zoo):
    v = view(zoo, two_values_missed)
    got = {(e["process"], e["kind"], e["missed"]["value"]) for e in v["stale-read"]}
    assert got == {("6", "other-value", 10), ("7", "other-value", 10), ("9", "other-value", 10)}


@pytest.mark.spark
def test_missing_final_read_makes_the_verdict_unknown(zoo, tmp_path):
    v = view(zoo, no_final_read)
    assert [r["value"] for r in v["unconfirmed"]] == [20]
    assert "unseen" not in v
    res = verdict_of(no_final_read, tmp_path)
    assert res["valid"] == "unknown" and exit_code(res) == 2
    assert any("[1]" in n for n in res["notes"])


def test_allowed_anomalies_do_not_invalidate(tmp_path):
    found = ["lost-write", "unseen"]  # the final read skips the lost offset 2: no poll-skip
    res = verdict_of(loss, tmp_path, {"checker": {"allow": found}})
    assert sorted(res["anomalies"]) == found
    assert res["valid"] is True
    partly = {"checker": {"allow": ["unseen", "int-poll-skip"]}}
    res = check_path(loss().write(tmp_path / "run2", partly), backend="reference")
    assert res["valid"] is False


def test_records_read_then_truncated_away_are_lost(zoo, tmp_path):
    v = view(zoo, read_then_truncated)
    assert [r["value"] for r in v["lost-write"]] == [11]
    assert [r["value"] for r in v["unseen"]] == [12]
    assert v["inconsistent-offsets"], "offset 1 held 11 and then 30"
    res = verdict_of(read_then_truncated, tmp_path)
    assert res["valid"] is False and res["lost"]["count"] == 2


@pytest.mark.spark
def test_offsets_learned_from_reads(zoo):
    v = view(zoo, offsets_from_reads)
    [ns] = v["nonmonotonic-send"]  # acks=0 sends of process 2, placed by reads at 2 then 1
    assert (ns["process"], ns["offset"], ns["prev_offset"]) == ("2", 1, 2)
    [rt] = v["realtime-send-order"]
    assert (rt["process"], rt["offset"], rt["earlier_offset"]) == ("2", 1, 2)
    [lost] = v["lost-write"]  # the info send, read at 3 (so committed), then gone
    assert (lost["value"], lost["offset"]) == (13, 3)
    [unseen] = v["unseen"]  # acks=0, acknowledged, never read: offset unknown
    assert (unseen["value"], unseen["offset"]) == (15, None)
    assert "int-poll-skip" not in v  # the final read's jump over the lost 13 is not a skip


@pytest.mark.spark
def test_sends_inside_one_operation(zoo):
    v = view(zoo, sends_of_one_operation)
    [skip] = v["int-send-skip"]
    assert (skip["prev_offset"], skip["offset"], skip["skipped_offset"]) == (0, 2, 1)
    [nm] = v["int-nonmonotonic-send"]
    assert (nm["prev_offset"], nm["offset"]) == (5, 4)
    # both sends of an operation are invoked before either is acknowledged: no realtime order;
    # and a value failed in partition 0 but sent to partition 1 is no aborted read there
    assert set(v) == {"int-send-skip", "int-nonmonotonic-send"}


@pytest.mark.spark
def test_realtime_send_order_across_processes(zoo):
    v = view(zoo, realtime_order)
    got = {(e["process"], e["offset"], e["earlier_offset"]) for e in v["realtime-send-order"]}
    assert got == {("2", 1, 3), ("3", 2, 3)}
    assert set(v) == {"realtime-send-order"}


@pytest.mark.spark
@pytest.mark.native
def test_native_tasks_that_do_not_fit_leave_the_check_to_the_sql_plans(zoo, spark, monkeypatch,
                                                                       capfd):
    monkeypatch.setattr(spark_native, "TASK_MEMORY_FRACTION", 0.0)  # no share fits
    _, r, ing, _ = zoo
    compiled = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    before = compiled.getCount()
    with _job_group(spark) as jobs:
        s = spark_checks.run(spark, ing.ops_path, ing.reads_path, "all", 1_000_000)
    assert "the SQL plans check instead" in capfd.readouterr().err
    # the zoo's own run of the SQL plans generated these classes: the session kept them
    # (spark.CODEGEN_CACHE; with Spark's default of 100 this run compiled some 370 again)
    assert compiled.getCount() == before
    # a history within BROADCAST_MAX rows broadcasts its small tables uncounted (before: nine
    # `count` jobs of the 57 this check ran)
    assert jobs() and not [name for name in jobs() if name.startswith("count at")]
    assert json.loads(json.dumps(s.anomalies)) == json.loads(json.dumps(r.anomalies))
    assert records(classify_unread(s)) == records(classify_unread(r))
    with pytest.raises(NativeCheckError, match="needs more than 0 bytes"):
        spark_checks.run(spark, ing.ops_path, ing.reads_path, "all", plan="native")


@pytest.mark.spark
@pytest.mark.native
def test_a_history_histcheck_refuses_is_checked_by_the_sql_plans(spark, tmp_path, capfd):  # noqa: F811
    """histcheck keeps nulls in the value space (i64::MIN stands for null) and refuses a
    history that holds that value: its Spark tasks fail, and the SQL plans check it."""
    h = loss()
    h.send(1, 0, -(2**63), 7)
    run = h.write(tmp_path / "run")
    ing = ingest(run / "history.jsonl", run / "parquet")
    s = spark_checks.run(spark, ing.ops_path, ing.reads_path, "all", 1_000_000)
    assert "past this checker's range" in capfd.readouterr().err
    r = reference.run(ing.ops_path, ing.reads_path, "all", 1_000_000)
    assert json.loads(json.dumps(s.anomalies)) == json.loads(json.dumps(r.anomalies))
    assert records(classify_unread(s)) == records(classify_unread(r))
    assert -(2**63) in set(classify_unread(s)["value"])  # never read: a loss, found
    with pytest.raises(NativeCheckError, match="past this checker's range"):
        spark_checks.run(spark, ing.ops_path, ing.reads_path, "all", plan="native")


@pytest.mark.spark
@pytest.mark.native
def test_a_failed_native_task_is_one_line_not_a_java_trace(tmp_path):
    """In a fresh process (its JVM's stderr is the one captured here): the task that
    histcheck refuses is reported by its reason alone, without Spark's stack trace. The
    native plan alone: the SQL plans that would take over are the test above's, and would
    add 40-60 s of a cold JVM's query compiling to this one."""
    h = loss()
    h.send(1, 0, -(2**63), 7)
    run = h.write(tmp_path / "run")
    ing = ingest(run / "history.jsonl", run / "parquet")
    script = ("import sys; from pathlib import Path; from checkers import spark_checks; "
              "from checkers.spark import get_session; "
              "from checkers.native_checks import NativeCheckError\n"
              "try:\n"
              "    spark_checks.run(get_session('local[1]'), Path(sys.argv[1]), "
              "Path(sys.argv[2]), 'all', plan='native')\n"
              "except NativeCheckError as e:\n"
              "    sys.exit(f'refused: {e}')\n")
    done = subprocess.run([sys.executable, "-c", script, str(ing.ops_path), str(ing.reads_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "refused: " in done.stderr and "past this checker's range" in done.stderr
    assert "at org.apache.spark" not in done.stderr
