"""Histories of a real atomic register (or map of them) accessed concurrently.

Each op is invoked by an idle process, takes effect atomically at some later moment and
completes after that, so every history produced is linearizable by construction: the
order of the effects is a witness. Timeouts make ``info`` ops: either the op already took
effect, or it is left hanging and may take effect later or never. Used by the benchmark
and by the property tests as ground truth.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class _Op:
    process: int
    f: str
    arg: Any  # write: value; cas: (expected, new); read: None
    key: Any
    result: Any = None  # read: value seen; cas: whether it succeeded
    timed_out: bool = False


def _take(rng: random.Random, items: list[Any]) -> Any:
    """Remove and return a random element in O(1)."""
    i = rng.randrange(len(items))
    items[i], items[-1] = items[-1], items[i]
    return items.pop()


class _Sim:
    def __init__(self, rng: random.Random, processes: int, values: int, fs: Sequence[str],
                 keys: Sequence[Any] | None, info_rate: float) -> None:
        self.rng, self.values, self.fs, self.keys, self.info_rate = (
            rng, values, fs, keys, info_rate)
        self.idle = list(range(processes))
        self.next_process = processes
        self.waiting: list[_Op] = []  # invoked, not yet in effect
        self.applied: list[_Op] = []  # in effect, not yet completed
        self.registers: dict[Any, Any] = {}
        self.events: list[dict[str, Any]] = []

    def emit(self, op: _Op, kind: str, value: Any) -> None:
        if self.keys is not None:
            value = [op.key, value]
        n = len(self.events)
        self.events.append({"index": n, "time": n * 1000, "process": op.process,
                            "type": kind, "f": op.f, "value": value})

    def invoke(self) -> None:
        rng = self.rng
        f = rng.choice(self.fs)
        arg = (None if f == "read" else rng.randrange(self.values) if f == "write"
               else [rng.randrange(self.values), rng.randrange(self.values)])
        key = None if self.keys is None else rng.choice(self.keys)
        op = _Op(_take(rng, self.idle), f, arg, key)
        self.waiting.append(op)
        self.emit(op, "invoke", arg)

    def apply(self) -> None:
        op = _take(self.rng, self.waiting)
        if op.timed_out:  # a hung op: it may still take effect, or never
            if self.rng.random() < 0.5:
                self.effect(op)
            return
        if self.rng.random() < self.info_rate:
            self.time_out(op)
            op.timed_out = True
            self.waiting.append(op)
            return
        self.effect(op)
        self.applied.append(op)

    def effect(self, op: _Op) -> None:
        current = self.registers.get(op.key)
        if op.f == "read":
            op.result = current
        elif op.f == "write":
            self.registers[op.key] = op.arg
        else:
            op.result = current == op.arg[0]
            if op.result:
                self.registers[op.key] = op.arg[1]

    def complete(self) -> None:
        op = _take(self.rng, self.applied)
        if self.rng.random() < self.info_rate:
            self.time_out(op)
            return
        if op.f == "read":
            self.emit(op, "ok", op.result)
        else:
            self.emit(op, "ok" if op.result is not False else "fail", op.arg)
        self.idle.append(op.process)

    def time_out(self, op: _Op) -> None:
        """The client gives up: info, and the process is never reused."""
        self.emit(op, "info", op.arg)
        self.idle.append(self.next_process)
        self.next_process += 1


def simulate(rng: random.Random, n_ops: int, processes: int, *, values: int = 5,
             fs: Sequence[str] = ("read", "write", "cas"), keys: Sequence[Any] | None = None,
             info_rate: float = 0.0) -> list[dict[str, Any]]:
    """Events of ``n_ops`` ops by ``processes`` concurrent clients, in history order.

    ``keys`` makes a kv history with Jepsen independent values ``[key, value]``.
    """
    sim = _Sim(rng, processes, values, tuple(fs), keys, info_rate)
    invoked = 0
    while True:
        live = sum(1 for op in sim.waiting if not op.timed_out) + len(sim.applied)
        can_invoke = len(sim.idle) if invoked < n_ops else 0
        if not (can_invoke or live):
            return sim.events
        # each possible next step equally likely: one of the idle processes invokes, one of
        # the waiting ops takes effect, or one of the applied ops completes
        r = rng.randrange(can_invoke + len(sim.waiting) + len(sim.applied))
        if r < can_invoke:
            sim.invoke()
            invoked += 1
        elif r < can_invoke + len(sim.waiting):
            sim.apply()
        else:
            sim.complete()
