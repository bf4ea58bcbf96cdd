"""Sequential specifications the search checks histories against (Porcupine-style models).

A model is a pure function over hashable states: ``init()`` gives the initial state and
``step(state, op_input, op_output)`` says whether an op with that input could have produced
that output in that state, and the state after it. ``op_input`` is ``(f, value)``;
``op_output`` is the completion's value or ``UNKNOWN`` for an op whose outcome is unknown.
``partition`` splits a history into independent sub-histories checked on their own
(P-compositionality, Horn & Kroening): a kv store is linearizable iff each key is.
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


class Model:
    name = "model"
    fs: frozenset[str] = frozenset()

    def init(self) -> Hashable:
        raise NotImplementedError

    def step(self, state: Hashable, op_input: OpInput, op_output: Any) -> tuple[bool, Hashable]:
        raise NotImplementedError

    def prepare(self, ops: Sequence[Operation]) -> list[Operation]:
        """Validate ops (raising HistoryError naming the op) and drop those that cannot
        matter: an op with an unknown outcome that never changes the state."""
        for op in ops:
            self.validate(op)
        return [op for op in ops if not (op.output is UNKNOWN and self.read_only(op))]

    def validate(self, op: Operation) -> None:
        if op.f not in self.fs:
            raise HistoryError(
                f"{_where(op)}: f {op.f!r} is not an operation of model {self.name} "
                f"(expected one of {', '.join(sorted(self.fs))})")

    def read_only(self, op: Operation) -> bool:
        """True if the op never changes the state (so, with no output, constrains nothing)."""
        return False

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

    def __init__(self, initial: Any = None) -> None:
        self.initial = initial

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


class KV(Model):
    """A map of independent registers. Ops name their key either in a ``key`` field or as
    Jepsen's independent tuple ``value = [key, value]``. The state, when checked whole, is
    a frozenset of (key, register state) pairs; partitioning checks each key alone."""

    name = "kv"

    def __init__(self, inner: Register | None = None) -> None:
        self.inner = inner if inner is not None else CASRegister()
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
        for op in keyed:
            self.inner.validate(op)
        # The whole-map step reads the key from the input, so kept ops carry (key, value).
        return [replace(op, value=(op.key, op.value)) for op in keyed
                if not (op.output is UNKNOWN and self.inner.read_only(op))]

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
        return replace(op, key=key, value=value, output=output)

    def read_only(self, op: Operation) -> bool:
        return self.inner.read_only(op)

    def partition(self, ops: Sequence[Operation]) -> list[Partition]:
        by_key: dict[Any, list[Operation]] = {}
        for op in ops:
            by_key.setdefault(op.key, []).append(replace(op, value=op.value[1]))
        return [Partition(key, part, self.inner) for key, part in by_key.items()]

    def describe_op(self, op: Operation) -> str:
        inner = replace(op, value=op.value[1], key=None)
        return f"key {_show(op.key)}: {self.inner.describe_op(inner)}"

    def describe_state(self, state: Hashable) -> Any:
        return {repr(thaw(k)): self.inner.describe_state(v) for k, v in state}


MODELS = {"register": Register, "cas-register": CASRegister, "kv": KV}


def make_model(name: str, inner: str = "cas-register") -> Model:
    """Build a model by its CLI name; ``inner`` is the per-key model of ``kv``."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r} (expected one of {', '.join(MODELS)})")
    if name == "kv":
        if inner not in ("register", "cas-register"):
            raise ValueError(f"kv registers are register or cas-register, not {inner!r}")
        return KV(MODELS[inner]())
    return MODELS[name]()


def _where(op: Operation) -> str:
    return f"{op.where or 'history'} (index {op.invoke_index}, process {op.process!r})"


def _show(value: Any) -> str:
    return repr(thaw(value))
