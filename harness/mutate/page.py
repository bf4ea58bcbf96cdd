"""A mutation campaign's results: the score table per module, mutants.json and index.html.

Two scores per module. The **safety score**: safety kills / mutants counted, where a mutant is
counted unless it crashed at start (its module did not import), timed out or was killed for
liveness only (a mutant that stops serving was asked no safety question), and unless the hand
classification (campaigns/mutation-survivors.toml) of a survivor calls it "equivalent" (no
run could tell it from the original) or "safe" (it changes what the system does, but no
acknowledged record can be lost or misread through it: not safety-breaking, so not the
harness's to catch). The **score with loss-excess kills**: safety and loss-excess kills (a
seed that lost far more, per acknowledged send too, than the baseline's, with no new
kind: harness/mutate/oracle.py) / the safety score's count. The **score with liveness
kills**: all kills / the same count with the liveness kills put back. A survivor classified
"missed" is a safety-breaking change the harness did not catch. A killed mutant that a hand
verdict, given after reading the killing run, calls "equivalent" or "safe" leaves the count as
a classified survivor does, and its kill is counted as a **false alarm** of the oracle (a loss
the cell's faults allow, moved by a changed schedule onto a seed where the unmutated code lost
nothing: docs/mutation.md), shown in a column of their own so that no hand verdict hides one:
any loss-excess kill, and a safety kill only where the verdict says its run was read
(`false_alarm = true`). While only a sample of the survivors is classified, the
scores are lower bounds of the true ones."""

from __future__ import annotations

import html
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from control.files import write_json_atomic
from harness.mutate.mutants import Mutant
from harness.mutate.score import BASELINE, Result, ran

COLUMNS = ("module", "mutants", "crashed", "timed out", "safety kills", "loss-excess kills",
           "liveness kills", "killed only by unit tests", "survived both", "equivalent or safe",
           "missed", "false alarms", "survivors with unknown seeds",
           "survivors whose change never ran",
           "safety score",
           "score with loss-excess kills", "score with liveness kills")
NOT_COUNTED = ("equivalent", "safe")  # hand verdicts of survivors that are no safety bug


def classified(path: Path | None) -> dict[str, dict[str, str]]:
    """Hand classifications {mutant id: {"verdict": "equivalent"|"safe"|"missed", "why": ...,
    "before": ..., "after": ...}} (before and after: the line the mutant changes, stripped)."""
    if path is None or not path.is_file():
        return {}
    return tomllib.loads(path.read_text())


def _ratio(killed: int, counted: int) -> str:
    return f"{killed}/{counted} = {killed / counted:.0%}" if counted else "-"


def cleared(r: Result, hand: Mapping[str, Mapping]) -> bool:
    """A kill that a hand verdict calls a false alarm: a loss-excess kill of a mutant classified
    equivalent or safe, or a safety kill of one whose verdict says it read the kill
    (`false_alarm = true`): a verdict written while the mutant survived says nothing of a
    safety kill that came later."""
    note = hand.get(r.id, {})
    if r.outcome != "killed" or note.get("verdict") not in NOT_COUNTED:
        return False
    return r.kind == "loss-excess" or (r.kind == "safety" and note.get("false_alarm") is True)


def _module_row(module: str, results: Sequence[Result], hand: Mapping[str, Mapping]) -> dict:
    def count(outcome: str, kind: str | None = None) -> int:
        return sum(r.outcome == outcome and (kind is None or r.kind == kind) for r in results)

    survivors = [r for r in results if r.outcome == "survived"]
    verdicts = [hand.get(r.id, {}).get("verdict") for r in survivors]

    def alarms(kind: str) -> int:
        return sum(cleared(r, hand) and r.kind == kind for r in results)

    false_alarms = alarms("safety") + alarms("loss-excess")
    equivalent = sum(v in NOT_COUNTED for v in verdicts) + false_alarms
    unit_only = sum(r.unit == "killed" for r in survivors)
    both = sum(r.unit != "killed" and v not in NOT_COUNTED for r, v in zip(survivors, verdicts,
                                                                              strict=True))
    safety = count("killed", "safety") - alarms("safety")
    liveness = count("killed", "liveness")
    excess = count("killed", "loss-excess") - alarms("loss-excess")
    counted = len(results) - count("crashed") - count("timed-out") - equivalent
    return {"module": module, "mutants": len(results), "crashed": count("crashed"),
            "timed out": count("timed-out"), "safety kills": safety,
            "loss-excess kills": excess, "liveness kills": liveness,
            "killed only by unit tests": unit_only, "survived both": both,
            "equivalent or safe": equivalent, "missed": verdicts.count("missed"),
            "false alarms": false_alarms,
            "survivors with unknown seeds": sum(r.outcome == "survived" and r.unknown > 0
                                                for r in results),
            "survivors whose change never ran": sum(r.reached == 0 for r in survivors),
            "safety score": _ratio(safety, counted - liveness),
            "score with loss-excess kills": _ratio(safety + excess, counted - liveness),
            "score with liveness kills": _ratio(safety + excess + liveness, counted)}


def score_table(results: Mapping[str, Result], hand: Mapping[str, Mapping]) -> list[dict]:
    """One row per module, then the total (the baseline excluded)."""
    by_module: dict[str, list[Result]] = {}
    for r in results.values():
        if r.id != BASELINE:
            by_module.setdefault(r.id.split(":")[0], []).append(r)
    rows = [_module_row(m, rs, hand) for m, rs in sorted(by_module.items())]
    everything = [r for rs in by_module.values() for r in rs]
    return rows + [_module_row("all", everything, hand)]


def markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(row[c]) for c in COLUMNS) + " |" for row in rows]
    return "\n".join(lines)


def _table_html(rows: Sequence[Mapping[str, Any]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(r[c]))}</td>" for c in COLUMNS)
                   + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _mutant_html(r: Result, m: Mutant | None, hand: Mapping[str, Mapping]) -> str:
    note = hand.get(r.id)
    lacked = f" <i>The harness lacked:</i> {html.escape(note['lacked'])}" \
        if note and note.get("lacked") else ""
    said = (f"<p><b>{html.escape(note['verdict'])}</b>: {html.escape(note.get('why', ''))}"
            f"{lacked}</p>" if note else "<p>not classified</p>")
    unit = f"unit tests: {r.unit or 'not run'} {html.escape(', '.join(r.unit_failed[:3]))}"
    diff = html.escape(m.diff()) if m is not None else ""
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in r.notes)
    differs = f"<p>Seeds that differ from the baseline's:</p><ul>{notes}</ul>" if notes else ""
    where = f" (line {m.line})" if m else ""
    reach = f"; {ran(r)}" if ran(r) else ""
    return (f"<h3><code>{html.escape(r.id)}</code>{where}</h3>"
            f"<p>{html.escape(m.what if m else '')}; "
            f"{r.seeds_run} seeds, {r.unknown} of them unknown{_loaded(r)}{reach}; {unit}</p>"
            f"{said}{differs}<pre>{diff}</pre>")


# The survivors by whether their changed code ran: (title, which, what it means)
_SURVIVOR_GROUPS = (
    ("whose changed code ran", lambda r: bool(r.reached),
     "Seeds ran the change and saw no difference: equivalent, safe, or missed by the "
     "harness (the hand classification says which)."),
    ("whose changed code never ran", lambda r: r.reached == 0,
     "No seed ran the change, so none could tell it from the original: a gap in the cells' "
     "coverage (a workload, fault or setting that reaches the code), not an equivalent "
     "mutant."),
    ("not recorded whether their changed code ran", lambda r: r.reached is None,
     "From a campaign before the probe."),
)


def _survivors_html(survivors: Sequence[Result], mutants: Mapping[str, Mutant],
                    hand: Mapping[str, Mapping]) -> str:
    """The survivors, those whose change ran apart from those whose change no seed ran."""
    out = f"<h2>Survivors ({len(survivors)})</h2>"
    for title, which, meaning in _SURVIVOR_GROUPS:
        group = [r for r in survivors if which(r)]
        if group:
            out += (f"<h2>Survivors {title} ({len(group)})</h2><p>{html.escape(meaning)}</p>"
                    + "".join(_mutant_html(r, mutants.get(r.id), hand) for r in group))
    return out


def _loaded(r: Result) -> str:
    return ", the simulation never imported its module" if r.loaded is False else ""


def _killed_html(results: Sequence[Result]) -> str:
    rows = "".join(f"<tr><td><code>{html.escape(r.id)}</code></td><td>{r.kind}</td>"
                   f"<td>{html.escape(r.cell or '')}</td><td>{r.seed}</td><td>{r.wall_s:.1f}</td>"
                   f"<td>{'-' if r.reached is None else r.reached}</td>"
                   f"<td>{html.escape(', '.join(r.by))}</td></tr>" for r in results)
    return ("<table><tr><th>mutant</th><th>kill</th><th>cell</th><th>seed</th><th>wall s</th>"
            "<th>changed code ran (times)</th>"
            f"<th>what the baseline's same seed lacked (or lost less of)</th></tr>{rows}</table>")


def write(out: Path, results: Mapping[str, Result], mutants: Mapping[str, Mutant],
          hand: Mapping[str, Mapping], meta: Mapping[str, Any]) -> Path:
    """mutants.json (every result, the meta data) and index.html in `out`; the page's path."""
    rows = score_table(results, hand)
    write_json_atomic(out / "mutants.json", {
        **meta, "scores": rows, "results": [asdict(r) for r in results.values()],
        "diffs": {i: m.diff() for i, m in mutants.items()}})
    survivors = [r for r in results.values() if r.outcome == "survived" and r.id != BASELINE]
    killed = [r for r in results.values() if r.outcome == "killed"]
    false_alarms = [r for r in killed if cleared(r, hand)]
    facts = "".join(f"<li>{html.escape(str(k))}: {html.escape(str(v))}</li>"
                    for k, v in meta.items())
    page = (f"<!doctype html><meta charset=utf-8><title>mutation campaign</title>"
            f"<style>{_CSS}</style><h1>Mutation campaign</h1><ul>{facts}</ul>"
            f"<h2>Score per module</h2>{_table_html(rows)}"
            + _survivors_html(survivors, mutants, hand)
            + f"<h2>False alarms: kills classified by hand as no safety change "
              f"({len(false_alarms)})</h2>"
            + "".join(_mutant_html(r, mutants.get(r.id), hand) for r in false_alarms)
            + f"<h2>Killed ({len(killed)})</h2>{_killed_html(killed)}"
            + _baseline_html(results.get(BASELINE)))
    path = out / "index.html"
    path.write_text(page)
    return path


def _baseline_html(base: Result | None) -> str:
    """The unmutated code's invalid seeds: what a lossy cell loses without any mutant."""
    if base is None:
        return ""
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in base.notes) or "<li>none</li>"
    return (f"<h2>The baseline (unmutated code)</h2><p>{base.outcome}, {base.seeds_run} seeds, "
            f"{base.unknown} unknown. Its invalid seeds (a mutant is killed only by what its "
            f"same seed adds to these, or by losing far more):</p><ul>{notes}</ul>")


_CSS = ("body{font-family:sans-serif;margin:2em;max-width:75em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}"
        "pre{background:#f6f6f6;padding:.5em;overflow-x:auto}")
