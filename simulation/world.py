"""The simulated world: nodes, their disks and clocks, the network, one seed.

    world = World(seed=7, n_nodes=4, node_config=NodeConfig(min_insync_replicas=2))
    world.start_all()
    world.loop.run(main(world))          # the real Client/KafkaWorkload with pool=world.pool()

Names are control/cluster.py's: n1 runs the controller, n2..nN the brokers 1..N-1, each
listening on "<name>:9092"; `bootstrap()` is the controller's address then the brokers'.

The cluster operations (what the nemesis's fault kinds call) are plain methods named by node
name and take effect at the current virtual time:

    start(node)                     start the node's process if it is not running
    kill(node)                      SIGKILL: the page cache survives
    await stop_clean(node)          SIGTERM and wait: the controlled shutdown (writes the marker)
    pause(node) / resume(node)      SIGSTOP / SIGCONT
    power_loss(node, torn, pick)    kill, then lose every unsynced write (torn: a seeded part
                                    of them survives); returns what was lost
    page_cache_loss(node)           lose unsynced writes under the running process
    corrupt_segment(node, pick)     kill, then damage one record of a segment file (seeded)
    partition(grudge)               {node: nodes whose packets it drops}; replaces the last one
    heal_partition()
    degrade_link(node, kind, settings, pick) / restore_link(node)
                                    slow-link, lossy-link, reset-link on what node receives
    clock_jump(node, delta_ms) / clock_drift(node, rate) / clock_reset(node)
    is_running(node), events()

plus heal_network(), heal_all() (Nemesis.heal_all: every fault still in force undone -- the
kinds' host actions, a clock skew among them, partitions, link faults --, clocks reset,
everything resumed and started), start_all(), is_paused(node), run_for(seconds). `Verbs(world)` is the
same set as coroutines, the shape of nemesis.kinds.base.World (a kind's HostAction acts on
a `SimHost`: the host's clock). `NetConfig` (network.py) and
`DiskConfig` (disk.py) hold the latency and fsync distributions.

A clock fault moves the host's monotonic clock, which the node's timers and `now` follow: a
backward jump (clock_reset after a forward jump is one) holds its timers back by as much.

Every random choice is drawn from a stream derived from the seed by name (random.Random(
f"{seed}:net") and so on), so adding a draw in one place does not shift the others; nothing
reads the wall clock, os.urandom, id() or the order of a set of strings.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import traceback
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from nemesis.kinds.base import HostAction, HostActions
from replication.broker_store import LogConfig
from replication.config import NodeConfig
from simulation.disk import DiskConfig, NodeDisk
from simulation.loop import SimLoop
from simulation.network import (
    CLIENT_HOST,
    PORT,
    ClientProcess,
    LinkFault,
    NetConfig,
    Network,
    Pool,
)
from simulation.node import BrokerProcess, ControllerProcess, HostClock, NodeProcess
from workloads.history import json_line

# "ts" of events is this plus the virtual time: 2026-01-01T00:00:00Z, fixed so that events
# files of the same seed are byte-identical.
DEFAULT_EPOCH = 1_767_225_600.0
# Seconds from a node's start to its listening (and so registering), drawn uniformly: the
# embedded system's real nodes register 0.08-0.78 s after the harness starts them (median
# 0.21 s over the validation campaign's runs of 2026-11-27, benchmarks/restart_times.py).
# Apache Kafka's JVM brokers take 1.3-3.8 s on a lightly loaded machine and up to 20 s on a
# loaded one: `hosts.startup_s` sets another range (docs/simulation.md, "Start-up delay").
DEFAULT_STARTUP_S = (0.2, 0.5)


class World:
    def __init__(self, seed: int, n_nodes: int = 4, node_config: NodeConfig | None = None, *,
                 net: NetConfig | None = None, disk: DiskConfig | None = None,
                 startup_s: tuple[float, float] = DEFAULT_STARTUP_S, epoch: float = DEFAULT_EPOCH,
                 loop: SimLoop | None = None) -> None:
        if n_nodes < 2:
            raise ValueError("a world needs at least 2 nodes (a controller and a broker)")
        self.seed = seed
        self.loop = loop or SimLoop()
        self.node_config = node_config or NodeConfig()
        self.epoch = epoch
        self.startup_s = startup_s
        self.nodes = [f"n{i}" for i in range(1, n_nodes + 1)]
        self.controller = self.nodes[0]
        self.brokers = {i: name for i, name in enumerate(self.nodes[1:], start=1)}
        self.net = Network(self.loop, self.rng("net"), self.nodes, net)
        clock_rng = self.rng("clocks")
        # Hosts' monotonic clocks read their uptime: seeded, different per host.
        self.clocks = {n: HostClock(round(clock_rng.uniform(1_000.0, 100_000.0), 3)) for n in self.nodes}
        cfg = self.node_config
        self.disk_config = disk or DiskConfig()
        # Brokers use the storage port (deferred fsyncs) as on real hosts if fsyncs take
        # time; with instant fsyncs the logs sync inline.
        defer = self.disk_config.fsync is not None
        log_config = LogConfig(cfg.flush_messages, cfg.flush_ms, cfg.segment_bytes)
        self.disks = {n: NodeDisk(n, log_config, defer_sync=defer) for n in self.nodes}
        self._fsync_tables = {n: self.disk_config.fsync.table(self.rng(f"fsync:{n}"), bits=12)
                              for n in self.nodes} if self.disk_config.fsync is not None else {}
        self.client = ClientProcess(self.loop, CLIENT_HOST)
        self.history: Any = None  # the run's HistoryWriter, when a driver has one
        # simulation.invariants.InvariantMonitor, when the invariants are checked: told of
        # every step of a node process and every fault verb
        self.monitor: Any = None
        self.node_errors: list[dict[str, Any]] = []
        # what kinds' host actions did (Verbs.act_on_host) and no heal has undone yet: the
        # final heal undoes them, as a real run's heal_network does on its hosts
        self.host_actions = HostActions()
        self._procs: dict[str, NodeProcess] = {}
        self._events: list[dict[str, Any]] = []
        self._start_rng = self.rng("start")
        self._exits: dict[str, list[asyncio.Future]] = {}
        self._incarnations: dict[str, int] = {}

    def fsync_latency(self, node: str):
        """A function drawing one fsync latency (s) of the node's disk; None if instant."""
        table = self._fsync_tables.get(node)
        if table is None:
            return None
        bits = self.rng(f"fsync-draws:{node}:{self._incarnation(node)}").getrandbits
        return lambda: table[bits(12)]

    def _incarnation(self, node: str) -> int:
        self._incarnations[node] = self._incarnations.get(node, 0) + 1
        return self._incarnations[node]

    def rng(self, stream: str) -> random.Random:
        """A random stream derived from the seed and a name (stable across processes): the
        stream random.Random(f"{seed}:{stream}") is, seeded as random.seed seeds it from a
        str (the text's bytes followed by their SHA-512, as one integer), but with hashlib's
        SHA-512: random's own is pure Python under PyPy, 1.5-2 ms a stream there, a dozen
        streams a run (about 2 % of a run under PyPy)."""
        text = f"{self.seed}:{stream}".encode()
        return random.Random(int.from_bytes(text + hashlib.sha512(text).digest(), "big"))

    # ---- topology ------------------------------------------------------------------------------

    def address(self, node: str) -> str:
        self._check(node)
        return f"{node}:{PORT}"

    def bootstrap(self) -> list[str]:
        return [self.address(self.controller)] + [self.address(n) for n in self.brokers.values()]

    def broker_id(self, node: str) -> int | None:
        for b, n in self.brokers.items():
            if n == node:
                return b
        return None

    def pool(self) -> Pool:
        """A connection pool for a client running on the harness's host."""
        return Pool(self.net, self.client)

    def _check(self, node: str) -> None:
        if node not in self.clocks:
            raise KeyError(f"unknown node {node!r}; nodes: {', '.join(self.nodes)}")

    def process(self, node: str) -> NodeProcess | None:
        """The node's current process (alive or not), for inspection."""
        self._check(node)
        return self._procs.get(node)

    # ---- processes -------------------------------------------------------------------------------

    def start(self, node: str) -> None:
        """Start the node's process unless one is running; it listens after a seeded start-up
        delay. A broker reads (and deletes) its clean-shutdown marker when it starts."""
        self._check(node)
        proc = self._procs.get(node)
        if proc is not None and proc.alive:
            return
        if node == self.controller:
            proc = ControllerProcess(self, node)
        else:
            b = self.broker_id(node)
            assert b is not None
            proc = BrokerProcess(self, node, b)
        self._procs[node] = proc
        lo, hi = self.startup_s
        proc.call_later(self._start_rng.uniform(lo, hi), proc.boot)
        self._fault("start", node)

    def start_all(self) -> None:
        for node in self.nodes:
            self.start(node)

    def kill(self, node: str) -> None:
        """SIGKILL: the process is gone at once; its page cache (unsynced writes) survives."""
        proc = self.process(node)
        if proc is not None:
            proc.die()
        self._fault("kill", node)

    async def stop_clean(self, node: str, timeout: float = 20.0) -> None:
        """SIGCONT then SIGTERM, and wait up to `timeout` s for the exit (cluster.stop_clean).
        A broker hands its leaderships away, flushes its logs and writes its clean-shutdown
        marker; a process that has not installed its signal handlers yet (still starting) dies
        at once without a marker."""
        proc = self.process(node)
        if proc is None or not proc.alive:
            return
        proc.resume()
        if not proc.listening:
            proc.die()
            return
        exited = self.loop.create_future()
        self._exits.setdefault(node, []).append(exited)
        proc.request_stop()
        if proc.alive:
            try:
                await asyncio.wait_for(asyncio.shield(exited), timeout)
            except TimeoutError:
                pass

    def process_ended(self, proc: NodeProcess) -> None:
        for fut in self._exits.pop(proc.name, []):
            if not fut.done():
                fut.set_result(None)

    def pause(self, node: str) -> None:
        """SIGSTOP: nothing runs; arrivals and timers wait for resume()."""
        proc = self.process(node)
        if proc is not None:
            proc.pause()
        self._fault("pause", node)

    def resume(self, node: str) -> None:
        proc = self.process(node)
        if proc is not None:
            proc.resume()
        self._fault("resume", node)

    def is_running(self, node: str) -> bool:
        """A process exists (starting, running or paused)."""
        proc = self.process(node)
        return proc is not None and proc.alive

    def is_paused(self, node: str) -> bool:
        proc = self.process(node)
        return proc is not None and proc.alive and proc.paused

    # ---- disks ---------------------------------------------------------------------------------

    def power_loss(self, node: str, torn: bool = False, pick: int = 0) -> dict[str, Any]:
        """Kill, then every write not fsynced is lost (torn: a seeded prefix of the unsynced
        bytes survives, so the record it ends in is torn). Returns the node's filesystem's
        report, like the lossy filesystem's lose-unsynced and torn replies ({"lost_bytes",
        "files": {path: {...}}, "dropped_metadata"}, and "seed" when torn), with
        "lost_records" and "logs": {"<topic>-<partition>": records lost} (NodeDisk.lose)."""
        self.kill(node)
        rng = self.rng(f"torn:{node}:{pick}") if torn else None
        lost = self.disks[node].lose(rng, seed=pick if torn else None)
        self._fault("power_loss", node, {"torn": torn, "lost_records": lost["lost_records"]})
        return lost

    def corrupt_segment(self, node: str, pick: int = 0) -> dict[str, Any]:
        """Kill, then damage one record of one segment file on the node's disk, seeded by
        (pick, node) as on real hosts (nemesis/kinds/corrupt.py). Returns its report
        ({"file", "mode", "record_offset", ...}, or {"note"} when there was nothing to damage)
        with "lost_records" (NodeDisk.corrupt)."""
        self.kill(node)
        report = self.disks[node].corrupt(f"{pick}:{node}")
        self._fault("corrupt_segment", node, {"mode": report.get("mode"),
                                              "lost_records": report.get("lost_records", 0)})
        return report

    def page_cache_loss(self, node: str) -> dict[str, Any]:
        """Unsynced writes are lost while the process runs on; its open files fail (EIO)."""
        self._check(node)
        lost = self.disks[node].lose(running=self.is_running(node))
        self._fault("page_cache_loss", node, {"lost_records": lost["lost_records"]})
        return lost

    # ---- network -------------------------------------------------------------------------------

    def partition(self, grudge: Mapping[str, Iterable[str]]) -> None:
        """Each node drops the packets of the nodes its grudge names (nemesis/partition.py);
        replaces any earlier partition. Nodes the grudge does not mention drop nothing."""
        self.net.set_grudge({k: frozenset(v) for k, v in grudge.items()})
        self._fault("partition", None, {k: sorted(v) for k, v in sorted(grudge.items())})

    def heal_partition(self) -> None:
        self.net.set_grudge({})
        self._fault("heal_partition")

    def degrade_link(self, node: str, kind: str, settings: Mapping[str, float], pick: int = 0) -> None:
        """A link fault on what `node` receives (nemesis/link.py's kinds and settings keys);
        replaces an earlier one on that node. Its randomness is seeded by (seed, node, pick)."""
        self._check(node)
        self.net.set_link(node, LinkFault.from_settings(kind, settings, self.rng(f"link:{node}:{pick}")))
        self._fault("degrade_link", node, kind)

    def restore_link(self, node: str) -> None:
        self._check(node)
        self.net.set_link(node, None)

    def heal_network(self) -> None:
        self.heal_partition()
        for node in self.nodes:
            self.restore_link(node)

    # ---- clocks ----------------------------------------------------------------------------------

    def clock_jump(self, node: str, delta_ms: float) -> None:
        """The node's clock jumps by delta_ms (either way); its timers follow it."""
        self._check(node)
        self.clocks[node].jump(self.loop.time(), delta_ms / 1000)
        self._clock_changed(node)
        self._fault("clock_jump", node, delta_ms)

    def clock_drift(self, node: str, rate: float) -> None:
        """From now on the node's clock runs at `rate` seconds per real second."""
        self._check(node)
        self.clocks[node].drift(self.loop.time(), rate)
        self._clock_changed(node)
        self._fault("clock_drift", node, rate)

    def clock_reset(self, node: str) -> None:
        """Back to the node's undisturbed clock (base + virtual time, rate 1)."""
        self._check(node)
        self.clocks[node].reset(self.loop.time())
        self._clock_changed(node)

    def _fault(self, verb: str, node: str | None = None, detail: Any = None) -> None:
        if self.monitor is not None:
            self.monitor.fault(verb, node, detail)

    def _clock_changed(self, node: str) -> None:
        proc = self._procs.get(node)
        if proc is not None:
            proc.clock_changed()

    # ---- healing ---------------------------------------------------------------------------------

    def undo_host_actions(self) -> None:
        """Undo, newest first on each node, every kind's host action still in force (a clock
        skew whose fault the end of the workload cut short), each through its own undo."""
        for node, key in reversed(self.host_actions.pending()):
            action = self.host_actions.pop(node, key)
            if action is not None:
                action.undo_in_simulation(SimHost(self, node))

    def heal_all(self) -> None:
        """After the workload (Nemesis.heal_all): every fault still in force undone -- the
        kinds' host actions (undo_host_actions), partitions and link faults --, nothing
        paused, every node running. Then every clock reads its undisturbed time, whatever set
        it (a clock verb a test drives directly is no kind's action); that reset of every
        node, which re-aims each node's next timer, is what runs have always done here, so
        histories keep their bytes."""
        self.undo_host_actions()
        self.heal_network()
        for node in self.nodes:
            self.clock_reset(node)
            self.resume(node)
            self.start(node)

    # ---- events ----------------------------------------------------------------------------------

    def events(self) -> list[dict[str, Any]]:
        """Node events as the run folder's events.jsonl has them: ts (seconds, from virtual
        time), node, kind, the event's fields, host, time (virtual ns, the history's clock)."""
        return list(self._events)

    def write_events(self, path: str | Path) -> None:
        with open(path, "w") as f:
            for e in self._events:
                f.write(json_line(e) + "\n")

    def record_event(self, proc: NodeProcess, kind: str, fields: Mapping[str, Any]) -> None:
        now = self.loop.time()
        self._events.append({"ts": round(self.epoch + now, 6), "node": proc.label, "kind": kind,
                             **fields, "host": proc.name, "time": round(now * 1e9)})

    def node_error(self, proc: NodeProcess, where: str, e: BaseException, tb: str) -> None:
        """An exception a runtime task would have died of (kept in order; the traceback only
        for the first 50, since a broken node may fail every tick)."""
        keep = len(self.node_errors) < 50
        self.node_errors.append({"time": self.loop.time(), "node": proc.name, "where": where,
                                 "error": repr(e),
                                 "traceback": (tb or traceback.format_exc()) if keep else None})

    # ---- running -----------------------------------------------------------------------------------

    def run_for(self, seconds: float) -> None:
        """Advance the simulation by `seconds` of virtual time (outside any coroutine)."""
        self.loop.run_for(seconds)


class Verbs:
    """The World's operations as coroutines, the shape of nemesis.kinds.base.World (the verbs
    fault kinds call), so the same kinds drive real hosts and this world."""

    def __init__(self, world: World) -> None:
        self.world = world

    @property
    def acted(self) -> HostActions:
        """What kinds' host actions did, until undone: the world's, so its final heal sees them."""
        return self.world.host_actions

    @property
    def nodes(self) -> list[str]:
        return list(self.world.nodes)

    async def kill(self, node: str) -> None:
        self.world.kill(node)

    async def start(self, node: str) -> None:
        self.world.start(node)

    async def stop_clean(self, node: str) -> None:
        await self.world.stop_clean(node)

    async def pause(self, node: str) -> None:
        self.world.pause(node)

    async def resume(self, node: str) -> None:
        self.world.resume(node)

    async def power_loss(self, node: str, torn: bool, pick: int) -> dict[str, Any]:
        return self.world.power_loss(node, torn, pick)

    async def page_cache_loss(self, node: str) -> dict[str, Any]:
        return self.world.page_cache_loss(node)

    async def corrupt_segment(self, node: str, pick: int) -> dict[str, Any]:
        return self.world.corrupt_segment(node, pick)

    async def partition(self, grudge: Mapping[str, Iterable[str]]) -> None:
        self.world.partition(grudge)

    async def heal_partition(self) -> None:
        self.world.heal_partition()

    async def cut_from_clients(self, node: str) -> dict[str, Any]:
        # The client-partition kind says `simulated = False` and `harness simulate` refuses it
        # first; the simulated clients reach brokers from no host of their own to cut.
        raise NotImplementedError("client-partition needs real hosts: the simulated clients "
                                  "have no host of their own to cut a broker from")

    async def rejoin_clients(self, node: str) -> None:
        raise NotImplementedError("client-partition needs real hosts")

    async def degrade_link(self, node: str, kind: str, settings: Mapping[str, float], pick: int) -> None:
        self.world.degrade_link(node, kind, settings, pick)

    async def restore_link(self, node: str) -> None:
        self.world.restore_link(node)

    async def heal_network(self) -> None:
        """As HostsWorld.heal_network: no partition or link fault, and no host action left."""
        self.world.undo_host_actions()
        self.world.heal_network()

    async def add_toxic(self, node: str, kind: str, toxic: Mapping[str, Any]) -> None:
        # Never silently a no-op: the simulated network moves whole messages with no bytes,
        # chunks or bandwidth, so a Toxiproxy toxic has nothing honest to act on. The toxic
        # kinds say `simulated = False`, and `harness simulate` refuses them by name first.
        raise NotImplementedError(f"{kind}: Toxiproxy toxics need real hosts; the simulated "
                                  "world has no byte streams to apply them to")

    async def remove_toxic(self, node: str, kind: str) -> None:
        raise NotImplementedError(f"{kind}: Toxiproxy toxics need real hosts")

    async def act_on_host(self, node: str, key: str, action: HostAction) -> dict[str, Any]:
        """A kind's action on the node's simulated host (its clock port); remembered for its
        undo, as on real hosts."""
        out = action.in_simulation(SimHost(self.world, node))
        self.acted.add(node, key, action)
        return out

    async def undo_on_host(self, node: str, key: str) -> None:
        action = self.acted.pop(node, key)
        if action is not None:
            action.undo_in_simulation(SimHost(self.world, node))


class SimHost:
    """A simulated host as a fault kind's HostAction sees it (nemesis.kinds.base.SimHostPort):
    its clock, which the node's timers and `now` follow."""

    def __init__(self, world: World, node: str) -> None:
        self.world, self.node = world, node

    def clock_jump(self, delta_ms: float) -> None:
        self.world.clock_jump(self.node, delta_ms)

    def clock_drift(self, rate: float) -> None:
        self.world.clock_drift(self.node, rate)

    def clock_reset(self) -> None:
        self.world.clock_reset(self.node)
