"""What a fault kind is: its name and family, how it picks targets, applies and heals.

A `FaultKind` knows everything about one kind of fault, in one place: the planner
(nemesis.schedule) asks it for a symbolic target, the nemesis (nemesis.faults) asks it to
resolve that target against live metadata when the fault starts, to apply it and to heal it.

Kinds act on a `World`: the cluster as a set of named nodes with verbs (kill, pause,
power_loss, partition, ...). Real hosts implement the verbs over SSH (nemesis.hosts_world);
a simulated cluster implements the same verbs in simulated time. A kind written against the
verbs runs in both worlds; a kind that needs something new of its hosts carries it as a
`HostAction` (its commands on a real host, its effect on a simulated host's parts), which
every World runs through the same two verbs; a kind that needs something only real hosts
have (their VMs, Toxiproxy's byte streams) says so with `simulated = False`.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from nemesis import partition as grudges

Grudge = grudges.Grudge
# A resolved target: the node names hit, or for a partition the grudge applied.
Resolved = list[str] | Grudge
PICK_RANGE = 2**31
TARGET_MODES = ("auto", "leader", "controller", "random", "majority", "txn-coordinator",
                "group-coordinator")
# Selectors aimed at one partition's replicas (their target carries "partition").
PER_PARTITION = frozenset({"leader", "last-isr-member", "elr-members", "followers",
                           "isolate-leader", "successor", "elr-member"})
# Selectors aimed at the transaction coordinator of the workload's transactional ids: the
# leader of the `__transaction_state` partition they hash to, and that partition's replicas.
TXN_SELECTORS = frozenset({"txn-coordinator", "txn-log-replicas"})
NO_TRANSACTIONS = ("txn-coordinator targets need a transaction coordinator, and this system has "
                   "no transactions (the embedded one): run on Apache Kafka "
                   "(--set system.kind=kafka)")
# Selectors aimed at the coordinator of the workload's consumer group: the leader of the
# `__consumer_offsets` partition the group id hashes to, and that partition's replicas.
GROUP_SELECTORS = frozenset({"group-coordinator", "offsets-log-replicas"})
NO_GROUPS = ("group-coordinator targets need a consumer group's coordinator, and this system "
             "has no consumer groups (the embedded one): run on Apache Kafka "
             "(--set system.kind=kafka)")


class World(Protocol):
    """The verbs fault kinds use. Node names are the hosts' (n1 controller, n2.. brokers).
    Every verb may block for a while (SSH, a controlled shutdown): they are coroutines."""

    async def kill(self, node: str) -> None: ...
    async def start(self, node: str) -> None: ...
    async def stop_clean(self, node: str) -> None: ...
    async def pause(self, node: str) -> None: ...
    async def resume(self, node: str) -> None: ...
    async def power_loss(self, node: str, torn: bool, pick: int) -> dict[str, Any]: ...
    async def page_cache_loss(self, node: str) -> dict[str, Any]: ...
    async def corrupt_segment(self, node: str, pick: int) -> dict[str, Any]: ...
    async def partition(self, grudge: Grudge) -> None: ...
    async def heal_partition(self) -> None: ...
    async def cut_from_clients(self, node: str) -> dict[str, Any]: ...
    async def rejoin_clients(self, node: str) -> None: ...
    async def degrade_link(self, node: str, kind: str, settings: Mapping[str, float],
                           pick: int) -> None: ...
    async def restore_link(self, node: str) -> None: ...
    async def heal_network(self) -> None: ...
    async def add_toxic(self, node: str, kind: str, toxic: Mapping[str, Any]) -> None: ...
    async def remove_toxic(self, node: str, kind: str) -> None: ...
    async def act_on_host(self, node: str, key: str, action: HostAction) -> dict[str, Any]: ...
    async def undo_on_host(self, node: str, key: str) -> None: ...


class HostPort(Protocol):
    """A real host as a kind's `HostAction` sees it (nemesis.hosts_world): blocking calls,
    run on a worker thread."""

    name: str
    vm: bool  # a libvirt guest of the run's own: its clock and its power are ours to touch
    python: str  # the interpreter the nodes run with
    code: str | None  # the checkout the nodes import (netns hosts), first on PYTHONPATH

    def run(self, argv: Sequence[str], *, sudo: bool = False) -> str:
        """Run an argv on the host (each argument quoted: no shell line built from data);
        its stdout. A non-zero exit raises."""
        ...


class SimHostPort(Protocol):
    """A simulated host as a kind's `HostAction` sees it (simulation.world): its clock."""

    def clock_jump(self, delta_ms: float) -> None: ...
    def clock_drift(self, rate: float) -> None: ...
    def clock_reset(self) -> None: ...


class HostAction(Protocol):
    """What a fault kind does to a host and how it is undone, carried by the kind itself:
    on a real host through commands (`HostPort.run`), in the simulator through the host's
    simulated parts (`SimHostPort`). Every World runs it through one generic pair of verbs
    (`act_on_host`, `undo_on_host`), so a kind that needs something new of its hosts adds
    no verb to any World (clock-skew: nemesis/kinds/clock.py)."""

    def on_host(self, host: HostPort) -> dict[str, Any]: ...
    def undo_on_host(self, host: HostPort) -> None: ...
    def in_simulation(self, host: SimHostPort) -> dict[str, Any]: ...
    def undo_in_simulation(self, host: SimHostPort) -> None: ...


class HostActions:
    """The host actions a World has applied and not yet undone, by (node, key): the key is
    the kind's name, so its heal finds them again (each heal undoes one, the latest: two
    faults of a kind on one node are undone one by one). Both worlds keep one."""

    def __init__(self) -> None:
        self._done: dict[tuple[str, str], list[HostAction]] = {}

    def add(self, node: str, key: str, action: HostAction) -> None:
        self._done.setdefault((node, key), []).append(action)

    def pop(self, node: str, key: str) -> HostAction | None:
        """The latest action under `key` on `node` not yet undone, forgotten; None if none."""
        stack = self._done.get((node, key))
        if not stack:
            return None
        action = stack.pop()
        if not stack:
            del self._done[(node, key)]
        return action

    def pending(self) -> list[tuple[str, str]]:
        """(node, key) once for every action not yet undone."""
        return [k for k, stack in self._done.items() for _ in stack]


@dataclass(frozen=True)
class Setting:
    """One flat [nemesis] setting a kind applies: its default (configs stored before it
    existed leave it out) and its range, lo excluded unless lo_ok."""

    default: float
    lo: float
    hi: float
    lo_ok: bool = True


@dataclass(frozen=True)
class Topology:
    """Who is where, and a way to ask the cluster's live metadata about a partition."""

    nodes: tuple[str, ...]
    controller: str
    brokers: Mapping[int, str]  # broker id -> node name
    partition_state: Callable[[int], Awaitable[dict | None]]
    # The simulator's exact view of a partition, read without a message, so that recording
    # who played which part (nemesis.roles) leaves a simulated run as it was; None: ask.
    oracle: Callable[[int], Awaitable[dict | None]] | None = None
    # The state of the transaction log's partition that coordinates the workload's
    # transactional ids (its leader is their coordinator); None: the system has no
    # transactions, and a target aimed at them is refused (NO_TRANSACTIONS).
    txn_state: Callable[[], Awaitable[dict | None]] | None = None
    # The same for the consumer offsets log's partition that coordinates the workload's
    # consumer group (its leader is the group coordinator); None: no groups (NO_GROUPS).
    group_state: Callable[[], Awaitable[dict | None]] | None = None

    def nodes_of(self, broker_ids: Sequence[int]) -> list[str]:
        return [self.brokers[b] for b in broker_ids if b in self.brokers]

    async def peek(self, partition: int) -> dict | None:
        """The partition's state for recording roles: the oracle's, else the live metadata."""
        return await (self.oracle or self.partition_state)(partition)

    async def txn_log(self) -> dict | None:
        """The coordinating transaction log partition's state now (None: unknown now, as
        before the first transactional producer made Kafka create the log)."""
        if self.txn_state is None:
            raise ValueError(NO_TRANSACTIONS)
        return await self.txn_state()

    async def offsets_log(self) -> dict | None:
        """The coordinating consumer offsets partition's state now (None: unknown now, as
        before the first group member made Kafka create the log)."""
        if self.group_state is None:
            raise ValueError(NO_GROUPS)
        return await self.group_state()


@dataclass(frozen=True)
class PlanParams:
    """What target planning needs to know of the run (a view of ScheduleParams)."""

    partitions: int
    brokers: int
    targets: str


class FaultKind:
    """One kind of fault. Subclasses set the class attributes and override what differs."""

    name: ClassVar[str]
    family: ClassVar[str]  # process | host | partition | link | outage | toxic | disk
    # Selectors drawn from in the "auto" targets mode, with weights (leaders matter most),
    # and what each other targets mode means for this kind.
    auto_targets: ClassVar[Mapping[str, float]]
    mode_targets: ClassVar[Mapping[str, str]]
    needs_lazyfs: ClassVar[bool] = False  # the data directory must be the lossy filesystem
    simulated: ClassVar[bool] = True  # the simulated world can apply it
    # Why the kind cannot act on Apache Kafka's nodes (docs/kafka.md); "" when it can.
    not_on_kafka: ClassVar[str] = ""
    # The [nemesis] settings it applies: the config's schema for them (harness.config).
    settings: ClassVar[Mapping[str, Setting]] = {}
    # What it does (runformat.effects), written into each fault's history operation, which
    # the checkers and reports read instead of lists of kind names.
    effects: ClassVar[frozenset[str]] = frozenset()
    # Stories (harness.report.story): what happens, and what its heal looks like (None: not
    # told). {who} is the hosts hit; {is}/{loses}/{restarts}/{resumes} agree with them.
    phrase: ClassVar[str] = "{who} {is} hit by {kind}"
    heal_phrase: ClassVar[str | None] = None
    # Where the history and schedule.json record what describe() returns.
    record_key: ClassVar[str] = "link"

    def clean_host(self, host: HostPort) -> None:
        """Undo on a real host what a killed run of this kind may have left behind: run on
        every host before and after every run (nemesis.hosts_world.heal_network). Most
        kinds' leftovers are the World's own (rules, toxics): nothing here."""

    def plan_target(self, rng: random.Random, params: PlanParams) -> dict[str, Any]:
        """A symbolic target, resolved against live metadata when the fault starts."""
        if params.targets == "auto":
            names = list(self.auto_targets)
            selector = rng.choices(names, weights=[self.auto_targets[n] for n in names])[0]
        else:
            selector = self.mode_target(params.targets)
        target: dict[str, Any] = {self.target_key: selector}
        if selector in PER_PARTITION:
            target["partition"] = rng.randrange(params.partitions)
        target["pick"] = rng.randrange(PICK_RANGE)
        return target

    def mode_target(self, mode: str) -> str:
        """The selector a targets mode means for this kind (ValueError: it has none)."""
        if mode not in self.mode_targets:
            raise ValueError(f"fault {self.name!r} cannot be aimed by targets = {mode!r}; "
                             f"it takes {', '.join(['auto', *self.mode_targets])}")
        return self.mode_targets[mode]

    @property
    def target_key(self) -> str:
        return "select"

    async def resolve(self, topology: Topology, target: Mapping[str, Any]) -> Resolved:
        """The nodes (or grudge) a target means now. [] when nothing matches."""
        if "fixed" in target:  # a replayed run hits exactly what the original hit
            fixed = target["fixed"]
            if "grudge" in fixed:
                return {k: frozenset(v) for k, v in fixed["grudge"].items()}
            return list(fixed["nodes"])
        return await resolve_selector(topology, target)

    async def apply(self, world: World, resolved: Resolved, pick: int,
                    settings: Mapping[str, Any]) -> dict[str, Any]:
        """Inflict the fault; returns details for the history (e.g. what was lost)."""
        raise NotImplementedError

    async def heal(self, world: World, resolved: Resolved) -> None:
        """Undo the fault (a node killed is started again, a link restored, ...)."""

    def describe(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        """The settings a fault of this kind applies, for the history and schedule.json."""
        return {k: settings[k] for k in self.settings}

    def tell(self, nodes: Sequence[str], who: str, healed: bool = False) -> str | None:
        """The story's sentence for this fault hitting `nodes` (named `who`), or its heal."""
        template = self.heal_phrase if healed else self.phrase
        if template is None:
            return None
        one = len(nodes) == 1
        return template.format(who=who, kind=self.name, **{
            "is": "is" if one else "are", "loses": "loses" if one else "lose",
            "restarts": "restarts" if one else "restart", "resumes": "resumes" if one else "resume"})


async def resolve_selector(topology: Topology, target: Mapping[str, Any]) -> list[str]:
    """Nodes named by a process/host/link selector: fixed roles need no metadata, roles in a
    partition's replica set are read from the live metadata."""
    rng = random.Random(target.get("pick", 0))
    brokers = sorted(topology.brokers)
    select = target.get("select")
    if select == "controller":
        return [topology.controller]
    if select == "random-broker":
        return topology.nodes_of([rng.choice(brokers)])
    if select == "majority":
        return topology.nodes_of(rng.sample(brokers, len(brokers) // 2 + 1))
    if select in TXN_SELECTORS:
        return _coordinator_nodes(topology, select, await topology.txn_log())
    if select in GROUP_SELECTORS:
        return _coordinator_nodes(topology, select, await topology.offsets_log())
    if select not in PER_PARTITION:
        raise ValueError(f"unknown target {dict(target)}")
    state = await topology.partition_state(target.get("partition", 0))
    if state is None:
        return []
    leader, isr = state["leader"], state["isr"]
    if select == "leader":
        return topology.nodes_of([leader] if leader is not None else [])
    if select == "last-isr-member":
        return topology.nodes_of(isr[:1] if len(isr) == 1 else ([leader] if leader is not None else []))
    if select == "elr-members":
        return topology.nodes_of(state["elr"])
    if select == "elr-member":
        return topology.nodes_of([rng.choice(sorted(state["elr"]))] if state["elr"] else [])
    if select == "successor":
        return topology.nodes_of(_successor(state))
    if select == "followers":
        if leader is None:
            return []
        return topology.nodes_of([r for r in state["replicas"] if r != leader])
    raise ValueError(f"unknown target {dict(target)}")


def _successor(state: Mapping[str, Any]) -> list[int]:
    """The replica the controller elects when the leader is fenced (replication.metadata
    pick_clean_leader): the first other ISR member in replica order, else the first ELR one."""
    for pool in (state["isr"], state.get("elr") or ()):
        for r in state["replicas"]:
            if r != state["leader"] and r in pool:
                return [r]
    return []


def _coordinator_nodes(topology: Topology, select: str,
                       state: Mapping[str, Any] | None) -> list[str]:
    """A coordinator (the leader of its log's partition `state`), or that partition's
    replicas."""
    if state is None or state.get("leader") is None:
        return []
    if select.endswith("-coordinator"):
        return topology.nodes_of([state["leader"]])
    return topology.nodes_of(state["replicas"])


async def each(nodes: Resolved, action: Callable[[str], Awaitable[Any]]) -> dict[str, Any]:
    """Run `action` on every node of a node list, one after the other; the non-empty results
    by node name."""
    out: dict[str, Any] = {}
    for node in nodes:
        result = await action(node)
        if result:
            out[node] = result
    return out
