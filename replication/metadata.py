"""Partition metadata and the controller's rules for changing it.

Pure functions over immutable `PartitionState`s: the ISR / ELR / LastKnownELR transitions of
KIP-966 (Eligible Leader Replicas), labelled cases A-G as in §5.2.1 of the KIP-966 protocol
description in Jack Vanlightly's kafka-tlaplus repository ("The Kafka Replication Protocol
with KIP-966"), whose §5.3 also describes the unclean recovery that `elect_recovered`
completes; leader election; and striped placement. The controller state machine applies
them; tests drive them directly."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field, replace


@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    leader: int | None
    leader_epoch: int = 0
    partition_epoch: int = 0
    isr: tuple[int, ...] = ()
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> PartitionState:
        return cls(
            topic=d["topic"], partition=int(d["partition"]), replicas=tuple(d["replicas"]),
            leader=d["leader"], leader_epoch=d["leader_epoch"], partition_epoch=d["partition_epoch"],
            isr=tuple(d["isr"]), elr=tuple(d["elr"]), last_known_elr=tuple(d["last_known_elr"]),
        )

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)


@dataclass(frozen=True)
class Rules:
    """The per-topic knobs the transitions depend on."""

    min_isr: int
    elr_enabled: bool = True
    unclean_election: bool = False
    # unclean.recovery.strategy=last-leader, Kafka 4.x's recovery: LastKnownELR holds the
    # leader the partition had when its ISR emptied, and that broker is elected once ISR and
    # ELR are both empty (RecoveryStrategy.LAST_LEADER). Only with the ELR on, as in Kafka.
    last_leader: bool = False

    @property
    def keeps_last_leader(self) -> bool:
        return self.elr_enabled and self.last_leader


@dataclass
class Change:
    """The result of a transition: the new state and what the controller should report."""

    state: PartitionState
    reason: str
    unclean_election: bool = False
    notes: list[str] = field(default_factory=list)


def striped_placement(brokers: Sequence[int], partitions: int, replication_factor: int) -> list[tuple[int, ...]]:
    """Round-robin replicas, offsetting the first (preferred leader) by one per partition, as
    Kafka's StripedReplicaPlacer does (without its rack awareness and random start)."""
    ordered = sorted(brokers)
    n = len(ordered)
    if replication_factor > n:
        raise ValueError(f"replication factor {replication_factor} > {n} available brokers")
    return [tuple(ordered[(p + i) % n] for i in range(replication_factor)) for p in range(partitions)]


def _ordered(state: PartitionState, members: Collection[int]) -> tuple[int, ...]:
    """Members in replica-assignment order, so elections prefer the preferred leader."""
    return tuple(r for r in state.replicas if r in members)


def _bump(state: PartitionState, *, leader_changed: bool, **changes) -> PartitionState:
    new = replace(state, **changes)
    if new == state:
        return state
    return replace(
        new,
        partition_epoch=state.partition_epoch + 1,
        leader_epoch=state.leader_epoch + 1 if leader_changed else state.leader_epoch,
    )


def _apply_case_g(rules: Rules, isr: tuple[int, ...], elr: tuple[int, ...], lkelr: tuple[int, ...]):
    """Case G: once the ISR reaches MinISR the HWM can advance again, so ELR and
    LastKnownELR members lose their completeness guarantee."""
    if rules.elr_enabled and len(isr) >= rules.min_isr:
        return (), ()
    return elr, lkelr


def pick_clean_leader(state: PartitionState, rules: Rules, unfenced: Collection[int]) -> int | None:
    """ISR members first, then unfenced ELR members (case B)."""
    for r in _ordered(state, state.isr):
        if r in unfenced:
            return r
    if rules.elr_enabled:
        for r in _ordered(state, state.elr):
            if r in unfenced:
                return r
    return None


def _with_leader(state: PartitionState, leader: int | None, isr: tuple[int, ...], elr: tuple[int, ...]):
    """Case B: a leader taken from the ELR moves to the ISR."""
    if leader is not None and leader not in isr:
        isr = _ordered(state, set(isr) | {leader})
        elr = tuple(r for r in elr if r != leader)
    return isr, elr


def fence(state: PartitionState, broker: int, rules: Rules, unfenced: Collection[int]) -> Change | None:
    """The controller fenced `broker` (session timeout, controlled shutdown, re-registration).

    Cases A, C, D (ELR on); pre-KIP-966 the last ISR member is never removed ("last replica
    standing"), it just stops leading."""
    if broker not in state.isr:
        return None
    candidates = set(unfenced) - {broker}
    if not rules.elr_enabled and len(state.isr) == 1:
        if state.leader != broker:
            return None
        new = _bump(state, leader_changed=True, leader=None)
        return Change(new, "fence-last-isr-member")
    isr = tuple(r for r in state.isr if r != broker)
    elr = state.elr
    leader = state.leader
    if leader == broker:
        leader = pick_clean_leader(replace(state, isr=isr), rules, candidates)
        isr, elr = _with_leader(state, leader, isr, elr)
    if rules.elr_enabled and len(isr) < rules.min_isr:
        # Cases A and C: the HWM cannot advance without `broker`, so it stays complete.
        elr = _ordered(state, set(elr) | {broker})
    elr, lkelr = _apply_case_g(rules, isr, elr, state.last_known_elr)
    if rules.keeps_last_leader and not isr and state.leader is not None:
        lkelr = (state.leader,)  # the ISR has just emptied: remember who led last
    new = _bump(state, leader_changed=leader != state.leader, leader=leader, isr=isr, elr=elr,
                last_known_elr=lkelr)
    return Change(new, "fence")


def unclean_registration(state: PartitionState, broker: int, rules: Rules) -> Change | None:
    """§5.2/§5.3: a broker that lost its clean-shutdown marker leaves the ELR; it may still be
    complete, so it is remembered in LastKnownELR for balanced recovery."""
    if not rules.elr_enabled or broker not in state.elr:
        return None
    elr = tuple(r for r in state.elr if r != broker)
    lkelr = state.last_known_elr if rules.keeps_last_leader else \
        _ordered(state, set(state.last_known_elr) | {broker})
    return Change(_bump(state, leader_changed=False, elr=elr, last_known_elr=lkelr), "unclean-registration")


def elect_if_leaderless(state: PartitionState, rules: Rules, unfenced: Collection[int]) -> Change | None:
    """A clean election for a partition without a leader, then the classic unclean election
    when `unclean.leader.election.enable` allows it."""
    if state.leader is not None:
        return None
    leader = pick_clean_leader(state, rules, unfenced)
    if leader is not None:
        isr, elr = _with_leader(state, leader, state.isr, state.elr)
        elr, lkelr = _apply_case_g(rules, isr, elr, state.last_known_elr)
        if rules.keeps_last_leader:
            lkelr = ()  # a leader again: no last leader to remember
        new = _bump(state, leader_changed=True, leader=leader, isr=isr, elr=elr, last_known_elr=lkelr)
        return Change(new, "election")
    last = _last_leader(state, rules, unfenced)
    if last is not None:
        new = _bump(state, leader_changed=True, leader=last, isr=(last,), elr=(), last_known_elr=())
        return Change(new, "last-leader-election", unclean_election=True)
    if rules.unclean_election:
        for r in state.replicas:
            if r in unfenced:
                new = _bump(state, leader_changed=True, leader=r, isr=(r,), elr=(), last_known_elr=())
                return Change(new, "unclean-election", unclean_election=True)
    return None


def _last_leader(state: PartitionState, rules: Rules, unfenced: Collection[int]) -> int | None:
    """Kafka 4.x's recovery with no ISR and no ELR member left: the last leader, unasked about
    its log, once it is back (Kafka may name it while it is still fenced; it leads only when
    back either way)."""
    if not rules.keeps_last_leader or state.isr or state.elr or len(state.last_known_elr) != 1:
        return None
    last = state.last_known_elr[0]
    return last if last in unfenced else None


def elect_recovered(state: PartitionState, broker: int) -> PartitionState:
    """Unclean recovery chose `broker`'s log: it leads alone until others catch up."""
    lkelr = tuple(r for r in state.last_known_elr if r != broker)
    return _bump(state, leader_changed=True, leader=broker, isr=(broker,), elr=(), last_known_elr=lkelr)


def alter_isr(state: PartitionState, new_isr: Sequence[int], rules: Rules) -> Change:
    """AlterPartition from the leader: shrink (case F, or into the ELR below MinISR) or
    expand (case E, then G)."""
    isr = _ordered(state, set(new_isr))
    removed = set(state.isr) - set(isr)
    added = set(isr) - set(state.isr)
    elr = tuple(r for r in state.elr if r not in added)
    lkelr = tuple(r for r in state.last_known_elr if r not in added)
    if rules.elr_enabled and len(isr) < rules.min_isr:
        elr = _ordered(state, set(elr) | removed)
    elr, lkelr = _apply_case_g(rules, isr, elr, lkelr)
    return Change(_bump(state, leader_changed=False, isr=isr, elr=elr, last_known_elr=lkelr), "alter-partition")
