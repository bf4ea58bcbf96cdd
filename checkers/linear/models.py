"""Sequential specifications the search checks histories against (Porcupine-style models).

A model is a pure function over hashable states: ``init()`` gives the initial state and
``step(state, op_input, op_output)`` says whether an op with that input could have produced
that output in that state, and the state after it. ``op_input`` is ``(f, value)``;
``op_output`` is the completion's value or ``UNKNOWN`` for an op whose outcome is unknown.
``partition`` splits a history into independent sub-histories checked on their own
(P-compositionality, Horn & Kroening): a kv store is linearizable iff each key is.

Reads of nil (``NIL_READS``): by default an ok read that returned nil (``None``) means the
register held nil, as any other value would -- so it is legal only while the register is
still at an initial value of nil. Knossos instead treats an ok read of nil as a read whose
value is unknown (its register and cas-register models accept ``(nil? v)`` in any state):
clients that time out a read and record nil are then not reported. ``nil_reads="unknown"``
(``--nil-reads unknown``) selects Knossos's convention: such reads are dropped like any
read with an unknown outcome.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from checkers.linear.history import UNKNOWN, HistoryError, Operation, thaw

OpInput = tuple[str, Any]


@dataclass(frozen=True)
class Partition:
    """An independent sub-history with the model to check it against."""

    key: Any  # None for a history that is not partitioned
    ops: Sequence[Operation]
    model: Model


NIL_READS = ("value", "unknown")


class Model:
    name = "model"
    fs: frozenset[str] = frozenset()
    nil_reads = "value"  # or "unknown": an ok read of nil constrains nothing (Knossos)
    # True when step() accepts a read-only op iff its output is UNKNOWN or equals the state
    # and leaves the state alone: the search then compares without calling step()
    reads_return_state = False

    def init(self) -> Hashable:
        raise NotImplementedError

    def input_of(self, op: Operation) -> OpInput:
        """The op's input as ``step`` takes it."""
        return op.f, op.value

    def step(self, state: Hashable, op_input: OpInput, op_output: Any) -> tuple[bool, Hashable]:
        raise NotImplementedError

    def prepare(self, ops: Sequence[Operation]) -> list[Operation]:
        """Validate ops (raising HistoryError naming the op) and drop those that cannot
        matter: an op with an unknown outcome that never changes the state."""
        for op in ops:
            self.validate(op)
        return [op for op in self.unknown_nil_reads(ops)
                if not (op.output is UNKNOWN and self.read_only(op))]

    def unknown_nil_reads(self, ops: Sequence[Operation]) -> Sequence[Operation]:
        """Under the Knossos convention, ok reads of nil become reads of unknown outcome."""
        if self.nil_reads != "unknown":
            return ops
        return [replace(op, output=UNKNOWN) if op.output is None and self.read_only(op)
                else op for op in ops]

    def validate(self, op: Operation) -> None:
        if op.f not in self.fs:
            raise HistoryError(
                f"{_where(op)}: f {op.f!r} is not an operation of model {self.name} "
                f"(expected one of {', '.join(sorted(self.fs))})")

    def read_only(self, op: Operation) -> bool:
        """True if the op never changes the state (so, with no output, constrains nothing)."""
        return False

    def observes(self, op: Operation) -> Any:
        """The value ``op`` saw: it is accepted in exactly the states in which a read
        returning that value would be (a read's output, a successful cas's expected value).
        ``UNKNOWN`` when it constrains the state in no such way."""
        return op.output if self.read_only(op) else UNKNOWN

    def reachable(self, state: Hashable, output: Any, pending: Sequence[OpInput]) -> bool:
        """Could some sequence of the ``pending`` ops (any of them, each at most once, in any
        order) lead from ``state`` to a state in which a read returning ``output`` is
        accepted? ``True`` when unsure: it only prunes. More pending ops must never turn a
        ``True`` into ``False`` (the search's pre-check asks once per value seen)."""
        return True

    def partition(self, ops: Sequence[Operation]) -> list[Partition]:
        return [Partition(None, ops, self)]

    def describe_op(self, op: Operation) -> str:
        out = "?" if op.output is UNKNOWN else _show(op.output)
        return f"process {op.process}: {op.f} {_show(op.value)} -> {out}"

    def describe_state(self, state: Hashable) -> Any:
        """A JSON-friendly view of a state for reports."""
        return thaw(state)


class Register(Model):
    """A read/write register. Reads return the current value (``initial`` before any write)."""

    name = "register"
    fs = frozenset({"read", "write"})
    reads_return_state = True

    def __init__(self, initial: Any = None, nil_reads: str = "value") -> None:
        self.initial = initial
        self.nil_reads = _nil_reads(nil_reads)

    def init(self) -> Hashable:
        return self.initial

    def step(self, state: Hashable, op_input: OpInput, op_output: Any) -> tuple[bool, Hashable]:
        f, value = op_input
        if f == "write":
            return True, value
        if f == "read":
            return (op_output is UNKNOWN or op_output == state), state
        return False, state

    def prepare(self, ops: Sequence[Operation]) -> list[Operation]:
        for op in ops:
            if op.key is not None:
                raise HistoryError(f"{_where(op)}: op has key {_show(op.key)}; check keyed "
                                   "histories with --model kv")
        return super().prepare(ops)

    def read_only(self, op: Operation) -> bool:
        return op.f == "read"

    def reachable(self, state: Hashable, output: Any, pending: Sequence[OpInput]) -> bool:
        # only a write (or, below, a cas) of the value read can make the read legal
        return any(_writes(f, value, output) for f, value in pending)

    def describe_op(self, op: Operation) -> str:
        if op.f == "read":
            out = "?" if op.output is UNKNOWN else _show(op.output)
            return f"process {op.process}: read -> {out}"
        return f"process {op.process}: {op.f} {_show(op.value)}" + (
            " (outcome unknown)" if op.output is UNKNOWN else "")


class CASRegister(Register):
    """A register with compare-and-set: ``cas`` with value ``[expected, new]``.

    Jepsen convention: an ``ok`` cas succeeded; a cas that found another value completes
    with ``fail`` and so never reaches the model.
    """

    name = "cas-register"
    fs = frozenset({"read", "write", "cas"})

    def step(self, state: Hashable, op_input: OpInput, op_output: Any) -> tuple[bool, Hashable]:
        f, value = op_input
        if f == "cas":
            expected, new = value
            return (True, new) if state == expected else (False, state)
        return super().step(state, op_input, op_output)

    def observes(self, op: Operation) -> Any:
        if op.f == "cas":  # a cas that failed never got here; one that timed out saw nothing
            return UNKNOWN if op.output is UNKNOWN else op.value[0]
        return super().observes(op)

    def validate(self, op: Operation) -> None:
        super().validate(op)
        if op.f == "cas" and not (isinstance(op.value, tuple) and len(op.value) == 2):
            raise HistoryError(f"{_where(op)}: cas value must be [expected, new], "
                               f"got {_show(op.value)}")

    def describe_op(self, op: Operation) -> str:
        if op.f == "cas":
            expected, new = op.value
            return f"process {op.process}: cas {_show(expected)} -> {_show(new)}" + (
                " (outcome unknown)" if op.output is UNKNOWN else "")
        return super().describe_op(op)


class AppendRegister(Register):
    """Porcupine's kv value: ``get`` returns the value, ``put`` replaces it, ``append``
    concatenates to it (strings, or lists). The initial value is ``""`` as in Porcupine's
    kv model unless given."""

    name = "append-register"
    fs = frozenset({"get", "put", "append"})

    def __init__(self, initial: Any = "", nil_reads: str = "value") -> None:
        super().__init__(initial, nil_reads)

    def step(self, state: Hashable, op_input: OpInput, op_output: Any) -> tuple[bool, Hashable]:
        f, value = op_input
        if f == "get":
            return (op_output is UNKNOWN or op_output == state), state
        if f == "put":
            return True, value
        if f == "append":
            if state is None:
                return True, value
            try:
                return True, state + value
            except TypeError:  # e.g. appending a string to a number: no such state
                return False, state
        return False, state

    def read_only(self, op: Operation) -> bool:
        return op.f == "get"

    def reachable(self, state: Hashable, output: Any, pending: Sequence[OpInput]) -> bool:
        # appends only extend the value: without a pending put, the value read must
        # extend the current one
        if any(f == "put" for f, _ in pending):
            return True
        current = "" if state is None else state
        try:
            return len(output) > len(current) and output[:len(current)] == current
        except TypeError:
            return True

    def describe_op(self, op: Operation) -> str:
        if op.f == "get":
            out = "?" if op.output is UNKNOWN else _show(op.output)
            return f"process {op.process}: get -> {out}"
        return f"process {op.process}: {op.f} {_show(op.value)}" + (
            " (outcome unknown)" if op.output is UNKNOWN else "")


APPEND_FS = AppendRegister.fs


class KV(Model):
    """A map of independent registers. Ops name their key either in a ``key`` field or as
    Jepsen's independent tuple ``value = [key, value]``. The state, when checked whole, is
    a frozenset of (key, register state) pairs; partitioning checks each key alone.

    Without an explicit ``inner`` model the registers are chosen from the history: an
    ``AppendRegister`` (initial ``""``, as Porcupine's kv model) when its ops are
    get/put/append, else a ``CASRegister`` (initial nil) for read/write/cas. ``initial``
    and ``nil_reads`` apply to the chosen registers."""

    name = "kv"
    _UNSET: Any = object()

    def __init__(self, inner: Register | None = None, *, initial: Any = _UNSET,
                 nil_reads: str = "value") -> None:
        self.explicit = inner is not None
        self.initial = initial
        self.nil_reads = _nil_reads(nil_reads)
        self.inner = inner if inner is not None else self._register(CASRegister)
        self.fs = self.inner.fs if self.explicit else CASRegister.fs | APPEND_FS

    def _register(self, cls: type[Register]) -> Register:
        if self.initial is self._UNSET:
            return cls(nil_reads=self.nil_reads)
        return cls(self.initial, nil_reads=self.nil_reads)

    def choose_inner(self, ops: Sequence[Operation]) -> None:
        """Pick the register model from the ops' functions (unless one was given)."""
        if self.explicit:
            return
        fs = {op.f for op in ops}
        if fs & APPEND_FS and fs & CASRegister.fs:
            bad = next(op for op in ops if op.f in CASRegister.fs)
            raise HistoryError(f"{_where(bad)}: kv history mixes get/put/append with "
                               f"read/write/cas ops")
        cls = AppendRegister if fs & APPEND_FS else CASRegister
        if type(self.inner) is not cls:
            self.inner = self._register(cls)
        self.fs = self.inner.fs

    def init(self) -> Hashable:
        return frozenset()

    def step(self, state: Hashable, op_input: OpInput, op_output: Any) -> tuple[bool, Hashable]:
        f, (key, value) = op_input
        registers = dict(state)
        current = registers.get(key, self.inner.init())
        ok, new = self.inner.step(current, (f, value), op_output)
        if not ok or new == current:
            return ok, state
        registers[key] = new
        return True, frozenset(registers.items())

    def prepare(self, ops: Sequence[Operation]) -> list[Operation]:
        keyed = [self._keyed(op) for op in ops]
        self.choose_inner(keyed)
        for op in keyed:
            self.inner.validate(op)
        return [op for op in self.inner.unknown_nil_reads(keyed)
                if not (op.output is UNKNOWN and self.inner.read_only(op))]

    def input_of(self, op: Operation) -> OpInput:
        # the whole-map step needs the key: (f, (key, value))
        return op.f, (op.key, op.value)

    def _keyed(self, op: Operation) -> Operation:
        """Move the key out of an independent tuple into ``op.key``."""
        if op.key is not None:
            return op
        if not (isinstance(op.value, tuple) and len(op.value) == 2):
            raise HistoryError(f"{_where(op)}: kv op needs a `key` field or a [key, value] "
                               f"value, got {_show(op.value)}")
        key, value = op.value
        output = op.output
        if output is not UNKNOWN:
            if not (isinstance(output, tuple) and len(output) == 2 and output[0] == key):
                raise HistoryError(f"{_where(op)}: completion value {_show(output)} is not a "
                                   f"[key, value] pair for key {_show(key)}")
            output = output[1]
        return Operation(op.id, op.process, op.f, value, output, op.call, op.ret,
                         op.invoke_index, op.complete_index, key, op.where)

    def read_only(self, op: Operation) -> bool:
        return self.inner.read_only(op)

    def partition(self, ops: Sequence[Operation]) -> list[Partition]:
        by_key: dict[Any, list[Operation]] = {}
        for op in ops:
            by_key.setdefault(op.key, []).append(op)
        return [Partition(key, part, self.inner) for key, part in by_key.items()]

    def describe_op(self, op: Operation) -> str:
        inner = replace(op, key=None)
        return f"key {_show(op.key)}: {self.inner.describe_op(inner)}"

    def describe_state(self, state: Hashable) -> Any:
        return {repr(thaw(k)): self.inner.describe_state(v) for k, v in state}


MODELS = {"register": Register, "cas-register": CASRegister, "append-register": AppendRegister,
          "kv": KV}
KV_REGISTERS = ("auto", "register", "cas-register", "append-register")
_NO_INITIAL: Any = KV._UNSET


def make_model(name: str, inner: str = "auto", *, initial: Any = _NO_INITIAL,
               nil_reads: str = "value") -> Model:
    """Build a model by its CLI name; ``inner`` is the per-key model of ``kv`` ("auto":
    chosen from the history's ops). ``initial`` is the registers' initial value (default
    nil, and "" for append-register); ``nil_reads`` is "value" or "unknown" (Knossos)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r} (expected one of {', '.join(MODELS)})")
    if name == "kv":
        if inner not in KV_REGISTERS:
            raise ValueError(f"kv registers are {', '.join(KV_REGISTERS)}, not {inner!r}")
        if inner == "auto":
            return KV(initial=initial, nil_reads=nil_reads)
        cls = MODELS[inner]
        reg = cls(nil_reads=nil_reads) if initial is _NO_INITIAL else cls(initial, nil_reads)
        return KV(reg)
    cls = MODELS[name]
    return cls(nil_reads=nil_reads) if initial is _NO_INITIAL else cls(initial, nil_reads)


def _writes(f: str, value: Any, output: Any) -> bool:
    """Does an op (f, value) of a register set it to ``output``?"""
    if f == "write":
        return value == output
    if f == "cas":
        return isinstance(value, tuple) and len(value) == 2 and value[1] == output
    return True  # an op this function does not know: assume it might


def _nil_reads(value: str) -> str:
    if value not in NIL_READS:
        raise ValueError(f"nil reads are {' or '.join(NIL_READS)}, not {value!r}")
    return value


def _where(op: Operation) -> str:
    return f"{op.where or 'history'} (index {op.invoke_index}, process {op.process!r})"


def _show(value: Any) -> str:
    return repr(thaw(value))
