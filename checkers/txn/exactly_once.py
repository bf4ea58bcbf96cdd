"""Exactly-once delivery through a consume-transform-produce group (docs/kafka.md,
"Consume-transform-produce").

A transformer's transaction polls input partitions as a member of a consumer group, sends
records to output partitions, each naming the input records it was made of (its `sources`:
[partition, offset, value] each), and commits the group's offsets past what it polled in
the same transaction (`send_offsets_to_transaction`). Through the group, every input record
is then transformed exactly once:

- `duplicate-output`: an input record among the sources of two committed output records;
- `lost-output`: a committed input record below the group's committed position in its
  partition (past the highest offset a committed transformer transaction polled there)
  that no committed output record was made of.

A committed output record is one its partition's completed final read holds (the log's
final state) or, where that read did not complete, one an ok transaction sent. A transformer
transaction committed when it is ok, or when it is `info` and one of its records is
committed: a commit is atomic, so its offsets went with its records. An aborted
transaction's output read by a read-committed consumer is the per-partition checks'
`aborted-read`, as for any aborted record.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from checkers.txn.consumers import Log
from checkers.txn.ops import Send, Txn
from runformat.run_config import RunConfig

if TYPE_CHECKING:
    from checkers.txn.analysis import Findings

NAMES = ("duplicate-output", "lost-output")
Made = dict[tuple[int, int], list[tuple[Txn, Send]]]  # (partition, value) -> outputs of it


def history_partitions(config: RunConfig) -> int | None:
    """The partitions a run's history names: the test topic's and, with transformers, the
    output topic's after them (as many: output partition q is the history's P + q)."""
    if config.partitions is None or not config.transformers:
        return config.partitions
    return 2 * config.partitions


def exactly_once(txns: list[Txn], findings: Findings) -> None:
    """Judge the transformer transactions of `txns` (those whose sends name sources)."""
    transforms = [t for t in txns if any(s.sources for s in t.sends)]
    if not transforms:
        return
    log = Log(txns)
    outputs = [(t, s) for t in transforms if t.type != "fail" for s in t.sends if s.sources]
    committed = _committed(outputs, log)
    made: Made = defaultdict(list)
    for t, s in committed:
        for p, _, v in s.sources:
            made[(p, v)].append((t, s))
    _duplicates(made, findings)
    position = _positions(transforms, {t.id for t, _ in committed})
    lost, behind = _lost(position, made, _unsettled(outputs, log), log, findings)
    findings.stats["exactly_once"] = {
        "transactions": len(transforms), "committed": len({t.id for t, _ in committed}),
        "outputs": len(committed), "inputs": len(made), "lost": lost,
        "duplicated": sum(len(outs) > 1 for outs in made.values()),
        "past_position": behind}  # committed inputs the group had not transformed yet


def _committed(outputs: list[tuple[Txn, Send]], log: Log) -> list[tuple[Txn, Send]]:
    """The output records in their partition's completed final read, or, without one, the
    ok transactions' (an info transaction's record counts once the final read holds it)."""
    final = {k: set(records.values()) for k, records in log.final.items()}
    return [(t, s) for t, s in outputs
            if (s.value in final[s.key] if s.key in final else t.type == "ok")]


def _unsettled(outputs: list[tuple[Txn, Send]], log: Log) -> set[tuple[int, int]]:
    """Inputs of info transactions whose records no completed final read settles: they may
    have committed, so their inputs are not reported lost."""
    return {(p, v) for t, s in outputs if t.type == "info" and s.key not in log.final
            for p, _, v in s.sources}


def _duplicates(made: Made, findings: Findings) -> None:
    for (p, v), outs in sorted(made.items()):
        if len(outs) > 1:
            findings.add("duplicate-output", {
                "partition": p, "value": v,
                "outputs": [{"txn": t.id, "partition": s.key, "value": s.value,
                             "offset": s.offset} for t, s in outs]})


def _lost(position: dict[int, int], made: Made, unsettled: set[tuple[int, int]], log: Log,
          findings: Findings) -> tuple[int, int]:
    """Committed inputs below the group's position without output (reported), and how many
    lie past it: (lost, behind)."""
    lost = behind = 0
    for p, end in sorted(position.items()):
        for o, v in _records(log, p):
            behind += o >= end
            if o < end and (p, v) not in made and (p, v) not in unsettled:
                lost += 1
                findings.add("lost-output", {"partition": p, "offset": o, "value": v,
                                             "group_position": end})
    return lost, behind


def _positions(transforms: list[Txn], committed: set[int]) -> dict[int, int]:
    """Each input partition's committed position: past the highest offset a committed
    transformer transaction polled there."""
    position: dict[int, int] = {}
    for t in transforms:
        if t.type == "ok" or t.id in committed:
            for p in t.polls:
                if p.records:
                    position[p.key] = max(position.get(p.key, 0), p.records[-1][0] + 1)
    return position


def _records(log: Log, key: int) -> list[tuple[int, int]]:
    """The committed records of an input partition, (offset, value) by offset: its completed
    final read, else every record the history shows there."""
    if key in log.final:
        return sorted(log.final[key].items())
    return sorted((o, v) for o in log.offsets[key] for v in log.at[(key, o)])
