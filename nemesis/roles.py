"""Faults by role: the part each node played in the cluster when a fault hit it, and which node
plays that part now, on this or on another system.

A recorded schedule names hosts ("n3 lost power"); a host's part is what carries from one run,
or one system, to the next ("the leader of partition 0 lost power while it was the last ISR
member"). Roles are read off a partition's state (the one the fault aims at, else partition 0):

    controller              the KRaft controller (n1 on every system the harness runs)
    leader                  the partition's leader, while its ISR holds others too
    last-isr-member         the leader when the ISR has shrunk to it alone
    isr-follower#k          the k-th follower in the ISR (by broker id)
    elr-member#k            the k-th replica in the ELR (KIP-966), not in the ISR
    lagging-follower#k      the k-th other replica (out of sync)
    broker#k                the k-th broker that holds no replica of the partition

A fault aimed at transactions (targets = "txn-coordinator") is read off the transaction log's
partition that coordinates the workload's transactional ids instead (Apache Kafka only; a
system without transactions refuses it, nemesis.kinds.base.NO_TRANSACTIONS):

    txn-coordinator         the leader of that `__transaction_state` partition: the
                            coordinator FindCoordinator names for the ids
    txn-log-replica#k       the k-th other replica of that partition

and a fault aimed at the consumer group (targets = "group-coordinator") off the consumer
offsets log's partition that coordinates the workload's group (NO_GROUPS where there is none):

    group-coordinator       the leader of that `__consumer_offsets` partition
    offsets-log-replica#k   the k-th other replica of that partition

A partition between the two coordinators (nemesis.kinds.partition.GROUP_SHAPE) is read off
both: the group's roles, with the transaction coordinator named `txn-coordinator` where it is
another broker.

A role target ({"roles": {"nodes": [...]}} or {"roles": {"grudge": {role: [roles]}}}) is
resolved against the live state when the fault starts. A fault aimed at the last ISR member
waits up to LAST_MEMBER_WAIT_S for the ISR to shrink to one (another system may take longer to
notice a paused follower); a role nobody holds then is given to the nearest holder of a lesser
part (the last ISR member's to the leader, an ISR follower's to an ELR member, then a lagging
one). What each node played as the fault started is recorded in schedule.json ("roles")."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from nemesis.kinds.base import GROUP_SELECTORS, TXN_SELECTORS, Resolved, Topology
from nemesis.kinds.partition import GROUP_SHAPE, TXN_SHAPE
from nemesis.schedule import RealisedFault, replay_entries
from nemesis.until import UNTIL_TIMEOUT_S

LAST_MEMBER_WAIT_S = 10.0
_POLL_S = 0.25
# Stand-ins, nearest first, for a role nobody holds now.
_NEAREST = {
    "last-isr-member": ("leader", "isr-follower", "elr-member", "lagging-follower"),
    "leader": ("last-isr-member", "isr-follower", "elr-member", "lagging-follower"),
    "isr-follower": ("elr-member", "lagging-follower", "broker"),
    "elr-member": ("lagging-follower", "isr-follower", "broker"),
    "lagging-follower": ("elr-member", "isr-follower", "broker"),
    "broker": ("lagging-follower", "elr-member", "isr-follower"),
    "txn-coordinator": ("txn-log-replica", "broker"),
    "txn-log-replica": ("broker",),
    "group-coordinator": ("offsets-log-replica", "broker"),
    "offsets-log-replica": ("broker",),
}
# A coordinator's role and its log's other replicas', by the log.
TXN_ROLES = ("txn-coordinator", "txn-log-replica")
GROUP_ROLES = ("group-coordinator", "offsets-log-replica")


def roles_in(topology: Topology, state: Mapping[str, Any] | None) -> dict[str, str]:
    """node -> role, for the controller and every broker, from one partition state (None: the
    partition is unknown now, so every broker is just a broker)."""
    roles = {topology.controller: "controller"}
    state = state or {}
    leader = state.get("leader")
    isr, elr, replicas = (set(state.get(key) or ()) for key in ("isr", "elr", "replicas"))
    counts: dict[str, int] = {}
    for broker in sorted(topology.brokers):
        part = _part(broker, leader, isr, elr, replicas)
        if part not in ("leader", "last-isr-member"):
            counts[part] = counts.get(part, 0) + 1
            part = f"{part}#{counts[part]}"
        roles[topology.brokers[broker]] = part
    return roles


def _part(broker: int, leader: int | None, isr: set[int], elr: set[int],
          replicas: set[int]) -> str:
    if broker == leader:
        return "last-isr-member" if isr == {leader} else "leader"
    if broker in isr:
        return "isr-follower"
    if broker in elr:
        return "elr-member"
    return "lagging-follower" if broker in replicas else "broker"


def coordinator_roles_in(topology: Topology, state: Mapping[str, Any] | None,
                         parts: tuple[str, str]) -> dict[str, str]:
    """node -> role as a coordinating log's partition `state` makes it: its leader the
    coordinator (parts[0]), its other replicas parts[1]#k, the rest broker#k (None: unknown
    now, every broker just a broker): TXN_ROLES for the transaction log, GROUP_ROLES for the
    consumer offsets log."""
    roles = {topology.controller: "controller"}
    state = state or {}
    leader, replicas = state.get("leader"), set(state.get("replicas") or ())
    counts: dict[str, int] = {}
    for broker in sorted(topology.brokers):
        if broker == leader:
            roles[topology.brokers[broker]] = parts[0]
            continue
        part = parts[1] if broker in replicas else "broker"
        counts[part] = counts.get(part, 0) + 1
        roles[topology.brokers[broker]] = f"{part}#{counts[part]}"
    return roles


def both_coordinators_roles_in(topology: Topology, offsets: Mapping[str, Any] | None,
                               txn: Mapping[str, Any] | None) -> dict[str, str]:
    """node -> role for a fault between the two coordinators: the consumer offsets log's
    roles (GROUP_ROLES), the transaction log's leader `txn-coordinator` where it is not the
    group coordinator too."""
    roles = coordinator_roles_in(topology, offsets, GROUP_ROLES)
    leader = (txn or {}).get("leader")
    if leader in topology.brokers and leader != (offsets or {}).get("leader"):
        roles[topology.brokers[leader]] = TXN_ROLES[0]
    return roles


def _named(target: Mapping[str, Any]) -> list[str]:
    """The roles a role target names: its nodes', or its grudge's sides'."""
    spec = target.get("roles", {})
    return [*spec.get("nodes", ()), *spec.get("grudge", {})]


def aims_at_transactions(target: Mapping[str, Any]) -> bool:
    """Whether a target names the transaction coordinator or its log, by selector, shape or
    role."""
    return (target.get("select") in TXN_SELECTORS
            or target.get("shape") in (TXN_SHAPE, GROUP_SHAPE)
            or any(r.startswith("txn-") for r in _named(target)))


def aims_at_group(target: Mapping[str, Any]) -> bool:
    """Whether a target names the group coordinator or its log, by selector, shape or role."""
    return (target.get("select") in GROUP_SELECTORS or target.get("shape") == GROUP_SHAPE
            or any(r.split("#")[0] in GROUP_ROLES for r in _named(target)))


def role_target(resolved: Resolved, roles: Mapping[str, str]) -> dict[str, Any]:
    """The role form of a resolved target, as `roles` (roles_in) named the nodes then."""
    if isinstance(resolved, dict):
        return {"grudge": {roles[n]: sorted(roles[m] for m in resolved[n])
                           for n in sorted(resolved)}}
    return {"nodes": [roles[n] for n in resolved]}


def holders(roles: Mapping[str, str], wanted: Sequence[str]) -> dict[str, str]:
    """role -> the node that plays it now, a stand-in (see _NEAREST) where nobody does; each
    node stands in for one role at most. Roles left without anyone are left out."""
    by_role = {role: node for node, role in roles.items()}
    taken = {by_role[r] for r in wanted if r in by_role}
    out: dict[str, str] = {}
    for role in wanted:
        if role in by_role:
            out[role] = by_role[role]
            continue
        stand_in = _stand_in(role, roles, taken)
        if stand_in is not None:
            out[role] = stand_in
            taken.add(stand_in)
    return out


def _stand_in(role: str, roles: Mapping[str, str], taken: set[str]) -> str | None:
    for part in _NEAREST.get(role.split("#")[0], ()):
        free = sorted((r, n) for n, r in roles.items() if r.split("#")[0] == part and n not in taken)
        if free:
            return free[0][1]
    return None


def as_fixed(roles: Mapping[str, str], target: Mapping[str, Any]) -> dict[str, Any]:
    """A role target as the fixed target it means under `roles` (roles_in, now): the nodes,
    or the grudge, that play those roles."""
    spec = target["roles"]
    if "grudge" in spec:
        wanted = sorted({r for side, others in spec["grudge"].items() for r in [side, *others]})
        who = holders(roles, wanted)
        grudge = {who[side]: sorted(who[r] for r in others if r in who)
                  for side, others in spec["grudge"].items() if side in who}
        return {**target, "fixed": {"grudge": grudge}}
    who = holders(roles, spec["nodes"])
    return {**target, "fixed": {"nodes": [who[r] for r in spec["nodes"] if r in who]}}


async def roles_now(topology: Topology, target: Mapping[str, Any]) -> dict[str, str]:
    """Every node's role now, for the partition the target aims at (else partition 0), or
    the transaction log's (the consumer offsets log's) for a target aimed at transactions
    (at the group), or both for one aimed at both."""
    if aims_at_transactions(target) and aims_at_group(target):
        return both_coordinators_roles_in(topology, await topology.offsets_log(),
                                          await topology.txn_log())
    if aims_at_transactions(target):
        return coordinator_roles_in(topology, await topology.txn_log(), TXN_ROLES)
    if aims_at_group(target):
        return coordinator_roles_in(topology, await topology.offsets_log(), GROUP_ROLES)
    return roles_in(topology, await topology.peek(target.get("partition", 0)))


def waits_for_role(target: Mapping[str, Any]) -> bool:
    """Whether a target may wait before it is hit: for its role to be held (see
    await_last_member) or for a partition state (nemesis.until)."""
    return "until" in target or _waits_for_last_member(target)


def longest_wait(target: Mapping[str, Any]) -> float:
    """The longest a fault aimed at `target` may wait before it is hit, in seconds."""
    if "until" in target:
        return float(target["until"].get("timeout_s", UNTIL_TIMEOUT_S))
    return LAST_MEMBER_WAIT_S if _waits_for_last_member(target) else 0.0


def _waits_for_last_member(target: Mapping[str, Any]) -> bool:
    return "last-isr-member" in target.get("roles", {}).get("nodes", ())


async def await_last_member(topology: Topology, target: Mapping[str, Any],
                            roles: dict[str, str],
                            sleep: Callable[[float], Awaitable[Any]]) -> dict[str, str]:
    """`roles` again, once the ISR has shrunk to one or LAST_MEMBER_WAIT_S have passed, when
    the role target is aimed at the last ISR member. `sleep`: the run's own (simulated or
    real); `topology` must ask afresh each time."""
    if not _waits_for_last_member(target):
        return roles
    for _ in range(int(LAST_MEMBER_WAIT_S / _POLL_S)):
        if "last-isr-member" in roles.values():
            break
        await sleep(_POLL_S)
        roles = await roles_now(topology, target)
    return roles


def role_entries(faults: Sequence[RealisedFault]) -> list[dict[str, Any]]:
    """Plan entries that replay a realised schedule by role: the recorded start times and
    durations, each target the roles its nodes played when it started. Faults that never
    started, or whose roles were not recorded, are left out."""
    return replay_entries(faults, _as_roles)


def _as_roles(f: RealisedFault) -> dict[str, Any] | None:
    if not f.roles or f.resolved is None:
        return None
    hit = f.resolved.get("nodes")
    resolved = list(hit) if hit is not None else {
        n: frozenset(m) for n, m in f.resolved["grudge"].items()}
    target = {"roles": role_target(resolved, f.roles), "pick": f.target.get("pick", 0)}
    if "partition" in f.target:
        target["partition"] = f.target["partition"]
    return target
