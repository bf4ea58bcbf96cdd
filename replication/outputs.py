"""What the sans-IO state machines ask their runtime to do.

A state machine method returns a list of these; the runtime carries them out in order. In
particular a `Persist` must be durable before any later `Reply` is sent."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Reply:
    """Answer the request identified by `token` (opaque to the state machine)."""

    token: Any
    msg: dict


@dataclass(frozen=True)
class Send:
    """Send a request to `dest` ("controller" or a broker id); its answer comes back through
    the state machine's `on_response(dest, request, response)`."""

    dest: str | int
    msg: dict


@dataclass(frozen=True)
class Event:
    """A line for the node's events.jsonl (docs/formats.md)."""

    kind: str
    fields: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Persist:
    """A metadata record to append and fsync before anything that follows it."""

    record: dict


Output = Reply | Send | Event | Persist
