"""Counting the records the protocol invariants look up in replicas' logs
(checkers.invariants.holds), for tests that bound how much a check does."""

from __future__ import annotations

from checkers import invariants


def count_lookups(monkeypatch) -> list[int]:
    """From now on (for the test), `[n]`: n is the number of look-ups so far."""
    calls = [0]
    holds = invariants.holds

    def counting(r, rec):
        calls[0] += 1
        return holds(r, rec)
    monkeypatch.setattr(invariants, "holds", counting)
    return calls
