"""The native reader (native/histingest) against the exact path, on histories written every
way JSON allows: if the native reader converts a history, the exact path must convert it to
the same tables; if the exact path refuses it, the native reader must have refused it too.

Each history is the same small run (sends, a Jepsen operation of two parts, a nemesis op, a
final read), each of its fields written in one of several spellings that Python reads alike
(escapes, whitespace, an integer process, key order, unknown keys) or reads otherwise (a
float, a string where an integer belongs, a missing field, a duplicate key, -0, integers past
64 bits). A must-fail twin checks that the comparison sees a difference when there is one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkers import ingest as ingest_mod
from checkers.ingest import MAX_LINE_BYTES, HistoryError, ingest
from checkers.native_ingest import NativeUnsure, native_ingest

pytestmark = pytest.mark.native

BASE: list[dict] = [
    {"index": 0, "time": 10, "process": 0, "type": "invoke", "f": "send", "partition": 0,
     "value": 5},
    {"index": 1, "time": 20, "process": 0, "type": "ok", "f": "send", "partition": 0,
     "value": 5, "offset": 0, "node": "n2", "epoch": 1, "acks": "all"},
    {"index": 2, "time": 25, "process": "nemesis", "type": "info", "f": "start-kill",
     "value": {"nodes": ["n2"], "at": 3}},
    {"index": 3, "time": 30, "process": 2, "type": "invoke", "f": "send", "partition": 1,
     "value": 6, "txn": 3},
    {"index": 4, "time": 30, "process": 2, "type": "info", "f": "send", "partition": 1,
     "value": 6, "txn": 3, "error": "timeout"},
    {"index": 5, "time": 40, "process": 1, "type": "invoke", "f": "final-poll",
     "partition": 0, "offset": 0},
    {"index": 6, "time": 50, "process": 1, "type": "ok", "f": "final-poll", "partition": 0,
     "offset": 0, "records": [[0, 5], [1, -7]], "hwm": 2},
]  # fmt: skip


def _escaped(s: str) -> str:
    """The same string with every character written as a \\u escape."""
    return '"' + "".join(f"\\u{ord(c):04x}" for c in s) + '"'


# Spellings of one field's value, as JSON text: alike to Python, or not.
def _spellings(key: str, v) -> st.SearchStrategy[str]:
    plain = json.dumps(v, separators=(",", ":"))
    alike = [plain, " " + plain + " ", json.dumps(v, indent=1, ensure_ascii=False)]
    if isinstance(v, str):
        alike.append(_escaped(v))
    otherwise = ["null", "1.5", "true", '"x"', "[]", "{}", "18446744073709551616", "-0",
                 "-1", "1e3", '"\\ud800"']
    if isinstance(v, int) and not isinstance(v, bool):
        alike.append(json.dumps(str(v)) if key in ("process", "node", "error") else plain)
    if key == "value" and isinstance(v, dict):
        alike += ['{"nodes":["n2"],"at":3,"nodes":["n3"]}',  # a duplicate key: the last wins
                  '{"nodes":["\\u00e9\\n\\t"],"at":2e0}', '{"at":123456789012345678901234567890}',
                  '{"ünïcödé":"🙂","esc":"\\"\\\\\\/\\b\\f"}']
    return st.sampled_from(alike + otherwise)


@st.composite
def histories(draw) -> list[str]:
    lines = []
    for op in BASE:
        fields = list(op.items())
        changed = draw(st.lists(st.sampled_from(range(len(fields))), max_size=2, unique=True))
        texts = [(k, draw(_spellings(k, v)) if i in changed else json.dumps(v))
                 for i, (k, v) in enumerate(fields)]
        if draw(st.booleans()):
            texts.append((draw(st.sampled_from(["extra", "value2", "Records"])),
                          draw(st.sampled_from(['[1.5, {"a": [null]}]', "1e400", '"\\u00ff"']))))
        if draw(st.integers(0, 9)) == 0 and len(texts) > 3:
            texts.pop(draw(st.integers(0, len(texts) - 1)))  # a field gone
        order = draw(st.permutations(texts))
        lines.append("{" + ", ".join(f'"{k}": {t}' for k, t in order) + "}")
    return lines


# (ROW_GROUP, BUFFERED) of the tables' clustering by partition, small (checkers/ingest.py)
TINY_LAYOUT = (3, 7)


def _write(tmp: Path, lines: list[str]) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "history.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _tables(folder: Path) -> tuple:
    return tuple(pq.read_table(folder / f"{name}.parquet") for name in ("ops", "reads"))


def _compare(tmp: Path, lines: list[str]) -> str:
    """What the two paths made of `lines`: 'both', 'exact only', 'neither'; fails if the
    native reader converted what the exact path refuses or to other tables."""
    history = _write(tmp, lines)
    (tmp / "native").mkdir()
    try:
        native_ingest(history, tmp / "native" / "ops.parquet", tmp / "native" / "reads.parquet",
                      MAX_LINE_BYTES, 2, TINY_LAYOUT)
        native = True
    except NativeUnsure:
        native = False
    try:
        with pytest.MonkeyPatch.context() as mp:  # row groups of a few rows: the clustering
            mp.setattr(ingest_mod, "ROW_GROUP", TINY_LAYOUT[0])  # rules fire in most examples
            mp.setattr(ingest_mod, "BUFFERED", TINY_LAYOUT[1])
            ingest(history, tmp / "exact", 2, native=False)
    except HistoryError:
        assert not native, "the native reader converted a history the exact path refuses"
        return "neither"
    if native:
        for a, b in zip(_tables(tmp / "native"), _tables(tmp / "exact"), strict=True):
            assert a.equals(b), (a.to_pylist(), b.to_pylist())
        return "both"
    return "exact only"


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(lines=histories())
def test_the_native_reader_converts_as_the_exact_path_or_refuses(tmp_path_factory, lines):
    _compare(tmp_path_factory.mktemp("h"), lines)


def test_the_spellings_exercise_both_outcomes(tmp_path):
    """Not a vacuous property: the plain history is converted natively, and each kind of
    spelling that Python reads alike keeps it native."""
    plain = [json.dumps(op) for op in BASE]
    assert _compare(tmp_path / "a", plain) == "both"
    escaped = [line.replace('"final-poll"', _escaped("final-poll")) for line in plain]
    assert _compare(tmp_path / "b", escaped) == "both"
    dup = plain[:2] + ['{"index": 2, "time": 25, "process": "nemesis", "type": "info", '
                       '"f": "start-kill", "value": {"a": 1, "b": 2, "a": 3}}'] + plain[3:]
    assert _compare(tmp_path / "c", dup) == "both"
    huge = plain[:2] + ['{"index": 2, "time": 25, "process": "nemesis", "type": "info", '
                        '"f": "start-x", "value": [123456789012345678901234567890]}'] + plain[3:]
    assert _compare(tmp_path / "d", huge) == "both"
    assert _compare(tmp_path / "e", plain[:1] + [plain[1].replace('"offset": 0', '"offset": 0.0')]
                    + plain[2:]) == "neither"


def test_a_difference_in_the_tables_is_seen(tmp_path, monkeypatch):
    """The must-fail twin: a native table that differs from the exact one fails _compare."""
    real = native_ingest

    def off_by_one(history, ops, reads, max_line, partitions, layout):
        lines = history.read_text().splitlines()
        lines[1] = lines[1].replace('"epoch": 1', '"epoch": 2')
        other = history.with_name("other.jsonl")
        other.write_text("\n".join(lines) + "\n")
        return real(other, ops, reads, max_line, partitions, layout)

    monkeypatch.setitem(globals(), "native_ingest", off_by_one)
    with pytest.raises(AssertionError):
        _compare(tmp_path, [json.dumps(op) for op in BASE])


# How each column's values are stored, by both paths alike (native/histingest/src/tables.rs,
# `properties`; checkers/ingest.py, `_writer`): text in dictionaries, integers delta-encoded,
# statistics only for `partition` (the only ones a reader uses: docs/checkers.md).
def _storage(path: Path) -> dict[str, tuple[bool, bool, bool]]:
    """{column: (dictionary, delta-encoded, statistics)} over every row group of a table."""
    meta = pq.ParquetFile(path).metadata
    out: dict[str, tuple[bool, bool, bool]] = {}
    for g in range(meta.num_row_groups):
        for c in range(meta.num_columns):
            col = meta.row_group(g).column(c)
            seen = (any("DICTIONARY" in e for e in col.encodings),
                    "DELTA_BINARY_PACKED" in col.encodings, col.is_stats_set)
            assert out.setdefault(col.path_in_schema, seen) == seen, (col.path_in_schema, g)
    return out


def _expected(path: Path) -> dict[str, tuple[bool, bool, bool]]:
    schema = pq.read_schema(path)
    return {f.name: (f.type == "string", f.type != "string", f.name == "partition")
            for f in schema}


def _both_paths(tmp: Path, lines: list[str]) -> list[Path]:
    history = _write(tmp, lines)
    (tmp / "native").mkdir()
    native_ingest(history, tmp / "native" / "ops.parquet", tmp / "native" / "reads.parquet",
                  MAX_LINE_BYTES, 2, TINY_LAYOUT)
    ingest(history, tmp / "exact", 2, native=False)
    return [tmp / side / f"{name}.parquet" for side in ("native", "exact")
            for name in ("ops", "reads")]


def test_both_paths_store_each_column_as_histingest_chooses(tmp_path):
    """A table written otherwise (plain integers, every column's statistics: what pyarrow
    does by default and the exact path did before) holds the same rows in about five times
    the bytes at 10M operations; this pins the choice on both paths."""
    for path in _both_paths(tmp_path, [json.dumps(op) for op in BASE]):
        assert _storage(path) == _expected(path), path


def test_a_table_stored_otherwise_is_seen(tmp_path):
    """The must-fail twin: the same rows with pyarrow's defaults fail the comparison."""
    (path, *_) = _both_paths(tmp_path, [json.dumps(op) for op in BASE])
    default = tmp_path / "default.parquet"
    pq.write_table(pq.read_table(path), default)
    assert _storage(default) != _expected(default)


# The columns the contract fills in every row, REQUIRED in Parquet on both paths (no
# definition levels to encode: docs/checkers.md, "Ingest"); every other column is OPTIONAL.
NEVER_NULL = {"ops": {"index", "time", "process", "type", "f"},
              "reads": {"index", "process", "partition", "offset", "value", "time", "f", "pos",
                        "invoke_time"}}


def _required(path: Path) -> set[str]:
    schema = pq.ParquetFile(path).schema
    return {schema.column(i).name for i in range(len(schema))
            if schema.column(i).max_definition_level == 0}


def test_both_paths_write_the_never_null_columns_as_required(tmp_path):
    for path in _both_paths(tmp_path, [json.dumps(op) for op in BASE]):
        assert _required(path) == NEVER_NULL[path.stem], path


def test_a_table_of_optional_columns_is_seen(tmp_path):
    """The must-fail twin: the same rows with every column nullable fail the comparison."""
    (path, *_) = _both_paths(tmp_path, [json.dumps(op) for op in BASE])
    table = pq.read_table(path)
    optional = tmp_path / "optional.parquet"
    pq.write_table(table.cast(pa.schema([f.with_nullable(True) for f in table.schema])),
                   optional)
    assert _required(optional) != NEVER_NULL["ops"]

