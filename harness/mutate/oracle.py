"""The differential oracle: does a mutant's seed tell it from the unmutated code's same seed?

Each (cell, seed) is searched once with the unmutated code, the baseline, and a mutant's row
for that seed is judged against the baseline's row (`judge`):

- a **safety** kill when the mutant's seed shows an anomaly or an invariant violation the
  baseline's same seed does not (a `lost-write` where the baseline lost nothing, an
  `invariant:LeaderCompleteness` the baseline never broke), unless the cell's own faults
  explain it. A cell is **lossy** when the baseline loses acknowledged records in it on its
  own (a `lost-write` or `unseen` at some seed: power losses of every replica holding an
  unflushed tail). There, and at any seed where the baseline's is itself invalid, a kind the
  baseline shows at some seed of the cell (`cell_kinds`; `lost-write` and `unseen` count as
  one, a loss told apart only by whether a poll had read the record) is no kill by itself: a
  mutant that merely moves the schedule moves which tails a power loss takes, and loses at a
  seed where the baseline did not (docs/mutation.md, "The two kills of the lossy cell"). What
  kills there is a kind the baseline never shows in the cell, or an invariant broken
  **before the seed's first fault that can lose written data** (`before_loss` of the row,
  harness/simulate.py) that the baseline's seed did not break before its own: until that
  fault a lossy cell's run is the safe configuration's, which breaks none. Counts of an
  anomaly both have are reported, never a kill: records of two differently timed histories
  cannot be matched one to one.
- a **liveness** kill when the baseline's seed has a known verdict (valid or invalid, with
  something acknowledged) and the mutant's does not: it raised, acknowledged nothing, or its
  final read never reached the high watermark (unknown). Counted apart from safety kills.
- a **loss-excess** kill when both seeds served, the mutant's shows no kind the baseline's
  lacks, but lost far more (`loss_excess`: at least LOSS_FACTOR times the baseline's lost
  records AND times its lost-per-acknowledged rate, and LOSS_MIN records more): a statistic, not
  a record-by-record match, since the workload's values come from one counter shared by
  closed-loop producers, so value N is another producer's send at another time as soon as two
  runs' timings part; only where the baseline's seed lost records too. Or, over a lossy
  cell's seeds, when the mutant lost records at so many more seeds than the baseline that
  chance does not explain it (`loss_frequency`: a sign test of the seeds where exactly one of
  the two lost). Counted apart from the anomaly kills
  (docs/mutation.md), and neither ends a mutant's search: a later seed may still give it a
  safety kill.

With no baseline row for a seed (its block timed out), any anomaly is a safety kill and
liveness is not judged. Pure logic: rows are the dicts `harness.simulate.search` returns."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from math import comb
from typing import Any

SAFETY, LIVENESS, LOSS_EXCESS = "safety", "liveness", "loss-excess"
# A loss-excess kill needs every margin: safe mutants that only move timing came within reach
# of each one alone (docs/mutation.md: 282 records more at 1.07 times the count; 1.8 times the
# rate from fewer sends, with 4 records fewer), and small losses vary most.
LOSS_FACTOR = 1.5
LOSS_MIN = 100
KNOWN = (True, False)  # verdicts that answer the question; "unknown" and "error" do not
LOSS_KINDS = frozenset({"lost-write", "unseen"})  # one loss: acknowledged, gone from the log
# A loss-frequency kill: the chance that a mutant which only moves the schedule loses at this
# many more seeds, or more (one-sided sign test); 7 seeds to none is the fewest that pass.
FREQUENCY_ALPHA = 0.01


@dataclass
class Judgement:
    """A mutant's seed against the baseline's: the kind of kill (None: no kill), why, and how
    the two differ where they differ without a kill (counts of shared anomalies)."""

    kind: str | None = None
    why: list[str] = field(default_factory=list)
    differs: list[str] = field(default_factory=list)


def served(row: Mapping[str, Any]) -> bool:
    """Whether a seed's run answered at all: a known verdict with something acknowledged."""
    return row["valid"] in KNOWN and bool(row["acked"])


def new_anomalies(row: Mapping[str, Any], base: Mapping[str, Any] | None) -> list[str]:
    """The anomalies and invariants of `row` that `base` (the same seed, unmutated) lacks."""
    had = set(base["anomalies"]) if base is not None else set()
    return sorted(k for k, n in row["anomalies"].items() if n and k not in had)


def loss_ratio(row: Mapping[str, Any]) -> float:
    """A seed's lost records (the checker's lost-write and unseen) per acknowledged send: a
    rate, not a fraction of one set (sends whose outcome was unknown can be lost too)."""
    return row.get("lost", 0) / row["acked"]


def loss_excess(row: Mapping[str, Any], base: Mapping[str, Any] | None) -> str | None:
    """Why `row` lost far more than `base` (the same seed, unmutated), or None: both must have
    served, the baseline's seed must have lost records itself (a seed it kept says nothing of
    how much a moved schedule would lose there: two safe mutants lost 111 and 112 at such
    seeds of a lossy cell; those seeds go to `loss_frequency`), and the excess must pass every
    margin."""
    if base is None or not served(row) or not served(base) or not base.get("lost", 0):
        return None
    lost, had = row.get("lost", 0), base.get("lost", 0)
    ratio, was = loss_ratio(row), loss_ratio(base)
    if lost - had < LOSS_MIN or lost < LOSS_FACTOR * had or ratio < LOSS_FACTOR * was:
        return None
    return (f"lost {lost} for {row['acked']} acknowledged ({ratio:.1%}; baseline {had} for "
            f"{base['acked']}, {was:.1%})")


def _count_changes(row: Mapping[str, Any], base: Mapping[str, Any]) -> list[str]:
    shared = sorted(set(row["anomalies"]) & set(base["anomalies"]))
    out = [f"{k} {row['anomalies'][k]} (baseline {base['anomalies'][k]})" for k in shared
           if row["anomalies"][k] != base["anomalies"][k]]
    if row.get("lost", 0) != base.get("lost", 0):
        out.append(f"lost {row.get('lost', 0)} for {row['acked']} acknowledged "
                   f"(baseline {base.get('lost', 0)} for {base['acked']})")
    return out


def _stalled(row: Mapping[str, Any]) -> str:
    if row["valid"] == "error":
        return f"error: {str(row.get('error')).split(':')[0]}"
    if not row["acked"]:
        return "nothing acknowledged"
    return "unknown verdict"


def lossy(cell_kinds: Collection[str]) -> bool:
    """Whether the baseline loses acknowledged records in the cell on its own."""
    return not LOSS_KINDS.isdisjoint(cell_kinds)


def early_breaks(row: Mapping[str, Any], base: Mapping[str, Any]) -> list[str]:
    """The invariants `row` broke before its first fault that can lose written data and `base`
    (the same seed, unmutated) did not break before its own (none for a row from before the
    field)."""
    return sorted(set(row.get("before_loss") or ()) - set(base.get("before_loss") or ()))


def judge(row: Mapping[str, Any], base: Mapping[str, Any] | None,
          cell_kinds: Collection[str] = ()) -> Judgement:
    """The mutant's `row` against the baseline's `base` for the same cell and seed, and, where
    `base` is invalid or the cell lossy, against `cell_kinds`: every kind the baseline shows in
    the cell."""
    fresh = new_anomalies(row, base) if row["valid"] is False else []
    excusable = base is not None and (base["valid"] is False or lossy(cell_kinds))
    shown = set(cell_kinds) | (LOSS_KINDS if lossy(cell_kinds) else set())
    seen = [k for k in fresh if excusable and k in shown]
    early = early_breaks(row, base) if excusable else []
    if len(seen) < len(fresh) or early:
        return Judgement(SAFETY, sorted({k for k in fresh if k not in seen}
                                        | {f"{k} (before any fault that loses data)" for k in early}))
    excess = loss_excess(row, base)
    if excess is not None:
        return Judgement(LOSS_EXCESS, [excess])
    if base is not None and served(base) and not served(row):
        return Judgement(LIVENESS, [f"{_stalled(row)} (baseline {_verdict(base)})"])
    if base is None and row["valid"] == "error":
        return Judgement(LIVENESS, [_stalled(row)])
    elsewhere = [f"{k} (the baseline has it at other seeds)" for k in seen]
    return Judgement(None, differs=elsewhere + (_count_changes(row, base) if base else []))


def _verdict(row: Mapping[str, Any]) -> str:
    return "valid" if row["valid"] is True else "invalid"


def decisive(row: Mapping[str, Any], base: Mapping[str, Any] | None,
             cell_kinds: Collection[str] = ()) -> bool:
    """Whether a seed ends the mutant's search: a safety or liveness kill (a loss excess does
    not, so that a safety kill at a later seed still counts as one)."""
    return judge(row, base, cell_kinds).kind in (SAFETY, LIVENESS)


def kinds(rows: Collection[Mapping[str, Any]]) -> set[str]:
    """Every anomaly and invariant the baseline's invalid seeds of a cell show."""
    return {k for r in rows if r["valid"] is False for k, n in r["anomalies"].items() if n}


def lost_any(row: Mapping[str, Any]) -> bool:
    """Whether a seed lost acknowledged records (a count, or a loss kind without one)."""
    return row.get("lost", 0) > 0 or any(row["anomalies"].get(k) for k in LOSS_KINDS)


def loss_frequency(only_mutant: int, only_baseline: int) -> str | None:
    """Why a mutant lost at too many more of a lossy cell's seeds than the baseline, or None.
    The counts are of the seeds where exactly one of the two lost: a mutant that only moves
    the schedule is as likely to lose at a seed the baseline kept as to keep one the
    baseline lost, so the mutant's share is a fair coin's (sign test, one-sided)."""
    n = only_mutant + only_baseline
    p = sum(comb(n, k) for k in range(only_mutant, n + 1)) / 2 ** n if n else 1.0
    if p > FREQUENCY_ALPHA:
        return None
    return (f"lost at {only_mutant} seeds where the baseline lost nothing, kept all at "
            f"{only_baseline} where it lost (p = {p:.4f} by chance)")
