"""Writing history.jsonl (the history contract, docs/architecture.md); runformat reads it back.

HistoryWriter assigns `index` (file order) and `time` (integer ns since the run started, from
time.monotonic_ns) while holding a lock, so both increase along the file whatever thread
writes. Each op is one write() of one complete line (or, with `buffer_bytes`, as a simulation
asks, one write() of many whole lines), so a killed writer leaves whole lines, but for
the last one when SIGKILL cuts a write that crosses a page boundary (Linux checks for a
fatal signal between the pages it copies; the readers drop such a torn tail, saying so);
a background thread fsyncs at least once a second while there are new lines, and close()
fsyncs once more.

Concurrency: every method is thread-safe. None of them awaits: from asyncio, call them
directly in coroutines. They cost one small write() under a lock, and the fsync runs on the
writer's own thread, so the event loop is never held up by the disk flush.

Pairing: `invoke()` returns a Pending whose `ok()`, `fail()` or `info()` writes the one
completion; a second completion raises. A process is busy from its invoke to its completion
and is never used again after an `info` (ProcessPool.retire hands out a fresh number).
close() completes every outstanding invoke as `info` with error "run-ended".
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any

from control.files import fsync_dir

NEMESIS = "nemesis"
COMPLETIONS = ("ok", "fail", "info")
RUN_ENDED = "run-ended"
_RESERVED = frozenset(("index", "time", "process", "type", "f"))
_TYPES = ("invoke", *COMPLETIONS)
# One encoder for every line: json.dumps builds a new one per call when given separators.
# No circular-reference bookkeeping (a dict per nested list, and a poll's records are
# hundreds of lists): an op is plain data from the workload; a cyclic one still fails
# (RecursionError) before it reaches the file.
_ENCODER = json.JSONEncoder(separators=(", ", ": "), check_circular=False)


def _one_encoder() -> Callable[[Any], str]:
    """_ENCODER.encode, with CPython's C encoder made once instead of once per call, as
    JSONEncoder.encode does (a third of its time on a history line). Where the json module
    has no C encoder (PyPy), encode itself."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return _ENCODER.encode
    e = _ENCODER
    chunks = make(None, e.default, encode_basestring_ascii, None, e.key_separator,
                  e.item_separator, e.sort_keys, e.skipkeys, e.allow_nan)
    join = "".join

    def encode(o: Any) -> str:
        return join(chunks(o, 0))
    return encode


_ENCODE = _one_encoder()
_SPLICE = "\x00encoded\x00"  # stands for an EncodedList while the rest of an op is encoded
_SPLICED = _ENCODE(_SPLICE)


class EncodedList(list):
    """A list that carries its own JSON text (`json`, as this writer's encoder would write
    it: ", " between items), which the writer splices in instead of encoding the items again
    (a poll's hundreds of records, mostly read before). The caller vouches for the text."""

    __slots__ = ("json",)

    def __init__(self, items: Any, json_text: str) -> None:
        super().__init__(items)
        self.json = json_text


def json_line(op: dict[str, Any]) -> str:
    """One history line (without its newline), as _ENCODE(op) would write it: json.dumps(op)'s
    text. The simulator writes its other files' lines with it too (events, invariant
    violations): under PyPy json.dumps is pure Python, and code that runs once a run is not
    compiled there (the violations of an unclean-election run took 40 ms to write)."""
    if _PLAIN_ENCODER:
        out: list[str] = []
        try:
            _put(op, out)
            return "".join(out)
        except _Unusual:
            pass  # the json module's encoder says what it makes of it
    values = list(op.values())
    shape = (*op, *map(type, values))
    plan = _PLANS.get(shape)
    if plan is None and shape not in _PLANS:
        plan = _plan(op, shape)
    if plan is not None:  # only str keys, int and str values: the shape's template
        template, strings = plan
        for i in strings:
            values[i] = _string(values[i])
        return template % tuple(values)
    if EncodedList not in map(type, values):  # no Python loop over the rest of the line
        return _ENCODE(op)
    for key, value in op.items():
        if value.__class__ is EncodedList:
            text = _ENCODE({**op, key: _SPLICE})
            if text.count(_SPLICED) == 1:  # else a value contains the marker: no splicing
                return text.replace(_SPLICED, value.json)
            break
    return _ENCODE(op)


# A line whose keys are str and whose values are all exactly int or str (an invoke, a send's
# completion, a failure: most lines) is written through a %-template of its shape (its keys and
# its values' classes): about a third of json's C encoder's instructions on such a line, which
# makes a tuple per item and a string per separator. %d writes an int as JSON does (bool and int
# subclasses have other classes: not plain), and _string escapes a str as json does.
_PLANS: dict[tuple[Any, ...], tuple[str, tuple[int, ...]] | None] = {}
_MAX_PLANS = 1024


def _plan(op: dict[str, Any], shape: tuple[Any, ...]) -> tuple[str, tuple[int, ...]] | None:
    """The template of `op`'s shape and the positions of its str values, or None when the
    shape is not plain (json's encoder writes such lines); remembered for the next line."""
    plan = None
    classes = shape[len(op):]
    if all(k.__class__ is str for k in op) and all(c is int or c is str for c in classes):
        parts = [_string(k).replace("%", "%%") + (": %d" if c is int else ": %s")
                 for k, c in zip(op, classes, strict=True)]
        strings = tuple(i for i, c in enumerate(classes) if c is str)
        plan = "{" + ", ".join(parts) + "}", strings
    if len(_PLANS) < _MAX_PLANS:
        _PLANS[shape] = plan
    return plan


# PyPy's json encoder is pure Python and escapes every string with a regular expression; there
# the plain recursive encoder below writes the same text 2-3x as fast (and a simulated run,
# which PyPy may run, writes tens of thousands of lines). CPython's encoder is C: it stays.
_PLAIN_ENCODER = sys.implementation.name == "pypy"
_INF = float("inf")


class _Unusual(Exception):
    """A value the plain encoder leaves to the json module (non-str keys, NaN, other types)."""


def _string(s: str) -> str:
    text = _STRINGS.get(s)
    if text is None:
        if s.isascii() and s.isprintable() and '"' not in s and "\\" not in s:
            text = '"' + s + '"'  # nothing to escape
        else:
            text = encode_basestring_ascii(s)
        if len(_STRINGS) < _MAX_STRINGS and len(s) <= 32:
            _STRINGS[s] = text
    return text


# The JSON text of short strings already written: the keys and the few values (op types,
# functions, errors) that make up most of every line.
_STRINGS: dict[str, str] = {}
_MAX_STRINGS = 4096


def _put(o: Any, out: list[str]) -> None:
    """Append the JSON text of `o` to `out`, as _ENCODE writes it; _Unusual if unsure."""
    cls = o.__class__
    if cls is str:
        out.append(_string(o))
    elif cls is int:
        out.append(int.__repr__(o))
    elif o is None:
        out.append("null")
    elif o is True:
        out.append("true")
    elif o is False:
        out.append("false")
    elif cls is dict:
        sep = "{"
        for k, v in o.items():
            if k.__class__ is not str:
                raise _Unusual
            out.append(sep)
            out.append(_string(k))
            out.append(": ")
            _put(v, out)
            sep = ", "
        out.append("}" if o else "{}")
    elif cls is EncodedList:
        out.append(o.json)  # the caller vouches for it (see EncodedList)
    elif cls is list or cls is tuple:
        sep = "["
        for v in o:
            out.append(sep)
            _put(v, out)
            sep = ", "
        out.append("]" if o else "[]")
    elif cls is float and o == o and o != _INF and o != -_INF:
        out.append(float.__repr__(o))
    else:
        raise _Unusual


class HistoryError(ValueError):
    """Misuse of the history: a busy or retired process, a second completion, a closed file."""


class Pending:
    """An invoked operation awaiting its single completion. `op` is the invoke as written;
    `fields` its fields past process, type and f, which the completion repeats."""

    __slots__ = ("_writer", "op", "fields", "process", "done")

    def __init__(self, writer: HistoryWriter, op: dict[str, Any], fields: dict[str, Any]) -> None:
        self._writer = writer
        self.op = op
        self.fields = fields
        self.process: int | str = op["process"]
        self.done = False

    def ok(self, **fields: Any) -> dict[str, Any]:
        return self._writer._complete(self, "ok", fields)

    def fail(self, error: str, **fields: Any) -> dict[str, Any]:
        """The operation definitely did not happen."""
        return self._writer._complete(self, "fail", {**fields, "error": error})

    def info(self, error: str | None = None, **fields: Any) -> dict[str, Any]:
        """Unknown outcome (timeout, lost connection): the process must not be reused."""
        extra = fields if error is None else {**fields, "error": error}
        return self._writer._complete(self, "info", extra)


class HistoryWriter:
    def __init__(self, path: str | Path, start_ns: int | None = None,
                 fsync_interval: float = 1.0, *, clock: Callable[[], int] | None = None,
                 background_fsync: bool = True, buffer_bytes: int = 0,
                 flush_interval: float | None = None) -> None:
        """Create `path` (which must not exist yet) and start timing from `start_ns`
        (a time.monotonic_ns() reading; default now).

        `clock`, if given, replaces the monotonic clock: it returns the ns since the run
        started (a simulation passes its virtual clock). With `background_fsync=False` no
        fsync thread is started and the file is fsynced only by close().

        `buffer_bytes` > 0 gathers lines and writes them once they reach that size (still
        whole lines per write(), as above), and at close(). For a
        simulation, whose run is replayed exactly by its seed: a write() per line was a tenth
        of a simulated run's time under PyPy. A real run passes `flush_interval` too: the
        fsync thread also writes out what is gathered that often, so the file lags the run by
        at most that long: a harness killed with SIGKILL loses at most that much of the
        history's tail (its last operations, as if the kill had come that much earlier; a
        SIGTERM or Ctrl-C closes the writer, which writes everything). At 20,000 sends/s a
        write() per line took about a tenth of the workload's event loop."""
        self.path = Path(path)
        self.start_ns = time.monotonic_ns() if start_ns is None else start_ns
        self._clock = clock
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        fsync_dir(self.path.parent)
        self._lock = threading.Lock()
        self._next_index = 0
        self._last_time = 0
        self._pending: dict[int | str, Pending] = {}
        self._retired: set[int | str] = set()
        self._dirty = False
        self._closed = False
        self._buffer_bytes = buffer_bytes
        self._buffer: list[str] = []  # whole lines, without their newlines
        self._buffered = 0
        self._stop = threading.Event()
        self._syncer: threading.Thread | None = None
        if background_fsync:
            flush = flush_interval if buffer_bytes else None
            self._syncer = threading.Thread(target=self._sync_loop, args=(fsync_interval, flush),
                                            name=f"fsync {self.path.name}", daemon=True)
            self._syncer.start()

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def now_ns(self) -> int:
        """Nanoseconds since the run started, on the history's clock."""
        if self._clock is not None:
            return self._clock()
        return time.monotonic_ns() - self.start_ns

    @property
    def count(self) -> int:
        """Number of ops written so far."""
        return self._next_index

    def outstanding(self) -> list[Pending]:
        with self._lock:
            return list(self._pending.values())

    def invoke(self, process: int, f: str, **fields: Any) -> Pending:
        """Write an invoke for `process` and return the handle that completes it."""
        with self._lock:
            if process in self._pending:
                raise HistoryError(f"process {process} already has an operation in flight")
            if process in self._retired:
                raise HistoryError(f"process {process} got an info completion and is retired")
            if not _RESERVED.isdisjoint(fields):
                raise HistoryError(f"{sorted(_RESERVED.intersection(fields))} are not an "
                                   "operation's fields")
            op = self._emit_locked(process, "invoke", f, fields, None)
            pending = Pending(self, op, fields)
            self._pending[process] = pending
            return pending

    def nemesis(self, f: str, value: Any = None, **fields: Any) -> dict[str, Any]:
        """A nemesis operation, e.g. nemesis("start-kill", {"nodes": ["n2"]})."""
        with self._lock:
            return self._write_locked({"process": NEMESIS, "type": "info", "f": f,
                                       "value": value, **fields})

    def write(self, op: Mapping[str, Any]) -> dict[str, Any]:
        """Write a raw op (it needs process, type and f); index and time are assigned here.
        Prefer invoke()/nemesis(): this bypasses the pairing checks."""
        missing = [k for k in ("process", "type", "f") if k not in op]
        if missing:
            raise HistoryError(f"op lacks {missing}: {dict(op)!r}")
        with self._lock:
            return self._write_locked(op)

    def close(self) -> None:
        """Complete outstanding invokes as info/run-ended, fsync and close. Idempotent."""
        with self._lock:
            if self._closed:
                return
            for pending in list(self._pending.values()):
                self._complete_locked(pending, "info", {"error": RUN_ENDED})
            self._closed = True  # from here on every write raises, so nothing is left open
            self._flush_locked()
        self._stop.set()
        if self._syncer is not None:
            self._syncer.join()
        try:
            os.fsync(self._fd)
        finally:
            os.close(self._fd)

    def _complete(self, pending: Pending, kind: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        with self._lock:
            return self._complete_locked(pending, kind, fields)

    def _complete_locked(self, pending: Pending, kind: str,
                         fields: Mapping[str, Any]) -> dict[str, Any]:
        if pending.done:
            raise HistoryError(f"operation {pending.op['index']} was already completed")
        # A completion repeats its invoke's fields (partition, value...) unless it overrides them.
        if _RESERVED.isdisjoint(fields):  # kind is one of COMPLETIONS (Pending's methods)
            op = self._emit_locked(pending.process, kind, pending.op["f"], pending.fields, fields)
        else:  # _write_locked says which it refuses, or what the fields override
            op = self._write_locked({"process": pending.process, "type": kind,
                                     "f": pending.op["f"], **pending.fields, **fields})
        pending.done = True
        del self._pending[pending.process]
        if kind == "info":
            self._retired.add(pending.process)
        return op

    def _write_locked(self, op: Mapping[str, Any]) -> dict[str, Any]:
        if self._closed:
            raise HistoryError(f"{self.path} is closed")
        if "index" in op or "time" in op:
            bad = [k for k in ("index", "time") if k in op]
            raise HistoryError(f"{bad} are assigned by the writer, not the caller")
        if op["type"] not in _TYPES:
            raise HistoryError(f"type must be invoke, ok, fail or info, got {op['type']!r}")
        stamp = max(self.now_ns(), self._last_time)
        full = {"index": self._next_index, "time": stamp, **op}
        self._put_locked(full, stamp)
        return full

    def _emit_locked(self, process: int | str, kind: str, f: str, fields: Mapping[str, Any],
                     more: Mapping[str, Any] | None) -> dict[str, Any]:
        """_write_locked of {process, type: kind, f, **fields, **more}, for an invoke or a
        completion whose fields hold none of _RESERVED and whose kind is one of _TYPES: the
        line's dict is made once, and only what such an op can get wrong is checked."""
        if self._closed:
            raise HistoryError(f"{self.path} is closed")
        stamp = max(self.now_ns(), self._last_time)
        full = {"index": self._next_index, "time": stamp, "process": process, "type": kind,
                "f": f, **fields}
        if more:  # as `**fields, **more` would: an override keeps its key's place
            full.update(more)
        self._put_locked(full, stamp)
        return full

    def _put_locked(self, full: dict[str, Any], stamp: int) -> None:
        """Write the op `full` (its index and time assigned) and count it."""
        # Serialise first: an unserialisable op must not consume an index or reach the file.
        line = json_line(full)
        if self._buffer_bytes:
            self._buffer.append(line)  # ASCII but for an EncodedList's text: len() is near its size
            self._buffered += len(line) + 1
            if self._buffered >= self._buffer_bytes:
                self._flush_locked()
        else:
            _write_all(self._fd, (line + "\n").encode())
        self._next_index += 1
        self._last_time = stamp
        self._dirty = True

    def _flush_locked(self) -> None:
        if self._buffer:
            self._buffer.append("")  # the last line's newline
            _write_all(self._fd, "\n".join(self._buffer).encode())
            self._buffer.clear()
            self._buffered = 0

    def _sync_loop(self, interval: float, flush_interval: float | None) -> None:
        """fsync every `interval` s what was written; write out the gathered lines every
        `flush_interval` s first (None: never, the writer does)."""
        wake = min(interval, flush_interval) if flush_interval else interval
        sync_at = time.monotonic() + interval
        while not self._stop.wait(wake):
            if flush_interval:
                with self._lock:  # close() writes the rest once this thread has stopped
                    self._flush_locked()
            if time.monotonic() >= sync_at and self._dirty:
                sync_at = time.monotonic() + interval
                self._dirty = False
                os.fsync(self._fd)  # the fd stays open until close() has joined this thread


def _write_all(fd: int, data: bytes) -> None:
    n = os.write(fd, data)
    if n == len(data):  # the usual case: no memoryview
        return
    view = memoryview(data)[n:]
    while view:
        view = view[os.write(fd, view):]


class ProcessPool:
    """Process numbers for clients: a client whose op ended in `info` retires its number and
    continues under a fresh one, so no process ever has two overlapping operations."""

    def __init__(self, first: int = 0) -> None:
        self._next = first
        self._active: set[int] = set()
        self._lock = threading.Lock()

    def new(self) -> int:
        with self._lock:
            p = self._next
            self._next += 1
            self._active.add(p)
            return p

    def retire(self, process: int) -> int:
        """Retire `process` and return its replacement."""
        with self._lock:
            if process not in self._active:
                raise HistoryError(f"process {process} is not active in this pool")
            self._active.discard(process)
        return self.new()

    @property
    def active(self) -> frozenset[int]:
        with self._lock:
            return frozenset(self._active)
