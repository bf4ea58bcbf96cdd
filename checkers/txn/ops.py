"""Transactions read back from a history.jsonl whose parts carry `txn` and `mop`.

Each part of a transaction is an invoke/completion pair of ours: a send of one value to one
partition, or a poll of one partition (its records). All parts share the transaction's
`txn` (its id), process, invoke and completion times, and completion type; `mop` is the
micro-op's place in the transaction (Jepsen's `:txn` value, in order). The reads of a failed
or crashed transaction's polls are kept, as `fail` / `info` polls with their `records`: the
broker returned them, so they prove what the log held even though the consumer's caller
discarded them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

from runformat import Op, history

COMMITTED, UNCOMMITTED = "read_committed", "read_uncommitted"


@dataclass(slots=True)
class Send:
    mop: int
    key: int
    value: int
    offset: int | None
    # the input records (partition, offset, value) a consume-transform-produce transaction
    # made this record of (checkers/txn/exactly_once.py); none for a plain send
    sources: tuple[tuple[int, int, int], ...] = ()


@dataclass(slots=True)
class Poll:
    mop: int
    key: int
    records: list[tuple[int, int]]  # (offset, value), in the order returned
    process: str  # the part's process: a translation renames it when an assign resets a key
    final: bool = False  # a final-poll that completed: the partition's final state
    start: int | None = None  # the offset it asked for (a seek), when it named one
    isolation: str = COMMITTED  # its consumer's isolation.level (a history's polls without
    # one are read-committed: Jepsen's transactional consumers are)
    group: str | None = None  # the consumer group whose member polled, if any


@dataclass(slots=True)
class Txn:
    id: int
    process: str  # its client (`client-N`, when its parts name one), else its first part's
    type: str  # ok, info or fail
    invoke: int
    complete: int | None  # None when info: it may take effect at any time after its invoke
    sends: list[Send] = field(default_factory=list)
    polls: list[Poll] = field(default_factory=list)
    ended: int = 0  # when its completion was written (an info's too)


def base_process(process: str) -> str:
    """The client behind a translated process name: `3`, `3#1` (after a crash) and `3~2`
    (after an assignment reset one key) are all client 3."""
    return process.split("~", 1)[0].split("#", 1)[0]


def has_transactions(path: Path, sample: int = 100) -> bool:
    """True when the first client lines of the history carry `mop`."""
    return any("mop" in op for op in islice(_client_ops(path), sample))


def _client_ops(path: Path) -> Iterator[Op]:
    """The history's client operations; a malformed line is skipped (the ingest names it)."""
    return (op for op in history(path) if op.get("process") != "nemesis")


def read_txns(ops: Iterable[dict[str, Any]]) -> list[Txn]:
    """The transactions of a history's client ops (completions carry what their invokes
    did), in order of their ids. Ops without `txn` (a final read's) are transactions of one
    part, numbered after the others."""
    invoked: dict[str, int] = {}
    txns: dict[int, Txn] = {}
    loose: dict[int, Txn] = {}  # by op index, which may equal some txn id
    for op in ops:
        process, kind = str(op.get("process")), op.get("type")
        if kind == "invoke":
            invoked[process] = int(op.get("time", 0))
            continue
        into = txns if "txn" in op else loose
        tid = int(op["txn"] if "txn" in op else op.get("index", len(loose)))
        t = into.get(tid)
        start = invoked.pop(process, int(op.get("time", 0)))
        if t is None:
            done = None if kind == "info" else int(op.get("time", 0))
            # a transactional client sends to each partition under a process of its own
            who = process if op.get("client") is None else f"client-{op['client']}"
            t = into[tid] = Txn(tid, who, str(kind), start, done)
        t.invoke = min(t.invoke, start)
        t.ended = max(t.ended, int(op.get("time", 0)))
        mop = int(op.get("mop", 0))
        if op.get("f") == "send":
            offset = op.get("offset") if kind != "fail" else None
            sources = tuple((int(p), int(o), int(v)) for p, o, v in op.get("sources") or ())
            t.sends.append(Send(mop, int(op["partition"]), int(op["value"]), offset, sources))
        elif op.get("f") in ("poll", "final-poll"):
            records = [(int(o), int(v)) for o, v in op.get("records") or []]
            final = op.get("f") == "final-poll" and kind == "ok" and op.get("complete") is True
            start = op.get("offset")
            t.polls.append(Poll(mop, int(op["partition"]), records, process, final,
                                int(start) if start is not None else None,
                                str(op.get("isolation", COMMITTED)), op.get("group")))
    after = max(txns, default=-1) + 1
    for t in loose.values():
        t.id += after
    return [txns[k] for k in sorted(txns)] + [loose[k] for k in sorted(loose)]


def load(path: Path) -> list[Txn]:
    return read_txns(_client_ops(path))
