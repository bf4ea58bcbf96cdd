"""Every checker reads integers exactly: values and offsets near and past 2^53, negative, at
the int64 extremes, and values that differ only past 2^53 get the same verdict and the same
anomaly counts from the pandas reference, histcheck and Spark (both of its plans). An offset
of int64's maximum, which would make offset + 1 wrap around in every backend, is refused. Through
float64 (pandas' type for an integer column with a null), 2^53 + 1 reads as 2^53: a record
read back would be lost and two distinct values a duplicate."""

from __future__ import annotations

import json

import pytest
from histories import History, counts

from checkers import native_checks, reference, spark_checks
from checkers.check import check_path
from checkers.ingest import ingest
from checkers.verdict import CheckOutput, classify_unread, records

B = 2**53
MAX, MIN = 2**63 - 1, -(2**63)
UNCAPPED = 1_000_000

# The anomalies the hostile history holds, no more: p1's duplicate, p3's loss, and p4's poll
# that skips a record acknowledged before it began (a skip within one poll, and a stale read).
EXPECTED = {"duplicate": 1, "lost-write": 1, "int-poll-skip": 1, "stale-read": 1}

pytestmark = pytest.mark.native


def hostile(low: int = MIN + 1) -> History:
    """The history; `low` is its lowest value (histcheck takes int64's minimum for null, so it
    refuses that one value: see test_every_backend_gives_the_same_verdict)."""
    h = History()
    # p0: distinct values at offsets past 2^53, the extremes among them; all read back
    values = [B, B + 1, MAX, low, -B - 1, -B]
    for i, v in enumerate(values):
        h.send(0, 0, v, B + i)
    h.final(9, 0, [[B + i, v] for i, v in enumerate(values)])
    # p1: a true duplicate (-2^53 - 1 at two offsets) beside a value it differs from past 2^53
    h.send(1, 1, -B - 3, 5)
    h.send(1, 1, -B - 2, 6)
    h.final(9, 1, [[5, -B - 3], [6, -B - 2], [7, -B - 3]])
    # p2: offsets at the top of int64, the high watermark at its maximum
    h.send(2, 2, 7, MAX - 2)
    h.send(2, 2, 8, MAX - 1)
    h.final(9, 2, [[MAX - 2, 7], [MAX - 1, 8]], hwm=MAX)
    # p3: a true loss in the middle of records past 2^53; an info send learns its offset
    h.send(3, 3, B + 5, B + 5)
    h.send(3, 3, B + 6, B + 6)
    h.send(3, 3, B + 7, type="info")
    h.final(9, 3, [[B + 5, B + 5], [B + 7, B + 7]])
    # p4: a poll that skips one known record, past 2^53
    for i in (1, 2, 3):
        h.send(4, 4, 40 + i, B + i)
    h.poll(8, 4, [[B + 1, 41], [B + 3, 43]], from_offset=B + 1)
    h.final(9, 4, [[B + i, 40 + i] for i in (1, 2, 3)])
    return h


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    run = hostile().write(tmp_path_factory.mktemp("hostile") / "run")
    return ingest(run / "history.jsonl", run / "parquet")


def _counts(out: CheckOutput) -> dict[str, int]:
    found = {name: n for name, (n, _) in out.anomalies.items() if n}
    kinds = classify_unread(out)["kind"].value_counts().to_dict()
    return found | {k: int(n) for k, n in kinds.items() if k != "unconfirmed"}


def _same(a: CheckOutput, b: CheckOutput) -> None:
    assert json.loads(json.dumps(a.anomalies)) == json.loads(json.dumps(b.anomalies))
    assert records(classify_unread(a)) == records(classify_unread(b))
    assert a.complete_partitions == b.complete_partitions
    assert a.stats == b.stats


def test_the_reference_and_histcheck_read_integers_exactly(tables):
    r = reference.run(tables.ops_path, tables.reads_path, "all", UNCAPPED)
    n = native_checks.run(tables.ops_path, tables.reads_path, "all", UNCAPPED)
    assert _counts(n) == EXPECTED
    assert _counts(r) == EXPECTED
    _same(r, n)
    lost = records(classify_unread(r))
    assert [(u["value"], u["offset"]) for u in lost] == [(B + 6, B + 6)]


@pytest.mark.spark
@pytest.mark.parametrize("plan", ["sql", "native"])
def test_spark_reads_integers_exactly_as_the_reference(spark, tables, plan):
    s = spark_checks.run(spark, tables.ops_path, tables.reads_path, "all", UNCAPPED, plan=plan)
    r = reference.run(tables.ops_path, tables.reads_path, "all", UNCAPPED)
    assert _counts(s) == EXPECTED
    _same(s, r)


@pytest.mark.spark
@pytest.mark.parametrize("low", [MIN + 1, MIN])
def test_every_backend_gives_the_same_verdict(spark, tmp_path, capsys, low):
    """Whole checks, verdict and all. With int64's minimum among the values histcheck refuses
    the history (that value is its null) and the reference checks instead, as always when
    histcheck cannot: the verdict is the same."""
    verdicts = {}
    for backend in ("reference", "native", "spark"):
        run = hostile(low).write(tmp_path / backend)
        results = check_path(run, backend=backend, spark_min_ops=0)
        verdicts[backend] = (results["valid"], counts(results), results["lost"]["count"])
    assert all(v == (False, EXPECTED, 1) for v in verdicts.values()), verdicts
    refused = "the reference checks instead" in capsys.readouterr().err
    assert refused == (low == MIN)


def top_of_int64() -> History:
    """Offsets at the top of what a log holds (int64's maximum less one: the log end after
    it is the maximum): a poll that goes back from there inside itself, one that skips a
    known record, and a final read that ends at the last offset."""
    h = History()
    for i, v in enumerate((1, 2, 3)):
        h.send(0, 0, v, MAX - 3 + i)  # offsets MAX-3, MAX-2, MAX-1
    h.poll(8, 0, [[MAX - 1, 3], [MAX - 3, 1]], from_offset=MAX - 1)  # back, inside one poll
    h.poll(7, 0, [[MAX - 3, 1], [MAX - 1, 3]], from_offset=MAX - 3)  # skips MAX-2
    h.final(9, 0, [[MAX - 3 + i, v] for i, v in enumerate((1, 2, 3))], hwm=MAX)
    return h


@pytest.mark.spark
def test_offsets_at_the_top_of_int64_get_one_verdict_from_every_backend(spark, tmp_path):
    """histcheck, pandas and Spark compute a read's next offset (offset + 1) in 64 bits: at
    the last offset a log can hold it is int64's maximum, exactly, on each of them."""
    verdicts = {}
    for backend in ("reference", "native", "spark"):
        run = top_of_int64().write(tmp_path / backend)
        results = check_path(run, backend=backend, spark_min_ops=0)
        verdicts[backend] = (results["valid"], counts(results), results["lost"]["count"])
    # the skip of MAX-2 is a stale read as well: that record was acknowledged before the poll
    expected = (False, {"int-nonmonotonic-poll": 1, "int-poll-skip": 1, "stale-read": 1}, 0)
    assert all(v == expected for v in verdicts.values()), verdicts


@pytest.mark.parametrize("where", ["record", "ack"])
def test_an_offset_of_int64_max_is_refused_by_every_backend(tmp_path, where):
    """No log holds a record at int64's maximum (the log end after it would be 2^63): it
    would make offset + 1 wrap around to int64's minimum in every backend (histcheck's
    release build, pandas and Spark alike), so the history is refused, one line, before any
    backend runs."""
    h = History()
    h.send(0, 0, 1, MAX if where == "ack" else MAX - 1)
    h.final(9, 0, [[MAX, 1] if where == "record" else [MAX - 1, 1]], hwm=MAX)
    line = 2 if where == "ack" else 4
    for backend in ("reference", "native", "spark"):
        results = check_path(h.write(tmp_path / backend), backend=backend, spark_min_ops=0)
        assert results["valid"] == "unknown" and len(results["errors"]) == 1, results
        assert f"history.jsonl:{line}: " in results["errors"][0]
        assert str(MAX - 1) in results["errors"][0]  # the range it gives
