"""Carrying out a nemesis schedule against a running cluster.

Each planned fault is resolved against live metadata when it starts (the leader of partition 0
*now*), applied over SSH, recorded as `start-<kind>` / `stop-<kind>` nemesis operations in the
history and in schedule.json, and undone when its duration is over."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from typing import Any

from harness.cluster import Cluster
from harness.hosts.host import Host
from nemesis import link
from nemesis import partition as grudges
from nemesis.schedule import ScheduleRecord
from replication.client import Client, ClientError
from workloads.history import HistoryWriter

LOSSY = ("power-loss", "torn-power-loss", "outage")


class Nemesis:
    def __init__(self, cluster: Cluster, history: HistoryWriter, schedule: ScheduleRecord,
                 topic: str, clock: Callable[[], float], link_settings: dict[str, float]) -> None:
        self.cluster = cluster
        self.link_settings = link_settings  # link.settings() of the run's [nemesis] table
        self.history = history
        self.schedule = schedule
        self.topic = topic
        self.clock = clock  # seconds since the workload started
        self.active: dict[int, dict[str, Any]] = {}

    # ---- target resolution ---------------------------------------------------------------------

    async def _metadata(self) -> dict:
        client = Client(self.cluster.bootstrap(), request_timeout_s=2)
        try:
            return await client.metadata(refresh=True)
        finally:
            await client.close()

    def _hosts_of(self, brokers) -> list[Host]:
        return [self.cluster.broker_hosts[b] for b in brokers if b in self.cluster.broker_hosts]

    async def resolve(self, kind: str, target: dict) -> list[Host] | dict:
        rng = random.Random(target.get("pick", 0))
        brokers = sorted(self.cluster.broker_hosts)
        if "fixed" in target:
            fixed = target["fixed"]
            if "grudge" in fixed:
                return {k: frozenset(v) for k, v in fixed["grudge"].items()}
            return [self.cluster.host(n) for n in fixed["nodes"]]
        if kind == "outage":
            return self._hosts_of(rng.sample(brokers, min(target["count"], len(brokers))))
        names = [h.name for h in self.cluster.hosts]
        shape = target.get("shape")
        if shape in ("isolate", "halves", "majority-ring", "bridge"):
            fn = {"isolate": grudges.isolate_one, "halves": grudges.halves,
                  "majority-ring": grudges.majority_ring, "bridge": grudges.bridge}[shape]
            return fn(names, rng)
        if shape == "isolate-controller":
            return grudges.isolate_node(names, self.cluster.controller_host.name)
        select = target.get("select")
        if select == "controller":
            return [self.cluster.controller_host]
        if select == "random-broker":
            return self._hosts_of([rng.choice(brokers)])
        if select == "majority":
            return self._hosts_of(rng.sample(brokers, len(brokers) // 2 + 1))
        state = await self._partition_state(target.get("partition", 0))
        if state is None:
            return []
        leader, isr, elr = state["leader"], state["isr"], state["elr"]
        if shape == "isolate-leader":
            return [] if leader is None else grudges.isolate_node(names, self.cluster.broker_hosts[leader].name)
        if select == "leader":
            return self._hosts_of([leader] if leader is not None else [])
        if select == "last-isr-member":
            return self._hosts_of(isr[:1] if len(isr) == 1 else ([leader] if leader is not None else []))
        if select == "elr-members":
            return self._hosts_of(elr)
        if select == "followers":
            return [] if leader is None else self._hosts_of([r for r in state["replicas"] if r != leader])
        raise ValueError(f"unknown target {target}")

    async def _partition_state(self, partition: int) -> dict | None:
        try:
            md = await self._metadata()
        except ClientError:
            return None
        for p in md["partitions"]:
            if p["topic"] == self.topic and p["partition"] == partition:
                return p
        return None

    # ---- applying and healing --------------------------------------------------------------------

    def _apply(self, kind: str, hosts: list[Host], pick: int) -> dict:
        """Blocking SSH work: run in an executor."""
        details: dict[str, Any] = {}
        for host in hosts:
            if kind == "kill":
                self.cluster.kill(host)
            elif kind == "pause":
                self.cluster.signal(host, "STOP")
            elif kind == "restart":
                self.cluster.stop_clean(host)
                self.cluster.start(host)
            elif kind in LOSSY or kind == "page-cache-loss":
                details[host.name] = self._lose_cache(kind, host, pick)
            elif kind in link.LINK_FAULTS:
                link.degrade(host, kind, self.link_settings, self.cluster.python, pick)
        return details

    def _lose_cache(self, kind: str, host: Host, pick: int) -> Any:
        if kind != "page-cache-loss":
            self.cluster.kill(host)
        if not self.cluster.lazyfs:
            return {"note": "no lazyfs mount: process killed, page cache kept"}
        if kind == "torn-power-loss":
            out = self.cluster.lazyfs_ctl(host, "torn", "--seed", str(pick))
        else:
            out = self.cluster.lazyfs_ctl(host, "lose-unsynced")
        try:
            return json.loads(out)
        except ValueError:
            return {"raw": out.strip()}

    def _heal(self, kind: str, hosts: list[Host]) -> None:
        for host in hosts:
            if kind == "pause":
                self.cluster.signal(host, "CONT")
            elif kind in ("kill", *LOSSY):
                self.cluster.start(host)
            elif kind in link.LINK_FAULTS:
                link.restore(host)

    async def run_fault(self, fault) -> None:
        loop = asyncio.get_running_loop()
        delay = fault.start_s - self.clock()
        if delay > 0:
            await asyncio.sleep(delay)
        try:
            resolved = await self.resolve(fault.kind, fault.target)
        except Exception as e:  # a fault that cannot be aimed is skipped, not fatal
            self.schedule.skipped(fault.id, f"could not resolve target: {e}")
            return
        if not resolved:
            self.schedule.skipped(fault.id, "no node matched the target now")
            return
        pick = fault.target.get("pick", 0)
        if isinstance(resolved, dict):
            value: dict[str, Any] = {"grudge": grudges.to_json(resolved)}
            record = {"grudge": grudges.to_json(resolved)}
        else:
            value = {"nodes": [h.name for h in resolved]}
            record = dict(value)
            if fault.kind in link.LINK_FAULTS:
                value["link"] = record["link"] = link.describe(fault.kind, self.link_settings)
        self.schedule.started(fault.id, record, self.clock())
        try:
            if isinstance(resolved, dict):
                await loop.run_in_executor(None, grudges.apply, self.cluster.hosts, resolved)
            else:
                details = await loop.run_in_executor(None, self._apply, fault.kind, resolved, pick)
                if details:
                    value["lost"] = details
        except Exception as e:
            # Half-applied (e.g. killed, then the cache could not be dropped): record it and
            # still undo it below, so no node stays down for the rest of the run.
            value["error"] = str(e)
        self.history.nemesis(f"start-{fault.kind}", value)
        await asyncio.sleep(max(0.0, fault.duration_s))
        try:
            if isinstance(resolved, dict):
                await loop.run_in_executor(None, grudges.heal, self.cluster.hosts)
            else:
                await loop.run_in_executor(None, self._heal, fault.kind, resolved)
            self.schedule.ended(fault.id, self.clock(), "failed" if "error" in value else "ok",
                                value.get("error"))
        except Exception as e:
            self.schedule.ended(fault.id, self.clock(), "failed", str(e))
        self.history.nemesis(f"stop-{fault.kind}", {"nodes": value.get("nodes", sorted(value.get("grudge", {})))})

    async def run(self) -> None:
        await asyncio.gather(*(self.run_fault(f) for f in self.schedule.faults))

    def heal_all(self) -> None:
        """After the workload: no partition or link fault, nothing paused, every node running."""
        heal_network(self.cluster.hosts)
        for host in self.cluster.hosts:
            self.cluster.signal(host, "CONT")
            self.cluster.start(host)


def heal_network(hosts: list[Host]) -> None:
    """Remove every partition and link fault (before a run too: a killed run on long-lived
    VMs leaves its rules and qdiscs behind)."""
    grudges.heal(hosts)
    link.heal(hosts)
