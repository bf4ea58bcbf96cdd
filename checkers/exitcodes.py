"""The exit-code contract of every entry point (`harness`, `python -m checkers`,
`python -m checkers.linear`): 0 valid, 1 invalid, 2 unknown, 3 error; 130 interrupted (Ctrl-C),
143 terminated (SIGTERM, where the entry point asks for it: terminate_as_interrupt).

A verdict is only ever 0, 1 or 2. Anything that went wrong -- a bad argument, an unreadable
file, a bug -- exits 3 with a message, so a crash never reads as "invalid" or "unknown"."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Coroutine
from enum import IntEnum
from typing import Any, NoReturn, TypeVar

T = TypeVar("T")


class Exit(IntEnum):
    VALID = 0
    INVALID = 1
    UNKNOWN = 2
    ERROR = 3
    INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT
    TERMINATED = 143  # SIGTERM (kill, systemd, CI), as shells report it: after the same teardown

    @classmethod
    def of(cls, valid: Any) -> Exit:
        """The exit code of a verdict: True, False, or anything else ("unknown", None)."""
        if valid is True:
            return cls.VALID
        if valid is False:
            return cls.INVALID
        return cls.UNKNOWN


def exit_code(results: dict[str, Any]) -> int:
    """0 valid, 1 invalid, 2 unknown; 3 when the history could not be read (its `errors`):
    a broken history is an error, never a verdict."""
    if results.get("errors"):
        return int(Exit.ERROR)
    return int(Exit.of(results.get("valid")))


class Parser(argparse.ArgumentParser):
    """argparse exits 2 on a usage error, which here means "unknown": exit 3 instead."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(Exit.ERROR, f"{self.prog}: error: {message}\n")


_terminating = False  # a SIGTERM came (terminate_as_interrupt): its interrupt exits 143
_main_task: Any = None  # the asyncio task run_interruptible runs now (asyncio.run does not nest)


def _on_sigterm(signum: int, frame: Any) -> None:
    global _terminating
    if _terminating:  # a second SIGTERM while the first one's teardown runs: let it finish
        return
    _terminating = True
    if _main_task is not None:  # cancelled in its loop: its teardown runs in it, as for Ctrl-C
        _main_task.get_loop().call_soon_threadsafe(_main_task.cancel)
        return
    # Whatever Ctrl-C would do now; KeyboardInterrupt if SIGINT is ignored.
    on_sigint = signal.getsignal(signal.SIGINT)
    if callable(on_sigint):
        on_sigint(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt


def run_interruptible(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(main), which a SIGTERM (terminate_as_interrupt) cancels, so that its
    teardown runs inside its task, to the end, and then raises KeyboardInterrupt.

    asyncio.run does so for Ctrl-C, but only when SIGINT has Python's handler. A process a
    non-interactive shell starts in the background (`nohup harness run ... &` in a script, a
    CI step that backgrounds it) inherits SIGINT ignored, and a SIGTERM there used to raise
    KeyboardInterrupt at whatever line the loop was running (inside a client's callback,
    say); asyncio.run then cancelled the main task in its final sweep of tasks, which does
    not wait for the tasks a teardown starts: they were destroyed pending, with tracebacks in
    the run's output."""
    import asyncio  # here: the commands that never run a loop do not import it

    async def registered() -> T:
        global _main_task
        _main_task = asyncio.current_task()
        try:
            return await main
        finally:
            _main_task = None

    try:
        result = asyncio.run(registered())
    except asyncio.CancelledError:
        if _terminating:
            raise KeyboardInterrupt from None
        raise
    if _terminating:  # it came as `main` ended, or a teardown swallowed the cancellation
        raise KeyboardInterrupt
    return result


def terminate_as_interrupt() -> None:
    """From now on SIGTERM is a Ctrl-C: every teardown that a KeyboardInterrupt runs (each
    phase's `finally` in harness/runner.py, a campaign's interrupted cell) runs for it too,
    instead of the process dying with its hosts left behind; `guarded` then exits 143. A
    handler that returns, not SIG_IGN, for a second one: children inherit an ignored signal.
    Only the main thread may set a handler (and only it gets signals): elsewhere, nothing."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)


class UserError(Exception):
    """Bad input the user can fix: printed as one line, no traceback."""


# Errors that are the input's fault, not the program's: one line, no traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (UserError, ValueError, OSError)


def guarded(prog: str, main: Callable[[], int],
            environment: Callable[[], tuple[type[BaseException], ...]] = tuple) -> int:
    """Run `main` and map whatever escapes it onto the contract: user errors and the caller's
    `environment()` errors (a host that cannot be reached, say) print one line, bugs a short
    traceback, all exit 3; Ctrl-C exits 130, SIGTERM (terminate_as_interrupt) 143.

    `environment` is asked only once something has escaped: its classes may live beside
    libraries (paramiko, confluent-kafka) that a command which never needed them should not
    wait a second to import."""
    try:
        return int(main())
    except KeyboardInterrupt:
        if _terminating:
            print(f"{prog}: terminated", file=sys.stderr)
            return Exit.TERMINATED
        print(f"{prog}: interrupted", file=sys.stderr)
        return Exit.INTERRUPTED
    except Exception as e:
        # environment() last: a user error is told without importing what it names
        return _error(prog, e, one_line=isinstance(e, USER_ERRORS) or isinstance(e, environment()))


def _error(prog: str, e: Exception, one_line: bool) -> Exit:
    """Input's or environment's fault: one line. A bug: say where, briefly. Never a verdict."""
    if one_line:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return Exit.ERROR
    frames = traceback.extract_tb(e.__traceback__)[-3:]
    print(f"{prog}: internal error: {type(e).__name__}: {e}", file=sys.stderr)
    for line in traceback.format_list(frames):
        print(line.rstrip(), file=sys.stderr)
    return Exit.ERROR
