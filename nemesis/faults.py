"""Carrying out a nemesis schedule against a running cluster, real or simulated.

Each planned fault is resolved against live metadata when it starts (the leader of partition 0
*now*), applied through its `FaultKind` (nemesis.kinds), recorded as `start-<kind>` /
`stop-<kind>` nemesis operations in the history (the start with the kind's effects,
runformat.effects) and in schedule.json, and healed when its duration is over. Times come from one clock: `clock()` gives seconds since the workload
started, on the same clock as the history."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from nemesis import partition as grudges
from nemesis.kinds import Topology, World, lookup
from nemesis.kinds.base import Resolved
from nemesis.roles import as_fixed, await_last_member, roles_now, waits_for_role
from nemesis.schedule import RealisedFault, ScheduleRecord
from nemesis.until import await_state
from replication.client import Client, ClientError
from replication.net import Pool
from workloads.history import HistoryWriter


def metadata_topology(nodes: list[str], bootstrap: list[str], topic: str,
                      pool_factory: Callable[[], Pool] = Pool) -> Topology:
    """n1 is the controller, n2.. brokers 1..; partition states from the cluster's metadata."""

    async def partition_state(partition: int) -> dict | None:
        client = Client(bootstrap, request_timeout_s=2, pool=pool_factory())
        try:
            md = await client.metadata(refresh=True)
        except ClientError:
            return None
        finally:
            await client.close()
        for p in md.partitions:
            if p.topic == topic and p.partition == partition:
                return p.to_dict()
        return None

    brokers = {i: name for i, name in enumerate(nodes[1:], start=1)}
    return Topology(tuple(nodes), nodes[0], brokers, partition_state)


def _asking_once(topology: Topology) -> Topology:
    """The topology for one fault's start: each partition's state (and the coordinating
    logs') is asked for once, so the roles recorded (nemesis.roles) and the target resolved
    come from the same answer."""
    answers: dict[int, dict | None] = {}

    async def partition_state(partition: int) -> dict | None:
        if partition not in answers:
            answers[partition] = await topology.partition_state(partition)
        return answers[partition]

    return replace(topology, partition_state=partition_state,
                   txn_state=_once(topology.txn_state), group_state=_once(topology.group_state))


def _once(ask: Callable[[], Awaitable[dict | None]] | None
          ) -> Callable[[], Awaitable[dict | None]] | None:
    """`ask`, answering its first answer from then on (None stays None: no such log)."""
    if ask is None:
        return None
    answer: list[dict | None] = []

    async def asked() -> dict | None:
        if not answer:
            answer.append(await ask())
        return answer[0]

    return asked


class Nemesis:
    def __init__(self, world: World, topology: Topology, history: HistoryWriter,
                 schedule: ScheduleRecord, clock: Callable[[], float],
                 settings: Mapping[str, Any]) -> None:
        self.world = world
        self.topology = topology
        self.history = history
        self.schedule = schedule
        self.clock = clock  # seconds since the workload started
        # the [nemesis] settings faults apply: link_delay_ms, ..., and "toxics" (kind -> table)
        self.settings = settings
        # fault id -> the seconds it waited for its role or a partition state (nemesis.until),
        # for faults that may (see _shift and _stretch)
        self._waits: dict[int, asyncio.Future[float]] = {}

    async def run_fault(self, fault: RealisedFault) -> None:
        kind = lookup(fault.kind)
        delay = fault.start_s - self.clock()
        if delay > 0:
            await asyncio.sleep(delay)
        await self._shift(fault)
        aimed = await self._aim(fault)
        self._waited(fault, aimed[2] if aimed else 0.0)
        if aimed is None:
            return
        resolved, roles, _ = aimed
        if isinstance(resolved, dict):
            value: dict[str, Any] = {"grudge": grudges.to_json(resolved)}
        else:
            value = {"nodes": list(resolved)}
        record = dict(value)
        described = kind.describe(self.settings)
        if described:
            value[kind.record_key] = record[kind.record_key] = described
        value["effects"] = sorted(kind.effects)  # what it does, for checkers and reports
        self.schedule.started(fault.id, record, self.clock(), roles)
        try:
            details = await kind.apply(self.world, resolved, fault.target.get("pick", 0),
                                       self.settings)
            if details:
                value["lost"] = details
        except Exception as e:
            # Half-applied (e.g. killed, then the cache could not be dropped): record it and
            # still heal it below, so no node stays down for the rest of the run.
            value["error"] = str(e)
        self.history.nemesis(f"start-{fault.kind}", value)
        hit_at = self.clock()
        await asyncio.sleep(max(0.0, fault.duration_s))
        await self._stretch(fault, hit_at)
        try:
            await kind.heal(self.world, resolved)
            self.schedule.ended(fault.id, self.clock(), "failed" if "error" in value else "ok",
                                value.get("error"))
        except Exception as e:
            self.schedule.ended(fault.id, self.clock(), "failed", str(e))
        self.history.nemesis(f"stop-{fault.kind}",
                             {"nodes": value.get("nodes", sorted(value.get("grudge", {})))})

    async def _aim(self, fault: RealisedFault) -> tuple[Resolved, dict[str, str], float] | None:
        """The nodes (or grudge) the fault hits now, every node's role, and how long it waited
        for its role (nemesis.roles); None, recorded as skipped, when nothing can be aimed at."""
        topology = _asking_once(self.topology)
        began = self.clock()
        try:
            await await_state(self.topology, fault.target, asyncio.sleep, self.clock)
            roles = await roles_now(topology, fault.target)
            roles = await await_last_member(self.topology, fault.target, roles, asyncio.sleep)
            target = as_fixed(roles, fault.target) if "roles" in fault.target else fault.target
            resolved = await lookup(fault.kind).resolve(topology, target)
        except Exception as e:  # a fault that cannot be aimed is skipped, not fatal
            self.schedule.skipped(fault.id, f"could not resolve target: {e}")
            return None
        if not resolved:
            self.schedule.skipped(fault.id, "no node matched the target now")
            return None
        return resolved, roles, self.clock() - began

    def _waited(self, fault: RealisedFault, seconds: float) -> None:
        waiting = self._waits.get(fault.id)
        if waiting is not None and not waiting.done():
            waiting.set_result(seconds)

    def _episode(self, fault: RealisedFault) -> list[RealisedFault]:
        """The other faults of the fault's episode (those with the same first fault, `after`)
        that may wait before they hit (nemesis.roles.waits_for_role)."""
        first = fault.id if fault.after is None else fault.after
        return [f for f in self.schedule.faults if f.id in self._waits and f.id != fault.id
                and first in (f.id, f.after)]

    async def _shift(self, fault: RealisedFault) -> None:
        """An episode's clock stops while one of its faults waits: a fault starts as much
        later as the faults before it in its episode waited."""
        before = [f for f in self._episode(fault) if (f.start_s, f.id) < (fault.start_s, fault.id)]
        if before:
            late = sum([await self._waits[f.id] for f in before])
            rest = fault.start_s + late - self.clock()
            if rest > 0:
                await asyncio.sleep(rest)

    async def _stretch(self, fault: RealisedFault, hit_at: float) -> None:
        """The same for its heal: a fault is healed as much later as the later faults of its
        episode that started while it lasted waited (the followers stay paused until the last
        ISR member has been hit, on a system slower to shrink)."""
        end = fault.start_s + fault.duration_s
        later = [f for f in self._episode(fault)
                 if (f.start_s, f.id) > (fault.start_s, fault.id) and f.start_s <= end]
        if later:
            late = sum([await self._waits[f.id] for f in later])
            rest = hit_at + fault.duration_s + late - self.clock()
            if rest > 0:
                await asyncio.sleep(rest)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._waits = {f.id: loop.create_future() for f in self.schedule.faults
                       if waits_for_role(f.target)}
        await asyncio.gather(*(self.run_fault(f) for f in self.schedule.faults))

    async def heal_all(self) -> None:
        """After the workload: no partition or link fault, nothing paused, every node running."""
        await self.world.heal_network()
        for node in self.topology.nodes:
            await self.world.resume(node)
            await self.world.start(node)
