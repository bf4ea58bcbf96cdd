"""history.jsonl -> the ops and reads Parquet tables, natively: DuckDB's multi-threaded JSON
reader, window functions and Parquet writer, with memory bounded by spilling to disk.

This is the fast path of `checkers.ingest.ingest`. It screens every line for everything the
exact path (`checkers.ingest`) rejects, and for a few things that path accepts but this one
cannot reproduce bit for bit; any such line, or any error of the reader itself (bad JSON,
bad UTF-8, a duplicate key, a torn last line), makes it give up: `NativeUnsure`. The exact
path then runs, names each bad line by file and line, or converts the history itself. So a
corrupt history is still reported line by line, and the tables never depend on which path
wrote them (tests/checkers/test_checker_ingest.py holds the two paths to the same tables).

What the screen flags, per line: a missing or non-integer index, time or process; an integer
field whose JSON text is not a plain 64-bit integer (a float, a string, a boolean: the reader
would coerce them); strings with \\u escapes (the exact path rejects lone surrogates); an
unknown type; a send without an integer value; records of an ok read that are not
[offset, value] pairs of integers; a partition outside the topic; and the history contract:
indexes strictly increasing along the file, time never going back for a process (but for
the parts of one Jepsen operation, which go back to its start), every completion answering
its process's pending invoke of the same f. The reader's own leniencies that no screen
catches: a trailing comma in an object, and `"records": null` on an ok read (read as no
records).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import duckdb

# DuckDB's working memory, beyond its read buffers: past it, sorts and windows spill to the
# scratch folder.
WORK_MEMORY = 4 << 30
# The reader holds two buffers of its longest-object bound per thread. A final read is one
# line holding a whole partition, so the bound grows with the file: an eighth of it (at least
# MIN_OBJECT), and the exact path's own limit if a line is longer still.
MIN_OBJECT = 16 << 20
ROW_GROUP_ROWS = 122_880  # DuckDB's own default: bounded row groups for Spark's readers

# Every field as raw JSON text, so the screen sees what was written (the typed reader would
# turn "10", 1.5 and true into integers).
_FIELDS = ["index", "time", "process", "type", "f", "partition", "value", "offset", "node",
           "epoch", "error", "hwm", "acks", "records", "txn"]
_COLUMNS = "{" + ", ".join(f"'{c}': 'JSON'" for c in _FIELDS) + "}"
_ACKS = {'"all"': "all", '"-1"': "all", '"1"': "1", '"0"': "0", "-1": "all", "1": "1", "0": "0"}
_RECORDS = r"\[(\[[0-9]+,-?[0-9]+\](,\[[0-9]+,-?[0-9]+\])*)?\]"


class NativeUnsure(Exception):
    """The native path will not vouch for this history: the exact path must read it."""


def _macros(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(f"""
        -- a JSON integer exactly as written, else NULL ('1.5', '"10"', 'true', '-0' are not)
        CREATE MACRO jint(j) AS CASE WHEN TRY_CAST(j::VARCHAR AS BIGINT)::VARCHAR = j::VARCHAR
                                     THEN TRY_CAST(j::VARCHAR AS BIGINT) END;
        -- present but not a plain integer
        CREATE MACRO jbadint(j) AS j IS NOT NULL AND jint(j) IS NULL;
        CREATE MACRO jstr(j) AS starts_with(j::VARCHAR, '"');
        -- a string or an integer field as the exact path stores it (str(v)), else NULL
        CREATE MACRO jtext(j) AS CASE WHEN jstr(j) THEN j->>'$'
                                      WHEN jint(j) IS NOT NULL THEN j::VARCHAR END;
        CREATE MACRO jbadtext(j) AS j IS NOT NULL AND (jtext(j) IS NULL
                                                      OR contains(j::VARCHAR, '\\u'));
        CREATE MACRO acks_of(j) AS map_extract_value(MAP {_sql_map(_ACKS)}, j::VARCHAR);
    """)


def _sql_map(d: dict[str, str]) -> str:
    return "{" + ", ".join(f"{_q(k)}: {_q(v)}" for k, v in d.items()) + "}"


def _q(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _source(history: Path, max_line: int) -> str:
    return (f"read_json({_q(str(history))}, format = 'newline_delimited', records = true, "
            f"columns = {_COLUMNS}, maximum_object_size = {max_line})")


# Pass 1: every line typed as the exact path types it (NULL where it is not), and `bad`
# where the screen says no. In layers, so that each field is parsed once. A parallel scan
# into a table keeps the file's order (preserve_insertion_order): rowid is the line's rank.
_TYPED = """
    SELECT jint(index) AS index, jint(time) AS time, jtext(process) AS process,
        CASE WHEN jstr(type) THEN type->>'$' END AS type,
        CASE WHEN jstr(f) THEN f->>'$' END AS f, jint(partition) AS partition,
        jint(value) AS ivalue, jint("offset") AS "offset", jtext(node) AS node,
        jint(epoch) AS epoch, jtext(error) AS error, jint(hwm) AS hwm,
        acks_of(acks) AS acks, jint(txn) AS txn,
        value AS j_value, acks AS j_acks, records AS j_records,
        (jbadint(index) OR jbadint(time) OR jbadtext(process) OR jbadint(partition)
         OR jbadint("offset") OR jbadint(epoch) OR jbadint(hwm) OR jbadint(txn)
         OR jbadtext(node) OR jbadtext(error) OR jbadtext(type) OR jbadtext(f)) AS bad_field
    FROM {src}
"""
_READ = "f IN ('poll', 'final-poll') AND type = 'ok'"
_LINES = f"""
    WITH t AS (SELECT *, {_READ} AS is_read FROM ({_TYPED})),
    r AS (
        -- Strict: past 64 bits it raises (a lenient cast would null the one element), and
        -- the error sends the history to the exact path. It would coerce "2" and 2.5, but
        -- such lists fail the screen's pattern. Transforming the parsed JSON is about 10x
        -- faster than casting its text to BIGINT[][] (1.2x on the whole pass at 1M ops)
        SELECT *, CASE WHEN is_read
                       THEN json_transform_strict(coalesce(j_records, '[]'), '[["BIGINT"]]')
                  END AS recs
        FROM t
    )
    SELECT index, time, process, type, f, partition, ivalue AS value,
        CASE WHEN j_value IS NOT NULL AND ivalue IS NULL THEN j_value::VARCHAR END
            AS value_json,
        "offset", node, epoch, error, hwm, acks, txn, recs, len(recs) AS n_recs,
        bad_field OR index IS NULL OR time IS NULL OR process IS NULL
        OR type IS NULL OR type NOT IN ('invoke', 'ok', 'fail', 'info') OR f IS NULL OR f = ''
        OR index < 0 OR time < 0 OR "offset" < 0 OR hwm < 0
        OR partition < 0 OR partition > {{max_partition}}
        OR (partition IS NULL AND f IN ('send', 'poll', 'final-poll'))
        OR (j_acks IS NOT NULL AND acks IS NULL)
        OR (f = 'send' AND j_value IS NOT NULL AND ivalue IS NULL
            AND (type != 'fail' OR regexp_full_match(j_value::VARCHAR, '-?[0-9]+')))
        OR (f = 'send' AND j_value IS NULL AND type != 'fail')
        OR (is_read AND ((j_records IS NOT NULL AND NOT regexp_full_match(
            j_records::VARCHAR, '{_RECORDS}')))) AS bad
    FROM r
"""

# Pass 2, in file order (`rn`): whether each line fails the screen or the history contract,
# and its order columns, by window: its invoke (for a completion: its process's previous
# op); for an ack, a completed send and a read with records, the one before it of its
# process to its partition (a lag over just those lines: far cheaper than a last-non-null
# over all of them). Narrow on purpose: a window carries every column it is given.
_ACK = "type = 'ok' AND f = 'send' AND \"offset\" IS NOT NULL"
_SENT = "f = 'send' AND type IN ('ok', 'info')"
_DERIVED = f"""
    WITH w AS (
        SELECT rowid AS rn, index, time, process, type, f, bad,
            lag(type) OVER w_proc AS inv_type, lag(f) OVER w_proc AS inv_f,
            lag(index) OVER w_proc AS inv_index, lag(time) OVER w_proc AS inv_time,
            lag("offset") OVER w_proc AS inv_offset
        FROM lines WINDOW w_proc AS (PARTITION BY process ORDER BY rowid)
    ), ack AS (
        SELECT rowid AS rn, lag(index) OVER w_pp AS prev_ack_op,
            lag("offset") OVER w_pp AS prev_ack_offset
        FROM lines WHERE {_ACK}
        WINDOW w_pp AS (PARTITION BY process, partition ORDER BY rowid)
    ), sent AS (
        SELECT rowid AS rn, lag(index) OVER w_pp AS prev_send_op,
            lag("offset") OVER w_pp AS prev_send_offset, lag(txn) OVER w_pp AS prev_send_txn
        FROM lines WHERE {_SENT}
        WINDOW w_pp AS (PARTITION BY process, partition ORDER BY rowid)
    ), tx0 AS (
        SELECT rowid AS rn, process, txn, time,
            lag(txn) OVER (PARTITION BY process ORDER BY rowid) AS prev_txn
        FROM lines WHERE txn IS NOT NULL
    ), tx1 AS (
        SELECT *, sum((prev_txn IS DISTINCT FROM txn)::INTEGER)
            OVER (PARTITION BY process ORDER BY rn ROWS UNBOUNDED PRECEDING) AS run
        FROM tx0
    ), tx AS (
        -- the parts of one operation (consecutive txn of a process) after its first may go
        -- back in time to the first's, never before it
        SELECT rn, CASE WHEN prev_txn = txn
                        THEN first_value(time) OVER (PARTITION BY process, run ORDER BY rn)
                   END AS txn_start
        FROM tx1
    ), rd AS (
        SELECT rowid AS rn, lag(index) OVER w_pp AS prev_read_op,
            lag(recs[-1][1]) OVER w_pp AS prev_read_off
        FROM lines WHERE n_recs > 0
        WINDOW w_pp AS (PARTITION BY process, partition ORDER BY rowid)
    )
    SELECT rn,
        bad OR time < coalesce(txn_start, inv_time)
        OR (type = 'invoke' AND inv_type = 'invoke')
        OR (type != 'invoke' AND inv_type = 'invoke' AND inv_f != f)
        OR (type != 'invoke' AND inv_type IS DISTINCT FROM 'invoke'
            AND NOT (type = 'info' AND process = 'nemesis')) AS broken,
        {{paired}} inv_index END AS invoke_index, {{paired}} inv_time END AS invoke_time,
        {{paired}} inv_offset END AS invoke_offset,
        prev_ack_op, prev_ack_offset, prev_send_op, prev_send_offset, prev_send_txn,
        prev_read_op, prev_read_off
    FROM w LEFT JOIN ack USING (rn) LEFT JOIN sent USING (rn) LEFT JOIN rd USING (rn)
        LEFT JOIN tx USING (rn)
    ORDER BY rn
""".replace("{paired}", "CASE WHEN type != 'invoke' AND inv_type = 'invoke' THEN")

# Indexes strictly increase along the file: a streaming lag over the table in rowid order.
_INDEX_BACK = """
    SELECT count(*) FILTER (WHERE index <= prev)
    FROM (SELECT index, lag(index) OVER () AS prev FROM lines)
"""

# Pass 3: the ops table, each line beside its pass-2 row (both in file order).
_OPS = """
    SELECT index, time, process, type, f, partition::INTEGER AS partition, value, value_json,
        "offset", node, epoch, error, hwm, acks, n_recs::INTEGER AS n_records,
        invoke_index, invoke_time, invoke_offset, prev_ack_op, prev_ack_offset, txn,
        prev_send_op, prev_send_offset, prev_send_txn
    FROM lines POSITIONAL JOIN derived
"""

# Pass 4: the reads table, one row per record of an ok read, in file order.
_READS = """
    SELECT index, process, partition::INTEGER AS partition,
        unnest(list_transform(recs, lambda x: x[1])) AS "offset",
        unnest(list_transform(recs, lambda x: x[2])) AS value,
        time, f, unnest(range(n_recs))::INTEGER AS pos, invoke_time,
        invoke_offset AS from_offset,
        unnest(list_prepend(prev_read_op, list_transform(recs[2:], lambda x: index)))
            AS prev_op,
        unnest(list_prepend(prev_read_off, list_transform(recs[:-2], lambda x: x[1])))
            AS prev_offset
    FROM lines POSITIONAL JOIN derived WHERE n_recs > 0
"""


def native_ingest(history: Path, ops_path: Path, reads_path: Path, scratch: Path,
                  max_line: int, partitions: int | None) -> tuple[int, int]:
    """Write both tables and return (ops, reads), or raise NativeUnsure (nothing useful
    written) when the exact path must read this history."""
    bound = min(max_line, max(MIN_OBJECT, history.stat().st_size // 8))
    try:
        return _run(history, ops_path, reads_path, scratch, bound, partitions)
    except NativeUnsure as e:
        if bound >= max_line or "maximum_object_size" not in str(e.__cause__):
            raise
    return _run(history, ops_path, reads_path, scratch, max_line, partitions)


def _unsure_or_full(e: Exception) -> Exception:
    """A full disk is the environment's error (one line, exit 3, as on the exact path);
    anything else DuckDB stops on sends the history to the exact reader."""
    if isinstance(e, duckdb.IOException) and "No space left" in str(e):
        return OSError(errno.ENOSPC, "No space left on device")
    return NativeUnsure(f"the native reader stopped: {str(e).splitlines()[0]:.200}")


def _run(history: Path, ops_path: Path, reads_path: Path, scratch: Path, max_line: int,
         partitions: int | None) -> tuple[int, int]:
    max_partition = 2**31 - 1 if partitions is None else partitions - 1
    threads = os.cpu_count() or 1
    memory = WORK_MEMORY + 2 * threads * max_line
    db = scratch / "ingest.duckdb"
    db.unlink(missing_ok=True)
    try:
        con = duckdb.connect(str(db))
    except duckdb.Error as e:
        raise _unsure_or_full(e) from e
    try:
        con.execute(f"SET threads = {threads}; SET memory_limit = '{memory >> 20}MB';"
                    f"SET temp_directory = {_q(str(scratch / 'spill'))};"
                    "SET preserve_insertion_order = true; SET enable_progress_bar = false")
        _macros(con)
        lines = (_LINES.replace("{src}", _source(history, max_line))
                 .replace("{max_partition}", str(max_partition)))
        con.execute(f"CREATE TABLE lines AS {lines}")
        con.execute(f"CREATE TABLE derived AS {_DERIVED}")
        (back,) = con.execute(_INDEX_BACK).fetchone()
        broken, ops = con.execute("SELECT count(*) FILTER (WHERE broken), count(*) "
                                  "FROM derived").fetchone()
        if back or broken:
            raise NativeUnsure(f"{back + broken} line(s) need the exact reader")
        options = f"(FORMAT parquet, COMPRESSION snappy, ROW_GROUP_SIZE {ROW_GROUP_ROWS})"
        con.execute(f"COPY ({_OPS}) TO {_q(str(ops_path))} {options}")
        (reads,) = con.execute(f"COPY ({_READS}) TO {_q(str(reads_path))} {options}").fetchone()
        return int(ops), int(reads)
    except (duckdb.ParserException, duckdb.BinderException, duckdb.CatalogException):
        raise  # our own SQL is wrong: a bug to see, not a history to read the slow way
    except duckdb.Error as e:
        raise _unsure_or_full(e) from e
    finally:
        con.close()
        db.unlink(missing_ok=True)
