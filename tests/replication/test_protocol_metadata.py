"""The controller's pure ISR / ELR / LastKnownELR rules (replication.metadata) against public
accounts of them: the KIP-966 protocol description in Jack Vanlightly's kafka-tlaplus
repository (§5.2.1 cases A-G, §5.2.2), the walk-through (steps 1-8) of his post "Kafka KIP-966
- Fixing the Last Replica Standing issue", and Kafka's striped replica placement
(StripedReplicaPlacer). RF 3, MinISR 2 throughout, as in those accounts."""

from __future__ import annotations

from support.partition_states import leader_candidates_ok

from replication import metadata as md
from replication.metadata import PartitionState, Rules

RULES = Rules(min_isr=2)
ALL = {1, 2, 3}


def _state(leader: int | None, isr=(), elr=(), lkelr=(), leader_epoch: int = 0,
           partition_epoch: int = 0) -> PartitionState:
    return PartitionState("t", 0, (1, 2, 3), leader, leader_epoch, partition_epoch,
                          tuple(isr), tuple(elr), tuple(lkelr))


def _view(s: PartitionState) -> tuple:
    return (s.leader, s.isr, s.elr, s.last_known_elr)


# ---- kafka-tlaplus KIP-966 description §5.2.1: cases A-G -----------------------------------------


def test_case_a_fenced_in_sync_follower_moves_to_elr_below_min_isr() -> None:
    change = md.fence(_state(1, isr=(1, 2)), 2, RULES, unfenced={1})
    assert _view(change.state) == (1, (1,), (2,), ())
    assert (change.state.leader_epoch, change.state.partition_epoch) == (0, 1)


def test_case_b_elr_member_elected_moves_to_isr() -> None:
    leaderless = _state(None, isr=(), elr=(2, 3))
    assert md.elect_if_leaderless(leaderless, RULES, unfenced=set()) is None
    change = md.elect_if_leaderless(leaderless, RULES, unfenced={3})
    assert _view(change.state) == (3, (3,), (2,), ())
    assert (change.state.leader_epoch, change.state.partition_epoch) == (1, 1)
    assert change.reason == "election" and not change.unclean_election


def test_case_b_isr_member_preferred_over_elr() -> None:
    change = md.elect_if_leaderless(_state(None, isr=(3,), elr=(2,)), RULES, unfenced={2, 3})
    assert _view(change.state) == (3, (3,), (2,), ())


def test_case_c_fenced_leader_moves_to_elr_when_new_isr_below_min_isr() -> None:
    change = md.fence(_state(1, isr=(1, 2)), 1, RULES, unfenced={2, 3})
    assert _view(change.state) == (2, (2,), (1,), ())
    assert (change.state.leader_epoch, change.state.partition_epoch) == (1, 1)


def test_case_d_fenced_leader_not_in_elr_when_new_isr_meets_min_isr() -> None:
    change = md.fence(_state(1, isr=(1, 2, 3)), 1, RULES, unfenced={2, 3})
    assert _view(change.state) == (2, (2, 3), (), ())
    assert (change.state.leader_epoch, change.state.partition_epoch) == (1, 1)


def test_case_e_caught_up_follower_added_to_isr() -> None:
    change = md.alter_isr(_state(1, isr=(1, 2)), [1, 2, 3], RULES)
    assert _view(change.state) == (1, (1, 2, 3), (), ())
    assert (change.state.leader_epoch, change.state.partition_epoch) == (0, 1)


def test_case_f_out_of_sync_follower_removed_not_in_elr() -> None:
    change = md.alter_isr(_state(1, isr=(1, 2, 3)), [1, 2], RULES)
    assert _view(change.state) == (1, (1, 2), (), ())


def test_case_g_isr_reaching_min_isr_empties_elr_and_last_known_elr() -> None:
    change = md.alter_isr(_state(1, isr=(1,), elr=(3,), lkelr=(2,)), [1, 2], RULES)
    assert _view(change.state) == (1, (1, 2), (), ())


def test_shrink_below_min_isr_moves_removed_follower_to_elr() -> None:
    """AlterPartition that drops the ISR below MinISR: the HWM freezes, so the follower stays
    complete (kafka-tlaplus KIP-966 description §5.2.2 step 2)."""
    change = md.alter_isr(_state(1, isr=(1, 3)), [1], RULES)
    assert _view(change.state) == (1, (1,), (3,), ())


def test_one_shrink_below_min_isr_moves_every_dropped_follower_to_elr() -> None:
    """As Kafka's controller does (the old ISR and ELR less the new ISR, below MinISR): both
    followers dropped at once stay complete. Once all three are fenced and register
    uncleanly, the recovery quorum is all three, more than MinISR (docs/invariants.md,
    "MinIsrRecoveryQuorum: at least, not exactly")."""
    s = md.alter_isr(_state(1, isr=(1, 2, 3)), [1], RULES).state
    assert _view(s) == (1, (1,), (2, 3), ())
    s = md.fence(s, 1, RULES, unfenced=()).state
    assert _view(s) == (None, (), (1, 2, 3), ())
    for broker in (3, 2, 1):
        s = md.unclean_registration(s, broker, RULES).state
    assert _view(s) == (None, (), (), (1, 2, 3))


def test_unclean_registration_moves_elr_member_to_last_known_elr() -> None:
    change = md.unclean_registration(_state(None, elr=(2, 3)), 2, RULES)
    assert _view(change.state) == (None, (), (3,), (2,))
    assert change.reason == "unclean-registration"
    # Not an ELR member: nothing to change (kafka-tlaplus KIP-966 description §5.3.3 step 6).
    assert md.unclean_registration(_state(None, elr=(2, 3)), 1, RULES) is None


# ---- kafka-tlaplus KIP-966 description §5.2.2: clean ELR-based recovery --------------------------


def test_seed_000_clean_elr_recovery_example() -> None:
    # 1. Leader=1, ISR=[1,2,3], ELR=[]
    s = _state(1, isr=(1, 2, 3))
    # 2a. Replica 2 leaves the ISR; the ISR still meets MinISR, so no ELR.
    s = md.alter_isr(s, [1, 3], RULES).state
    assert _view(s) == (1, (1, 3), (), ())
    # 2b. Replica 3 leaves; the ISR is below MinISR, so 3 joins the ELR.
    s = md.alter_isr(s, [1], RULES).state
    assert _view(s) == (1, (1,), (3,), ())
    # 3. Replica 1 (leader, sole ISR member) has an unclean shutdown: fenced, 3 elected.
    #    Case C puts the fenced leader into the ELR (the controller cannot yet know the
    #    shutdown was unclean); the seed's ELR=[] is the state once 1 re-registers uncleanly.
    s = md.fence(s, 1, RULES, unfenced={2, 3}).state
    assert _view(s) == (3, (3,), (1,), ())
    assert s.leader_epoch == 1
    s = md.unclean_registration(s, 1, RULES).state
    assert _view(s) == (3, (3,), (), (1,))
    # 4. Replica 1 catches up and is re-added: ISR reaches MinISR, LastKnownELR is cleaned.
    s = md.alter_isr(s, [1, 3], RULES).state
    assert _view(s) == (3, (1, 3), (), ())
    assert leader_candidates_ok(s)


# ---- Vanlightly's KIP-966 post: the walk-through -------------------------------------------------


def test_seed_001_kip_966_walkthrough_steps_1_to_8() -> None:
    unfenced = set(ALL)
    # 1. Leader=R1, ISR=[R1,R2,R3], ELR=[]
    s = _state(1, isr=(1, 2, 3))
    # 2. R3 unreachable, fenced: ISR still meets MinISR, R3 not in the ELR.
    unfenced.discard(3)
    s = md.fence(s, 3, RULES, unfenced).state
    assert _view(s) == (1, (1, 2), (), ())
    # 3. R1 replicates req1 to R2 and advances the HWM: the ISR [R1,R2] meets MinISR, so the
    #    committed log is on exactly the two ISR members (the Replica tests check the HWM rule).
    assert len(s.isr) >= RULES.min_isr
    holders_of_req1 = set(s.isr)
    # 4. R2 unreachable: removed from the ISR, which is now below MinISR: R2 joins the ELR.
    unfenced.discard(2)
    s = md.fence(s, 2, RULES, unfenced).state
    assert _view(s) == (1, (1,), (2,), ())
    # 5. An OS error kills R1: no candidate, so NoLeader, and R1 joins the ELR too.
    unfenced.discard(1)
    s = md.fence(s, 1, RULES, unfenced).state
    assert _view(s) == (None, (), (1, 2), ())
    assert s.leader_epoch == 1
    # 6. R1 restarts after losing req1, registers uncleanly: it leaves the ELR.
    s = md.unclean_registration(s, 1, RULES).state
    holders_of_req1.discard(1)
    assert _view(s) == (None, (), (2,), (1,))
    unfenced.add(1)
    assert md.elect_if_leaderless(s, RULES, unfenced) is None  # R1 is no candidate
    # 7. R2 is reachable again and unfenced: elected from the ELR, moved to the ISR.
    unfenced.add(2)
    s = md.elect_if_leaderless(s, RULES, unfenced).state
    assert _view(s) == (2, (2,), (), (1,))
    assert s.leader in holders_of_req1 and s.leader_epoch == 2
    # 8. R1 catches up from R2 and is re-added; the ISR meets MinISR again (case G).
    s = md.alter_isr(s, [1, 2], RULES).state
    assert _view(s) == (2, (1, 2), (), ())


def test_last_replica_standing_without_elr_keeps_unclean_leader_in_isr() -> None:
    """Pre-KIP-966: the last ISR member stays in the ISR when fenced, and is re-elected
    after its unclean restart (the data-loss hole KIP-966 closes)."""
    rules = Rules(min_isr=2, elr_enabled=False)
    s = md.fence(_state(1, isr=(1, 2)), 2, rules, unfenced={1, 3}).state
    assert _view(s) == (1, (1,), (), ())
    s = md.fence(s, 1, rules, unfenced={3}).state
    assert _view(s) == (None, (1,), (), ())
    assert md.unclean_registration(s, 1, rules) is None
    s = md.elect_if_leaderless(s, rules, unfenced={1, 3}).state
    assert _view(s) == (1, (1,), (), ())


def test_unclean_election_takes_any_unfenced_replica() -> None:
    rules = Rules(min_isr=2, unclean_election=True)
    change = md.elect_if_leaderless(_state(None, elr=(1,), lkelr=(2,)), rules, unfenced={3})
    assert change.unclean_election and change.reason == "unclean-election"
    assert _view(change.state) == (3, (3,), (), ())


def test_elect_recovered_leads_alone() -> None:
    s = md.elect_recovered(_state(None, lkelr=(2, 3), leader_epoch=4, partition_epoch=9), 2)
    assert _view(s) == (2, (2,), (), (3,))
    assert (s.leader_epoch, s.partition_epoch) == (5, 10)


# ---- Kafka's striped placement (StripedReplicaPlacer) --------------------------------------------


def test_striped_placement_three_brokers_three_partitions() -> None:
    assert md.striped_placement([1, 2, 3], 3, 3) == [(1, 2, 3), (2, 3, 1), (3, 1, 2)]
    assert md.striped_placement([2, 3, 4, 1], 3, 3) == [(1, 2, 3), (2, 3, 4), (3, 4, 1)]
