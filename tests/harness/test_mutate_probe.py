"""The probe of harness/mutate/mutants.py (docs/mutation.md, "Whether the changed code ran"):
every mutant's probed source is the mutant plus one call of a counter around the changed code,
on the same lines; it compiles, computes what the mutant computes, and counts each run of the
changed code (none of a branch not taken or an operand short-circuited). End to end, a
`harness mutate` run of two mutants over the safe cell: the HWM-as-max mutant's change runs
(and kills it), the pre-KIP-966 fence branch's never runs there (a coverage gap, said so in
the CLI lines, mutants.json and the report)."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_mutate import HWM_MAX, PRE_KIP966_FENCED_LEADER_KEPT

from harness.mutate.child import ROOT
from harness.mutate.mutants import (
    MODULES,
    OPERATORS,
    PROBE,
    Probe,
    _Text,
    mutants_of,
    mutants_of_source,
)

SOURCE = '''\
def f(a, b, xs):
    if a < b and b in xs:
        a = a + 1
    n = min(a, b) - 1
    xs.append(n)
    ok = a if a != b else b
    if a > 100:
        return True
    return a == b


def g(limit):
    k = 0
    budget = iter(range(20))
    while k < limit:
        next(budget)
        k += 1
    return k
'''
# g's budget: a mutant that never ends its loop (a dropped `k += 1`) raises StopIteration
INPUTS = [(1, 2, [2]), (2, 1, []), (3, 3, [3]), (200, 300, [300]), (5, 9, [])]


def _is_probe(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == PROBE and not node.args)


def _same_as_mutant(probed: str, mutated: str) -> bool:
    """The probed source is the mutant's with exactly one probe added, and nothing else."""
    changed = _changed_lines(probed, mutated)
    if changed is None:
        return False
    same, probes = _same_tree(ast.parse(probed), ast.parse(mutated), changed)
    return same and probes == 1


def _changed_lines(probed: str, mutated: str) -> set[int] | None:
    """The (1-based) lines whose text differs, or None when the line counts differ."""
    ours, theirs = probed.splitlines(), mutated.splitlines()
    if len(ours) != len(theirs):
        return None
    return {n for n, (a, b) in enumerate(zip(ours, theirs, strict=True), 1) if a != b}


_SPAN = ("lineno", "col_offset", "end_lineno", "end_col_offset")


def _same_tree(a: ast.AST, b: ast.AST, changed: set[int]) -> tuple[bool, int]:
    """Whether `a` with its probes taken out (`(PROBE() or (X))` as X, `PROBE()` as `pass`) is
    `b`, and how many probes it held. A node at the same place in both on lines of the same
    text is the same tree, with no probe (the mutant has none): not walked, as walking every
    node of every module's mutants took most of a minute of the suite."""
    span = [getattr(a, k, None) for k in _SPAN]
    if (span[0] is not None and span == [getattr(b, k, None) for k in _SPAN]
            and changed.isdisjoint(range(span[0], span[2] + 1))):
        return True, 0
    if isinstance(a, ast.BoolOp) and isinstance(a.op, ast.Or) and len(a.values) == 2 \
            and _is_probe(a.values[0]):
        same, probes = _same_tree(a.values[1], b, changed)
        return same, probes + 1
    if isinstance(a, ast.Expr) and _is_probe(a.value):
        return isinstance(b, ast.Pass), 1
    if type(a) is not type(b):
        return False, 0
    return _same_fields(a, b, changed)


def _same_fields(a: ast.AST, b: ast.AST, changed: set[int]) -> tuple[bool, int]:
    probes = 0
    for name in a._fields:
        ours, theirs = getattr(a, name, None), getattr(b, name, None)
        if not isinstance(ours, list):
            ours, theirs = [ours], [theirs]
        if not isinstance(theirs, list) or len(ours) != len(theirs):
            return False, 0
        for x, y in zip(ours, theirs, strict=True):
            if isinstance(x, ast.AST):
                same, more = _same_tree(x, y, changed) if isinstance(y, ast.AST) else (False, 0)
            else:
                same, more = x == y, 0
            if not same:
                return False, 0
            probes += more
    return True, probes


def _calls(source: str, probe: Probe | None = None) -> list:
    """f over INPUTS and g over a few limits, with what each returned or raised."""
    space: dict = {PROBE: probe or Probe()}
    exec(compile(source, "snippet.py", "exec", dont_inherit=True), space)
    out = []
    for name, args in [("f", (a, b, list(xs))) for a, b, xs in INPUTS] + [("g", (3,)), ("g", (0,))]:
        try:
            out.append(space[name](*args))
        except Exception as e:  # noqa: BLE001 -- a mutant may raise; the probed one the same
            out.append(type(e).__name__)
    return out


MUTANTS = mutants_of_source("snippet.py", SOURCE)


def test_the_snippet_has_mutants_of_every_operator() -> None:
    assert {m.operator for m in MUTANTS} == set(OPERATORS)


@pytest.mark.parametrize("m", MUTANTS, ids=lambda m: f"{m.operator}-{m.line}-{m.index}")
def test_a_probed_mutant_is_the_mutant_plus_one_probe_and_computes_the_same(m) -> None:
    assert m.probed.count("\n") == m.source.count("\n")  # same lines: tracebacks stay true
    assert _same_as_mutant(m.probed, m.source)
    probe = Probe()
    assert _calls(m.probed, probe) == _calls(m.source)


def test_a_probe_spliced_around_the_unmutated_text_is_caught() -> None:
    """Must-fail twin of the check above: a probe that lost the change (spliced into the
    original text) is no longer the mutant, and the check says so."""
    m = next(m for m in MUTANTS if m.operator == "cmp-negate")
    lost = m.probed.replace(m.what.split("`")[3], m.what.split("`")[1], 1)
    assert lost != m.probed and not _same_as_mutant(lost, m.source)


def test_a_probe_that_changed_a_value_is_caught() -> None:
    """Must-fail twin of the behaviour check: `and` in place of the probe's `or` (the probe
    returns None) makes the expression None, and the calls differ."""
    m = next(m for m in MUTANTS if m.operator == "return-value" and "a == b" in m.what + m.source
             and m.line == 9)
    broken = m.probed.replace(f"{PROBE}() or", f"{PROBE}() and")
    assert _calls(broken) != _calls(m.source)


def _one(operator: str, line: int) -> object:
    (m,) = [m for m in MUTANTS if m.operator == operator and m.line == line and m.index == 0]
    return m


def _hits(m, calls: list[tuple[str, tuple]]) -> int:
    probe = Probe()
    space: dict = {PROBE: probe}
    exec(compile(m.probed, "snippet.py", "exec", dont_inherit=True), space)
    for name, args in calls:
        space[name](*args)
    return probe.hits


def test_the_probe_counts_each_run_of_the_changed_code_and_no_branch_not_taken() -> None:
    inc = _one("off-by-one", 3)  # a = a + 1, inside `if a < b and b in xs`
    assert _hits(inc, [("f", (1, 2, [2]))]) == 1
    assert _hits(inc, [("f", (2, 1, [])), ("f", (1, 2, []))]) == 0  # the branch not taken
    dropped = _one("drop-stmt", 5)  # xs.append(n): every call of f
    assert _hits(dropped, [("f", (2, 1, []))] * 3) == 3
    # `b in xs` negated: short-circuited when a >= b, so not run, though its statement ran
    member = next(m for m in MUTANTS if m.operator == "cmp-negate" and m.line == 2
                  and "not in" in m.what)
    assert _hits(member, [("f", (2, 1, []))]) == 0
    assert _hits(member, [("f", (1, 2, []))]) == 1
    # a while's condition counts each evaluation: k <= 3 is evaluated 5 times
    loop = _one("cmp-boundary", 15)
    assert _hits(loop, [("g", (3,))]) == 5
    assert _hits(_one("negate-cond", 15), [("g", (3,))]) == 1


def _spread(mutants: list, most: int) -> list:
    """At most `most` of `mutants`, evenly spaced (every mutant of a module takes a minute on
    the loaded machine: HARNESS_PROBE_ALL=1 checks them all)."""
    if os.environ.get("HARNESS_PROBE_ALL") == "1" or len(mutants) <= most:
        return mutants
    return [mutants[i * len(mutants) // most] for i in range(most)]


def test_the_protocol_modules_mutants_compile_probed_as_themselves() -> None:
    """The real modules (f-strings, multi-line expressions, elif chains): each probed source
    compiles, keeps its lines, and is its mutant plus one probe; up to 8 of each operator of
    each module, every one of those that span several lines."""
    wrong = []
    for path in MODULES:
        every = mutants_of(ROOT, path)
        for operator in OPERATORS:
            mine = [m for m in every if m.operator == operator]
            several = [m for m in mine if m.probed.count("\n") and _multiline(m)]
            for m in {x.id: x for x in _spread(mine, 8) + several}.values():
                compile(m.probed, m.path, "exec", dont_inherit=True)
                if m.probed.count("\n") != m.source.count("\n") \
                        or not _same_as_mutant(m.probed, m.source):
                    wrong.append(m.id)
    assert wrong == []


def _multiline(m) -> bool:
    """Whether the probe's two ends fall on different lines."""
    lines = m.probed.splitlines()
    hit = [i for i, line in enumerate(lines) if PROBE in line][0]
    return lines[hit].count("(") - lines[hit].count(")") != \
        m.source.splitlines()[hit].count("(") - m.source.splitlines()[hit].count(")")


def test_the_text_spans_count_bytes_so_a_probe_after_non_ascii_text_lands_right() -> None:
    source = 'def f(a):\n    s = "é"\n    return a < 1\n'
    (m,) = [m for m in mutants_of_source("x.py", source) if m.operator == "cmp-boundary"]
    assert _Text(source).data != source  # bytes, not characters
    assert "return (" + PROBE + "() or (a <= 1))" in m.probed


# ---- end to end: `harness mutate`, two mutants, the safe cell, seeds 1-2 ------------------

def _campaign(tmp_path: Path) -> Path:
    """The validation campaign with 10 s runs (the cell's config otherwise as it is)."""
    text = (ROOT / "campaigns" / "validation.toml").read_text()
    short = re.sub(r"^time_limit = \d+$", "time_limit = 10", text, count=1, flags=re.M)
    assert short != text
    path = tmp_path / "validation-10s.toml"
    path.write_text(short)
    return path


def test_harness_mutate_records_whether_each_mutants_changed_code_ran(tmp_path: Path) -> None:
    results = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "mutate", "--campaign", str(_campaign(tmp_path)),
         "--cell", "safe", "--mutant", HWM_MAX, "--mutant", PRE_KIP966_FENCED_LEADER_KEPT,
         "--seeds", "1-2", "--block", "2", "--jobs", "2", "--unit-tests", "none"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_RESULTS": str(results)},
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (out,) = (results / "mutation").iterdir()
    saved = {r["id"]: r for r in json.loads((out / "mutants.json").read_text())["results"]}
    hwm, fence = saved[HWM_MAX], saved[PRE_KIP966_FENCED_LEADER_KEPT]
    # the acks=all mutant's change runs in the safe cell, and it is killed at seed 1
    assert (hwm["outcome"], hwm["seed"], hwm["seeds_reached"]) == ("killed", 1, 1)
    assert hwm["reached"] > 0
    # the pre-KIP-966 branch is never taken with ELR on: imported, never run, a survivor
    assert (fence["outcome"], fence["loaded"], fence["reached"], fence["seeds_run"]) == \
        ("survived", True, 0, 2)
    assert saved["(unmutated)"]["reached"] is None
    lines = [line for line in proc.stderr.splitlines() if line.startswith("[mutate]")]
    assert any(HWM_MAX in line and f"ran {hwm['reached']} times, in 1 of 1 seeds" in line
               for line in lines), lines
    assert any(PRE_KIP966_FENCED_LEADER_KEPT in line and "never ran in 2 seeds" in line
               for line in lines), lines
    page = (out / "index.html").read_text()
    gap = page.split("Survivors whose changed code never ran (1)")[1]
    assert PRE_KIP966_FENCED_LEADER_KEPT in gap
    assert "| survivors whose change never ran |" in proc.stdout


# ---- the count through the parent: blocks folded, older results, the report --------------

def _row(seed: int, reached: int | None) -> dict:
    row = {"seed": seed, "valid": True, "acked": 500, "anomalies": {}, "error": None, "lost": 0}
    return row if reached is None else {**row, "reached": reached}


def test_each_seeds_count_is_added_and_a_row_without_one_leaves_it_unrecorded() -> None:
    from harness.mutate.score import Result, _record, ran

    base = {s: _row(s, None) for s in (1, 2, 3)}
    counted, older = Result("x.py:f:drop-stmt:0:0"), Result("x.py:f:drop-stmt:1:0")
    _record(counted, {"rows": [_row(1, 4), _row(2, 0)], "cell": "safe", "wall_s": 1.0}, base)
    _record(counted, {"rows": [_row(3, 3)], "cell": "safe", "wall_s": 1.0}, base)
    _record(older, {"rows": [_row(1, None)], "cell": "safe", "wall_s": 1.0}, base)
    assert (counted.reached, counted.seeds_reached, counted.seeds_run) == (7, 2, 3)
    assert ran(counted) == "its changed code ran 7 times, in 2 of 3 seeds"
    assert (older.reached, ran(older)) == (None, "")


def test_a_campaign_saved_before_the_probe_is_rescored_with_its_survivors_apart(
        tmp_path: Path) -> None:
    """progress.jsonl lines without the count still load; the report puts their survivors
    under "not recorded", apart from a survivor whose change never ran (a coverage gap)."""
    from dataclasses import asdict

    from harness.commands.mutate import _saved
    from harness.mutate import page
    from harness.mutate.mutants import mutant
    from harness.mutate.score import Result

    gap = Result(PRE_KIP966_FENCED_LEADER_KEPT, outcome="survived", seeds_run=2, reached=0,
                 seeds_reached=0)
    old = {k: v for k, v in asdict(Result(HWM_MAX, outcome="survived", seeds_run=2)).items()
           if k not in ("reached", "seeds_reached")}
    (tmp_path / "progress.jsonl").write_text(json.dumps(old) + "\n"
                                             + json.dumps(asdict(gap)) + "\n")
    results = {r["id"]: Result(**r) for r in _saved(tmp_path)["results"]}
    assert results[HWM_MAX].reached is None
    mutants = {i: mutant(ROOT, i) for i in results}
    html = page.write(tmp_path, results, mutants, {}, {}).read_text()
    never = html.split("Survivors whose changed code never ran (1)")[1].split("<h2>")[0]
    unknown = html.split("Survivors not recorded whether their changed code ran (1)")[1]
    assert PRE_KIP966_FENCED_LEADER_KEPT in never and HWM_MAX not in never
    assert HWM_MAX in unknown.split("<h2>")[0]
    total = page.score_table(results, {})[-1]
    assert total["survivors whose change never ran"] == 1
