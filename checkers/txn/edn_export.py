"""A history.jsonl with transactions written back as Jepsen Kafka ops (EDN), so Jepsen's own
checker (jepsen.tests.kafka, Elle) can read a run of ours: the other direction of
checkers/jepsen_kafka.py.

Each transaction becomes one Jepsen op, invoked at its invoke time and completed at its
completion time (`:send`, `:poll` or `:txn` as its micro-ops are): `[:send k v]` /
`[:send k [offset v]]` and `[:poll]` / `[:poll {k [[offset v] ...]}]`, in `mop` order,
partitions as keys. A failed or crashed transaction keeps its polls' records, as Jepsen
records them. Each client of ours becomes one Jepsen process until an `info` ends it, after
which it goes on under a new number, as Jepsen's processes do; a translated process name
(`3~1`, an assignment that reset a key) is a process of its own. Jepsen has no seek: a poll
that asked for an offset at or below what its client had read of that partition (our
consumers' occasional re-seek) starts a new process too, as a reassigned consumer would,
rather than reading as a nonmonotonic poll.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import Any

from checkers.exitcodes import Exit
from checkers.linear.edn import Keyword as K
from checkers.linear.edn import dumps
from checkers.txn.ops import Txn, load
from control.files import atomic_output


def _value(t: Txn, completed: bool) -> tuple[Any, ...]:
    mops: list[tuple[int, tuple[Any, ...]]] = []
    for s in t.sends:
        v = (s.offset, s.value) if completed and s.offset is not None else s.value
        mops.append((s.mop, (K("send"), s.key, v)))
    polls: dict[int, dict[int, tuple[tuple[int, int], ...]]] = {}
    for p in t.polls:
        polls.setdefault(p.mop, {})[p.key] = tuple(p.records)
    for mop, reads in polls.items():
        mops.append((mop, (K("poll"), reads) if completed else (K("poll"),)))
    return tuple(m for _, m in sorted(mops, key=lambda x: x[0]))


def _f(t: Txn) -> str:
    if t.sends and t.polls:
        return "txn"
    return "send" if t.sends else "poll"


def jepsen_ops(txns: list[Txn]) -> list[dict[Any, Any]]:
    """Jepsen op maps, invokes and completions in time order, indexed from 0."""
    numbers = itertools.count()
    process: dict[str, int] = {}
    read_to: dict[tuple[str, int], int] = {}  # (client, partition) -> last offset read
    events = []
    for t in sorted(txns, key=lambda t: (t.invoke, t.id)):
        if any(p.start is not None and p.start <= read_to.get((t.process, p.key), -1)
               for p in t.polls):
            process.pop(t.process, None)  # a seek back: a new consumer, in Jepsen's terms
            read_to = {k: v for k, v in read_to.items() if k[0] != t.process}
        for p in t.polls:
            if p.records:
                read_to[(t.process, p.key)] = p.records[-1][0]
        if t.process not in process:
            process[t.process] = next(numbers)
        p = process[t.process]
        if t.type == "info":
            del process[t.process]  # a crashed process is never used again
        events.append((t.invoke, 0, t.id, {K("process"): p, K("type"): K("invoke"),
                                           K("f"): K(_f(t)), K("value"): _value(t, False)}))
        events.append((max(t.ended, t.invoke), 1, t.id, {
            K("process"): p, K("type"): K(t.type), K("f"): K(_f(t)),
            K("value"): _value(t, True)}))
    events.sort(key=lambda e: e[:3])
    return [{K("index"): i, K("time"): time, **op}
            for i, (time, _, _, op) in enumerate(events)]


def export(history: Path, out: Path) -> Path:
    """Write `out` (EDN, one op per line) from a history.jsonl with transactions."""
    with atomic_output(out) as fh:
        for op in jepsen_ops(load(history)):
            fh.write((dumps(op) + "\n").encode())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m checkers.txn.edn_export",
                                 description="a history.jsonl with transactions as Jepsen EDN")
    ap.add_argument("history", type=Path)
    ap.add_argument("out", type=Path)
    args = ap.parse_args(argv)
    try:
        print(export(args.history, args.out))
    except OSError as e:
        print(f"cannot export {args.history} to {args.out}: {e.strerror}", file=sys.stderr)
        return int(Exit.ERROR)
    return int(Exit.VALID)


if __name__ == "__main__":
    sys.exit(main())
