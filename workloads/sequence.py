"""The run sequence, written once for real hosts (harness/runner.py) and the simulated world
(simulation/run.py):

    create the topic; wait until every partition has a leader and a full ISR (60 s)
    connect the workload; start the faults; run the workload for the time limit
    stop the faults; heal everything; wait for health again; read every partition to the end

Where it happens is an `Environment`: real hosts with the embedded system or Apache Kafka
(harness/runner.py's), or a simulated world (simulation/run.py's). What injects the faults
is the caller's `Faults`: the nemesis with the run's schedule, or a test's own script. A
fault task that raised fails the run: a broken schedule must not pass unseen."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from workloads.history import HistoryWriter
from workloads.kafka import WorkloadParams


class Workload(Protocol):
    stats: dict[str, int]
    final_errors: dict[int, str]

    async def connect(self) -> None:
        """Get ready to send, before the workload's clock starts."""
        ...

    async def run(self, duration_s: float) -> None: ...
    async def final_read(self, timeout_s: float) -> dict[int, bool]: ...


class Environment(Protocol):
    """The cluster a run exercises, reached through its bootstrap addresses."""

    async def create_topic(self, topic: str, partitions: int, replication_factor: int) -> None: ...
    async def wait_healthy(self, topic: str, partitions: int, timeout_s: float) -> bool: ...
    def workload(self, params: WorkloadParams, history: HistoryWriter) -> Workload: ...

    def alongside(self, workload: Workload, time_limit: float) -> list[Coroutine[Any, Any, Any]]:
        """What runs beside the whole workload and is cancelled after it (a watcher of the
        cluster, a progress display); may be empty."""
        ...

    def say(self, msg: str) -> None: ...


@dataclass
class Faults:
    """`start()`, when the workload's clock starts: an awaitable that injects faults until
    cancelled (or None: no faults); `stopped()` once it is; `heal()` after the workload."""

    start: Callable[[], Awaitable[Any] | None]
    heal: Callable[[], Awaitable[None]]
    stopped: Callable[[], None] = lambda: None


@dataclass
class Outcome:
    workload: Workload
    final_read: dict[int, bool]  # partition -> read to its end
    healthy: bool  # every partition had a full ISR again before the final read


async def exercise(env: Environment, params: WorkloadParams, history: HistoryWriter, *,
                   replication_factor: int, time_limit: float, final_read_timeout: float,
                   faults: Faults, on_workload: Callable[[Workload], None] | None = None) -> Outcome:
    """The sequence above; `on_workload` hears of the workload as soon as it exists."""
    await env.create_topic(params.topic, params.partitions, replication_factor)
    await env.wait_healthy(params.topic, params.partitions, 60)
    workload = env.workload(params, history)
    if on_workload is not None:
        on_workload(workload)
    loop = asyncio.get_running_loop()
    beside = [loop.create_task(c) for c in env.alongside(workload, time_limit)]
    try:
        await _with_faults(workload, faults, time_limit)
    finally:
        for task in beside:
            task.cancel()
        await asyncio.gather(*beside, return_exceptions=True)
    env.say("healing every fault and restarting stopped nodes")
    await faults.heal()
    history.nemesis("stop-all", {"healed": True})
    healthy = await env.wait_healthy(params.topic, params.partitions, final_read_timeout)
    if not healthy:
        env.say("cluster did not fully recover (some partition has no full ISR); reading anyway")
    env.say("final read")
    done = await workload.final_read(final_read_timeout)
    missing = [p for p, ok in done.items() if not ok]
    if missing:
        env.say(f"final read incomplete for partitions {missing}: {workload.final_errors}")
    env.say(f"workload stats: {workload.stats}")
    return Outcome(workload, done, healthy)


async def _with_faults(workload: Workload, faults: Faults, time_limit: float) -> None:
    """The workload for the time limit, the faults alongside from its first moment."""
    await workload.connect()
    started = faults.start()
    task = asyncio.get_running_loop().create_task(_awaited(started)) if started is not None else None
    try:
        await workload.run(time_limit)
    finally:
        if task is not None:
            task.cancel()
            (outcome,) = await asyncio.gather(task, return_exceptions=True)
        faults.stopped()
    if task is not None and isinstance(outcome, Exception):
        raise RuntimeError(f"the faults failed: {outcome!r}") from outcome


async def _awaited(aw: Awaitable[Any]) -> Any:
    return await aw
