"""The fault kinds' verbs (nemesis.kinds.base.World) on real hosts, over SSH.

Processes are signalled through the host's `Remote`, page-cache loss goes through the lossy
filesystem's control socket, partitions, cuts from the clients and link faults are netfilter
rules (nemesis.partition, nemesis.client_partition, nemesis.link), toxics go to the host's
Toxiproxy (control.toxiproxy). What a kind does on a host of its own (clock-skew's step of a
VM's clock) is its `HostAction`, run here through `act_on_host` on a `RealHost`. The SSH and
HTTP work blocks, so each verb runs it on a worker thread."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from control import toxiproxy
from control.cluster import Cluster
from control.host import Host
from control.parallel import on_hosts
from nemesis import client_partition, link, segment_damage
from nemesis import partition as grudges
from nemesis.kinds import all_kinds
from nemesis.kinds.base import HostAction, HostActions
from nemesis.partition import Grudge

STOP_WAIT_S = 10.0  # how long a SIGKILLed node may take to be gone before corrupt-segment

# argv: <data dir> <seed>. Prints one JSON object: what was done, or {"note": why nothing was}.
CORRUPT_PROGRAM = Path(segment_damage.__file__).read_text()


def corrupt_argv(python: str, data_dir: str, seed: str) -> list[str]:
    """The command that damages one segment file under `data_dir` (an argv list: Remote.run
    quotes each argument, no shell line is built from data): nemesis/segment_damage.py, run
    by the host's python, which has nothing else of the harness."""
    return [python, "-c", CORRUPT_PROGRAM, str(data_dir), str(seed)]


@dataclass(frozen=True)
class RealHost:
    """A host as a kind's HostAction sees it (nemesis.kinds.base.HostPort; a VM's power too,
    nemesis.kinds.vm.VmHostPort). What a host action needs of the cluster (its record of
    stopped nodes, what it set up on the host besides the node) goes through here, so no
    kind reaches into the Cluster."""

    host: Host
    python: str
    code: str | None
    cluster: Cluster | None = None  # None: a port for commands only (no node, no set-up)

    @property
    def name(self) -> str:
        return self.host.name

    @property
    def vm(self) -> bool:
        return bool(self.host.vm)

    @property
    def domain(self) -> str:
        """The host's libvirt domain, "" when it is not a VM."""
        return self.host.vm

    @property
    def data_dir(self) -> str:
        return str(self.host.data_dir)

    @property
    def run_dir(self) -> str:
        return str(self.host.run_dir)

    def run(self, argv: Sequence[str], *, sudo: bool = False, timeout: float = 60.0) -> str:
        return self.host.remote.run(list(argv), sudo=sudo, timeout=timeout).stdout

    def fetch_dir(self, remote_dir: str, local_dir: Path, skip: tuple[str, ...] = ()) -> None:
        self.host.remote.fetch_dir(remote_dir, local_dir, skip)

    def disconnect(self) -> None:
        """Drop the SSH connection (it died with the guest); the next command reconnects."""
        self.host.remote.close()

    def _cluster(self) -> Cluster:
        if self.cluster is None:
            raise RuntimeError(f"{self.name}: this host port has no cluster (commands only)")
        return self.cluster

    def signal_node(self, sig: str) -> None:
        self._cluster().signal(self.host, sig)

    def node_down(self) -> None:
        """The node is gone without a kill (its host lost power): the cluster records it."""
        self._cluster().down.add(self.name)

    def restore_after_boot(self) -> None:
        """What the cluster set up on the host besides the node, set up again after a boot:
        the lossy filesystem's mount (its backing directory is on disk) and Toxiproxy."""
        cluster = self._cluster()
        if cluster.lazyfs:
            cluster.mount_lazyfs(self.host)
        if cluster.toxiproxy:
            cluster.start_toxiproxy(self.host)

    @property
    def derived_files(self) -> tuple[str, ...]:
        """Suffixes of the files the node rebuilds after an unclean shutdown (Kafka's offset
        and time indexes)."""
        kafka = self._cluster().kafka
        return kafka.mapped_suffixes if kafka else ()


def real_host(cluster: Cluster, host: Host) -> RealHost:
    return RealHost(host, cluster.python, cluster.code, cluster)


class HostsWorld:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.acted = HostActions()  # what kinds' host actions did, until undone

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
        await self._blocking(lambda: link.degrade(self.cluster.host(node), kind, settings,
                                                  self.cluster.python, pick,
                                                  code=self.cluster.code))

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

    async def act_on_host(self, node: str, key: str, action: HostAction) -> dict[str, Any]:
        """A kind's action on the node's host; remembered (once it succeeded) for its undo.
        Cancelled midway (the workload ended: the runner cancels the nemesis, then heals),
        the action's thread cannot be: it is waited for, and remembered if it succeeded, so
        the heal that follows undoes it and finds the host settled (a VM booted, a clock
        stepped); then the cancel goes on."""
        job = asyncio.get_running_loop().run_in_executor(None, action.on_host, self._port(node))
        try:
            out = await asyncio.shield(job)
        except asyncio.CancelledError:
            await asyncio.wait([job])
            if not job.cancelled() and job.exception() is None:
                self.acted.add(node, key, action)
            raise
        self.acted.add(node, key, action)
        return out

    async def undo_on_host(self, node: str, key: str) -> None:
        action = self.acted.pop(node, key)
        if action is not None:
            await self._blocking(action.undo_on_host, self._port(node))

    def _port(self, node: str) -> RealHost:
        return real_host(self.cluster, self.cluster.host(node))

    async def heal_network(self) -> None:
        """No partition, cut from the clients or link fault anywhere (before a run too: a
        killed run on long-lived VMs leaves its rules behind), and no host action left: what
        this world did is undone, and every kind cleans what a killed run left (clock-skew:
        every VM's chrony runs, which steps its clock back)."""
        for node, key in self.acted.pending():
            await self.undo_on_host(node, key)
        await self._blocking(heal_network, self.cluster)


def heal_network(cluster: Cluster) -> None:
    grudges.heal(cluster.hosts)
    client_partition.heal(cluster.hosts)
    link.heal(cluster.hosts)
    on_hosts(cluster.hosts, lambda h: clean_host(real_host(cluster, h)))
    if cluster.toxiproxy:
        on_hosts(cluster.hosts, toxiproxy.remove_toxics)


def clean_host(host: RealHost) -> None:
    """Every kind's cleaning of what a killed run of it may have left on the host."""
    for kind in all_kinds():
        kind.clean_host(host)
