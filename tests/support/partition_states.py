"""What every partition state must satisfy, for the protocol's property tests."""

from __future__ import annotations

from replication.metadata import PartitionState


def leader_candidates_ok(state: PartitionState) -> bool:
    """Structural invariants every state must satisfy: ISR and ELR disjoint, both within
    the replicas, the leader (if any) in the ISR."""
    return (
        not (set(state.isr) & set(state.elr))
        and set(state.isr) <= set(state.replicas)
        and set(state.elr) <= set(state.replicas)
        and (state.leader is None or state.leader in state.isr)
    )
