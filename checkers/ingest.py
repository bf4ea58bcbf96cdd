"""Convert history.jsonl to two flat Parquet tables, streaming in bounded batches.

The pass is sequential anyway, so it also records each read's and each ack's predecessor
from the same process and partition: the order-dependent checks then become filters
instead of a shuffle and sort of every record.

`ops`   one row per history line (Jepsen operation), completions carry their invocation's
        index/time/offset so checkers never have to pair them again.
`reads` one row per record returned by an ok poll/final-poll.

Only one batch of rows (plus one pending invocation per live process) is held in memory,
so a history larger than memory converts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

BATCH_OPS = 50_000
MAX_REPORTED_ERRORS = 20

OPS_SCHEMA = pa.schema(
    [
        ("index", pa.int64()),
        ("time", pa.int64()),
        ("process", pa.string()),
        ("type", pa.string()),
        ("f", pa.string()),
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
    ]
)

READS_SCHEMA = pa.schema(
    [
        ("index", pa.int64()),
        ("process", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("value", pa.int64()),
        ("time", pa.int64()),
        ("f", pa.string()),
        ("pos", pa.int32()),  # position of the record within its poll
        ("invoke_time", pa.int64()),
        ("from_offset", pa.int64()),
        # the record this process read from this partition just before (history order)
        ("prev_op", pa.int64()),
        ("prev_offset", pa.int64()),
    ]
)

COMPLETIONS = ("ok", "fail", "info")
READ_FS = ("poll", "final-poll")


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


def _int(op: dict, key: str, required: bool = False) -> int | None:
    v = op.get(key)
    if v is None:
        if required:
            raise _BadLine(f"missing {key!r}")
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _BadLine(f"{key!r} must be an integer, got {v!r}")
    return v


def _opt_str(v: Any) -> str | None:
    return None if v is None else str(v)


class _Batches:
    """Column buffers for one batch of ops and reads, flushed to Parquet writers."""

    def __init__(self, ops_path: Path, reads_path: Path) -> None:
        self.ops_writer = pq.ParquetWriter(ops_path, OPS_SCHEMA, compression="snappy")
        self.reads_writer = pq.ParquetWriter(reads_path, READS_SCHEMA, compression="snappy")
        self._reset()

    def _reset(self) -> None:
        self.ops: dict[str, list] = {n: [] for n in OPS_SCHEMA.names}
        self.reads: dict[str, list] = {n: [] for n in READS_SCHEMA.names}

    def flush(self) -> None:
        if self.ops["index"]:
            self.ops_writer.write_table(pa.table(self.ops, schema=OPS_SCHEMA))
        if self.reads["index"]:
            self.reads_writer.write_table(pa.table(self.reads, schema=READS_SCHEMA))
        self._reset()

    def close(self) -> None:
        self.flush()
        self.ops_writer.close()
        self.reads_writer.close()


def _parse(raw: bytes) -> dict:
    try:
        op = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise _BadJSON(f"invalid JSON ({e})") from None
    if not isinstance(op, dict):
        raise _BadLine("not a JSON object")
    return op


class _Converter:
    def __init__(self, batches: _Batches) -> None:
        self.b = batches
        self.pending: dict[str, tuple[int, int, int | None]] = {}
        # (process, partition) -> (op index, offset) of the last record read / last ack
        self.last_read: dict[tuple[str, int], tuple[int | None, int | None]] = {}
        self.last_ack: dict[tuple[str, int], tuple[int | None, int | None]] = {}
        self.ops = 0
        self.reads = 0

    def add(self, op: dict) -> None:
        index = _int(op, "index", required=True)
        time = _int(op, "time", required=True)
        typ, f = op.get("type"), op.get("f")
        if op.get("process") is None:
            raise _BadLine("missing 'process'")
        if not isinstance(typ, str) or not isinstance(f, str):
            raise _BadLine("'type' and 'f' must be strings")
        process = str(op["process"])
        partition = _int(op, "partition", required=f == "send" or f in READ_FS)
        value = op.get("value")
        int_value = value if isinstance(value, int) and not isinstance(value, bool) else None
        if f == "send" and int_value is None and typ != "fail":
            raise _BadLine(f"send value must be an integer, got {value!r}")
        offset = _int(op, "offset")
        records = self._records(op, typ, f)

        inv = (None, None, None)
        if typ == "invoke":
            self.pending[process] = (index, time, offset)
        elif typ in COMPLETIONS:
            inv = self.pending.pop(process, (None, None, None))
        else:
            raise _BadLine(f"unknown type {typ!r}")

        o = self.b.ops
        o["index"].append(index)
        o["time"].append(time)
        o["process"].append(process)
        o["type"].append(typ)
        o["f"].append(f)
        o["partition"].append(partition)
        o["value"].append(int_value)
        o["value_json"].append(None if value is None or int_value is not None else json.dumps(value))
        o["offset"].append(offset)
        o["node"].append(_opt_str(op.get("node")))
        o["epoch"].append(_int(op, "epoch"))
        o["error"].append(_opt_str(op.get("error")))
        o["hwm"].append(_int(op, "hwm"))
        o["acks"].append(_opt_str(op.get("acks")))
        o["n_records"].append(None if records is None else len(records))
        o["invoke_index"].append(inv[0])
        o["invoke_time"].append(inv[1])
        o["invoke_offset"].append(inv[2])
        prev_ack = (None, None)
        if typ == "ok" and f == "send" and offset is not None:
            prev_ack = self.last_ack.get((process, partition), prev_ack)
            self.last_ack[(process, partition)] = (index, offset)
        o["prev_ack_op"].append(prev_ack[0])
        o["prev_ack_offset"].append(prev_ack[1])
        self.ops += 1
        if records:
            self._add_reads(records, index, process, partition, time, f, inv[1], inv[2])
        if len(o["index"]) >= BATCH_OPS:
            self.b.flush()

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
                raise _BadLine(f"record {r!r} is not an [offset, value] pair of integers")
        return records

    def _add_reads(self, records, index, process, partition, time, f, inv_time, from_offset):
        r = self.b.reads
        n = len(records)
        key = (process, partition)
        prev_op, prev_offset = self.last_read.get(key, (None, None))
        offsets = [rec[0] for rec in records]
        r["index"].extend([index] * n)
        r["process"].extend([process] * n)
        r["partition"].extend([partition] * n)
        r["offset"].extend(offsets)
        r["value"].extend(rec[1] for rec in records)
        r["time"].extend([time] * n)
        r["f"].extend([f] * n)
        r["pos"].extend(range(n))
        r["invoke_time"].extend([inv_time] * n)
        r["from_offset"].extend([from_offset] * n)
        r["prev_op"].append(prev_op)
        r["prev_op"].extend([index] * (n - 1))
        r["prev_offset"].append(prev_offset)
        r["prev_offset"].extend(offsets[:-1])
        self.last_read[key] = (index, offsets[-1])
        self.reads += n


def ingest(history: Path, out_dir: Path) -> IngestResult:
    """Write out_dir/ops.parquet and out_dir/reads.parquet from `history`.

    Raises HistoryError naming every corrupt line (up to a cap). A last line that is cut
    short (no trailing newline, not parseable: the run crashed mid-write) is skipped and
    reported in IngestResult.notes.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    result = IngestResult(out_dir / "ops.parquet", out_dir / "reads.parquet")
    batches = _Batches(result.ops_path, result.reads_path)
    conv = _Converter(batches)
    errors: list[str] = []
    total_errors = 0
    truncated: tuple[int, str] | None = None
    try:
        with open(history, "rb") as fh:
            lineno = 0
            for raw in fh:
                lineno += 1
                if not raw.strip():
                    continue
                try:
                    conv.add(_parse(raw))
                except _BadLine as e:
                    if isinstance(e, _BadJSON) and not raw.endswith(b"\n"):
                        # Only the physically last line can lack a newline: a cut-off write.
                        truncated = (lineno, str(e))
                        continue
                    total_errors += 1
                    if len(errors) < MAX_REPORTED_ERRORS:
                        errors.append(f"{history}:{lineno}: {e}")
    finally:
        batches.close()
    if total_errors:
        raise HistoryError(errors, total_errors)
    if truncated:
        result.notes.append(
            f"{history}:{truncated[0]}: last line is truncated ({truncated[1]}); "
            "ignored it as the tail of a crashed run"
        )
    result.ops, result.reads = conv.ops, conv.reads
    return result
