"""The exit-code contract of every entry point (`harness`, `python -m checkers`,
`python -m checkers.linear`): 0 valid, 1 invalid, 2 unknown, 3 error.

A verdict is only ever 0, 1 or 2. Anything that went wrong -- a bad argument, an unreadable
file, a bug -- exits 3 with a message, so a crash never reads as "invalid" or "unknown"."""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable
from enum import IntEnum
from typing import Any, NoReturn


class Exit(IntEnum):
    VALID = 0
    INVALID = 1
    UNKNOWN = 2
    ERROR = 3
    INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT

    @classmethod
    def of(cls, valid: Any) -> Exit:
        """The exit code of a verdict: True, False, or anything else ("unknown", None)."""
        if valid is True:
            return cls.VALID
        if valid is False:
            return cls.INVALID
        return cls.UNKNOWN


class Parser(argparse.ArgumentParser):
    """argparse exits 2 on a usage error, which here means "unknown": exit 3 instead."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(Exit.ERROR, f"{self.prog}: error: {message}\n")


class UserError(Exception):
    """Bad input the user can fix: printed as one line, no traceback."""


# Errors that are the input's fault, not the program's: one line, no traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (UserError, ValueError, OSError)


def guarded(prog: str, main: Callable[[], int]) -> int:
    """Run `main` and map whatever escapes it onto the contract: user errors print one line,
    bugs a short traceback, both exit 3; Ctrl-C exits 130."""
    try:
        return int(main())
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return Exit.INTERRUPTED
    except USER_ERRORS as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return Exit.ERROR
    except Exception as e:  # a bug: say where, briefly, and never exit with a verdict's code
        frames = traceback.extract_tb(e.__traceback__)[-3:]
        print(f"{prog}: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        for line in traceback.format_list(frames):
            print(line.rstrip(), file=sys.stderr)
        return Exit.ERROR
