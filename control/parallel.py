"""Doing the same thing on many hosts at once."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")
MAX_WORKERS = 16


def on_hosts(hosts: Sequence[T], action: Callable[[T], R]) -> list[R]:
    """Run `action` on every host in parallel and return the results in host order.

    Every action runs to its end even when another fails; then the first error is raised, so a
    failure on one host never leaves work on the others half-started and unobserved."""
    if not hosts:
        return []
    with ThreadPoolExecutor(max_workers=min(MAX_WORKERS, len(hosts))) as pool:
        futures = [pool.submit(action, h) for h in hosts]
    for f in futures:
        if f.exception() is not None:
            raise f.exception()
    return [f.result() for f in futures]
