"""The linearizability search: Wing & Gong's algorithm as refined by Lowe.

The history is a doubly linked list of call and return entries in real-time order. The
search walks it, linearizing ops just in time: at a call entry it tries to apply that op
to the model state; if the model accepts it and the configuration (set of linearized ops,
state) has not been seen before, the op is linearized and its entries are lifted out of
the list. Reaching a return entry means that op's return passed while it was still
unlinearized, so the search backtracks. Reaching the end of the list means every op that
returned is linearized: the history is linearizable. Ops with an unknown outcome have no
return entry, so they may be linearized at any point after their call, or never.

The memo of seen configurations is Lowe's cache. The linearized set is stored compactly
as (m, gaps): every op with id < m except the ``gaps`` is linearized and none with id >= m
is. Ids are in call order, so ``gaps`` holds only ops still pending at that point and
stays small however long the history is, where a bitset would grow with it.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from checkers.linear.history import Operation
from checkers.linear.models import Model

_TAIL = 8  # linearized ops shown before the failing point
_CHECK_EVERY = 1024  # iterations between budget checks


@dataclass(frozen=True)
class Budget:
    """Limits after which the verdict is "unknown". ``deadline`` is a time.time() value so
    it means the same on every worker of a Spark job."""

    deadline: float | None = None
    max_states: int | None = None

    @classmethod
    def of(cls, seconds: float | None = None, max_states: int | None = None) -> Budget:
        return cls(None if seconds is None else time.time() + seconds, max_states)


UNLIMITED = Budget()


@dataclass
class Failure:
    """The deepest point the search reached before running out of orderings."""

    op: Operation  # returned while no ordering could linearize it
    state: Hashable  # model state after the linearized ops
    linearized: int  # how many ops were linearized at that point
    previous: list[Operation]  # the last linearized ops, in linearization order
    concurrent: list[tuple[Operation, bool]]  # pending ops, and whether the model accepts each


@dataclass
class SearchResult:
    valid: bool | None  # None: budget exhausted
    explored: int  # configurations memoised
    reason: str | None = None  # why unknown
    failure: Failure | None = None
    linearization: list[int] = field(default_factory=list)  # op ids, if valid and asked for


def search(ops: Sequence[Operation], model: Model, budget: Budget = UNLIMITED,
           *, want_linearization: bool = False) -> SearchResult:
    """Decide whether ``ops`` is linearizable with respect to ``model``."""
    return _Search(sorted(ops, key=lambda o: o.call), model, budget).run(want_linearization)


class _Search:
    def __init__(self, ops: list[Operation], model: Model, budget: Budget) -> None:
        self.ops = ops
        self.model = model
        self.budget = budget
        self._build_list()

    def _build_list(self) -> None:
        """Entries 1..E in real-time order, 0 is the head of a circular list."""
        points = []
        for i, op in enumerate(self.ops):
            points.append((op.call, i, True))
            if op.ret is not None:
                points.append((op.ret, i, False))
        points.sort()
        n = len(points)
        self.is_call = [False] + [p[2] for p in points]
        self.op_of = [-1] + [p[1] for p in points]
        self.ret_entry = [0] * (n + 1)  # call entry -> its return entry (0: none)
        call_entry = {}
        for e in range(1, n + 1):
            if self.is_call[e]:
                call_entry[self.op_of[e]] = e
            else:
                self.ret_entry[call_entry[self.op_of[e]]] = e
        self.nxt = [(e + 1) % (n + 1) for e in range(n + 1)]
        self.prv = [(e - 1) % (n + 1) for e in range(n + 1)]

    def run(self, want_linearization: bool) -> SearchResult:
        nxt, prv, is_call, op_of, ret_entry = (
            self.nxt, self.prv, self.is_call, self.op_of, self.ret_entry)
        step = self.model.step
        inputs = [(op.f, op.value) for op in self.ops]
        outputs = [op.output for op in self.ops]
        read_only = [self.model.read_only(op) for op in self.ops]
        deadline, max_states = self.budget.deadline, self.budget.max_states

        state = self.model.init()
        m, gaps = 0, frozenset()
        seen: set[tuple[int, frozenset[int], Hashable]] = set()
        stack: list[tuple[int, Hashable, int, frozenset[int]]] = []
        best = -1
        failure = None
        countdown = _CHECK_EVERY
        e = nxt[0]
        fresh = True  # at a configuration not scanned yet
        forced = False  # trying the one read-only op this configuration needs to try
        while e:
            countdown -= 1
            if not countdown:
                countdown = _CHECK_EVERY
                reason = self._over_budget(deadline, max_states, len(seen))
                if reason:
                    return SearchResult(None, len(seen), reason)
            if fresh:
                # A read-only op the model accepts now can go first in any linearization
                # from here (it changes nothing, and whatever had to precede it already
                # has), so when there is one it is the only op worth trying.
                fresh = False
                x = e
                while x and is_call[x]:
                    i = op_of[x]
                    if read_only[i] and step(state, inputs[i], outputs[i])[0]:
                        e, forced = x, True
                        break
                    x = nxt[x]
            if is_call[e]:
                i = op_of[e]
                ok, new_state = step(state, inputs[i], outputs[i])
                if ok:
                    if i < m:
                        new_m, new_gaps = m, gaps - {i}
                    else:
                        new_m, new_gaps = i + 1, gaps.union(range(m, i)) if i > m else gaps
                    config = (new_m, new_gaps, new_state)
                    if config not in seen:
                        seen.add(config)
                        stack.append((e, state, m, gaps))
                        state, m, gaps = new_state, new_m, new_gaps
                        # lift the call and its return out of the list
                        nxt[prv[e]] = nxt[e]
                        prv[nxt[e]] = prv[e]
                        r = ret_entry[e]
                        if r:
                            nxt[prv[r]] = nxt[r]
                            prv[nxt[r]] = prv[r]
                        e = nxt[0]
                        fresh, forced = True, False
                        continue
                if not forced:
                    e = nxt[e]
                    continue
            elif len(stack) > best:  # op e returned while still unlinearized
                best = len(stack)
                failure = self._failure(e, state, stack)
            # This configuration has failed: backtrack to the last one that still has
            # ops to try. Frames of forced read-only ops have none, so they go too.
            forced = False
            while True:
                if not stack:
                    return SearchResult(False, len(seen), failure=failure)
                e, state, m, gaps = stack.pop()
                r = ret_entry[e]  # unlift in reverse order of lifting
                if r:
                    nxt[prv[r]] = r
                    prv[nxt[r]] = r
                nxt[prv[e]] = e
                prv[nxt[e]] = e
                if not read_only[op_of[e]]:
                    break
            e = nxt[e]
        lin = [op_of[s[0]] for s in stack] if want_linearization else []
        return SearchResult(True, len(seen), linearization=[self.ops[i].id for i in lin])

    @staticmethod
    def _over_budget(deadline: float | None, max_states: int | None, states: int) -> str | None:
        if max_states is not None and states >= max_states:
            return f"explored {states} configurations, the limit is {max_states}"
        if deadline is not None and time.time() >= deadline:
            return "time budget exhausted"
        return None

    def _failure(self, ret: int, state: Hashable, stack: list[Any]) -> Failure:
        """Describe the configuration where op ``ret`` returned unlinearized."""
        concurrent = []
        e = self.nxt[0]
        while e != ret:
            if self.is_call[e]:
                op = self.ops[self.op_of[e]]
                ok, _ = self.model.step(state, (op.f, op.value), op.output)
                concurrent.append((op, ok))
            e = self.nxt[e]
        previous = [self.ops[self.op_of[s[0]]] for s in stack[-_TAIL:]]
        return Failure(self.ops[self.op_of[ret]], state, len(stack), previous, concurrent)
