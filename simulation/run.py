"""One simulated test run, end to end: the runner's sequence (harness/runner.py) in a World.

    result = run_simulation(out_dir, seed=7, params=WorkloadParams("chaos", 1, producers=16,
                            rate=300), time_limit=30, system={"min.insync.replicas": 2})

builds the world, starts every node, and runs the run sequence of real hosts
(workloads/sequence.py) in it: creates the topic through the real Client over the simulated
network, waits until every partition has a leader and a full ISR, runs the real KafkaWorkload
for `time_limit` virtual seconds (with `faults(world, loop)` alongside, if given: a coroutine
it returns runs until the workload ends, then is cancelled), heals everything, waits for
health again, and does the final read. `out_dir` gets history.jsonl
(timestamps from the virtual clock) and events.jsonl (the run folder's merged form). Same
seed, same arguments, same code: the same bytes in both files.

With `invariants=True` (the default) the protocol invariants (checkers/invariants.py) are
checked after every step (simulation/invariants.py) and `out_dir` also gets invariants.jsonl,
one violation a line (empty: none). The first violation stops the run -- the history ends
there, `SimResult.stopped_by` says why -- unless `keep_going=True`, which records each
violation once and runs on.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replication.config import NodeConfig
from simulation.disk import DiskConfig
from simulation.invariants import InvariantMonitor, InvariantViolation
from simulation.loop import SimLoop
from simulation.network import NetConfig
from simulation.world import DEFAULT_STARTUP_S, World
from workloads import sequence
from workloads.history import HistoryWriter
from workloads.kafka import KafkaWorkload, WorkloadParams
from workloads.sequence import exercise
from workloads.topics import create_topic, wait_healthy

# The simulated clients' linger: two of real hosts' LINGER_MS (librdkafka's default, 5 ms).
# Producer batching is the client's policy, not the replication protocol under test, and a
# batch of three records takes the brokers' same code paths as a batch of two; but at the
# validation campaign's 300 sends/s it makes a third fewer produce requests, replica fetches
# and answers, a third fewer messages, which is what a simulated run's time goes to. Finding
# the weaknesses was measured as before with it (docs/simulation.md, "Speed"). linger.ms is a
# setting users raise for throughput; a simulated and a real run of one config differ in it.
SIM_LINGER_MS = 10

# A test's own fault script: called when the workload starts, it returns what runs alongside.
FaultScript = Callable[[World, SimLoop], Awaitable[Any] | None]


@dataclass
class SimResult:
    seed: int
    out_dir: Path
    virtual_s: float  # simulated seconds from the world's start to the end of the final read
    wall_s: float
    stats: dict[str, int]  # the workload's counters
    final_read: dict[int, bool]  # partition -> the final read completed
    final_errors: dict[int, str]
    healthy_before_final_read: bool
    node_errors: list[dict[str, Any]] = field(default_factory=list)
    loop_errors: list[dict[str, Any]] = field(default_factory=list)
    net: dict[str, int] = field(default_factory=dict)
    invariants: list[dict[str, Any]] | None = None  # violations found; None: not checked
    stopped_by: str | None = None  # the invariant violation that ended the run early

    @property
    def history(self) -> Path:
        return self.out_dir / "history.jsonl"

    @property
    def events(self) -> Path:
        return self.out_dir / "events.jsonl"

    @property
    def speed(self) -> float:
        """Simulated seconds per wall second."""
        return self.virtual_s / self.wall_s if self.wall_s > 0 else float("inf")


@contextmanager
def _earlier_objects_frozen() -> Iterator[None]:
    """While a run goes, the objects that were alive before it (the modules, a search's own
    state: 120,000-160,000 in sim_speed.py and `harness simulate`) are left out of the
    cyclic collector's full collections (gc.freeze), which then walk the run's objects only:
    a run makes about one full collection, which spent 5-6 % of its CPU walking those
    (CPython; docs/simulation.md, "Speed"). Not where something else froze objects, nor
    under PyPy (no gc.freeze). The collector frees nothing a run reads: runs stay the same."""
    if getattr(gc, "freeze", None) is None or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@_earlier_objects_frozen()
def run_simulation(out_dir: str | Path, *, seed: int, params: WorkloadParams, time_limit: float,
                   system: Mapping[str, Any] | None = None, n_nodes: int = 4,
                   replication_factor: int = 3, final_read_timeout: float = 60.0,
                   faults: FaultScript | None = None, net: NetConfig | None = None,
                   disk: DiskConfig | None = None,
                   world_hook: Callable[[World], None] | None = None,
                   invariants: bool = True, keep_going: bool = False,
                   startup_s: tuple[float, float] | None = None) -> SimResult:
    """Run the workload in a simulated world; see the module docstring. `world_hook`, if
    given, is called with the world before anything runs (tests inspect it afterwards).
    `startup_s`: the range a node's start-up delay is drawn from (World's default if None)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    loop = SimLoop()
    world = World(seed, n_nodes, NodeConfig.from_settings(system or {}), net=net, disk=disk, loop=loop,
                  startup_s=startup_s or DEFAULT_STARTUP_S)
    monitor = world.monitor = InvariantMonitor(world, keep_going=keep_going) if invariants else None
    if world_hook is not None:
        world_hook(world)
    # Buffered: a simulated run is replayed exactly by its seed, and close() (below, also after
    # an error) writes what is left.
    history = HistoryWriter(out / "history.jsonl", clock=loop.time_ns, background_fsync=False,
                            buffer_bytes=1 << 16)
    world.history = history
    wall = time.perf_counter()
    box: dict[str, Any] = {}
    stopped_by = None
    try:
        outcome = loop.run(_main(world, history, params, time_limit, replication_factor,
                                 final_read_timeout, faults, box))
        if monitor is not None:
            monitor.end_of_run()
    except InvariantViolation as e:  # the first violation ends the run (keep_going=False)
        stopped_by = str(e)
        outcome = (box.get("workload"), {}, False)
    finally:
        history.close()
        world.write_events(out / "events.jsonl")
        if monitor is not None:
            monitor.write(out / "invariants.jsonl")
        loop.close()
    workload, done, healthy = outcome
    return SimResult(seed=seed, out_dir=out, virtual_s=loop.time(), wall_s=time.perf_counter() - wall,
                     stats=dict(workload.stats) if workload else {}, final_read=done,
                     final_errors=dict(workload.final_errors) if workload else {},
                     healthy_before_final_read=healthy, node_errors=world.node_errors,
                     loop_errors=loop.errors, net=dict(world.net.stats),
                     invariants=monitor.violations if monitor is not None else None,
                     stopped_by=stopped_by)


class SimEnvironment:
    """The run sequence's environment in a simulated world: the real client over the
    simulated network."""

    def __init__(self, world: World) -> None:
        self.world = world

    async def create_topic(self, topic: str, partitions: int, replication_factor: int) -> None:
        await create_topic(self.world.bootstrap(), len(self.world.brokers), topic, partitions,
                           replication_factor, pool_factory=self.world.pool)

    async def wait_healthy(self, topic: str, partitions: int, timeout_s: float) -> bool:
        return await wait_healthy(self.world.bootstrap(), topic, partitions, timeout_s,
                                  pool_factory=self.world.pool)

    def workload(self, params: WorkloadParams, history: HistoryWriter) -> KafkaWorkload:
        return KafkaWorkload(params, self.world.bootstrap(), history, pool_factory=self.world.pool,
                             linger_ms=SIM_LINGER_MS)

    def alongside(self, workload: Any, time_limit: float) -> list:
        return []  # the nodes record their own events; nobody watches the virtual clock

    def say(self, msg: str) -> None:
        """Quiet: a search simulates thousands of runs."""


async def _main(world: World, history: HistoryWriter, params: WorkloadParams, time_limit: float,
                rf: int, final_read_timeout: float, faults: FaultScript | None,
                box: dict[str, Any] | None = None):
    world.start_all()

    async def heal() -> None:
        world.heal_all()

    outcome = await exercise(
        SimEnvironment(world), params, history, replication_factor=rf, time_limit=time_limit,
        final_read_timeout=final_read_timeout,
        faults=sequence.Faults(start=(lambda: faults(world, world.loop)) if faults else lambda: None,
                               heal=heal),
        on_workload=(lambda w: box.__setitem__("workload", w)) if box is not None else None)
    return outcome.workload, outcome.final_read, outcome.healthy
