"""What the sans-IO state machines ask their runtime to do.

A state machine method returns a list of these; the runtime carries them out in order. In
particular a `Persist` must be durable before any later `Reply` is sent.

`Sync` is the storage port of a broker whose logs defer their durability work
(`Log(defer_sync=True)`; log.py): the runtime runs `job.run()` -- fsyncs, checkpoint
writes -- wherever it likes (the asyncio runtime: a storage thread per broker; a simulator:
after a simulated delay) and then calls the broker's `on_synced(topic, partition, job, now)`.
Jobs of one log come one at a time (the next only after `on_synced` for the previous) and
must run in the order given. A runtime that keeps logs syncing inline never sees a `Sync`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from replication.log import SyncJob
    from replication.messages import Message, Request


@dataclass(frozen=True)
class Reply:
    """Answer the request identified by `token` (opaque to the state machine)."""

    token: Any
    msg: Message


@dataclass(frozen=True)
class Send:
    """Send a request to `dest` ("controller" or a broker id); its answer comes back through
    the state machine's `on_response(dest, request, response)`."""

    dest: str | int
    msg: Request


@dataclass(frozen=True)
class Event:
    """A line for the node's events.jsonl (docs/formats.md)."""

    kind: str
    fields: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Persist:
    """A metadata record to append and fsync before anything that follows it."""

    record: dict


@dataclass(frozen=True)
class Sync:
    """Run a log's durability job off the state machine, then report it with `on_synced`."""

    topic: str
    partition: int
    job: SyncJob


Output = Reply | Send | Event | Persist | Sync


def events_first(events: list[Output], outputs: list[Output]) -> list[Output]:
    """`outputs` with `events` inserted before the first output that is not an Event.

    Observations of the state a step leaves must reach events.jsonl before anything the step
    sends: a peer that reacts to a Reply or Send writes its own events on another host's
    loop, and the trace checker orders events by time (checkers/trace.py)."""
    if not events:
        return outputs
    i = 0
    n = len(outputs)
    while i < n and outputs[i].__class__ is Event:
        i += 1
    return outputs[:i] + events + outputs[i:]
