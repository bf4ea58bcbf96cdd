"""The fault kinds' verbs (nemesis.kinds.base.World) on real hosts, over SSH.

Processes are signalled through the host's `Remote`, page-cache loss goes through the lossy
filesystem's control socket, partitions and link faults are netfilter rules (nemesis.partition,
nemesis.link), toxics go to the host's Toxiproxy (control.toxiproxy). The SSH and HTTP work
blocks, so each verb runs it on a worker thread."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from control import toxiproxy
from control.cluster import Cluster
from control.parallel import on_hosts
from nemesis import link
from nemesis import partition as grudges
from nemesis.partition import Grudge


class HostsWorld:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    @property
    def nodes(self) -> list[str]:
        return [h.name for h in self.cluster.hosts]

    async def _blocking(self, fn, *args) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    async def kill(self, node: str) -> None:
        await self._blocking(self.cluster.kill, self.cluster.host(node))

    async def start(self, node: str) -> None:
        await self._blocking(self.cluster.start, self.cluster.host(node))

    async def stop_clean(self, node: str) -> None:
        await self._blocking(self.cluster.stop_clean, self.cluster.host(node))

    async def pause(self, node: str) -> None:
        await self._blocking(self.cluster.signal, self.cluster.host(node), "STOP")

    async def resume(self, node: str) -> None:
        await self._blocking(self.cluster.signal, self.cluster.host(node), "CONT")

    async def power_loss(self, node: str, torn: bool, pick: int) -> dict[str, Any]:
        await self.kill(node)
        if torn:
            return await self._lazyfs(node, "torn", "--seed", str(pick))
        return await self._lazyfs(node, "lose-unsynced")

    async def page_cache_loss(self, node: str) -> dict[str, Any]:
        return await self._lazyfs(node, "lose-unsynced")

    async def _lazyfs(self, node: str, *command: str) -> dict[str, Any]:
        if not self.cluster.lazyfs:
            return {"note": "no lazyfs mount: process killed, page cache kept"}
        out = await self._blocking(self.cluster.lazyfs_ctl, self.cluster.host(node), *command)
        try:
            return json.loads(out)
        except ValueError:
            return {"raw": out.strip()}

    async def partition(self, grudge: Grudge) -> None:
        await self._blocking(grudges.apply, self.cluster.hosts, grudge)

    async def heal_partition(self) -> None:
        await self._blocking(grudges.heal, self.cluster.hosts)

    async def degrade_link(self, node: str, kind: str, settings: Mapping[str, float],
                           pick: int) -> None:
        await self._blocking(link.degrade, self.cluster.host(node), kind, settings,
                             self.cluster.python, pick)

    async def restore_link(self, node: str) -> None:
        await self._blocking(link.restore, self.cluster.host(node))

    async def add_toxic(self, node: str, kind: str, toxic: Mapping[str, Any]) -> None:
        if not self.cluster.toxiproxy:
            raise RuntimeError(f"{kind} needs Toxiproxy, and this run has none (hosts.toxiproxy "
                               "= false; docs/toxiproxy.md)")
        await self._blocking(lambda: toxiproxy.add_toxic(
            self.cluster.host(node), kind, toxic["type"], toxic["direction"],
            toxic["attributes"], toxic["toxicity"]))

    async def remove_toxic(self, node: str, kind: str) -> None:
        if self.cluster.toxiproxy:
            await self._blocking(toxiproxy.remove_toxics, self.cluster.host(node), kind)

    async def heal_network(self) -> None:
        """No partition or link fault anywhere (before a run too: a killed run on long-lived
        VMs leaves its rules behind)."""
        await self._blocking(heal_network, self.cluster)


def heal_network(cluster: Cluster) -> None:
    grudges.heal(cluster.hosts)
    link.heal(cluster.hosts)
    if cluster.toxiproxy:
        on_hosts(cluster.hosts, toxiproxy.remove_toxics)
