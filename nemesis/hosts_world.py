"""The fault kinds' verbs (nemesis.kinds.base.World) on real hosts, over SSH.

Processes are signalled through the host's `Remote`, page-cache loss goes through the lossy
filesystem's control socket, partitions, cuts from the clients and link faults are netfilter
rules (nemesis.partition, nemesis.client_partition, nemesis.link), toxics go to the host's
Toxiproxy (control.toxiproxy), a VM's clock is stepped with its NTP daemon stopped. The SSH
and HTTP work blocks, so each verb runs it on a worker thread."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from control import toxiproxy
from control.cluster import Cluster
from control.host import Host
from control.parallel import on_hosts
from nemesis import client_partition, link, segment_damage
from nemesis import partition as grudges
from nemesis.partition import Grudge

# Step the wall clock by argv[1] seconds (run with the cluster's python, as root).
STEP_CLOCK = ("import sys, time; c = time.CLOCK_REALTIME; "
              "time.clock_settime(c, time.clock_gettime(c) + float(sys.argv[1]))")
# The guest's NTP daemon would slew a stepped clock back: stopped while the clock is skewed.
# Debian names it chrony, others chronyd; a guest without it has nothing to stop.
CHRONY = "systemctl {0} chrony 2>/dev/null || systemctl {0} chronyd 2>/dev/null || true"
STOP_WAIT_S = 10.0  # how long a SIGKILLed node may take to be gone before corrupt-segment

# argv: <data dir> <seed>. Prints one JSON object: what was done, or {"note": why nothing was}.
CORRUPT_PROGRAM = Path(segment_damage.__file__).read_text()


def corrupt_argv(python: str, data_dir: str, seed: str) -> list[str]:
    """The command that damages one segment file under `data_dir` (an argv list: Remote.run
    quotes each argument, no shell line is built from data): nemesis/segment_damage.py, run
    by the host's python, which has nothing else of the harness."""
    return [python, "-c", CORRUPT_PROGRAM, str(data_dir), str(seed)]


class HostsWorld:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._skew_ms: dict[str, float] = {}  # node -> how far its clock was stepped

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

    async def corrupt_segment(self, node: str, pick: int) -> dict[str, Any]:
        """Kill, wait until the process is gone (SIGKILL is asynchronous: no write after the
        damage), then damage one segment file in its data directory (nemesis.segment_damage,
        run on the host)."""
        await self.kill(node)
        return await self._blocking(self._damage, self.cluster.host(node), f"{pick}:{node}")

    def _damage(self, host: Host, seed: str) -> dict[str, Any]:
        deadline = time.monotonic() + STOP_WAIT_S
        while host.remote.is_running("node"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{host.name}: node still running {STOP_WAIT_S:.0f} s after SIGKILL")
            time.sleep(0.05)
        out = host.remote.run(corrupt_argv(self.cluster.python, str(host.data_dir), seed),
                              timeout=60).stdout
        try:
            return json.loads(out)
        except ValueError:
            return {"raw": out.strip()}

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

    async def cut_from_clients(self, node: str) -> dict[str, Any]:
        return await self._blocking(client_partition.cut, self.cluster.host(node))

    async def rejoin_clients(self, node: str) -> None:
        await self._blocking(client_partition.restore, self.cluster.host(node))

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

    async def clock_jump(self, node: str, delta_ms: float) -> None:
        await self._blocking(step_clock, self.cluster.host(node), self.cluster.python, delta_ms,
                             True)
        self._skew_ms[node] = self._skew_ms.get(node, 0.0) + delta_ms

    async def clock_reset(self, node: str) -> None:
        skew = self._skew_ms.pop(node, None)
        if skew is not None:
            await self._blocking(step_clock, self.cluster.host(node), self.cluster.python,
                                 -skew, False)

    async def heal_network(self) -> None:
        """No partition, cut from the clients or link fault anywhere (before a run too: a
        killed run on long-lived VMs leaves its rules behind), and no skewed clock: a skew
        this world made is stepped back, and every VM's chrony runs (it steps back what a
        killed run left)."""
        for node in list(self._skew_ms):
            await self.clock_reset(node)
        await self._blocking(heal_network, self.cluster)


def heal_network(cluster: Cluster) -> None:
    grudges.heal(cluster.hosts)
    client_partition.heal(cluster.hosts)
    link.heal(cluster.hosts)
    vms = [h for h in cluster.hosts if h.vm]
    if vms:
        on_hosts(vms, lambda h: h.remote.run(["sh", "-c", CHRONY.format("start")], sudo=True))
    if cluster.toxiproxy:
        on_hosts(cluster.hosts, toxiproxy.remove_toxics)


def step_clock(host: Host, python: str, delta_ms: float, skewing: bool) -> None:
    """Step a VM's wall clock by delta_ms: chrony stopped first when `skewing`, started again
    after a step back. Namespace hosts share this machine's kernel clock (and an inventory
    machine that is not a VM is not ours to step): refused."""
    if not host.vm:
        raise RuntimeError(f"{host.name} is not a VM: clock-skew steps a guest's own clock, and "
                           "namespace hosts share this machine's one kernel clock (docs/vms.md)")
    if skewing:
        host.remote.run(["sh", "-c", CHRONY.format("stop")], sudo=True)
    host.remote.run([python, "-c", STEP_CLOCK, repr(delta_ms / 1000)], sudo=True)
    if not skewing:
        host.remote.run(["sh", "-c", CHRONY.format("start")], sudo=True)
