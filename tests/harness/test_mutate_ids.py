"""Stable mutant ids (harness/mutate/mutants.py): `PATH:FUNCTION:OPERATOR:DIGEST:K` survives
edits of other lines (above, below, in the same function, a re-indentation), changes when the
mutated line itself changes, and an older positional id is still found, by its line or, once
that moved, by the diff recorded beside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.mutate.mutants import changed_lines, mutant, mutants_of_source, resolve

BEFORE = '''\
class Replica:
    def advance(self, ends, hwm):
        top = min(ends)
        if top > hwm:
            hwm = top
        return hwm

    def twice(self, a, b):
        a = a + 1
        b = b + 1
        a = a + 1
        return a, b


def helper(x):
    def inner(y):
        return y < x
    return inner
'''

# Lines added above and inside the functions, one function's body re-indented under a `with`,
# a comment and a blank line: every mutated line is as it was, only its place moved.
AFTER = '''\
"""A docstring that moves everything down."""
import os


class Replica:
    def advance(self, ends, hwm):
        os.getpid()  # a new first statement
        top = min(ends)
        if top > hwm:

            hwm = top
        return hwm

    def twice(self, a, b):
        with open(os.devnull):
            a = a + 1
            b = b + 1
            a = a + 1
        return a, b


def helper(x):
    def inner(y):
        return y < x
    return inner
'''


def _ids(source: str) -> dict[str, str]:
    """Each stable id with what its mutant changes."""
    return {m.id: "|".join(changed_lines(m.diff())) for m in mutants_of_source("r.py", source)}


def test_ids_name_the_function_and_operator_and_are_unique() -> None:
    ids = _ids(BEFORE)
    assert len(ids) == len(mutants_of_source("r.py", BEFORE))
    assert {i.split(":")[1] for i in ids} == {"Replica.advance", "Replica.twice",
                                              "helper.inner", "helper"}
    mins = [i for i in ids if ":min-max:" in i]
    assert len(mins) == 1 and mins[0].startswith("r.py:Replica.advance:min-max:")


def test_repeated_identical_lines_in_one_function_are_told_apart_by_their_order() -> None:
    ids = _ids(BEFORE)
    swaps = sorted(i for i in ids if i.startswith("r.py:Replica.twice:arith-swap:"))
    assert [ids[i] for i in swaps].count("-a = a + 1|+a = a - 1") == 2
    assert {i.rsplit(":", 1)[1] for i in swaps if ids[i] == "-a = a + 1|+a = a - 1"} == {"0", "1"}


def test_edits_of_other_lines_change_no_id_and_no_mutants_change() -> None:
    before, after = _ids(BEFORE), _ids(AFTER)
    kept = {i: c for i, c in after.items() if i in before}
    assert kept == before  # every old id is still there, making the same change
    # the new statement's own mutant is the only new id
    assert [c for i, c in after.items() if i not in before] == [
        "-os.getpid()  # a new first statement|+pass  # a new first statement"]


def test_an_edit_of_the_mutated_line_itself_changes_its_id() -> None:
    edited = BEFORE.replace("top = min(ends)", "top = min(ends, default=0)")
    old = {i for i in _ids(BEFORE) if ":min-max:" in i}
    new = {i for i in _ids(edited) if ":min-max:" in i}
    assert len(old) == len(new) == 1 and old != new


def test_a_positional_id_is_found_by_its_line_or_else_by_its_recorded_diff(tmp_path: Path) -> None:
    module = tmp_path / "r.py"
    module.write_text(BEFORE)
    (hwm,) = [m for m in mutants_of_source("r.py", BEFORE) if m.operator == "min-max"]
    assert hwm.place == "r.py:min-max:3:14:0"
    assert mutant(tmp_path, hwm.place) == hwm == resolve(tmp_path, hwm.place, hwm.diff())
    module.write_text(AFTER)  # the line moved: the old place names no min-max now
    with pytest.raises(ValueError, match="no such mutant"):
        mutant(tmp_path, hwm.place)
    moved = resolve(tmp_path, hwm.place, hwm.diff())
    assert moved.id == hwm.id and moved.line == 8
    assert resolve(tmp_path, hwm.id).line == 8
