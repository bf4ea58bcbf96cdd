"""A deterministic virtual-time asyncio event loop.

`SimLoop` implements what asyncio's tasks, futures and primitives (`sleep`, `wait_for`,
`timeout`, `gather`, locks, queues) ask of an event loop -- `call_soon`, `call_at`,
`call_later`, `time`, `create_future`, `create_task`, the exception handler, `run_forever`,
`run_until_complete`, `stop` -- and nothing of `asyncio.BaseEventLoop` (no selector, no
executor, no transports): it is an `asyncio.AbstractEventLoop` whose

- `time()` is a virtual clock that starts at 0.0 and only moves when the loop would wait;
- one loop iteration (`_iterate`) never waits: when nothing is ready it jumps the virtual
  clock to the next scheduled timer (exactly to that timer's time).

So unmodified asyncio code runs in simulated time as fast as the CPU allows, and callbacks run
in an order that depends only on the program: the ready queue is FIFO and timers fire in
(time, scheduling order). The heap holds (when, sequence, item) triples, compared in C (the
sequence is unique, so the item is never compared); an item is a `SimTimer` (what `call_at`
and `call_later` return: asyncio's public TimerHandle interface -- cancel, cancelled, when,
get_context) or an `Event`, a plain `(fn, args)` tuple that `at(when, fn, *args)` schedules
for the simulation's own, never-cancelled events (message arrivals, node timers): no handle,
no context, and no object to make beyond the tuple (an object with slots cost 0.7 % of a
run's instructions; there are tens of thousands of them a run). Exceptions in those
propagate out of the loop: they are bugs of the simulation, not of the code under test,
whose callbacks go through `SimHandle.run` and the exception handler.

Nothing real may happen inside: sockets, pipes, subprocesses, DNS and signal handlers raise
`RealIOError`; `run_in_executor` runs the function inline in virtual time zero (or refuses,
with `executor="refuse"`) because a thread would make the order of events depend on the OS.
When nothing is ready and no timer is scheduled, every task waits for something that can
never happen: the loop raises `SimulationDeadlock` instead of blocking forever.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
import logging
import re
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

log = logging.getLogger("simulation")
T = TypeVar("T")


class SimulationDeadlock(RuntimeError):
    """Nothing is ready and no timer is scheduled: the simulation can never make progress."""


class SimulationLivelock(RuntimeError):
    """The loop spun too many times without the virtual clock moving."""


class RealIOError(RuntimeError):
    """Real I/O (sockets, pipes, processes, threads) was attempted inside a simulation."""


class SimHandle:
    """What `call_soon` returns: a callback to run once in its context, unless cancelled."""

    __slots__ = ("callback", "args", "context", "loop", "is_cancelled")

    def __init__(self, callback: Callable[..., Any], args: tuple, loop: SimLoop,
                 context: contextvars.Context | None) -> None:
        self.callback = callback
        self.args = args
        self.context = contextvars.copy_context() if context is None else context
        self.loop = loop
        self.is_cancelled = False

    def cancel(self) -> None:
        if not self.is_cancelled:
            self._drop()

    def _drop(self) -> None:
        # as asyncio's handles do: what the callback holds is freed now, not when it is due
        self.is_cancelled = True
        self.callback = self.args = None

    def cancelled(self) -> bool:
        return self.is_cancelled

    def get_context(self) -> contextvars.Context:
        return self.context

    def run(self) -> None:
        """Run the callback; what it raises goes to the loop's exception handler, as asyncio's
        handles do (code under test that fails is recorded, not a crash of the simulation)."""
        try:
            self.context.run(self.callback, *self.args)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self.loop.call_exception_handler({"message": f"Exception in callback {self!r}",
                                              "exception": exc, "handle": self})

    def __repr__(self) -> str:
        name = getattr(self.callback, "__qualname__", None) or repr(self.callback)
        return f"<{type(self).__name__} {name}{' cancelled' if self.is_cancelled else ''}>"


class SimTimer(SimHandle):
    """What `call_at` and `call_later` return: a SimHandle due at a virtual time."""

    __slots__ = ("due", "in_heap")

    def __init__(self, when: float, callback: Callable[..., Any], args: tuple, loop: SimLoop,
                 context: contextvars.Context | None) -> None:
        # SimHandle's fields set here rather than through super(): a timer per request
        self.callback = callback
        self.args = args
        self.context = contextvars.copy_context() if context is None else context
        self.loop = loop
        self.is_cancelled = False
        self.due = when
        self.in_heap = True

    def when(self) -> float:
        return self.due

    def cancel(self) -> None:
        if not self.is_cancelled:
            if self.in_heap:
                self.loop.timer_cancelled()
            self._drop()


# A bare callback of the simulation's own (`SimLoop.at`), (fn, args): never cancelled, no context.
Event = tuple[Callable[..., Any], tuple]


class SimLoop(asyncio.AbstractEventLoop):
    """asyncio in virtual time; see the module docstring."""

    def __init__(self, *, executor: str = "inline", max_spins: int = 5_000_000) -> None:
        if executor not in ("inline", "refuse"):
            raise ValueError(f"executor must be 'inline' or 'refuse', got {executor!r}")
        self.now = 0.0
        self._spins = 0
        self.max_spins = max_spins
        self.executor = executor
        self._ready: deque[SimHandle | Event] = deque()
        self._heap: list[tuple[float, int, SimTimer | Event]] = []
        self._seq = itertools.count()
        self._cancelled = 0  # cancelled SimTimers still in the heap
        self._closed = False
        self._running = False
        self._stopping = False
        self._debug = False
        self._task_factory: Callable[..., Any] | None = None
        # Exceptions nobody retrieved (a task that died, a callback that raised), in order.
        self.errors: list[dict[str, Any]] = []
        self._exception_handler: Callable[..., Any] | None = _record_error

    # ---- the virtual clock ---------------------------------------------------------------------

    def time(self) -> float:
        return self.now

    def time_ns(self) -> int:
        """Virtual nanoseconds since the loop was made (the history's clock)."""
        return round(self.now * 1e9)

    def deadlock_report(self) -> str:
        tasks = sorted(asyncio.all_tasks(self), key=_creation_order)
        waiting = "; ".join(_describe(t) for t in tasks[:8])
        more = f" (+{len(tasks) - 8} more)" if len(tasks) > 8 else ""
        return (f"deadlock at virtual time {self.now:.6f} s: nothing is ready and no timer is "
                f"scheduled, so nothing can ever happen again. {len(tasks)} task(s) wait: "
                f"{waiting or '-'}{more}")

    # ---- callbacks and timers ------------------------------------------------------------------

    def call_soon(self, callback, *args, context=None):  # noqa: ANN001
        if self._closed:
            self._check_closed()
        handle = SimHandle(callback, args, self, context)
        self._ready.append(handle)
        return handle

    def call_at(self, when, callback, *args, context=None):  # noqa: ANN001
        if self._closed:
            self._check_closed()
        timer = SimTimer(when, callback, args, self, context)
        heapq.heappush(self._heap, (when, next(self._seq), timer))
        return timer

    def call_later(self, delay, callback, *args, context=None):  # noqa: ANN001
        return self.call_at(self.now + delay, callback, *args, context=context)

    def at(self, when: float, fn: Callable[..., Any], *args: Any) -> None:
        """Run fn(*args) at virtual time `when` (not cancellable, no handle, no context)."""
        heapq.heappush(self._heap, (when, next(self._seq), (fn, args)))

    def timer_cancelled(self) -> None:
        """A SimTimer still in the heap was cancelled: drop the cancelled ones once they are
        more than half of it (as asyncio does), so the heap stays as short as the live timers."""
        self._cancelled += 1
        if self._cancelled > 512 and self._cancelled * 2 > len(self._heap):
            self._heap = [e for e in self._heap if not _cancelled_timer(e[2])]
            heapq.heapify(self._heap)
            self._cancelled = 0

    def _iterate(self) -> None:
        """One iteration: if nothing is ready, jump to the next timer; move the timers that
        are due to the ready queue; run what was ready when the iteration began."""
        ready = self._ready
        heap = self._heap
        pop = heapq.heappop
        if not ready and not self._stopping:
            while heap and (top := heap[0][2]).__class__ is SimTimer and top.is_cancelled:
                pop(heap)
                self._cancelled -= 1
            if not heap:
                raise SimulationDeadlock(self.deadlock_report())
            when = heap[0][0]
            if when > self.now:
                self.now = when
                self._spins = 0
        self._spins += 1
        if self._spins > self.max_spins:
            raise SimulationLivelock(
                f"{self._spins} loop iterations at virtual time {self.now:.6f} s without the "
                "clock moving (a callback that always reschedules itself at once?)")
        end = self.now + 1e-9
        while heap and heap[0][0] < end:
            item = pop(heap)[2]
            if item.__class__ is SimTimer:
                if item.is_cancelled:
                    self._cancelled -= 1
                    continue
                item.in_heap = False
            ready.append(item)
        popleft = ready.popleft
        for _ in range(len(ready)):
            item = popleft()
            if item.__class__ is tuple:
                item[0](*item[1])
            elif not item.is_cancelled:
                item.run()

    # ---- running -------------------------------------------------------------------------------

    def run_forever(self) -> None:
        self._check_closed()
        if self._running:
            raise RuntimeError("This event loop is already running")
        if _another_loop_runs():
            raise RuntimeError("Cannot run the event loop while another loop is running")
        self._running = True
        _set_running_loop(self)
        try:
            while not self._stopping:
                self._iterate()
        finally:
            self._stopping = False
            self._running = False
            _set_running_loop(None)

    def run_until_complete(self, future: Awaitable[T]) -> T:
        self._check_closed()
        fut = asyncio.ensure_future(future, loop=self)
        fut.add_done_callback(self._complete)
        try:
            self.run_forever()
        finally:
            fut.remove_done_callback(self._complete)
        if not fut.done():
            raise RuntimeError("Event loop stopped before Future completed.")
        return fut.result()

    def _complete(self, fut: asyncio.Future) -> None:
        self.stop()

    def run(self, main: Awaitable[T]) -> T:
        """run_until_complete, then leave no task behind (see `cancel_all`)."""
        try:
            return self.run_until_complete(main)
        finally:
            self.cancel_all()

    def run_for(self, seconds: float) -> None:
        """Let the simulation run for `seconds` of virtual time."""
        self.run_until_complete(asyncio.sleep(seconds))

    def cancel_all(self) -> None:
        """Cancel every task still pending, in the order they were created (not the order of
        a set, which varies between processes), and let them finish."""
        tasks = sorted((t for t in asyncio.all_tasks(self) if not t.done()), key=_creation_order)
        if not tasks:
            return
        for t in tasks:
            t.cancel()
        self.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))

    def stop(self) -> None:
        self._stopping = True

    def is_running(self) -> bool:
        return self._running

    def is_closed(self) -> bool:
        return self._closed

    def _check_closed(self) -> None:
        if self._closed:
            raise RuntimeError("Event loop is closed")

    def close(self) -> None:
        if self._running:
            raise RuntimeError("Cannot close a running event loop")
        self._closed = True
        self._ready.clear()
        self._heap.clear()

    async def shutdown_asyncgens(self) -> None:
        """Nothing to do: the loop installs no async generator hooks."""

    async def shutdown_default_executor(self) -> None:
        """Nothing to do: there is no executor."""

    # ---- futures and tasks ---------------------------------------------------------------------

    def create_future(self) -> asyncio.Future:
        return asyncio.Future(loop=self)

    def create_task(self, coro, *, name=None, context=None):  # noqa: ANN001
        self._check_closed()
        if self._task_factory is not None:
            task = (self._task_factory(self, coro) if context is None
                    else self._task_factory(self, coro, context=context))
            if name is not None:
                task.set_name(name)
            return task
        return asyncio.Task(coro, loop=self, name=name, context=context)

    def set_task_factory(self, factory: Callable[..., Any] | None) -> None:
        self._task_factory = factory

    def get_task_factory(self) -> Callable[..., Any] | None:
        return self._task_factory

    def get_debug(self) -> bool:
        return self._debug

    def set_debug(self, enabled: bool) -> None:
        self._debug = enabled

    # ---- errors --------------------------------------------------------------------------------

    def get_exception_handler(self) -> Callable[..., Any] | None:
        return self._exception_handler

    def set_exception_handler(self, handler: Callable[..., Any] | None) -> None:
        if handler is not None and not callable(handler):
            raise TypeError(f"A callable object or None is expected, got {handler!r}")
        self._exception_handler = handler

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        log.error("%s", context.get("message") or "Unhandled exception in event loop",
                  exc_info=exc if isinstance(exc, BaseException) else None)

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        if self._exception_handler is None:
            self.default_exception_handler(context)
            return
        try:
            self._exception_handler(self, context)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException:  # as asyncio does: a failing handler must not stop the loop
            log.exception("exception in the event loop's exception handler")

    # ---- no threads, no real I/O ---------------------------------------------------------------

    def run_in_executor(self, executor: Any, func: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Run `func(*args)` inline, now, in virtual time zero (executor="refuse": raise)."""
        if self.executor == "refuse":
            raise RealIOError(f"run_in_executor({getattr(func, '__name__', func)!r}): no threads in "
                              "a simulation")
        fut = self.create_future()
        try:
            fut.set_result(func(*args))
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as e:
            fut.set_exception(e)
        return fut

    def set_default_executor(self, executor: Any) -> None:
        raise RealIOError("no executors in a simulation")

    def call_soon_threadsafe(self, callback, *args, context=None):  # noqa: ANN001
        raise RealIOError("call_soon_threadsafe: no other threads in a simulation")

    def _refuse(self, what: str) -> RealIOError:
        return RealIOError(f"{what}: real I/O inside a simulation (use simulation.network)")

    async def create_connection(self, *a: Any, **k: Any) -> Any:
        raise self._refuse("create_connection")

    async def create_server(self, *a: Any, **k: Any) -> Any:
        raise self._refuse("create_server")

    async def create_unix_connection(self, *a: Any, **k: Any) -> Any:
        raise self._refuse("create_unix_connection")

    async def create_unix_server(self, *a: Any, **k: Any) -> Any:
        raise self._refuse("create_unix_server")

    async def create_datagram_endpoint(self, *a: Any, **k: Any) -> Any:
        raise self._refuse("create_datagram_endpoint")

    async def connect_accepted_socket(self, *a: Any, **k: Any) -> Any:
        raise self._refuse("connect_accepted_socket")

    async def getaddrinfo(self, *a: Any, **k: Any) -> Any:
        raise self._refuse("getaddrinfo")

    async def getnameinfo(self, *a: Any, **k: Any) -> Any:
        raise self._refuse("getnameinfo")

    async def sock_connect(self, *a: Any, **k: Any) -> Any:
        raise self._refuse("sock_connect")

    async def sock_accept(self, *a: Any, **k: Any) -> Any:
        raise self._refuse("sock_accept")

    async def sock_recv(self, *a: Any, **k: Any) -> Any:
        raise self._refuse("sock_recv")

    async def sock_sendall(self, *a: Any, **k: Any) -> Any:
        raise self._refuse("sock_sendall")

    async def connect_read_pipe(self, *a: Any, **k: Any) -> Any:
        raise self._refuse("connect_read_pipe")

    async def connect_write_pipe(self, *a: Any, **k: Any) -> Any:
        raise self._refuse("connect_write_pipe")

    async def subprocess_exec(self, *a: Any, **k: Any) -> Any:
        raise self._refuse("subprocess_exec")

    async def subprocess_shell(self, *a: Any, **k: Any) -> Any:
        raise self._refuse("subprocess_shell")

    def add_reader(self, *a: Any, **k: Any) -> None:
        raise self._refuse("add_reader")

    def add_writer(self, *a: Any, **k: Any) -> None:
        raise self._refuse("add_writer")

    def remove_reader(self, *a: Any, **k: Any) -> bool:
        return False

    def remove_writer(self, *a: Any, **k: Any) -> bool:
        return False

    def add_signal_handler(self, *a: Any, **k: Any) -> None:
        raise self._refuse("add_signal_handler")

    def remove_signal_handler(self, *a: Any, **k: Any) -> bool:
        return False


def _another_loop_runs() -> bool:
    """Whether this thread already runs an event loop (asyncio's public question)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _set_running_loop(loop: SimLoop | None) -> None:
    """Make `loop` the loop asyncio.get_running_loop() returns in this thread (None: none),
    which asyncio.sleep, create_task, current_task, wait_for, locks and queues all ask for.
    The one reach into asyncio below its public names, kept on purpose: asyncio has no public
    way for a loop that is not a BaseEventLoop to become the running loop.
    `asyncio._set_running_loop` is the hook asyncio exports for that (in asyncio.__all__;
    "a low-level function intended to be used by event loops", its docstring says), the one
    uvloop uses too. The alternative, subclassing BaseEventLoop for its run_forever, would
    mean overriding its private `_run_once` and carrying its selector and executor state."""
    asyncio._set_running_loop(loop)


def _cancelled_timer(item: SimTimer | Event) -> bool:
    return item.__class__ is SimTimer and item.is_cancelled


def _record_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    exc = context.get("exception")
    entry = {"time": loop.time(), "message": context.get("message", ""),
             "exception": repr(exc) if exc is not None else None}
    if isinstance(loop, SimLoop):
        loop.errors.append(entry)
    log.error("simulation: %s %s", entry["message"], entry["exception"] or "",
              exc_info=exc if isinstance(exc, BaseException) else None)


_TASK_NUMBER = re.compile(r"^Task-(\d+)$")


def _creation_order(task: asyncio.Task) -> tuple[int, str]:
    """Tasks named by asyncio ("Task-N", from a process-wide counter) sort by N."""
    m = _TASK_NUMBER.match(task.get_name())
    return (int(m.group(1)), "") if m else (1 << 62, task.get_name())


def _describe(task: asyncio.Task) -> str:
    coro = task.get_coro()
    name = getattr(coro, "__qualname__", repr(coro))
    frame = getattr(coro, "cr_frame", None)
    where = f" at line {frame.f_lineno}" if frame is not None else ""
    return f"{task.get_name()} {name}{where}"


def run(main: Awaitable[T], loop: SimLoop | None = None) -> T:
    """Run a coroutine on a (new) SimLoop and close it: asyncio.run for simulated time."""
    own = loop is None
    loop = loop or SimLoop()
    try:
        return loop.run(main)
    finally:
        if own:
            loop.close()
