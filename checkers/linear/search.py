"""The linearizability search: Wing & Gong's algorithm as refined by Lowe.

The history is a doubly linked list of call and return entries in real-time order. Ops
are linearized just in time: in a configuration (the set of ops linearized so far and the
model state) the candidates are the ops whose call precedes the first return entry still
in the list. The search tries them one by one, earliest return first; an op the model
accepts that leads to a configuration not seen before is linearized and its entries are
lifted out of the list. When no candidate works, the op of the first return entry cannot
take effect before it returned, and the search backtracks. When no return entry is left,
every op that returned is linearized: the history is linearizable. Ops with an unknown
outcome have no return entry, so they may be linearized at any point after their call,
or never.

The memo of seen configurations is Lowe's cache. The linearized set is stored compactly
as (m, gaps): every op with id < m except the ``gaps`` (a sorted tuple, the smallest
hashable form) is linearized and none with id >= m is. Ids are in call order, so ``gaps``
holds only ops still pending at that point and stays small however long the history is,
where a bitset would grow with it.

Two prunings on top (sound, and checked against brute force in the tests): a read-only op
the model accepts is the only candidate tried, and of identical pending ops only the one
returning first is (see ``_Search._candidates``).

Before searching, an op that saw a value nothing could explain ends it at once: one whose
value (``Model.observes``: a read's output, a cas's expected value) no sequence of the other
ops invoked before it returned can produce from the initial state, as the model's
``reachable`` tells (a register read of a value nobody wrote). The search would reach the
same verdict only after trying every order of the ops that come before it, which is
exponential in the hanging ones; such a failure is reported with ``unexplained`` set.

Cost: ops with an unknown outcome stay candidates forever, so many concurrent hanging
writes make the search exponential, as in every WGL-style checker; the budget turns that
into an "unknown" verdict.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from checkers.linear.history import UNKNOWN, Operation
from checkers.linear.models import Model

_TAIL = 8  # linearized ops shown before the failing point
_CHECK_EVERY = 1024  # iterations between budget checks
# The pre-check hands Model.reachable the ops invoked before each op it looks at: it stops
# (and leaves the verdict to the search) once it has handed this many in all, which bounds
# it on histories with very many distinct values seen.
_EXPLAIN_WORK = 4_000_000


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
    # op ids of the longest partial linearization, in order (only with want_linearization)
    partial: list[int] = field(default_factory=list)
    # found before searching: no sequence of the ops invoked before ``op`` returned leads
    # from ``state`` (the initial one) to a state in which it is accepted
    unexplained: bool = False


@dataclass
class SearchResult:
    valid: bool | None  # None: budget exhausted
    explored: int  # configurations memoised
    reason: str | None = None  # why unknown
    failure: Failure | None = None
    linearization: list[int] = field(default_factory=list)  # op ids, if valid and asked for


def search(ops: Sequence[Operation], model: Model, budget: Budget = UNLIMITED,
           *, want_linearization: bool = False) -> SearchResult:
    """Decide whether ``ops`` is linearizable with respect to ``model``. With
    ``want_linearization``, a valid result carries a linearization and an invalid one the
    longest partial linearization found (``failure.partial``)."""
    return drive(searching(ops, model, budget, want_linearization=want_linearization))


def searching(ops: Sequence[Operation], model: Model, budget: Budget = UNLIMITED,
              *, want_linearization: bool = False) -> Generator[None, None, SearchResult]:
    """The search as a generator: it yields every ``_CHECK_EVERY`` steps, so several
    searches can share one thread in turns (checkers.linear.check.run_local), and returns
    the SearchResult. Nothing is prepared before the first ``next``."""
    searcher = _Search(sorted(ops, key=lambda o: o.call), model, budget)
    return (yield from searcher.run(want_linearization))


def drive(gen: Generator[None, None, SearchResult]) -> SearchResult:
    """Run a ``searching`` generator to its end."""
    try:
        while True:
            next(gen)
    except StopIteration as done:
        return done.value


class _Search:
    def __init__(self, ops: list[Operation], model: Model, budget: Budget) -> None:
        self.ops = ops
        self.model = model
        self.budget = budget
        self._build_list()
        self.inputs = [model.input_of(op) for op in ops]
        self.outputs = [op.output for op in ops]
        self.read_only = [model.read_only(op) for op in ops]
        self.observed = [model.observes(op) for op in ops]
        # a read is accepted iff it returned the state: compared here, not through step()
        self.reads_return_state = model.reads_return_state
        kinds: dict[tuple[Any, Any, Any], int] = {}
        self.kind = [kinds.setdefault((inp, op.output), len(kinds))
                     for inp, op in zip(self.inputs, ops, strict=True)]
        never = 1 + max((op.ret or op.call for op in ops), default=0)  # after every return
        self.rank = [never + i if op.ret is None else op.ret for i, op in enumerate(ops)]

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
        self.call_entry = [0] * len(self.ops)
        for e in range(1, n + 1):
            if self.is_call[e]:
                self.call_entry[self.op_of[e]] = e
            else:
                self.ret_entry[self.call_entry[self.op_of[e]]] = e
        self.nxt = [(e + 1) % (n + 1) for e in range(n + 1)]
        self.prv = [(e - 1) % (n + 1) for e in range(n + 1)]

    def run(self, want_linearization: bool) -> Generator[None, None, SearchResult]:
        nxt, prv, ret_entry = self.nxt, self.prv, self.ret_entry
        step = self.model.step
        deadline, max_states = self.budget.deadline, self.budget.max_states
        state = self.model.init()
        unexplained = self._unexplained(state)
        if unexplained is not None:
            return SearchResult(False, 0, failure=Failure(
                self.ops[unexplained], state, 0, [], [], unexplained=True))
        m, gaps = 0, ()
        seen: set[tuple[int, tuple[int, ...], Hashable]] = set()
        stack: list[tuple[int, Hashable, int, tuple[int, ...], list[int], int, int]] = []
        best = -1
        failure = None
        countdown = _CHECK_EVERY
        fresh = True  # at a configuration whose candidates are not computed yet
        while True:
            countdown -= 1
            if not countdown:
                countdown = _CHECK_EVERY
                reason = self._over_budget(deadline, max_states, len(seen))
                if reason:
                    return SearchResult(None, len(seen), reason)
                yield
            if fresh:
                fresh = False
                first_ret, cands = self._candidates(state)
                if not first_ret:  # every op that returned is linearized
                    lin = [self.op_of[f[0]] for f in stack] if want_linearization else []
                    return SearchResult(True, len(seen),
                                        linearization=[self.ops[i].id for i in lin])
                pos = 0
            if pos < len(cands):
                e = cands[pos]
                pos += 1
                i = self.op_of[e]
                ok, new_state = step(state, self.inputs[i], self.outputs[i])
                if not ok:
                    continue
                if i < m:
                    new_m, new_gaps = m, tuple(g for g in gaps if g != i)
                else:
                    new_m, new_gaps = i + 1, gaps + tuple(range(m, i)) if i > m else gaps
                config = (new_m, new_gaps, new_state)
                if config in seen:
                    continue
                seen.add(config)
                stack.append((e, state, m, gaps, cands, pos, first_ret))
                state, m, gaps = new_state, new_m, new_gaps
                # lift the call and its return out of the list
                nxt[prv[e]] = nxt[e]
                prv[nxt[e]] = prv[e]
                r = ret_entry[e]
                if r:
                    nxt[prv[r]] = nxt[r]
                    prv[nxt[r]] = prv[r]
                fresh = True
                continue
            # No candidate works: the op of first_ret cannot be linearized before it returns.
            if len(stack) > best:
                best = len(stack)
                failure = self._failure(first_ret, state, stack, want_linearization)
            if not stack:
                return SearchResult(False, len(seen), failure=failure)
            e, state, m, gaps, cands, pos, first_ret = stack.pop()
            r = ret_entry[e]  # unlift in reverse order of lifting
            if r:
                nxt[prv[r]] = r
                prv[nxt[r]] = r
            nxt[prv[e]] = e
            prv[nxt[e]] = e

    def _candidates(self, state: Hashable) -> tuple[int, list[int]]:
        """The first return entry (0 if none is left) and the call entries worth trying in
        this configuration, most urgent (earliest return) first.

        Two prunings, both sound by exchanging ops in a linearization:
        - a read-only op the model accepts now can go first in any linearization from here
          (it changes nothing, and whatever had to precede it already has), so when there
          is one it is the only op worth trying;
        - of identical pending ops (same f, value and output) only the one that returns
          first needs trying: swapping it with an identical op placed before it keeps the
          states and every real-time constraint.
        And one cut: when the op that returns first is a read the model does not accept
        now, it must be linearized after some of the pending ops and before it returns, so
        if the model says no sequence of the pending ops can lead to a state it accepts
        (``Model.reachable``, e.g. no pending write of the value read), nothing is tried.
        """
        nxt, is_call, op_of, kind, rank = self.nxt, self.is_call, self.op_of, self.kind, self.rank
        outputs, reads_state = self.outputs, self.reads_return_state
        first: dict[int, int] = {}
        read = 0
        e = nxt[0]
        while e and is_call[e]:  # the pending calls precede the first return entry
            i = op_of[e]
            if self.read_only[i]:
                if not read and (
                        (outputs[i] is UNKNOWN or outputs[i] == state) if reads_state
                        else self.model.step(state, self.inputs[i], outputs[i])[0]):
                    read = e
            else:
                j = first.get(kind[i])
                if j is None or rank[i] < rank[j]:
                    first[kind[i]] = i
            e = nxt[e]
        if read:
            return e, [read]
        if e and self.read_only[op_of[e]]:
            r = op_of[e]
            if not self.model.reachable(state, self.outputs[r],
                                        [self.inputs[i] for i in first.values()]):
                return e, []
        return e, [self.call_entry[i] for i in sorted(first.values(), key=rank.__getitem__)]

    def _unexplained(self, init: Hashable) -> int | None:
        """The first op, in return order, whose observed value no sequence of the other ops
        invoked before it returned can explain from the initial state (``Model.reachable``),
        or None.

        Only the first op to observe each value needs asking: a later one has every op the
        first had before it, the first one too, and more ops can only make a value
        reachable."""
        step, reachable = self.model.step, self.model.reachable
        before: list[Any] = []  # inputs of the state-changing ops invoked so far
        place: dict[int, int] = {}  # such an op -> its place in `before`
        asked: set[Any] = set()
        work = 0
        for e in range(1, len(self.op_of)):  # the entries in real-time order
            i = self.op_of[e]
            if self.is_call[e]:
                if not self.read_only[i]:
                    place[i] = len(before)
                    before.append(self.inputs[i])
                continue
            seen = self.observed[i]
            if seen is UNKNOWN or seen in asked:
                continue
            asked.add(seen)
            if step(init, self.inputs[i], self.outputs[i])[0]:
                continue
            others = before if self.read_only[i] else before[:place[i]] + before[place[i] + 1:]
            work += len(others)
            if work > _EXPLAIN_WORK:
                return None
            if not reachable(init, seen, others):
                return i
        return None

    @staticmethod
    def _over_budget(deadline: float | None, max_states: int | None, states: int) -> str | None:
        if max_states is not None and states >= max_states:
            return f"explored {states} configurations, the limit is {max_states}"
        if deadline is not None and time.time() >= deadline:
            return "time budget exhausted"
        return None

    def _failure(self, ret: int, state: Hashable, stack: list[Any],
                 want_partial: bool = False) -> Failure:
        """Describe the configuration where op ``ret`` returned unlinearized."""
        concurrent = []
        e = self.nxt[0]
        while e != ret:
            if self.is_call[e]:
                op = self.ops[self.op_of[e]]
                ok, _ = self.model.step(state, self.model.input_of(op), op.output)
                concurrent.append((op, ok))
            e = self.nxt[e]
        previous = [self.ops[self.op_of[s[0]]] for s in stack[-_TAIL:]]
        partial = [self.ops[self.op_of[s[0]]].id for s in stack] if want_partial else []
        return Failure(self.ops[self.op_of[ret]], state, len(stack), previous, concurrent,
                       partial)
