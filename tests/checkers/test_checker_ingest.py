"""history.jsonl -> Parquet: streaming, corrupt and truncated lines (no Spark needed)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from histories import History, merge
from test_checker_anomalies import SCENARIOS

from checkers import ingest as ingest_mod
from checkers import native_ingest
from checkers.check import check_path
from checkers.exitcodes import exit_code
from checkers.ingest import HistoryError, ingest


def small() -> History:
    h = History()
    h.send(1, 0, 10, 0)
    h.send(1, 0, 11, 1)
    h.nemesis("start-kill", {"nodes": ["n2"]})
    h.final(9, 0, [(0, 10), (1, 11)])
    return h


def test_tables_hold_every_op_and_record(tmp_path):
    run = small().write(tmp_path)
    res = ingest(run / "history.jsonl", tmp_path / "pq")
    ops = pq.read_table(res.ops_path).to_pylist()
    reads = pq.read_table(res.reads_path).to_pylist()
    # clustered: the nemesis op (no partition) first, then partition 0 in history order
    assert [o["index"] for o in ops] == [4, 0, 1, 2, 3, 5, 6]
    ops.sort(key=lambda o: o["index"])
    ack = ops[1]
    assert (ack["type"], ack["offset"], ack["invoke_index"], ack["process"]) == ("ok", 0, 0, "1")
    assert json.loads(ops[4]["value_json"]) == {"nodes": ["n2"]}
    assert [(r["offset"], r["value"], r["pos"], r["from_offset"]) for r in reads] == [
        (0, 10, 0, 0), (1, 11, 1, 0),
    ]  # fmt: skip
    assert reads[0]["invoke_time"] == ops[5]["time"]


def _partitions_by_row_group(path: Path) -> list[tuple[int | None, int | None, int]]:
    """Each row group's partition statistics: (min, max, rows)."""
    meta = pq.ParquetFile(path).metadata
    col = meta.schema.names.index("partition")
    out = []
    for i in range(meta.num_row_groups):
        rg = meta.row_group(i)
        st = rg.column(col).statistics
        assert st is not None and st.has_null_count, (path.name, i)
        lo, hi = (st.min, st.max) if st.has_min_max else (None, None)
        if st.null_count:
            assert (lo, hi) == (None, None), (path.name, i, "partitioned and unpartitioned rows")
        out.append((lo, hi, rg.num_rows))
    return out


def _assert_clustered(res, row_group: int) -> None:
    """Each row group of both tables holds one partition (or only rows without one), at most
    `row_group` rows, and each partition's rows come in history order."""
    for path in (res.ops_path, res.reads_path):
        groups = _partitions_by_row_group(path)
        assert all(lo == hi and n <= row_group for lo, hi, n in groups), (path.name, groups)
        t = pq.read_table(path, columns=["partition", "index"]).to_pylist()
        for p in {r["partition"] for r in t}:
            idx = [r["index"] for r in t if r["partition"] == p]
            assert idx == sorted(idx), (path.name, p)


@pytest.mark.parametrize("native", [pytest.param(True, marks=pytest.mark.native), False])
def test_streams_in_bounded_row_groups_of_one_partition(tmp_path, monkeypatch, native):
    """Both paths buffer per partition and write row groups of one partition: a partition's
    buffer at ROW_GROUP rows, every buffer at BUFFERED rows together."""
    monkeypatch.setattr(ingest_mod, "ROW_GROUP", 10)
    monkeypatch.setattr(ingest_mod, "BUFFERED", 25)
    h = History()
    for i in range(100):
        h.send(i % 2, i % 3, i, i // 3)
    h.nemesis("start-kill", {"nodes": ["n2"]})
    h.final(9, 1, [(o, v) for v, o in zip(range(1, 100, 3), range(40), strict=False)])
    run = h.write(tmp_path)
    res = ingest(run / "history.jsonl", tmp_path / "pq", native=native)
    assert res.path == "native" or not native
    # 100 sends (invoke, ok) round the 3 partitions: the buffers fill together, so all are
    # written each time 25 are buffered (groups of 8 or 9 rows); the nemesis op alone
    groups = _partitions_by_row_group(res.ops_path)
    assert sum(n for *_, n in groups) == 203 and len(groups) >= 203 // 9
    assert [n for lo, _, n in groups if lo is None] == [1]
    # the final read of 33 records in one line: partition 1's buffer full three times
    assert _partitions_by_row_group(res.reads_path) == [(1, 1, 10)] * 3 + [(1, 1, 3)]
    _assert_clustered(res, 10)


def test_corrupt_middle_line_is_reported_with_its_line_number(tmp_path):
    run = small().write(tmp_path)
    lines = (run / "history.jsonl").read_text().splitlines(keepends=True)
    lines[2] = '{"index": 2, "time": 3000000, "process": 1, "type": "inv\n'
    lines[3] = lines[3].replace('"partition": 0', '"partition": "zero"')
    (run / "history.jsonl").write_text("".join(lines))
    with pytest.raises(HistoryError) as e:
        ingest(run / "history.jsonl", tmp_path / "pq")
    assert e.value.total == 2
    assert "history.jsonl:3: invalid JSON (" in e.value.errors[0]
    assert "history.jsonl:4: 'partition' must be an integer" in e.value.errors[1]
    res = check_path(run)  # fails before any Spark work
    assert res["valid"] == "unknown" and exit_code(res) == 3  # an error, not a verdict
    assert json.loads((run / "results.json").read_text())["errors"] == e.value.errors
    cli = subprocess.run(
        [sys.executable, "-m", "checkers", str(run)], capture_output=True, text=True, timeout=120
    )
    assert cli.returncode == 3
    assert "history.jsonl:3: invalid JSON" in cli.stderr


def test_truncated_last_line_is_a_note(tmp_path):
    run = small().write(tmp_path)
    with open(run / "history.jsonl", "a") as fh:
        fh.write('{"index": 7, "time": 8000000, "process": 1, "ty')
    res = ingest(run / "history.jsonl", tmp_path / "pq")
    assert res.ops == 7
    assert len(res.notes) == 1 and "history.jsonl:8: last line is truncated" in res.notes[0]


def test_complete_but_invalid_last_line_is_an_error(tmp_path):
    run = small().write(tmp_path)
    with open(run / "history.jsonl", "a") as fh:
        fh.write('{"index": 7, "time": "late", "process": 1, "type": "invoke", "f": "send"}')
    with pytest.raises(HistoryError, match="history.jsonl:8: 'time' must be an integer"):
        ingest(run / "history.jsonl", tmp_path / "pq")


def _same_tables(native, exact) -> None:
    for a, b in ((native.ops_path, exact.ops_path), (native.reads_path, exact.reads_path)):
        assert pq.read_table(a).equals(pq.read_table(b)), a.name


@pytest.mark.native
def test_native_and_exact_paths_write_the_same_tables(tmp_path):
    """Every anomaly scenario at once (Jepsen operations of several sends, reads from
    offsets, final reads, info sends, nemesis ops): the native tables are the exact ones."""
    run = merge([s() for s in SCENARIOS]).write(tmp_path / "zoo")
    native = ingest(run / "history.jsonl", tmp_path / "native")
    assert native.path == "native"
    _same_tables(native, ingest(run / "history.jsonl", tmp_path / "exact", native=False))


@pytest.mark.native
def test_native_path_on_a_workload_shaped_history(tmp_path):
    """The benchmark's generator: producers, tailing consumers, final reads of whole
    partitions, injected losses and stale reads; bigger than one row group."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from checker_throughput import generate

    generate(tmp_path / "history.jsonl", 300_000)
    native = ingest(tmp_path / "history.jsonl", tmp_path / "native")
    assert native.path == "native" and native.ops >= 300_000 and native.reads > 500_000
    _assert_clustered(native, ingest_mod.ROW_GROUP)
    _same_tables(native, ingest(tmp_path / "history.jsonl", tmp_path / "exact", native=False))


@pytest.mark.native
def test_both_paths_cluster_alike_when_buffers_fill(tmp_path, monkeypatch):
    """Small row groups and buffers, so that both of the clustering's rules (a partition's
    buffer full, all buffers full) fire thousands of times, in the ops and in the reads (a
    final read of a whole partition, larger than any buffer, among them): the native and
    exact tables are still the same, row for row."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from checker_throughput import generate

    monkeypatch.setattr(ingest_mod, "ROW_GROUP", 1000)
    monkeypatch.setattr(ingest_mod, "BUFFERED", 2500)
    generate(tmp_path / "history.jsonl", 60_000)
    native = ingest(tmp_path / "history.jsonl", tmp_path / "native")
    assert native.path == "native"
    _assert_clustered(native, 1000)
    _same_tables(native, ingest(tmp_path / "history.jsonl", tmp_path / "exact", native=False))


@pytest.mark.native
def test_a_broken_first_line_of_a_big_history_is_refused_at_once(tmp_path):
    """More history than the native reader's stages hold (a few 4 MB blocks): refusing its
    first line must stop the reader too, not leave it waiting on a full queue for ever (it
    did: `harness check` of a big corrupt history hung)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from checker_throughput import generate

    big = tmp_path / "big.jsonl"
    generate(big, 600_000)  # about 95 MB
    history = tmp_path / "history.jsonl"
    with open(history, "wb") as out, open(big, "rb") as src:
        out.write(b'{"index": 0, "time": "late", "process": 1, "type": "invoke", "f": "send"}\n')
        shutil.copyfileobj(src, out)
    done = subprocess.run([native_ingest.binary(), str(history), str(tmp_path / "o.parquet"),
                           str(tmp_path / "r.parquet")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == native_ingest.UNSURE and "line 1: 'time'" in done.stderr


@pytest.mark.native
def test_a_torn_last_line_is_read_natively_and_is_the_same_note(tmp_path):
    run = small().write(tmp_path)
    with open(run / "history.jsonl", "a") as fh:
        fh.write('{"index": 7, "time": 8000000, "process": 1, "ty')
    native = ingest(run / "history.jsonl", tmp_path / "native")
    exact = ingest(run / "history.jsonl", tmp_path / "exact", native=False)
    assert native.path == "native" and native.ops == 7
    assert native.notes == exact.notes
    assert "history.jsonl:8: last line is truncated (invalid JSON (" in native.notes[0]
    _same_tables(native, exact)


@pytest.mark.native
def test_a_last_line_only_python_reads_takes_the_exact_path(tmp_path):
    """NaN is JSON to Python, not to the native reader: the last line, without its newline,
    is then no torn tail but a line the exact path must judge."""
    run = small().write(tmp_path)
    with open(run / "history.jsonl", "a") as fh:
        fh.write('{"index": 7, "time": 8000000, "process": "nemesis", "type": "info", '
                 '"f": "start-x", "value": NaN}')
    res = ingest(run / "history.jsonl", tmp_path / "pq")
    assert res.path.startswith("the native reader took the last line for a torn one")
    assert res.ops == 8 and res.notes == []


@pytest.mark.native
def test_a_whole_partition_in_one_line_is_read_natively(tmp_path):
    """A final read holds a whole partition in one line: 2.5M records, about 40 MB."""
    h = History()
    h.final(9, 0, [(o, o) for o in range(2_500_000)])
    run = h.write(tmp_path)
    res = ingest(run / "history.jsonl", tmp_path / "pq")
    assert res.path == "native" and res.reads == 2_500_000
    reads = pq.read_table(res.reads_path, columns=["offset", "prev_offset"])
    assert reads["offset"][-1].as_py() == 2_499_999 and reads["prev_offset"][-1].as_py() == 2_499_998
    assert pq.ParquetFile(res.reads_path).metadata.num_row_groups > 1  # in bounded row groups


def test_a_line_past_the_limit_takes_the_exact_path(tmp_path, monkeypatch):
    monkeypatch.setattr(ingest_mod, "MAX_LINE_BYTES", 1000)
    h = small()
    h.final(9, 1, [(o, o) for o in range(200)])
    run = h.write(tmp_path)
    with pytest.raises(HistoryError, match="line longer than 1000 bytes"):
        ingest(run / "history.jsonl", tmp_path / "pq")


def test_without_the_native_reader_the_exact_path_reads(tmp_path, monkeypatch):
    monkeypatch.setattr(native_ingest, "binary", lambda: None)
    res = ingest(small().write(tmp_path) / "history.jsonl", tmp_path / "pq")
    assert res.path == "histingest is not built (make bootstrap builds it)" and res.ops == 7
