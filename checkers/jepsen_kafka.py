"""Jepsen Kafka histories (jepsen.tests.kafka: Kafka, Redpanda) translated into ours.

Jepsen's ops carry micro-ops in their values::

    {:type :invoke, :f :send, :value [[:send 3 12] [:send 4 13]], :process 0, ...}
    {:type :ok,     :f :send, :value [[:send 3 [7 12]] [:send 4 13]], ...}   ; [offset value]
    {:type :ok,     :f :poll, :value [[:poll {3 [[7 12] [8 14]], 4 []}]], ...}
    {:type :ok,     :f :assign, :value [3 4], ...}                            ; or :subscribe

(`:txn` ops mix both.) Each Jepsen op becomes several of ours, all carrying the Jepsen op's
index as `txn`, the micro-op's place as `mop` and its invoke and completion times, so the
checks know which of our ops are parts of one operation (the `int-` anomalies of
checkers/definitions.py, and the transactions of checkers/txn; docs/formats.md):

- each `[:send k v]` becomes a send of v to partition k, completed as the Jepsen op was (ok,
  info or fail), with the offset Jepsen returned when there is one (and a fail with Jepsen's
  `:error`, else "fail": our fails carry an error). An op that completed info (or never
  completed) and sent a value some ok op read completes ok: a transaction commits whole;
- the `[:poll ...]` micro-ops of an op become one poll per key, its records in the order
  Jepsen returned them (across micro-ops), completed as the op. The per-partition checks read
  only ok polls; the reads of failed or crashed ops are kept for checkers/txn, as evidence of
  what the log held;
- `:assign` / `:subscribe` (ok or info) that drop a key reset that process's place in it, as
  in Jepsen: our process for the key gets a new name (`3~1`), so the next read or send is not
  compared with the ones before. Keys a transaction's `:rebalance-log` names are read per
  micro-op (only the reads of one micro-op count as one read);
- a process whose op ended in `info` is never used again in our history: Jepsen's own tests
  use it again, and its later ops then go under a new name (`3#1`), as Jepsen's runs give a
  crashed process's successor a new number;
- other ops (`:crash`, `:debug-topic-partitions`, the nemesis) are left out.

Keys and values that are not integers (the keywords of Jepsen's own tests) are numbered in
order of appearance; `jepsen-kafka.json` beside the history maps them back. `test.json`
allows what Jepsen's checker allows for such a test: `int-send-skip` always (another
producer's sends interleave with an op's), `poll-skip` and `nonmonotonic-poll` when
consumers `:subscribe` (rebalances move them).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkers.linear.history import HistoryError
from checkers.linear.importers import read_edn
from control.files import atomic_output, owned_dir, write_json_atomic, write_text_atomic

CLIENT_FS = ("send", "poll", "txn")
ASSIGN_FS = ("assign", "subscribe")
MAX_PARTITION = 2**31 - 1


def _micro_ops(value: Any) -> bool:
    return (isinstance(value, list) and bool(value)
            and all(isinstance(m, list) and m and m[0] in ("send", "poll") for m in value))


def is_jepsen_kafka(path: str | Path, sample: int = 200) -> bool:
    """True if the history's first client ops are Jepsen Kafka ops (micro-op values, or
    assignments of lists of keys)."""
    try:
        events = read_edn(path)
    except (HistoryError, OSError, UnicodeDecodeError):
        return False
    seen = 0
    for _, e in events:
        if e.get("f") in CLIENT_FS + ASSIGN_FS and e.get("process") != "nemesis":
            if _micro_ops(e.get("value")) or (e.get("f") in ASSIGN_FS
                                              and isinstance(e.get("value"), list)):
                return True
            seen += 1
            if seen >= sample:
                break
    return False


class _Numbering:
    """Integers stay themselves when every item is a suitable integer; else items are
    numbered 0, 1, ... in order of appearance."""

    def __init__(self, items: Iterable[Any], lo: int, hi: int) -> None:
        ordered = list(dict.fromkeys(_hashable(x) for x in items))
        self.identity = all(isinstance(x, int) and not isinstance(x, bool) and lo <= x <= hi
                            for x in ordered)
        self.ids = {x: (x if self.identity else i) for i, x in enumerate(ordered)}

    def __call__(self, x: Any) -> int:
        return self.ids[_hashable(x)]

    def legend(self) -> dict[str, Any] | None:
        return None if self.identity else {str(i): _show(x) for x, i in self.ids.items()}


def _hashable(x: Any) -> Any:
    if isinstance(x, list):
        return tuple(_hashable(v) for v in x)
    if isinstance(x, dict):
        return tuple(sorted(((repr(k), _hashable(v)) for k, v in x.items())))
    return x


def _show(x: Any) -> Any:
    return list(x) if isinstance(x, tuple) else x


def _pair(mop: list) -> tuple[Any, Any]:
    """(offset or None, value) of a send micro-op's value: `v` or `[offset v]`."""
    v = mop[2] if len(mop) > 2 else None
    if isinstance(v, list) and len(v) == 2:
        return v[0], v[1]
    return None, v


@dataclass
class _Op:
    invoke: dict[str, Any]
    complete: dict[str, Any] | None
    where: str


@dataclass
class Translation:
    events: list[dict[str, Any]] = field(default_factory=list)
    subscribed: bool = False
    dropped_reads: int = 0  # records without an offset
    resolved: list[int] = field(default_factory=list)  # info ops a read proved committed
    partitions: int = 0
    legend: dict[str, Any] = field(default_factory=dict)


def _int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _bad_micro_op(mop: Any) -> str | None:
    """Why a micro-op of a :send/:poll/:txn op cannot be read, or None: `[:send k v]` (v may
    be `[offset v]`), `[:poll]` (an invocation) or `[:poll {k [[offset v] ...]}]`. Names other
    than send and poll are left out, as before."""
    if not isinstance(mop, list) or not mop:
        return "a micro-op must be a non-empty vector"
    if mop[0] == "send" and not 2 <= len(mop) <= 3:
        return "a :send micro-op is [:send key value]"
    if mop[0] == "poll":
        reads = mop[1] if len(mop) > 1 else None
        if len(mop) > 2 or not isinstance(reads, dict | None):
            return "a :poll micro-op is [:poll] or [:poll {key [[offset value] ...]}]"
        if reads and not all(isinstance(pairs, list | None) for pairs in reads.values()):
            return "a :poll micro-op's reads of a key must be a vector of [offset value]"
    return None


def _bad_op(e: dict[str, Any]) -> str | None:
    """Why a client op cannot be translated, or None (what the translation relies on)."""
    if any(k in e and not _int(e[k]) for k in ("time", "index")):
        return ":time and :index must be integers"
    value = e.get("value")
    if not isinstance(value, list | None):
        return f":{e.get('f')} needs a vector value"
    if e.get("f") in CLIENT_FS:
        for mop in value or []:
            if (why := _bad_micro_op(mop)) is not None:
                return why
    log = e.get("rebalance-log")
    if log is not None and not (isinstance(log, list) and all(
            isinstance(r, dict) and isinstance(r.get("keys"), list | None) for r in log)):
        return ":rebalance-log must be a vector of maps with :keys vectors"
    return None


def _pairs(events: list[tuple[str, dict[str, Any]]]) -> list[_Op]:
    """Client ops paired by process, in completion order (pending invokes last)."""
    pending: dict[Any, tuple[str, dict[str, Any]]] = {}
    out: list[_Op] = []
    for where, e in events:
        process, kind, f = e.get("process"), e.get("type"), e.get("f")
        if process == "nemesis" or f not in CLIENT_FS + ASSIGN_FS:
            continue
        if (why := _bad_op(e)) is not None:
            raise HistoryError(f"{where}: {why}")
        if kind == "invoke":
            if process in pending:
                raise HistoryError(f"{where}: process {process!r} invoked again while its op "
                                   f"from {pending[process][0]} is pending")
            pending[process] = (where, e)
        elif kind in ("ok", "info", "fail"):
            # a completion alone (Jepsen's unit tests write some) is its own invocation
            inv = pending.pop(process, (where, e))
            out.append(_Op(inv[1], e, where))
        else:
            raise HistoryError(f"{where}: type {kind!r} is not invoke, ok, info or fail")
    out += [_Op(e, None, where) for where, e in pending.values()]
    return out


def translate_events(events: list[tuple[str, dict[str, Any]]]) -> Translation:
    """Our history events (and what the translation dropped) from Jepsen Kafka events."""
    ops = _pairs(events)
    keys: list[Any] = []
    values: list[Any] = []
    for op in ops:
        for e in (op.invoke, op.complete):
            if e is None:
                continue
            v = e.get("value")
            if e.get("f") in ASSIGN_FS and isinstance(v, list):
                keys += v
            elif e.get("f") in CLIENT_FS and isinstance(v, list):
                for mop in v:
                    if isinstance(mop, list) and mop and mop[0] == "send" and len(mop) >= 2:
                        keys.append(mop[1])
                        values.append(_pair(mop)[1])
                    elif isinstance(mop, list) and len(mop) >= 2 and mop[0] == "poll":
                        for k, pairs in (mop[1] or {}).items():
                            keys.append(k)
                            values += [p[1] for p in pairs or [] if isinstance(p, list)]
    key_no = _Numbering(keys, 0, MAX_PARTITION)
    value_no = _Numbering(values, -(2**63), 2**63 - 1)
    t = Translation(partitions=1 + max((key_no(k) for k in keys), default=0))
    t.legend = {"keys": key_no.legend(), "values": value_no.legend()}
    epoch: dict[tuple[Any, int], int] = {}
    touched: dict[Any, set[int]] = {}  # process -> keys it read or sent since its assignment
    crashed: dict[Any, int] = {}  # process -> its ops that ended in info so far

    def alias(process: Any, key: int) -> str:
        touched.setdefault(process, set()).add(key)
        e = epoch.get((process, key), 0)
        name = f"{process}" if not crashed.get(process) else f"{process}#{crashed[process]}"
        return name if e == 0 else f"{name}~{e}"

    def emit(**fields: Any) -> None:
        t.events.append({"index": len(t.events), **fields})

    committed = _committed_by_reads(ops, key_no, value_no)
    for n, op in enumerate(ops):
        inv, done = op.invoke, op.complete
        f, process = inv.get("f"), inv.get("process")
        kind = "info" if done is None else done["type"]
        if kind == "info" and n in committed:
            kind = "ok"
            t.resolved.append(int((done or inv).get("index", n)))
        txn = (done or inv).get("index", n)
        t_inv = int(inv.get("time", inv.get("index", n)))
        t_done = int((done or inv).get("time", t_inv))
        if f in ASSIGN_FS:
            if f == "subscribe":
                t.subscribed = True
            if kind in ("ok", "info"):
                kept = {key_no(k) for k in (done or inv).get("value") or []}
                mine = touched.setdefault(process, set())
                for k in mine - kept:
                    epoch[(process, k)] = epoch.get((process, k), 0) + 1
                mine &= kept
            continue
        value = (done if done is not None and isinstance(done.get("value"), list) else inv)
        mops = value.get("value") or []
        rebalanced = {key_no(k) for r in (done or {}).get("rebalance-log") or []
                      for k in (r.get("keys") or [])}
        common = {"time": t_inv, "txn": txn}
        # sends, in micro-op order
        for i, mop in enumerate(mops):
            if not (isinstance(mop, list) and mop and mop[0] == "send"):
                continue
            offset, v = _pair(mop)
            k = key_no(mop[1])
            p = alias(process, k)
            emit(process=p, type="invoke", f="send", partition=k, value=value_no(v), mop=i,
                 **common)
            completion: dict[str, Any] = {"process": p, "type": kind, "f": "send",
                                          "partition": k, "value": value_no(v),
                                          "time": t_done, "txn": txn, "mop": i}
            if isinstance(offset, int) and offset >= 0 and kind != "fail":
                completion["offset"] = offset
            if kind == "fail":
                completion["error"] = _error(done)
            emit(**completion)
        # reads: one poll per key (per micro-op for a rebalanced key), completed as the op
        reads: dict[tuple[int, int], list[list[int]]] = {}
        first_mop: dict[tuple[int, int], int] = {}
        for i, mop in enumerate(mops):
            if not (isinstance(mop, list) and len(mop) >= 2 and mop[0] == "poll"):
                continue
            for key, pairs in (mop[1] or {}).items():
                k = key_no(key)
                records = []
                for pair in pairs or []:
                    if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], int):
                        records.append([pair[0], value_no(pair[1])])
                    else:
                        t.dropped_reads += 1
                where = (k, i if k in rebalanced else -1)
                reads.setdefault(where, []).extend(records)
                first_mop.setdefault(where, i)
        for (k, part), records in reads.items():
            p = alias(process, k)
            mop_no = first_mop[(k, part)]
            emit(process=p, type="invoke", f="poll", partition=k, mop=mop_no, **common)
            failed = {"error": _error(done)} if kind == "fail" else {}
            emit(process=p, type=kind, f="poll", partition=k, records=records, time=t_done,
                 txn=txn, mop=mop_no, **failed)
        if kind == "info":  # ours never uses a process again after an info (Jepsen's unit
            crashed[process] = crashed.get(process, 0) + 1  # tests do): a new name
    return t


def _committed_by_reads(ops: list[_Op], key_no: _Numbering, value_no: _Numbering) -> set[int]:
    """The ops that completed info (or never completed) and sent a value some ok op read:
    a transaction commits whole or not at all, so one read proves all of its sends."""
    read: set[tuple[int, int]] = set()
    for op in ops:
        if op.complete is not None and op.complete.get("type") == "ok":
            for mop in op.complete.get("value") or []:
                if isinstance(mop, list) and len(mop) >= 2 and mop[0] == "poll":
                    read |= {(key_no(k), value_no(p[1])) for k, pairs in (mop[1] or {}).items()
                             for p in pairs or [] if isinstance(p, list) and len(p) == 2}
    committed = set()
    for n, op in enumerate(ops):
        done = op.complete
        if op.invoke.get("f") in ASSIGN_FS or (done is not None and done["type"] != "info"):
            continue
        mops = (done or op.invoke).get("value") or []
        if any(isinstance(m, list) and len(m) >= 2 and m[0] == "send"
               and (key_no(m[1]), value_no(_pair(m)[1])) in read for m in mops):
            committed.add(n)
    return committed


def _error(done: dict[str, Any] | None) -> str:
    """A failed op's `error` (every fail of our history carries one): Jepsen's `:error` as
    text, else "fail"."""
    error = (done or {}).get("error")
    if error is None:
        return "fail"
    return error if isinstance(error, str) else json.dumps(error, default=str)


def translate(path: str | Path, out_dir: str | Path) -> Path:
    """Write out_dir/history.jsonl (ours), test.json and jepsen-kafka.json (the legend of
    keys and values, and what was dropped) from a Jepsen Kafka history.edn; return out_dir."""
    t = translate_events(read_edn(path))
    # Ours, real, and writable by nobody else: a folder planted at this name (a symlink to a
    # run folder) would have these files, and the check's results, replace that run's.
    out = owned_dir(Path(out_dir))
    with atomic_output(out / "history.jsonl") as fh:
        for e in t.events:
            fh.write((json.dumps(e) + "\n").encode())
    allow = ["int-send-skip"] + (["poll-skip", "nonmonotonic-poll"] if t.subscribed else [])
    config = {"topic": {"name": "jepsen", "partitions": max(1, t.partitions)},
              "workload": {"acks": "all"}, "checker": {"allow": allow}}
    write_json_atomic(out / "test.json", {"name": "jepsen-kafka", "config": config})
    write_text_atomic(out / "jepsen-kafka.json", json.dumps(
        {"source": str(path), "dropped_reads": t.dropped_reads, "subscribe": t.subscribed,
         "info_committed_by_reads": t.resolved,
         **t.legend}, indent=2, default=str) + "\n")
    return out
