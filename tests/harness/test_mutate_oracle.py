"""The differential oracle of harness mutate (harness/mutate/oracle.py): a mutant's seed is a
kill only by what it adds to the unmutated code's same seed. Pure logic first, then end to end
under the power mix, where the safe configuration loses records on its own: the HWM-as-max
mutant is killed there, and an equivalent mutant, which makes the very same runs, is not."""

from __future__ import annotations

import argparse

import pytest

from harness.commands.mutate import CLASSIFIED, cells
from harness.mutate import page
from harness.mutate.child import ROOT
from harness.mutate.mutants import mutants_of
from harness.mutate.oracle import (
    LIVENESS,
    LOSS_EXCESS,
    SAFETY,
    decisive,
    judge,
    loss_excess,
    loss_frequency,
)
from harness.mutate.score import BASELINE, Result, _record, local_runner, search_all, settle


def _row(valid, anomalies=None, acked: int = 500, lost: int = 0, error=None) -> dict:
    return {"seed": 1, "valid": valid, "anomalies": anomalies or {}, "acked": acked,
            "lost": lost, "error": error}


LOSSY = _row(False, {"lost-write": 40, "invariant:LeaderCompleteness": 1}, lost=40)


def test_what_the_baseline_also_has_is_no_kill_within_the_loss_margins() -> None:
    same_kinds = _row(False, {"lost-write": 55, "invariant:LeaderCompleteness": 3}, lost=55)
    verdict = judge(same_kinds, LOSSY)
    assert verdict.kind is None
    assert verdict.differs == ["invariant:LeaderCompleteness 3 (baseline 1)",
                               "lost-write 55 (baseline 40)",
                               "lost 55 for 500 acknowledged (baseline 40 for 500)"]
    assert judge(LOSSY, LOSSY).kind is None  # the unmutated code never kills itself


def _lossy(lost: int, acked: int) -> dict:
    return _row(False, {"lost-write": lost}, acked=acked, lost=lost)


# safe/power seed 1 as measured (docs/mutation.md): the unmutated code, then the mutant that
# elects uncleanly when unclean election is disabled (metadata.py:elect_if_leaderless)
BASE_1, UNCLEAN_1 = _lossy(592, 6845), _lossy(977, 6913)


@pytest.mark.parametrize(("row", "base", "kind"), [
    (UNCLEAN_1, BASE_1, LOSS_EXCESS),
    # its twin: a safe mutant's seed 1 (pending produces expire early: Replica.tick)
    (_lossy(594, 6635), BASE_1, None),
    # twins on the rate: 1.5 times the baseline's kills, just below it does not
    (_lossy(900, 6845), _lossy(600, 6845), LOSS_EXCESS),
    (_lossy(899, 6845), _lossy(600, 6845), None),
    # twins on the count: 1.5 times the rate from fewer sends kills only with 1.5 times the
    # records (Log.append:arith-swap's seed 1 lost 588 for 3791 acknowledged, against 592 for 6845)
    (_lossy(900, 3791), _lossy(600, 6845), LOSS_EXCESS),
    (_lossy(588, 3791), BASE_1, None),
    # and a safe mutant's 282 records more at the same order of rate (Replica.tick's seed 2)
    (_lossy(4564, 4994), _lossy(4282, 5936), None),
    # twins on the floor: 100 records more kills, 99 do not, whatever the ratio (a clean
    # baseline's seed is no case: below)
    (_lossy(110, 5000), _lossy(10, 5000), LOSS_EXCESS),
    (_lossy(109, 5000), _lossy(10, 5000), None),
    # a baseline that lost next to nothing: the floor alone decides
    (_lossy(101, 5000), _lossy(1, 5000), LOSS_EXCESS),
    (_lossy(100, 5000), _lossy(1, 5000), None),
    # the rate, not the count alone: twice the records from twice the sends is no excess
    (_lossy(1200, 13800), BASE_1, None),
])
def test_far_more_records_lost_and_per_acknowledged_send_is_a_loss_excess_kill(row, base,
                                                                               kind) -> None:
    assert judge(row, base).kind == kind


def test_no_loss_excess_at_a_seed_the_baseline_kept_whole() -> None:
    """small-segments/power seeds 20 and 30, measured: two mutants classified safe, which move
    the schedule, lost 111 and 112 records where the unmutated code lost none; such a seed's
    loss is counted for the frequency test, not judged alone. Its twin: one record lost by the
    baseline makes the seed comparable."""
    kept = _row(True, acked=5977)
    assert loss_excess(_lossy(111, 1294), kept) is None
    assert judge(_lossy(111, 1294), kept, {"lost-write"}).kind is None
    assert loss_excess(_lossy(111, 1294), _lossy(1, 5977)) is not None


def test_a_loss_excess_kill_says_both_rates() -> None:
    assert judge(UNCLEAN_1, BASE_1).why == [
        "lost 977 for 6913 acknowledged (14.1%; baseline 592 for 6845, 8.6%)"]


def test_a_loss_excess_does_not_end_the_childs_search_a_safety_kill_does() -> None:
    assert judge(UNCLEAN_1, BASE_1).kind == LOSS_EXCESS and not decisive(UNCLEAN_1, BASE_1)
    assert decisive(_row(False, {"stale-read": 1}), _row(True))


def test_no_loss_excess_without_a_baseline_or_where_either_did_not_serve() -> None:
    assert loss_excess(UNCLEAN_1, None) is None
    assert loss_excess(UNCLEAN_1, _row("unknown", acked=6845, lost=592)) is None
    assert loss_excess(_row("unknown", acked=6900, lost=992), BASE_1) is None
    assert judge(_row("unknown", lost=992), BASE_1).kind == LIVENESS


@pytest.mark.parametrize("row", [
    _row(True), _row(True, acked=0), _row("unknown"), _row("error", acked=0, error="E: x"),
    LOSSY, BASE_1, UNCLEAN_1, _lossy(99, 100), _lossy(5000, 6000),
    _row(False, {"unseen": 3, "invariant:ValidControllerState": 1}, lost=3)])
def test_no_seed_of_any_kind_kills_itself(row) -> None:
    """The unmutated code against itself (a deterministic simulation repeats a seed exactly):
    no rule may fire, whatever the seed lost."""
    assert judge(row, row, {"lost-write", "unseen"}).kind is None
    assert judge(row, row).kind is None


def test_an_anomaly_or_invariant_the_baseline_lacks_is_a_safety_kill() -> None:
    worse = _row(False, {"lost-write": 40, "invariant:LeaderCompleteness": 1, "stale-read": 2,
                         "invariant:ValidControllerState": 1})
    verdict = judge(worse, LOSSY)
    assert (verdict.kind, verdict.why) == (SAFETY, ["invariant:ValidControllerState",
                                                    "stale-read"])
    assert judge(_row(False, {"lost-write": 1}), _row(True)).kind == SAFETY
    assert judge(_row(False, {"lost-write": 1}), None).kind == SAFETY  # no baseline: absolute


@pytest.mark.parametrize(("row", "why"), [
    (_row("unknown"), "unknown verdict (baseline invalid)"),
    (_row("unknown", acked=0), "nothing acknowledged (baseline invalid)"),
    (_row("error", error="NameError: name 'x' is not defined"), "error: NameError (baseline invalid)"),
])
def test_a_run_that_stops_serving_where_the_baseline_answered_is_a_liveness_kill(row, why) -> None:
    verdict = judge(row, LOSSY)
    assert (verdict.kind, verdict.why) == (LIVENESS, [why])


def test_no_liveness_kill_where_the_baseline_did_not_answer_either() -> None:
    unknown = _row("unknown")
    assert judge(unknown, unknown).kind is None
    assert judge(_row("unknown", acked=0), _row(True, acked=0)).kind is None
    assert judge(unknown, None).kind is None  # no baseline row: liveness is not judged


def _one(path: str, operator: str, changed: str) -> str:
    """The id of the one mutant of `path` that makes `changed` (ids are stable, but the test
    names the change it means)."""
    found = [m.id for m in mutants_of(ROOT, path) if m.operator == operator and changed in m.source]
    assert len(found) == 1, found
    return found[0]


def test_under_a_lossy_mix_a_known_bad_mutant_is_killed_and_an_equivalent_one_is_not() -> None:
    """Seed 1 of safe/power loses records with the unmutated code, seed 3 does not: the HWM
    mutant adds no kind at seed 1, but breaks an invariant there before any fault has lost
    data, which the unmutated code never does (so it is killed at seed 1, not only at seed 3
    by a loss the cell's faults could explain); unclean election when it is
    disabled adds no kind at seed 1 but loses far more there (a loss-excess kill); the
    equivalent mutant (`<=` where equality changes nothing) runs the very same seeds, so it is
    never killed."""
    hwm = _one("replication/partition.py", "min-max", "max([settled if r == me")
    unclean = _one("replication/metadata.py", "negate-cond", "if not (rules.unclean_election)")
    (same,) = [i for i, note in page.classified(CLASSIFIED).items()
               if ":Log.settled_end:cmp-boundary:" in i and note["verdict"] == "equivalent"]
    args = argparse.Namespace(cell=["safe/power"], campaign=ROOT / "campaigns" / "mutation.toml")
    results = search_all([hwm, unclean, same], cells(args), [1, 3], local_runner(2), block=2)
    baseline = results[BASELINE]
    assert (baseline.outcome, baseline.seeds_run) == ("survived", 2)
    assert [n.split(":")[0] for n in baseline.notes] == ["safe/power seed 1"]  # lossy on its own
    assert " acknowledged" in baseline.notes[0]  # its loss, what a loss excess is measured by
    killed = results[hwm]
    assert (killed.outcome, killed.kind, killed.seed) == ("killed", SAFETY, 1)
    assert any(why.endswith("(before any fault that loses data)") for why in killed.by), killed.by
    assert (results[unclean].outcome, results[unclean].kind, results[unclean].seed) == \
        ("killed", LOSS_EXCESS, 1)
    assert (results[same].outcome, results[same].seeds_run, results[same].notes) == \
        ("survived", 2, [])


def test_on_a_lossy_seed_only_a_kind_the_baseline_never_shows_in_the_cell_kills() -> None:
    """`unseen` beside the baseline's `lost-write` is the same loss under a sibling kind when
    the unmutated code reports `unseen` at other seeds of the cell; on a clean seed it kills."""
    unseen = _row(False, {"lost-write": 40, "invariant:LeaderCompleteness": 1, "unseen": 9})
    cell = {"lost-write", "unseen", "invariant:LeaderCompleteness"}
    verdict = judge(unseen, LOSSY, cell)
    assert verdict.kind is None and verdict.differs[0] == "unseen (the baseline has it at other seeds)"
    assert judge(unseen, LOSSY).why == ["unseen"]  # the cell unknown: the seed alone decides
    assert judge(unseen, LOSSY, {"lost-write"}).kind is None  # one loss under two names
    novel = _row(False, {"lost-write": 40, "invariant:ValidControllerState": 1})
    assert judge(novel, LOSSY, cell).why == ["invariant:ValidControllerState"]


# small-segments/power seed 10, measured (docs/mutation.md, "The two kills of the lossy cell"):
# the unmutated code kept every record; Client._known_state:and-or, which only moves which
# broker a send goes to first, lost 67 acknowledged at a power loss of all three brokers.
CELL = {"lost-write", "inconsistent-offsets", "stale-read", "nonmonotonic-send",
        "invariant:ConsistentRead", "invariant:LeaderCandidateCompleteness",
        "invariant:LeaderCompleteness", "invariant:NoCommittedRecordLostGlobally"}
MOVED = _row(False, {"unseen": 67, "stale-read": 2, "invariant:ConsistentRead": 3,
                     "invariant:LeaderCandidateCompleteness": 16,
                     "invariant:LeaderCompleteness": 3,
                     "invariant:NoCommittedRecordLostGlobally": 1}, acked=1112, lost=67)
CLEAN_10 = _row(True, acked=6373)


def test_in_a_lossy_cell_a_loss_the_cells_faults_explain_is_no_kill_even_at_a_clean_seed() -> None:
    verdict = judge(MOVED, CLEAN_10, CELL)
    assert verdict.kind is None and not decisive(MOVED, CLEAN_10, CELL)
    assert "unseen (the baseline has it at other seeds)" in verdict.differs
    # the twin: in a cell where the unmutated code never loses, the same seed kills
    assert judge(MOVED, CLEAN_10, CELL - {"lost-write"}).kind == SAFETY
    assert judge(MOVED, CLEAN_10).kind == SAFETY


def test_an_invariant_broken_before_any_fault_that_loses_data_kills_in_a_lossy_cell() -> None:
    """Until its first power loss a lossy cell's run is the safe configuration's: the HWM
    mutant's seed breaks LeaderCandidateCompleteness at 0.5 s, the first outage is at 2.6 s."""
    early = {**MOVED, "before_loss": ["invariant:LeaderCandidateCompleteness"]}
    verdict = judge(early, CLEAN_10, CELL)
    assert verdict.kind == SAFETY and decisive(early, CLEAN_10, CELL)
    assert verdict.why == ["invariant:LeaderCandidateCompleteness (before any fault that loses data)"]
    assert judge(early, LOSSY, CELL).kind == SAFETY  # at a seed the baseline lost too
    # twins: the baseline's seed broke it before its first loss as well; a row from before the
    # field (no before_loss) is judged as it was
    assert judge(early, {**CLEAN_10, "before_loss": early["before_loss"]}, CELL).kind is None
    assert judge(MOVED, CLEAN_10, CELL).kind is None


@pytest.mark.parametrize(("mine", "theirs", "kills"), [
    (7, 0, True), (6, 0, False),  # 1/128 passes 0.01, 1/64 does not
    (10, 1, True), (8, 1, False),  # 12/2048 against 10/512
    (20, 5, True), (15, 10, False), (0, 0, False), (0, 9, False)])
def test_a_loss_frequency_kill_needs_a_sign_test_chance_would_fail(mine, theirs, kills) -> None:
    assert (loss_frequency(mine, theirs) is not None) is kills


def _seeds(rows: list[dict], bases: list[dict]) -> Result:
    """A mutant's rows over one cell's seeds against the baseline's, folded and settled."""
    result = Result("m")
    _record(result, {"cell": "c", "wall_s": 0.0,
                     "rows": [{**r, "seed": i} for i, r in enumerate(rows)]},
            {i: {**b, "seed": i} for i, b in enumerate(bases)})
    settle(result)
    return result


def test_a_mutant_that_loses_at_many_seeds_the_baseline_kept_is_a_loss_frequency_kill() -> None:
    lost, kept = _row(False, {"lost-write": 5}, lost=5), _row(True)
    result = _seeds([lost] * 8, [kept] * 7 + [lost])  # the last seed: both lost
    assert (result.outcome, result.kind, result.cell) == ("killed", LOSS_EXCESS, "c")
    assert result.lone_losses == {"c": [7, 0]}
    assert result.by[0].startswith("lost at 7 seeds where the baseline lost nothing")
    # the twin: the same losses shuffled over the seeds, as a moved schedule shuffles them
    shuffled = _seeds([lost, kept] * 4, [kept, lost] * 4)
    assert (shuffled.outcome, shuffled.lone_losses) == ("survived", {"c": [4, 4]})
