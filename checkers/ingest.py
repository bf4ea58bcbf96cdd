"""Convert history.jsonl to two flat Parquet tables.

`ingest` reads the history natively first (`checkers.native_ingest`: a Rust program that
parses on every core and writes both tables in one streaming pass, in bounded memory). That
path refuses every line this module rejects, and every line it cannot type exactly as this
module does; then this module's exact path reads the history instead, line by line, in
bounded batches: it names each bad line by file and line, or, for a line the native reader
was only unsure of (a byte-order mark, a float in a nemesis value), converts the history
itself.
Both paths write the same tables (tests/checkers/test_checker_ingest.py compares them).

Both record each read's and each ack's predecessor from the same process and partition: the
order-dependent checks then become filters instead of a shuffle and sort of every record.

`ops`   one row per history line (Jepsen operation), completions carry their invocation's
        index/time/offset so checkers never have to pair them again.
`reads` one row per record returned by an ok poll/final-poll.

Both tables are clustered by Kafka partition: each row group holds one partition's rows (or
only rows without a partition), in history order, so that its statistics name the partition
and a reader of a share of the partitions (a Spark task's histcheck) reads only its row
groups. At most BUFFERED rows per table (plus one pending invocation per live process) are
held in memory, so a history larger than memory converts.

The same pass validates the history contract (docs/architecture.md, "History"), line by
line: every field has its type and range (integers fit 64 bits, partitions are
0 <= p < topic.partitions, offsets and times are >= 0, a record's or an ack's offset is below
2^63 - 1, so that the log end after it is a 64-bit integer); indexes count 0, 1, 2, ... along the
file; time never goes back, neither along the file nor for a process (the parts of one Jepsen
operation, which share its `txn`, carry its own invoke and completion times: they are exempt
from the first); a client's `f` is send, poll or final-poll, and the nemesis writes only `info`
of start-<kind>, stop-<kind> or stop-all; every completion (ok/fail/info) answers the pending
invoke of its process with the same `f` and repeats its partition, value, offset and txn; a
`fail` carries an `error`; an ok read carries its `records`, and a final-poll's `complete` is a
boolean; a process that got an `info` is never used again (but by the rest of that info's
Jepsen operation). Invokes still pending at the end are fine (a crashed run). A history that
breaks any of this raises HistoryError naming each bad line: it is not checked, since a verdict
on it would mean nothing.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from checkers.exitcodes import UserError
from checkers.native_ingest import NativeUnsure, native_ingest
from control.files import file_kind
from runformat.run_config import ACKS

# The tables are clustered by Kafka partition (as native/histingest/src/tables.rs writes
# them, by the same rule): rows are buffered per partition and a partition's buffer is a row
# group once it holds ROW_GROUP rows; all buffers are written (rows without a partition
# first, then by partition) once they hold BUFFERED rows together, and at the end.
ROW_GROUP = 122_880
BUFFERED = 4 * ROW_GROUP
MAX_REPORTED_ERRORS = 20
# A final read returns a whole partition in one line; anything longer is junk (and reading it
# whole could exhaust memory).
MAX_LINE_BYTES = 512 << 20
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MAX = 2**31 - 1
MAX_OFFSET = INT64_MAX - 1  # a record's (and an ack's): the log end after it fits 64 bits
NEMESIS = "nemesis"  # workloads.history.NEMESIS: its ops are `info` without an invoke


def _never_null(name: str, kind: pa.DataType) -> pa.Field:
    """A column the contract fills in every row: REQUIRED in Parquet, so its writer encodes
    no definition levels for it (with every column OPTIONAL, they were a tenth of
    histingest's samples at 10M operations); histingest's tables.rs marks the same columns."""
    return pa.field(name, kind, nullable=False)


OPS_SCHEMA = pa.schema(
    [
        _never_null("index", pa.int64()),
        _never_null("time", pa.int64()),
        _never_null("process", pa.string()),
        _never_null("type", pa.string()),
        _never_null("f", pa.string()),
        ("partition", pa.int32()),
        ("value", pa.int64()),
        ("value_json", pa.string()),  # non-integer values (nemesis ops) as JSON text
        ("offset", pa.int64()),
        ("node", pa.string()),
        ("epoch", pa.int64()),
        ("error", pa.string()),
        ("hwm", pa.int64()),
        ("acks", pa.string()),
        ("n_records", pa.int32()),
        ("invoke_index", pa.int64()),
        ("invoke_time", pa.int64()),
        ("invoke_offset", pa.int64()),  # the offset a poll asked to read from
        # for ok sends: this process's previous ok send to the same partition
        ("prev_ack_op", pa.int64()),
        ("prev_ack_offset", pa.int64()),
        # the operation this op is a part of (a Jepsen op split into ours: its index), if any
        ("txn", pa.int64()),
        # for ok and info sends: this process's previous ok or info send to the same
        # partition, its own offset (if its completion had one) and its txn (if any)
        ("prev_send_op", pa.int64()),
        ("prev_send_offset", pa.int64()),
        ("prev_send_txn", pa.int64()),
    ]
)

READS_SCHEMA = pa.schema(
    [
        _never_null("index", pa.int64()),
        _never_null("process", pa.string()),
        _never_null("partition", pa.int32()),
        _never_null("offset", pa.int64()),
        _never_null("value", pa.int64()),
        _never_null("time", pa.int64()),
        _never_null("f", pa.string()),
        _never_null("pos", pa.int32()),  # position of the record within its poll
        _never_null("invoke_time", pa.int64()),  # an ok poll's: its invoke's
        ("from_offset", pa.int64()),
        # the record this process read from this partition just before (history order)
        ("prev_op", pa.int64()),
        ("prev_offset", pa.int64()),
    ]
)

COMPLETIONS = ("ok", "fail", "info")
READ_FS = ("poll", "final-poll")
CLIENT_FS = ("send", *READ_FS)
NEMESIS_FS = ("start-", "stop-")  # start-<kind>, stop-<kind>, stop-all


class HistoryError(ValueError):
    """The history has corrupt lines; `errors` lists them as 'file:line: problem'."""

    def __init__(self, errors: list[str], total: int) -> None:
        self.errors = errors
        self.total = total
        more = f" (and {total - len(errors)} more)" if total > len(errors) else ""
        super().__init__(f"{total} corrupt history line(s){more}:\n" + "\n".join(errors))


class _BadLine(ValueError):
    pass


class _BadJSON(_BadLine):
    pass


@dataclass
class IngestResult:
    ops_path: Path
    reads_path: Path
    ops: int = 0
    reads: int = 0
    notes: list[str] = field(default_factory=list)
    # "native", or why the exact path read the history (NativeUnsure's message)
    path: str = "native"


def _short(v: Any, limit: int = 60) -> str:
    text = repr(v)
    return text if len(text) <= limit else text[:limit] + "..."


def _int(op: dict, key: str, required: bool = False, lo: int = INT64_MIN,
         hi: int = INT64_MAX) -> int | None:
    v = op.get(key)
    if v is None:
        if required:
            raise _BadLine(f"missing {key!r}")
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _BadLine(f"{key!r} must be an integer, got {_short(v)}")
    if not lo <= v <= hi:
        raise _BadLine(f"{key!r} is {_short(v)}, out of range [{lo}, {hi}]")
    return v


def _compact(value: Any) -> str:
    """JSON text as the native reader writes it (minified, UTF-8), so both paths agree."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _opt_str(v: Any) -> str | None:
    return None if v is None else str(v)


def _text(key: str, v: str) -> str:
    """A string that Parquet (UTF-8) can hold: JSON's \\ud800 escapes make lone surrogates."""
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        raise _BadLine(f"{key!r} is not valid Unicode text (a lone surrogate)") from None
    return v


def _scalar(op: dict, key: str) -> str | None:
    """An optional string field (node, error) that may also be written as an integer."""
    v = op.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, str | int):
        raise _BadLine(f"{key!r} must be a string or an integer, got {_short(v)}")
    return _text(key, str(v))


def refuse_outputs(history: Path, outputs: list[Path]) -> None:
    """Raise UserError, before anything is touched, for an output that replacing would harm
    (as histingest's refuse_outputs): a device (root would remove it), FIFO, directory or
    symlink, or the same file as the history or as another output."""
    seen = set()
    try:
        st = history.stat()
        seen.add((st.st_dev, st.st_ino))
    except OSError:
        pass  # no history: reading it says so
    if len(set(outputs)) < len(outputs):
        raise UserError(f"{outputs[0]}: both outputs are this one file")
    for out in outputs:
        try:
            st = out.lstat()
        except FileNotFoundError:
            continue
        kind = file_kind(st.st_mode)
        if kind is not None:
            raise UserError(f"{out}: {kind}: refusing to replace it")
        if (st.st_dev, st.st_ino) in seen:
            raise UserError(f"{out}: the same file as an input or the other output: refusing "
                            "to replace it")
        seen.add((st.st_dev, st.st_ino))


def _create(path: Path) -> BinaryIO:
    """A new file at `path`: an old one (or a symlink planted there) is removed, never
    written through."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    return os.fdopen(fd, "wb")


class _Clustered:
    """One table's rows, buffered per Kafka partition (None: rows without one) and written
    to `writer` as row groups of one partition each (the rule is at ROW_GROUP)."""

    def __init__(self, writer: pq.ParquetWriter, schema: pa.Schema) -> None:
        self.writer, self.schema = writer, schema
        self.parts: dict[int | None, dict[str, list]] = {}
        self.buffered = 0

    def extend(self, key: int | None, rows: dict[str, list], n: int) -> None:
        """Add n rows of one partition (a list per column), writing what falls due on the
        way, row by row as histingest does."""
        done = 0
        while done < n:
            part = self.parts.setdefault(key, {c: [] for c in self.schema.names})
            take = min(n - done, ROW_GROUP - len(part["index"]), BUFFERED - self.buffered)
            for c, values in rows.items():
                part[c].extend(values[done:done + take])
            done += take
            self.buffered += take
            if len(part["index"]) >= ROW_GROUP:
                self.buffered -= ROW_GROUP
                self._write(self.parts.pop(key))
            elif self.buffered >= BUFFERED:
                self.write_all()

    def write_all(self) -> None:
        for key in sorted(self.parts, key=lambda p: (p is not None, p or 0)):
            self._write(self.parts[key])
        self.parts, self.buffered = {}, 0

    def _write(self, columns: dict[str, list]) -> None:
        self.writer.write_table(pa.table(columns, schema=self.schema), row_group_size=ROW_GROUP)


def _writer(file: BinaryIO, schema: pa.Schema) -> pq.ParquetWriter:
    """A table's writer, storing values as histingest does (native/histingest/src/tables.rs,
    `properties`): dictionaries for the text columns only, the integer columns
    delta-encoded, statistics only for `partition` (the only ones a reader uses), snappy."""
    text = [f.name for f in schema if pa.types.is_string(f.type)]
    return pq.ParquetWriter(
        file, schema, compression="snappy", use_dictionary=text,
        column_encoding={f.name: "DELTA_BINARY_PACKED" for f in schema if f.name not in text},
        write_statistics=["partition"])


class _Batches:
    """Both tables' buffers and Parquet writers."""

    def __init__(self, ops_path: Path, reads_path: Path) -> None:
        self.files = [_create(ops_path), _create(reads_path)]
        self.ops = _Clustered(_writer(self.files[0], OPS_SCHEMA), OPS_SCHEMA)
        self.reads = _Clustered(_writer(self.files[1], READS_SCHEMA), READS_SCHEMA)

    def close(self) -> None:
        try:
            for table in (self.ops, self.reads):
                table.write_all()
                table.writer.close()
        finally:
            for f in self.files:
                f.close()


def _parse(raw: bytes) -> dict:
    try:
        op = json.loads(raw)
    except ValueError as e:  # bad JSON, bad UTF-8, an integer of thousands of digits
        raise _BadJSON(f"invalid JSON ({_short(str(e), 120)})") from None
    except RecursionError:
        raise _BadJSON("invalid JSON (nested too deeply)") from None
    if not isinstance(op, dict):
        raise _BadLine("not a JSON object")
    return op


class _Contract:
    """The history contract's state along the file: the last index, the run clock (the latest
    time so far, and its line), each process's last time, its pending invoke (its line, index,
    time, offset, f and the fields its completion repeats) and, for a process that got an
    `info`, that line and its txn."""

    def __init__(self) -> None:
        self.last_index: int | None = None
        self.clock: tuple[int, int] = (0, 0)  # (time, line)
        self.last_time: dict[str, int] = {}
        self.pending: dict[str, tuple[int, int, int, int | None, str, tuple]] = {}
        self.txn_start: dict[str, tuple[int, int]] = {}  # process -> (txn, its first time)
        self.retired: dict[str, tuple[int, int | None]] = {}  # process -> (line, txn) of its info
        self.after_bad = False  # the line before was refused: its index is not known

    def check(self, lineno: int, index: int, time: int, process: str, typ: str, f: str,
              offset: int | None, txn: int | None = None, echo: tuple = ()
              ) -> tuple[int | None, int | None, int | None]:
        """Raise _BadLine if this op breaks the contract; else record it and return its
        invocation's (index, time, offset) for a completion. `echo` holds the fields a
        completion repeats from its invoke (partition, value, offset, txn).

        Ops with the same `txn` (the parts of one Jepsen operation, checkers.jepsen_kafka)
        all carry that operation's invoke and completion times: within it, time may go
        back to the operation's start, never before it."""
        self._index(index)
        self._time(lineno, time, process, txn)
        self._retired(process, txn)
        inv: tuple[int | None, int | None, int | None] = (None, None, None)
        waiting = self.pending.get(process)
        if typ == "invoke":
            if waiting is not None:
                raise _BadLine(f"process {process} invokes again while its invoke on line "
                               f"{waiting[0]} has no completion yet")
            self.pending[process] = (lineno, index, time, offset, f, echo)
        elif waiting is None:
            if not (typ == "info" and process == NEMESIS):
                raise _BadLine(f"{typ!r} completion without an invoke: process {process} has "
                               "no operation pending")
        else:
            if waiting[4] != f:
                raise _BadLine(f"completion f {f!r} does not match the invoke on line "
                               f"{waiting[0]} (f {waiting[4]!r})")
            _repeats(waiting[0], waiting[5], echo)
            del self.pending[process]
            inv = (waiting[1], waiting[2], waiting[3])
        if typ == "info" and process != NEMESIS:
            self.retired[process] = (lineno, txn)
        self.last_time[process] = time
        if time >= self.clock[0]:
            self.clock = (time, lineno)
        return inv

    def _index(self, index: int) -> None:
        """Check the index and take it: a gap, or a line that breaks another rule, is one
        error, not one on every later line."""
        last = self.last_index
        expected = 0 if last is None else last + 1
        if self.after_bad and index > (-1 if last is None else last):
            expected = index  # the bad line before may have held the missing index
        self.after_bad = False
        if index >= expected:
            self.last_index = index
        if last is None and index != 0:
            raise _BadLine(f"the first index is {index}: indexes count 0, 1, 2, ... along "
                           "the file")
        if index != expected:
            raise _BadLine(f"index {index} does not follow {last}: indexes count 0, 1, 2, "
                           "... along the file (a duplicate, missing or reordered line)")

    def _time(self, lineno: int, time: int, process: str, txn: int | None) -> None:
        last = self.last_time.get(process)
        if txn is not None:
            start = self.txn_start.get(process)
            if start is not None and start[0] == txn:
                last = start[1]
            else:
                self.txn_start[process] = (txn, time)
        if last is not None and time < last:
            raise _BadLine(f"time {time} goes back for process {process} (its previous op "
                           f"was at {last})")
        # A Jepsen operation's parts come in completion order with its own times: only
        # they may be earlier than a line before them.
        if txn is None and time < self.clock[0]:
            raise _BadLine(f"time {time} goes back: line {self.clock[1]} was at "
                           f"{self.clock[0]} (the run clock never goes back along the file)")

    def _retired(self, process: str, txn: int | None) -> None:
        info = self.retired.get(process)
        if info is not None and (txn is None or txn != info[1]):
            raise _BadLine(f"process {process} is used again after its 'info' on line "
                           f"{info[0]} (a process that got an info is never used again)")


ECHOED = ("partition", "value", "offset", "txn")


def _repeats(line: int, invoked: tuple, completed: tuple) -> None:
    """A completion repeats its invoke's fields: raise _BadLine for one it changes. It may add
    one the invoke did not have (a send's offset); one it leaves out is read from the invoke
    (`invoke_offset`), as hand-made histories do."""
    for key, was, now in zip(ECHOED, invoked, completed, strict=True):
        if was is not None and now is not None and was != now:
            raise _BadLine(f"{key!r} is {_short(now)}, but its invoke on line {line} has "
                           f"{_short(was)} (a completion repeats its invoke's fields)")


def _shape(op: dict, process: str, typ: str, f: str) -> None:
    """The fields the contract fixes for this kind of op: raise _BadLine for one it lacks."""
    if process == NEMESIS:
        if typ != "info" or not f.startswith(NEMESIS_FS):
            raise _BadLine(f"the nemesis writes only 'info' ops of start-<kind>, stop-<kind> or "
                           f"stop-all, not {typ!r} {_short(f)}")
        return
    if f not in CLIENT_FS:
        raise _BadLine(f"unknown f {_short(f)}: a client's f is send, poll or final-poll")
    if typ == "fail" and op.get("error") is None:
        raise _BadLine("a 'fail' carries an 'error' (why it definitely did not happen)")
    if typ == "ok" and f in READ_FS and op.get("records") is None:
        raise _BadLine(f"an ok {f} carries its 'records'")
    complete = op.get("complete")
    if f == "final-poll" and complete is not None and not isinstance(complete, bool):
        raise _BadLine(f"'complete' must be true or false, got {_short(complete)}")


class _Converter:
    def __init__(self, batches: _Batches | None, partitions: int | None = None) -> None:
        self.b = batches
        self.contract = _Contract()
        self.max_partition = INT32_MAX if partitions is None else partitions - 1
        # (process, partition) -> (op index, offset) of the last record read / last ack
        self.last_read: dict[tuple[str, int], tuple[int | None, int | None]] = {}
        self.last_ack: dict[tuple[str, int], tuple[int | None, int | None]] = {}
        self.last_send: dict[tuple[str, int], tuple[int | None, int | None, int | None]] = {}
        self.ops = 0
        self.reads = 0

    def add(self, op: dict, lineno: int = 0) -> None:
        index = _int(op, "index", required=True, lo=0)
        time = _int(op, "time", required=True, lo=0)
        typ, f = op.get("type"), op.get("f")
        raw_process = op.get("process")
        if raw_process is None:
            raise _BadLine("missing 'process'")
        if isinstance(raw_process, bool) or not isinstance(raw_process, str | int):
            raise _BadLine(f"'process' must be an integer or a string, got {_short(raw_process)}")
        if not isinstance(typ, str) or not isinstance(f, str) or not f:
            raise _BadLine("'type' and 'f' must be strings")
        if typ != "invoke" and typ not in COMPLETIONS:
            raise _BadLine(f"unknown type {_short(typ)}")
        process = _text("process", str(raw_process))
        _text("f", f)
        partition = _int(op, "partition", required=f == "send" or f in READ_FS, lo=0,
                         hi=self.max_partition)
        value = op.get("value")
        int_value = value if isinstance(value, int) and not isinstance(value, bool) else None
        if int_value is not None and not INT64_MIN <= int_value <= INT64_MAX:
            if f == "send":
                raise _BadLine(f"'value' is {_short(value)}, out of range [{INT64_MIN}, "
                               f"{INT64_MAX}]")
            int_value = None  # another op's value: kept as JSON text
        if f == "send" and int_value is None and typ != "fail":
            raise _BadLine(f"send value must be an integer, got {_short(value)}")
        # A record's offset is below int64's maximum, as in Kafka: the log end after it,
        # offset + 1, which every backend computes in 64 bits, must not wrap around.
        offset = _int(op, "offset", lo=0, hi=MAX_OFFSET if f == "send" else INT64_MAX)
        epoch = _int(op, "epoch")
        hwm = _int(op, "hwm", lo=0)
        node, error = _scalar(op, "node"), _scalar(op, "error")
        acks = op.get("acks")
        if acks is not None:
            if isinstance(acks, bool) or not isinstance(acks, str | int) or acks not in ACKS:
                raise _BadLine(f"'acks' must be \"0\", \"1\" or \"all\", got {_short(acks)}")
            acks = ACKS[acks]
        records = self._records(op, typ, f)
        # a lone surrogate (a \ud800 escape) anywhere in a nemesis value: no UTF-8 for Parquet
        value_json = (None if value is None or int_value is not None
                      else _text("value", _compact(value)))

        txn = _int(op, "txn")
        echo = (partition, value if int_value is None else int_value, offset, txn)
        inv = self.contract.check(lineno, index, time, process, typ, f, offset, txn, echo)
        _shape(op, process, typ, f)
        if self.b is None:  # validating only
            return

        prev_ack = (None, None)
        if typ == "ok" and f == "send" and offset is not None:
            prev_ack = self.last_ack.get((process, partition), prev_ack)
            self.last_ack[(process, partition)] = (index, offset)
        prev_send: tuple[int | None, int | None, int | None] = (None, None, None)
        if f == "send" and typ in ("ok", "info"):
            prev_send = self.last_send.get((process, partition), prev_send)
            self.last_send[(process, partition)] = (index, offset, txn)
        row = (index, time, process, typ, f, partition, int_value, value_json, offset, node,
               epoch, error, hwm, acks, None if records is None else len(records), *inv,
               *prev_ack, txn, *prev_send)
        self.b.ops.extend(partition, {c: [v] for c, v in zip(OPS_SCHEMA.names, row,
                                                             strict=True)}, 1)
        self.ops += 1
        if records:
            self._add_reads(records, index, process, partition, time, f, inv[1], inv[2])

    @staticmethod
    def _records(op: dict, typ: str, f: str) -> list | None:
        if typ != "ok" or f not in READ_FS:
            return None
        records = op.get("records", [])
        if not isinstance(records, list):
            raise _BadLine("'records' must be a list of [offset, value] pairs")
        for r in records:
            if (
                not isinstance(r, list)
                or len(r) != 2
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in r)
            ):
                raise _BadLine(f"record {_short(r)} is not an [offset, value] pair of integers")
            if not (0 <= r[0] <= MAX_OFFSET and INT64_MIN <= r[1] <= INT64_MAX):
                raise _BadLine(f"record {_short(r)}: the offset must be in [0, {MAX_OFFSET}] "
                               f"and the value a 64-bit integer")
        return records

    def _add_reads(self, records, index, process, partition, time, f, inv_time, from_offset):
        assert self.b is not None
        n = len(records)
        key = (process, partition)
        prev_op, prev_offset = self.last_read.get(key, (None, None))
        offsets = [rec[0] for rec in records]
        self.b.reads.extend(partition, {
            "index": [index] * n, "process": [process] * n, "partition": [partition] * n,
            "offset": offsets, "value": [rec[1] for rec in records], "time": [time] * n,
            "f": [f] * n, "pos": list(range(n)), "invoke_time": [inv_time] * n,
            "from_offset": [from_offset] * n, "prev_op": [prev_op] + [index] * (n - 1),
            "prev_offset": [prev_offset] + offsets[:-1],
        }, n)
        self.last_read[key] = (index, offsets[-1])
        self.reads += n


def _lines(fh: BinaryIO):
    """(line number, bytes) of each line; a line longer than MAX_LINE_BYTES comes as None
    (after skipping it, in bounded reads)."""
    lineno = 0
    while True:
        raw = fh.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        lineno += 1
        if len(raw) > MAX_LINE_BYTES:
            while raw and not raw.endswith(b"\n"):
                raw = fh.readline(1 << 20)
            yield lineno, None
            continue
        yield lineno, raw


def _convert(history: Path, conv: _Converter) -> tuple[int, list[str], tuple[int, str] | None]:
    """Feed every line of `history` to `conv`: (bad lines, their first errors, truncated tail)."""
    errors: list[str] = []
    total_errors = 0
    truncated: tuple[int, str] | None = None
    with open(history, "rb") as fh:
        for lineno, raw in _lines(fh):
            try:
                if raw is None:
                    raise _BadLine(f"line longer than {MAX_LINE_BYTES} bytes")
                if not raw.strip():
                    continue
                conv.add(_parse(raw), lineno)
            except _BadLine as e:
                if isinstance(e, _BadJSON) and raw is not None and not raw.endswith(b"\n"):
                    # Only the physically last line can lack a newline: a cut-off write.
                    truncated = (lineno, str(e))
                    continue
                total_errors += 1
                conv.contract.after_bad = True
                if len(errors) < MAX_REPORTED_ERRORS:
                    errors.append(f"{history}:{lineno}: {e}")
    return total_errors, errors, truncated


def _truncated_note(history: Path, truncated: tuple[int, str]) -> str:
    return (f"{history}:{truncated[0]}: last line is truncated ({truncated[1]}); "
            "ignored it as the tail of a crashed run")


def _torn_reason(history: Path) -> str:
    """Why the file's last line (no newline) is not JSON, in the exact path's words; or
    NativeUnsure if Python reads it after all (the exact path then judges it)."""
    with open(history, "rb") as fh:
        end = fh.seek(0, os.SEEK_END)
        start = end
        while start > 0:  # back to the line's start, in bounded reads
            step = min(start, 1 << 20)
            fh.seek(start - step)
            chunk = fh.read(step)
            cut = chunk.rfind(b"\n")
            if cut >= 0:
                start = start - step + cut + 1
                break
            start -= step
        fh.seek(start)
        raw = fh.read(end - start)
    try:
        _parse(raw)
    except _BadJSON as e:
        return str(e)
    except _BadLine:
        pass
    raise NativeUnsure("the native reader took the last line for a torn one; Python reads it")


def validate(history: Path, partitions: int | None = None) -> list[str]:
    """Check `history` against the history contract without converting it; raises
    HistoryError naming the bad lines, returns notes (a truncated last line)."""
    total, errors, truncated = _convert(history, _Converter(None, partitions))
    if total:
        raise HistoryError(errors, total)
    return [_truncated_note(history, truncated)] if truncated else []


def ingest(history: Path, out_dir: Path, partitions: int | None = None, *,
           native: bool = True) -> IngestResult:
    """Write out_dir/ops.parquet and out_dir/reads.parquet from `history`.

    Raises HistoryError naming every corrupt line (up to a cap), including lines that break
    the history contract; `partitions` (the topic's, when known) bounds the partition
    numbers. A last line that is cut short (no trailing newline, not parseable: the run
    crashed mid-write) is skipped and reported in IngestResult.notes. `native=False` takes
    the exact path at once (the tests compare the two).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    result = IngestResult(out_dir / "ops.parquet", out_dir / "reads.parquet")
    if native:
        try:
            result.ops, result.reads, torn = native_ingest(
                history, result.ops_path, result.reads_path, MAX_LINE_BYTES, partitions,
                (ROW_GROUP, BUFFERED))
            if torn is not None:
                result.notes.append(_truncated_note(history, (torn, _torn_reason(history))))
            return result
        except NativeUnsure as e:
            result.path = str(e)
    refuse_outputs(history, [result.ops_path, result.reads_path])
    batches = _Batches(result.ops_path, result.reads_path)
    conv = _Converter(batches, partitions)
    try:
        total_errors, errors, truncated = _convert(history, conv)
    finally:
        batches.close()
    if total_errors:
        raise HistoryError(errors, total_errors)
    if truncated:
        result.notes.append(_truncated_note(history, truncated))
    result.ops, result.reads = conv.ops, conv.reads
    return result
