"""The same checks (definitions.py) as DuckDB SQL over the ingest's Parquet tables.

A third implementation, single-process like checkers/reference.py, but what a user with one
machine would pick: DuckDB runs every query on all cores and spills to disk past its memory
limit, where pandas holds every table in memory (it was OOM-killed at 10M operations). The
benchmark (benchmarks/checker_throughput.py) times it beside Spark and pandas, and the tests
hold it to the reference's exact results.

Each check follows the reference's formulation: running maxima over time become window
maxima of (offset, ...) structs, and pandas' merge_asof becomes DuckDB's ASOF JOIN. Where
several rows tie for an as-of match, the struct's ordering picks the same row as the Spark
checks (the highest offset, then the latest acknowledgement).
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pandas as pd

from checkers.definitions import EXAMPLE_ORDER, EXAMPLES
from checkers.verdict import UNREAD_COLUMNS, CheckOutput, exact_frame, records

# Working memory before DuckDB spills its joins, sorts and windows to the scratch folder.
WORK_MEMORY = 4 << 30


def _q(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


# The shared tables, in dependency order. {acks} is the run's default acks.
_SETUP = [
    """CREATE TABLE acked AS SELECT partition, value, "offset", process, index AS ack_index,
           time AS ack_time, invoke_time, node, epoch, coalesce(acks, {acks}) AS acks
       FROM ops WHERE f = 'send' AND type = 'ok' AND "offset" IS NOT NULL""",
    # the final state: each partition's last ok final-poll
    """CREATE TABLE last_final AS SELECT partition, max(index) AS i FROM ops
       WHERE f = 'final-poll' AND type = 'ok' AND partition IS NOT NULL GROUP BY partition""",
    # one row per distinct (partition, offset, value) read or acked
    """CREATE TABLE cells AS
       WITH obs AS (
           SELECT partition, "offset", value, index, true AS is_read,
               index IN (SELECT i FROM last_final) AS is_final
           FROM reads
           UNION ALL
           SELECT partition, "offset", value, ack_index, false, false FROM acked)
       SELECT partition, "offset", value, bool_or(is_read) AS read,
           bool_or(is_final) AS in_final, min(index) AS first_op
       FROM obs GROUP BY partition, "offset", value""",
    """ALTER TABLE cells ADD COLUMN present BOOLEAN""",
    # present: in the final state where the partition has one, else read by anyone
    """UPDATE cells SET present = CASE WHEN partition IN (SELECT partition FROM last_final)
                                       THEN in_final ELSE read END""",
    """CREATE TABLE read_set AS SELECT DISTINCT partition, value FROM cells WHERE read""",
    # completed sends, with their offsets learned from reads where the send names none
    """CREATE TABLE done AS
       WITH read_min AS (SELECT partition, value, min("offset") AS read_offset FROM cells
                         WHERE read GROUP BY partition, value)
       SELECT s.*, r.read_offset,
           CASE WHEN s.type = 'ok' OR r.read_offset IS NOT NULL
                THEN coalesce(s."offset", r.read_offset) END AS resolved
       FROM ops s LEFT JOIN read_min r USING (partition, value)
       WHERE s.f = 'send' AND s.type IN ('ok', 'info')""",
    """CREATE TABLE unread AS
       WITH present AS (SELECT partition, value, "offset" FROM cells WHERE present),
       max_present AS (SELECT partition, max("offset") AS max_read_offset FROM present
                       GROUP BY partition)
       SELECT d.partition, d.value, d.resolved AS "offset", d.process,
           d.index AS ack_index, d.time AS ack_time, d.invoke_time, d.node, d.epoch,
           coalesce(d.acks, {acks}) AS acks, m.max_read_offset
       FROM done d LEFT JOIN max_present m USING (partition)
       WHERE (d.type = 'ok' OR d.read_offset IS NOT NULL)
         AND NOT EXISTS (SELECT 1 FROM present p
                         WHERE p.partition = d.partition AND p.value = d.value)""",
    # offsets known to exist, without the records the loss check reports
    """CREATE TABLE known AS
       SELECT DISTINCT c.partition, c."offset" AS k FROM cells c
       WHERE NOT EXISTS (SELECT 1 FROM unread u WHERE u.partition = c.partition
                         AND u."offset" = c."offset" AND u.value = c.value)""",
    # reads that break their process's sequence, with the offset they should have had
    """CREATE TABLE steps AS
       SELECT * FROM (
           SELECT *, CASE WHEN pos = 0 AND from_offset IS NOT NULL THEN from_offset
                          ELSE prev_offset + 1 END AS expected
           FROM reads)
       WHERE "offset" != expected""",
    """CREATE TABLE send_steps AS
       SELECT s.index, s.process, s.partition, s.prev_send_op, s.resolved,
           p.resolved AS prev_offset,
           coalesce(s.txn IS NOT NULL AND s.txn = s.prev_send_txn, false) AS internal
       FROM done s JOIN done p ON p.index = s.prev_send_op
       WHERE s.resolved IS NOT NULL AND p.resolved IS NOT NULL""",
    """CREATE TABLE polls AS
       SELECT index AS op, process, partition, invoke_time, invoke_offset AS from_offset, hwm
       FROM ops WHERE f IN ('poll', 'final-poll') AND type = 'ok' AND invoke_time IS NOT NULL""",
    # records read by someone and acked with acks=all: a later read must see them
    """CREATE TABLE visible AS
       SELECT a.partition, a."offset", a.value, a.ack_index AS ack_op, a.ack_time
       FROM acked a JOIN cells c USING (partition, "offset", value)
       WHERE c.read AND a.acks = 'all'""",
    """CREATE TABLE inconsistent AS
       SELECT partition, "offset",
           list({'value': value, 'first_op': first_op} ORDER BY value, first_op) AS "values"
       FROM cells GROUP BY partition, "offset" HAVING count(*) > 1""",
]


def _max_known_in(probes: str, lo: str, hi: str, cols: str) -> str:
    """The probes with `skipped_offset`, the highest known offset in [lo, hi], where any."""
    return f"""SELECT {cols}, k.k AS skipped_offset
               FROM ({probes}) p ASOF JOIN known k
                 ON p.partition = k.partition AND p.{hi} >= k.k
               WHERE k.k >= p.{lo}"""


def _poll_steps(internal: bool) -> str:
    return f"SELECT * FROM steps WHERE (pos > 0) = {str(internal).lower()}"


def _anomalies() -> dict[str, tuple[str, str]]:
    """name -> (query, example order) of every anomaly."""
    queries = _queries()
    return {name: (queries[name], ", ".join(f'"{c}"' for c in EXAMPLE_ORDER[name]))
            for name in EXAMPLE_ORDER}


def _queries() -> dict[str, str]:
    """name -> the query of every anomaly."""
    nonmono_poll = """SELECT process, partition, index AS op, prev_op, expected, "offset",
                          value FROM ({}) s WHERE "offset" < expected"""
    skip_cols = 'p.process, p.partition, p.index AS op, p.prev_op, p.expected, p."offset"'
    skip = """SELECT *, "offset" - 1 AS hi FROM ({}) s WHERE "offset" > expected"""
    nonmono_send = """SELECT process, partition, index AS op, resolved AS "offset",
                          prev_send_op AS prev_op, prev_offset
                      FROM send_steps WHERE resolved <= prev_offset AND internal = {}"""
    send_skip = _max_known_in(
        """SELECT *, prev_offset + 1 AS lo, resolved - 1 AS hi FROM send_steps
           WHERE internal AND resolved > prev_offset + 1""", "lo", "hi",
        'p.process, p.partition, p.index AS op, p.resolved AS "offset", '
        "p.prev_send_op AS prev_op, p.prev_offset")
    return {
        "inconsistent-offsets": "SELECT * FROM inconsistent",
        "duplicate": """SELECT partition, value,
                   list({'offset': "offset", 'first_op': first_op} ORDER BY "offset", first_op)
                   AS offsets
               FROM cells GROUP BY partition, value HAVING count(*) > 1""",
        "nonmonotonic-poll": nonmono_poll.format(_poll_steps(False)),
        "int-nonmonotonic-poll": nonmono_poll.format(_poll_steps(True)),
        "poll-skip": _max_known_in(skip.format(_poll_steps(False)), "expected", "hi", skip_cols),
        "int-poll-skip": _max_known_in(skip.format(_poll_steps(True)), "expected", "hi",
                                       skip_cols),
        "nonmonotonic-send": nonmono_send.format("false"),
        "int-nonmonotonic-send": nonmono_send.format("true"),
        "int-send-skip": send_skip,
        "realtime-send-order": _REALTIME,
        "aborted-read": _ABORTED,
        "stale-read": _STALE,
    }


# A committed send B invoked after an acknowledged send A landed below it. For each
# partition the running maximum, over acknowledgement time, of (offset, ack time, op) of the
# committed ok sends not lost; an as-of join gives each B the maximum strictly before it.
_REALTIME = """
    WITH c AS (
        SELECT * FROM done d
        WHERE (d.type = 'ok' OR d.read_offset IS NOT NULL) AND d.resolved IS NOT NULL
          AND d.index NOT IN (SELECT ack_index FROM unread)),
    run AS (
        SELECT DISTINCT partition, time,
            max({'o': resolved, 't': time, 'i': index}) OVER (
                PARTITION BY partition ORDER BY time) AS m
        FROM c WHERE type = 'ok')
    SELECT b.process, b.partition, b.index AS op, b.resolved AS "offset", b.invoke_time,
        r.m.i AS earlier_op, r.m.o AS earlier_offset, r.m.t AS earlier_ack_time
    FROM (SELECT * FROM c WHERE invoke_time IS NOT NULL) b
    ASOF JOIN run r ON b.partition = r.partition AND b.invoke_time > r.time
    WHERE b.resolved < r.m.o
"""

_ABORTED = """
    WITH failed AS (
        SELECT partition, value, index AS fail_op, error FROM ops
        WHERE f = 'send' AND type = 'fail' AND value IS NOT NULL AND partition IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM done d WHERE d.partition = ops.partition
                          AND d.value = ops.value))
    SELECT c.partition, c."offset", c.value, c.first_op AS read_op, f.fail_op, f.error
    FROM cells c JOIN failed f USING (partition, value) WHERE c.read
"""

def _missed(o: str, v: str, a: str, t: str) -> str:
    """The struct a stale read's example names; ordered by offset first."""
    return f"{{'offset': {o}, 'value': {v}, 'ack_op': {a}, 'ack_time': {t}}}"

# Three kinds of stale read, then one row per read op: its lowest missed offset.
_STALE = """
    WITH run AS (
        -- the highest visible record acknowledged so far, per partition over time
        SELECT DISTINCT partition, ack_time,
            max({missed_v}) OVER (PARTITION BY partition ORDER BY ack_time) AS m
        FROM visible),
    hwm AS (
        SELECT p.op, p.process, p.partition, p.invoke_time, p.from_offset, p.hwm,
            'hwm-behind' AS kind, r.m AS missed
        FROM (SELECT * FROM polls WHERE hwm IS NOT NULL) p
        ASOF JOIN run r ON p.partition = r.partition AND p.invoke_time > r.ack_time
        WHERE p.hwm <= r.m.offset AND (p.from_offset IS NULL OR p.from_offset <= r.m.offset)),
    other AS (
        SELECT p.op, p.process, p.partition, p.invoke_time, p.from_offset, p.hwm,
            'other-value' AS kind, {missed_other} AS missed
        FROM reads x JOIN inconsistent i USING (partition, "offset")
        JOIN visible v USING (partition, "offset")
        JOIN polls p ON p.op = x.index
        WHERE x.value != v.value AND x.invoke_time > v.ack_time),
    first_at AS (
        SELECT partition, "offset", min({missed_v}) AS m FROM visible
        GROUP BY partition, "offset"),
    skipped AS (
        SELECT p.op, p.process, p.partition, p.invoke_time, p.from_offset, p.hwm,
            'skipped' AS kind, v.m AS missed
        FROM (SELECT index AS op, partition, expected, "offset" - 1 AS hi FROM steps
              WHERE "offset" > expected AND (pos > 0 OR from_offset IS NOT NULL)) g
        ASOF JOIN first_at v ON g.partition = v.partition AND g.expected <= v."offset"
        JOIN polls p ON p.op = g.op
        WHERE v.m.offset <= g.hi AND v.m.ack_time < p.invoke_time),
    stale AS (SELECT * FROM hwm UNION ALL SELECT * FROM other UNION ALL SELECT * FROM skipped)
    SELECT op, process, partition, invoke_time, from_offset, hwm, kind, missed FROM stale
    QUALIFY row_number() OVER (PARTITION BY op ORDER BY missed.offset, kind,
                                                        missed.ack_op) = 1
""".replace("{missed_v}", _missed('"offset"', "value", "ack_op", "ack_time")
            ).replace("{missed_other}", _missed('x."offset"', "v.value", "v.ack_op", "v.ack_time"))

_COMPLETE = """
    WITH last AS (SELECT index, max("offset") AS max_off FROM reads WHERE f = 'final-poll'
                  GROUP BY index)
    SELECT DISTINCT o.partition FROM ops o LEFT JOIN last USING (index)
    WHERE o.f = 'final-poll' AND o.type = 'ok' AND o.partition IS NOT NULL
      AND (o.hwm IS NULL OR o.hwm <= 0 OR last.max_off + 1 >= o.hwm
           OR (last.max_off IS NULL AND o.invoke_offset >= o.hwm))
"""


def _fetch(con: duckdb.DuckDBPyConnection, sql: str) -> list[dict]:
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def run(ops_path: Path, reads_path: Path, acks: str, examples: int = EXAMPLES,
        scratch: Path | None = None) -> CheckOutput:
    """Check the two tables in one in-memory DuckDB database (spilling to `scratch`, by
    default beside the tables, past WORK_MEMORY)."""
    con = duckdb.connect()
    try:
        spill = scratch or ops_path.parent / ".duck-spill"
        con.execute(f"SET threads = {os.cpu_count() or 1}; "
                    f"SET memory_limit = '{WORK_MEMORY >> 20}MB'; "
                    f"SET temp_directory = {_q(str(spill))}; "
                    "SET preserve_insertion_order = false; SET enable_progress_bar = false")
        con.execute(f"CREATE VIEW ops AS SELECT * FROM read_parquet({_q(str(ops_path))})")
        con.execute(f"CREATE VIEW reads AS SELECT * FROM read_parquet({_q(str(reads_path))})")
        for sql in _SETUP:
            con.execute(sql.replace("{acks}", _q(acks)))
        anomalies: dict[str, tuple[int, list[dict]]] = {}
        for name, (sql, order) in _anomalies().items():
            con.execute(f"CREATE TEMP TABLE found AS {sql}")
            (n,) = con.execute("SELECT count(*) FROM found").fetchone()
            rows = _fetch(con, f"SELECT * FROM found ORDER BY {order} LIMIT {examples}")
            anomalies[name] = (int(n), records(pd.DataFrame(rows)) if rows else [])
            con.execute("DROP TABLE found")
        unread = exact_frame(con.sql("SELECT * FROM unread").to_arrow_table())[UNREAD_COLUMNS]
        complete = {int(r[0]) for r in con.execute(_COMPLETE).fetchall()}
        return CheckOutput(anomalies=anomalies, unread=unread, complete_partitions=complete,
                           stats=_stats(con))
    finally:
        con.close()


def _stats(con: duckdb.DuckDBPyConnection) -> dict:
    by = con.execute("SELECT f, type, count(*) FROM ops WHERE f IS NOT NULL AND type IS NOT NULL "
                     "GROUP BY f, type ORDER BY f, type").fetchall()
    acked = con.execute("SELECT partition, count(*) FROM ops WHERE f = 'send' AND type = 'ok' "
                        "AND partition IS NOT NULL GROUP BY partition "
                        "ORDER BY partition").fetchall()
    (reads,) = con.execute("SELECT count(*) FROM reads").fetchone()
    (info,) = con.execute("SELECT count(*) FROM ops s JOIN read_set r USING (partition, value) "
                          "WHERE s.f = 'send' AND s.type = 'info'").fetchone()
    return {
        "ops": sum(n for _, _, n in by),
        "ops_by_f_type": {f"{f}:{t}": int(n) for f, t, n in by},
        "reads": int(reads),
        "acked_by_partition": {str(int(p)): int(n) for p, n in acked},
        "info_sends_read": int(info),
    }
