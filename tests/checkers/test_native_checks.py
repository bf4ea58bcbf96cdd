"""The native checks (checkers/native_checks.py, the histcheck program) are held to the pandas
reference's exact results: every anomaly scenario at once, a workload-shaped history with
injected anomalies, and the same history checked in shares of its partitions and merged (as
the Spark checker's tasks do)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
from histories import History, merge
from test_checker_anomalies import SCENARIOS

from checkers import native_checks, reference
from checkers.ingest import ingest
from checkers.verdict import CheckOutput, classify_unread, records

pytestmark = pytest.mark.native
UNCAPPED = 1_000_000


def _same(n: CheckOutput, r: CheckOutput) -> None:
    assert json.loads(json.dumps(n.anomalies)) == json.loads(json.dumps(r.anomalies))
    assert records(classify_unread(n)) == records(classify_unread(r))
    assert n.complete_partitions == r.complete_partitions
    assert n.stats == r.stats


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    run = merge([s() for s in SCENARIOS]).write(tmp_path_factory.mktemp("zoo") / "zoo")
    return ingest(run / "history.jsonl", run / "parquet")


def test_native_and_reference_agree_exactly_on_every_scenario(zoo):
    n = native_checks.run(zoo.ops_path, zoo.reads_path, "all", UNCAPPED)
    r = reference.run(zoo.ops_path, zoo.reads_path, "all", UNCAPPED)
    _same(n, r)
    found = {name for name, (k, _) in n.anomalies.items() if k}
    assert len(found) >= 10  # the zoo holds nearly every anomaly


@pytest.mark.parametrize("k", [2, 3, 7])
def test_shares_of_the_partitions_merge_to_the_whole(zoo, k):
    shares = [native_checks.check_share(zoo.ops_path, zoo.reads_path, "all", 3, (r, k),
                                        threads=1) for r in range(k)]
    whole = native_checks.check_share(zoo.ops_path, zoo.reads_path, "all", 3)
    assert native_checks.merge(shares, 3) == whole
    r = reference.run(zoo.ops_path, zoo.reads_path, "all", 3)
    _same(native_checks.to_output(native_checks.merge(shares, 3)), r)


def test_a_missing_acknowledgement_is_a_loss_the_native_checks_find(zoo, tmp_path):
    """The must-fail twin: delete every read of one acked record and the native checks report
    it as lost, as the reference does."""
    ops = pd.read_parquet(zoo.ops_path)
    reads = pd.read_parquet(zoo.reads_path)
    acked = ops[(ops["f"] == "send") & (ops["type"] == "ok") & ops["offset"].notna()]
    read_values = set(zip(reads["partition"], reads["value"], strict=True))
    target = next(row for row in acked.itertuples()
                  if (row.partition, row.value) in read_values)
    kept = reads[~((reads["partition"] == target.partition) & (reads["value"] == target.value))]
    kept.to_parquet(tmp_path / "reads.parquet", index=False)
    before = native_checks.run(zoo.ops_path, zoo.reads_path, "all", UNCAPPED)
    after = native_checks.run(zoo.ops_path, tmp_path / "reads.parquet", "all", UNCAPPED)
    assert len(after.unread) == len(before.unread) + 1
    assert target.value in set(after.unread["value"]) - set(before.unread["value"])
    _same(after, reference.run(zoo.ops_path, tmp_path / "reads.parquet", "all", UNCAPPED))


def _retried_and_unknown(retried: bool) -> History:
    """A send of 22 that failed, then (when `retried`) sent again and acked; two sends of
    unknown outcome (info), 30 read later and 31 never."""
    h = History()
    h.send(1, 0, 20, 0)
    h.send(3, 0, 22, type="fail", error="NOT_LEADER")
    if retried:
        h.send(3, 0, 22, 1)
    h.send(4, 0, 30, type="info")
    h.send(5, 0, 31, type="info")
    h.final(9, 0, [(0, 20), (1, 22), (2, 30)])
    return h


@pytest.mark.parametrize("retried", [True, False])
def test_a_failed_value_sent_again_is_no_aborted_read_and_info_sends_read_count(
        tmp_path, retried):
    """A failed send's value read is an aborted read only when no send of it completed (the
    twin: without the retry it is one); an info send counts as read when its value was."""
    run = _retried_and_unknown(retried).write(tmp_path / "run")
    ing = ingest(run / "history.jsonl", run / "parquet")
    n = native_checks.run(ing.ops_path, ing.reads_path, "all", UNCAPPED)
    _same(n, reference.run(ing.ops_path, ing.reads_path, "all", UNCAPPED))
    assert n.anomalies.get("aborted-read", (0, []))[0] == (0 if retried else 1)
    assert n.stats["info_sends_read"] == 1


@pytest.mark.parametrize("threads, at_once", [(2, 1), (3, 2), (4, 1)])
def test_a_partition_given_spare_threads_checks_as_on_one(zoo, threads, at_once):
    """With threads to spare (more threads than partitions at once), a partition's two
    tables load at once and its checks run in two groups: the output is the one thread's."""
    one = native_checks.check_share(zoo.ops_path, zoo.reads_path, "all", UNCAPPED, threads=1)
    spare = native_checks.check_share(zoo.ops_path, zoo.reads_path, "all", UNCAPPED,
                                      threads=threads, at_once=at_once)
    assert spare == one


def test_a_missing_acknowledgement_is_found_on_spare_threads_too(zoo, tmp_path):
    """The twin of the test above: on spare threads the check still tells a history with a
    lost record from the one without (the same loss as the must-fail twin above finds)."""
    ops = pd.read_parquet(zoo.ops_path)
    reads = pd.read_parquet(zoo.reads_path)
    acked = ops[(ops["f"] == "send") & (ops["type"] == "ok") & ops["offset"].notna()]
    target = acked[acked["value"].isin(reads["value"])].iloc[0]
    kept = reads[~((reads["partition"] == target["partition"])
                   & (reads["value"] == target["value"]))]
    kept.to_parquet(tmp_path / "reads.parquet", index=False)
    whole = native_checks.check_share(zoo.ops_path, zoo.reads_path, "all", UNCAPPED,
                                      threads=2, at_once=1)
    lost = native_checks.check_share(zoo.ops_path, tmp_path / "reads.parquet", "all",
                                     UNCAPPED, threads=2, at_once=1)
    assert len(lost["unread"]) == len(whole["unread"]) + 1
    assert lost == native_checks.check_share(zoo.ops_path, tmp_path / "reads.parquet", "all",
                                             UNCAPPED, threads=1)


def test_text_without_a_dictionary_or_of_no_type_checks_alike(zoo, tmp_path):
    """histcheck reads text columns as dictionaries (each distinct text interned once a
    batch): tables whose text is stored plain, or whose all-null text column has no type,
    check as tables with dictionaries do."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ops, reads = pq.read_table(zoo.ops_path), pq.read_table(zoo.reads_path)
    acks = ops.schema.get_field_index("acks")  # every send at the default acks, then
    typed = ops.set_column(acks, "acks", pa.nulls(len(ops), pa.string()))
    untyped = ops.set_column(acks, "acks", pa.nulls(len(ops), pa.null()))
    pq.write_table(typed, tmp_path / "ops-dict.parquet")
    pq.write_table(untyped, tmp_path / "ops.parquet", use_dictionary=False)
    pq.write_table(reads, tmp_path / "reads.parquet", use_dictionary=False)
    with_dict = native_checks.check_share(tmp_path / "ops-dict.parquet", zoo.reads_path,
                                          "all", UNCAPPED)
    plain = native_checks.check_share(tmp_path / "ops.parquet", tmp_path / "reads.parquet",
                                      "all", UNCAPPED)
    assert with_dict["stats"]["reads"] == len(reads)
    with_dict.pop("row_groups_read")
    plain.pop("row_groups_read")
    assert plain == with_dict


def test_native_checks_find_the_injected_anomalies_of_a_workload_shaped_history(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from checker_throughput import generate, summary

    g = generate(tmp_path / "history.jsonl", 120_000)
    ing = ingest(tmp_path / "history.jsonl", tmp_path / "pq")
    n = native_checks.run(ing.ops_path, ing.reads_path, "all")
    _same(n, reference.run(ing.ops_path, ing.reads_path, "all"))
    assert summary(n) == g.injected


def test_a_share_past_its_memory_limit_stops_and_checks_nothing(zoo):
    with pytest.raises(native_checks.ShareTooBigError, match="needs more than 1000 bytes") as e:
        native_checks.check_share(zoo.ops_path, zoo.reads_path, "all", 3, (1, 2),
                                  memory_limit=1000)
    assert e.value.share == (1, 2)
    # the zoo's rows take some tens of kB by the estimate
    whole = native_checks.check_share(zoo.ops_path, zoo.reads_path, "all", 3)
    assert native_checks.check_share(zoo.ops_path, zoo.reads_path, "all", 3,
                                     memory_limit=10**7) == whole


def test_the_share_too_big_is_read_back_from_a_spark_tasks_failure_text():
    """A Spark task's failure reaches the driver as text (spark_native._run rebuilds the
    error from it): the share it names is read back, and none from text naming none."""
    told = native_checks.ShareTooBigError(
        "checkers.native_checks.ShareTooBigError: share 3/16 needs more than 5 bytes")
    assert told.share == (3, 16)
    assert native_checks.ShareTooBigError("histcheck stopped: out of memory").share is None


def test_tables_it_cannot_read_are_an_error_not_a_verdict(tmp_path):
    bad = tmp_path / "ops.parquet"
    bad.write_bytes(b"PAR1 this is not a table")
    with pytest.raises(native_checks.NativeCheckError, match="not a Parquet table"):
        native_checks.run(bad, bad, "all")
