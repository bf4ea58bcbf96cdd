"""The differential oracle: does a mutant's seed tell it from the unmutated code's same seed?

Each (cell, seed) is searched once with the unmutated code, the baseline, and a mutant's row
for that seed is judged against the baseline's row (`judge`):

- a **safety** kill when the mutant's seed shows an anomaly or an invariant violation the
  baseline's same seed does not (a `lost-write` where the baseline lost nothing, an
  `invariant:LeaderCompleteness` the baseline never broke). Where the baseline's seed is
  itself invalid, only a kind the baseline shows on no seed of the cell (`cell_kinds`) kills:
  a lossy run whose timing a mutant merely moved may report its loss under a sibling kind
  (`unseen` for `lost-write`), which says nothing of the mutant. So a lossy cell, where the
  safe configuration loses unflushed records too (the validation campaign's `power` mix), can
  be searched: what both lose tells nothing. Counts of an anomaly both have are reported,
  never a kill: a mutant that only moves timing loses other records in another number, and
  records of two differently timed histories cannot be matched one to one.
- a **liveness** kill when the baseline's seed has a known verdict (valid or invalid, with
  something acknowledged) and the mutant's does not: it raised, acknowledged nothing, or its
  final read never reached the high watermark (unknown). Counted apart from safety kills.
- a **loss-excess** kill when both seeds served, the mutant's shows no kind the baseline's
  lacks, but lost far more (`loss_excess`: at least LOSS_FACTOR times the baseline's lost
  records AND times its lost-per-acknowledged rate, and LOSS_MIN records more): a statistic, not
  a record-by-record match, since the workload's values come from one counter shared by
  closed-loop producers, so value N is another producer's send at another time as soon as two
  runs' timings part. Counted apart from the anomaly kills (docs/mutation.md), and it does
  not end a mutant's search: a later seed may still give it a safety kill.

With no baseline row for a seed (its block timed out), any anomaly is a safety kill and
liveness is not judged. Pure logic: rows are the dicts `harness.simulate.search` returns."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

SAFETY, LIVENESS, LOSS_EXCESS = "safety", "liveness", "loss-excess"
# A loss-excess kill needs every margin: safe mutants that only move timing came within reach
# of each one alone (docs/mutation.md: 282 records more at 1.07 times the count; 1.8 times the
# rate from fewer sends, with 4 records fewer), and small losses vary most.
LOSS_FACTOR = 1.5
LOSS_MIN = 100
KNOWN = (True, False)  # verdicts that answer the question; "unknown" and "error" do not


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
    served, and the excess must pass every margin."""
    if base is None or not served(row) or not served(base):
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


def judge(row: Mapping[str, Any], base: Mapping[str, Any] | None,
          cell_kinds: Collection[str] = ()) -> Judgement:
    """The mutant's `row` against the baseline's `base` for the same cell and seed, and, where
    `base` is invalid, against `cell_kinds`: every kind the baseline shows in the cell."""
    fresh = new_anomalies(row, base) if row["valid"] is False else []
    seen = [k for k in fresh if base is not None and base["valid"] is False and k in cell_kinds]
    if len(seen) < len(fresh):
        return Judgement(SAFETY, [k for k in fresh if k not in seen])
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
