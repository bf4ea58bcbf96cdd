"""The docs the repo owns, held to the code they describe.

- harness/profiles/default.toml lists every key of the config schema (a commented-out line
  counts: it documents a key whose default is "unset").
- docs/formats.md lists exactly the event kinds and the `reason`s the nodes emit.
- docs/nemesis.md lists every registered fault kind, and the module that holds it.

The nodes emit kinds and reasons as string literals, so they are read out of replication/'s
source with ast. The test also asserts how a reason reaches its event (through `_fence`,
`Change` and `_truncate`), so a refactor that moves them fails here loudly instead of leaving
an empty set that passes. Pure and fast: no node, no host, no Spark."""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from harness.config import SCHEMA, TOP
from nemesis.kinds import KNOWN_FAULTS, all_kinds
from nemesis.kinds.toxics import TOXICS as TOXIC_TABLES
from nemesis.kinds.toxics import defaults

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "harness" / "profiles" / "default.toml"
FORMATS = ROOT / "docs" / "formats.md"
NEMESIS = ROOT / "docs" / "nemesis.md"
REPLICATION = ROOT / "replication"
WEIGHTS = "nemesis.weights"  # a table of fault kind -> weight, not of schema keys
TOXICS = "nemesis.toxics"  # [nemesis.toxics.<kind>] tables: one toxic fault's settings each


# ---- harness/profiles/default.toml ---------------------------------------------------------------


def _flat(table: str, data: Mapping[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """(table, key, value) of parsed TOML; [system] keys are Kafka names, dots and all."""
    for key, value in data.items():
        if isinstance(value, dict) and table == "system":
            for sub, v in _flat_dotted(key, value):
                yield table, sub, v
        elif isinstance(value, dict) and table != WEIGHTS and not table.startswith(TOXICS):
            if f"{table}.{key}" == TOXICS:  # tomllib's view: one key, nemesis.toxics
                yield "nemesis", "toxics", value
                continue
            yield from _flat(f"{table}.{key}" if table else key, value)
        else:
            yield table, key, value


def _flat_dotted(prefix: str, data: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    for key, value in data.items():
        if isinstance(value, dict):
            yield from _flat_dotted(f"{prefix}.{key}", value)
        else:
            yield f"{prefix}.{key}", value


def _profile_lines(text: str) -> tuple[dict[tuple[str, str], Any], dict[tuple[str, str], Any]]:
    """({(table, key): value} set, {(table, key): value} commented out) of a profile, line by
    line. A comment line counts when what follows its `#` is one TOML assignment."""
    active: dict[tuple[str, str], Any] = {}
    commented: dict[tuple[str, str], Any] = {}
    table = TOP
    for line in text.splitlines():
        stripped = line.strip()
        header = re.fullmatch(r"\[\s*([^\[\]]+?)\s*\]\s*(#.*)?", stripped)
        if header:
            table = header.group(1)
            parent, _, field = table.rpartition(".")
            if parent in SCHEMA and field in SCHEMA[parent]:  # [nemesis.weights] lists weights
                active[(parent, field)] = {}
            if parent == TOXICS:  # [nemesis.toxics.bandwidth]: part of the nemesis.toxics key
                active[("nemesis", "toxics")] = {}
            continue
        is_comment = stripped.startswith("#")
        body = stripped.lstrip("#").strip() if is_comment else stripped
        try:
            parsed = tomllib.loads(body)
        except tomllib.TOMLDecodeError:
            assert is_comment, f"{PROFILE.name}: cannot read line {line!r} on its own"
            continue  # prose
        for t, key, value in _flat(table, parsed):
            (commented if is_comment else active)[(t, key)] = value
    return active, commented


def test_default_profile_lists_every_schema_key() -> None:
    text = PROFILE.read_text(encoding="utf-8")
    active, commented = _profile_lines(text)
    # The line reader must see everything tomllib sees, or the checks below mean nothing.
    parsed = {(t, k) for t, k, _ in _flat(TOP, tomllib.loads(text))}
    assert parsed <= set(active), "the line reader misses keys tomllib reads in default.toml: " \
                                  f"{sorted(parsed - set(active))}"

    listed = set(active) | set(commented)
    schema = {(table, key) for table, fields in SCHEMA.items() for key in fields}
    missing = sorted(full for full in schema - listed)
    assert not missing, f"{PROFILE.name} does not list {missing}: add each (commented out " \
                        "when its default is unset) with a one-line comment"
    unknown = sorted(k for k in listed - schema
                     if k[0] != WEIGHTS and not k[0].startswith(TOXICS + "."))
    assert not unknown, f"{PROFILE.name} lists keys the schema does not know: {unknown}"
    both = sorted(set(active) & set(commented))
    assert not both, f"{PROFILE.name} both sets and comments out {both}"


def test_default_profile_commented_examples_are_valid_values() -> None:
    _, commented = _profile_lines(PROFILE.read_text(encoding="utf-8"))
    for (table, key), value in commented.items():
        if table != WEIGHTS and not table.startswith(TOXICS + "."):
            SCHEMA[table][key].check(value)  # raises on a value the schema would refuse


def test_default_profile_gives_every_toxic_kind_its_full_table() -> None:
    active, _ = _profile_lines(PROFILE.read_text(encoding="utf-8"))
    listed: dict[str, set[str]] = {}
    for table, key in active:
        if table.startswith(TOXICS + "."):
            listed.setdefault(table[len(TOXICS) + 1:], set()).add(key)
    expected = {kind: set(defaults(kind)) for kind in TOXIC_TABLES}
    assert listed == expected, f"[{TOXICS}.<kind>] tables should list every setting of every " \
                               "toxic kind"


def test_default_profile_weighs_every_fault_kind() -> None:
    active, _ = _profile_lines(PROFILE.read_text(encoding="utf-8"))
    weighed = {key for table, key in active if table == WEIGHTS}
    assert weighed == set(KNOWN_FAULTS), f"[{WEIGHTS}] should list every fault kind: " \
                                         f"missing {sorted(set(KNOWN_FAULTS) - weighed)}"


# ---- docs/formats.md: event kinds and reasons ----------------------------------------------------


def _tree(name: str) -> ast.Module:
    path = REPLICATION / name
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _callee(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _callee(n) == name]


def _function(tree: ast.AST, name: str) -> ast.FunctionDef:
    found = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
    assert len(found) == 1, f"expected one function {name!r} in replication/, found {len(found)}"
    return found[0]


def _literal_pattern(node: ast.expr, where: str) -> str:
    """A regex for a reason: a string literal exactly, an f-string with each field a word."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.escape(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(re.escape(p.value) if isinstance(p, ast.Constant) else "[a-z0-9-]+"
                       for p in node.values)
    raise AssertionError(f"{where}: a reason that is not a string literal "
                         f"({ast.unparse(node)}); teach this test where it comes from")


def _arg(call: ast.Call, index: int, keyword: str) -> ast.expr:
    if len(call.args) > index:
        return call.args[index]
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    raise AssertionError(f"call {ast.unparse(call)} passes no {keyword}")


def _event_fields(call: ast.Call) -> set[str]:
    """The field names an `Event(kind, {...})` or `_ev(kind, **fields)` call writes."""
    names = {kw.arg for kw in call.keywords if kw.arg}
    for arg in call.args[1:]:
        if isinstance(arg, ast.Dict):
            names |= {k.value for k in arg.keys if isinstance(k, ast.Constant)}
    return names


def _emits(function: ast.FunctionDef, kind: str, field: str, value: str) -> bool:
    """Whether `function` emits event `kind` with `field` set to the expression `value`."""
    for call in _calls(function, "Event") + _calls(function, "_ev"):
        if not (call.args and isinstance(call.args[0], ast.Constant) and call.args[0].value == kind):
            continue
        for kw in call.keywords:
            if kw.arg == field and ast.unparse(kw.value) == value:
                return True
        for arg in call.args[1:]:
            if isinstance(arg, ast.Dict):
                for k, v in zip(arg.keys, arg.values, strict=True):
                    if isinstance(k, ast.Constant) and k.value == field and ast.unparse(v) == value:
                        return True
    return False


def _strings(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)}


def _recovery_reasons(segment_log: ast.Module) -> set[str]:
    """The reasons a segment log's recovery gives: what `_break_reason` returns, and what
    `_recover` assigns to `reason` itself, handed on in its RecoveryInfo."""
    recover = _function(segment_log, "_recover")
    assert any(isinstance(a, ast.Name) and a.id == "reason"
               for call in _calls(recover, "RecoveryInfo") for a in call.args), \
        "segment_log._recover no longer passes `reason` to RecoveryInfo: follow the code"
    found: set[str] = set()
    for node in ast.walk(_function(segment_log, "_break_reason")):
        if isinstance(node, ast.Return) and node.value is not None:
            found |= _strings(node.value)
    for node in ast.walk(recover):
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "reason" for t in targets):
                found |= _strings(node.value)
    return found


def _code_reasons() -> dict[str, set[str]]:
    """Event kind -> regexes of the reasons replication/ can give it."""
    controller, metadata, partition, driver, segment_log = (
        _tree(n) for n in ("controller.py", "metadata.py", "partition.py", "driver.py",
                           "segment_log.py"))
    # How each reason reaches its event; if one of these fails, the code moved: follow it.
    assert _emits(_function(controller, "_fence"), "broker-fenced", "reason", "reason")
    assert _emits(_function(controller, "_set_partition"), "partition-change", "reason",
                  "change.reason")
    assert _emits(_function(partition, "_truncate"), "truncate", "reason", "reason")
    assert _emits(_function(driver, "_open_log"), "log-recovery", "reason", "info.reason")
    reasons: dict[str, set[str]] = {"broker-fenced": set(), "partition-change": set(),
                                    "truncate": set(), "log-recovery": set()}
    reasons["log-recovery"] = {re.escape(r) for r in _recovery_reasons(segment_log)}
    for call in _calls(controller, "_fence"):
        reasons["broker-fenced"].add(_literal_pattern(_arg(call, 1, "reason"), "controller._fence"))
    for tree, name in ((controller, "controller"), (metadata, "metadata")):
        for call in _calls(tree, "Change"):
            reasons["partition-change"].add(_literal_pattern(_arg(call, 1, "reason"),
                                                             f"{name}.Change"))
    for call in _calls(partition, "_truncate"):
        reasons["truncate"].add(_literal_pattern(_arg(call, 1, "reason"), "partition._truncate"))
    for kind, found in reasons.items():
        assert found, f"found no reason for {kind} in replication/: has the code moved?"
    return reasons


def _code_events() -> tuple[set[str], set[str]]:
    """(every event kind emitted in replication/, the kinds emitted with a `reason`)."""
    kinds: set[str] = set()
    with_reason: set[str] = set()
    for path in sorted(REPLICATION.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for call in _calls(tree, "Event") + _calls(tree, "_ev"):
            first = call.args[0] if call.args else None
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                continue  # the `_ev(kind, ...)` helper itself; its callers are counted
            kinds.add(first.value)
            if "reason" in _event_fields(call):
                with_reason.add(first.value)
    assert kinds, "found no Event(...) in replication/: has the code moved?"
    return kinds, with_reason


def _table_after(text: str, heading: str, nth: int = 0) -> list[list[str]]:
    """The body rows (cells stripped) of the `nth` Markdown table of the section `heading`."""
    lines = text.splitlines()
    assert heading in lines, f"no heading {heading!r}"
    tables: list[list[list[str]]] = []
    rows: list[list[str]] = []
    for line in [*lines[lines.index(heading) + 1:], ""]:
        if line.startswith("#"):
            break
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            tables.append(rows)
            rows = []
    if rows:
        tables.append(rows)
    assert len(tables) > nth and len(tables[nth]) > 2, \
        f"no table {nth} under {heading!r}"
    return tables[nth][2:]  # past the header and the |---| line


def _ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def test_formats_md_lists_exactly_the_event_kinds_emitted() -> None:
    text = FORMATS.read_text(encoding="utf-8")
    # The section's first table is the fields of every event; the second, the kinds.
    documented = {k for row in _table_after(text, "## Node events (`events.jsonl`)", nth=1)
                  for k in _ticked(row[0])}
    emitted, _ = _code_events()
    assert documented == emitted, (
        f"docs/formats.md lists kinds never emitted: {sorted(documented - emitted)}; "
        f"emitted but not listed: {sorted(emitted - documented)}")


def test_formats_md_reason_table_matches_the_code() -> None:
    rows = _table_after(FORMATS.read_text(encoding="utf-8"), "### Reasons")
    documented: dict[str, set[str]] = {}
    for row in rows:
        (kind,), (reason,) = _ticked(row[0]), _ticked(row[1])
        documented.setdefault(kind, set()).add(reason)
    code = _code_reasons()
    _, with_reason = _code_events()
    assert set(code) == with_reason, (
        f"events with a reason in replication/: {sorted(with_reason)}; this test knows how the "
        f"reasons of {sorted(code)} are produced: teach it the others")
    assert set(documented) == set(code), f"reason tables for {sorted(documented)}, " \
                                         f"events with reasons {sorted(code)}"
    problems = reason_drift(code, documented)
    assert not problems, "docs/formats.md ### Reasons vs replication/:\n" + "\n".join(problems)


def reason_drift(code: Mapping[str, set[str]], documented: Mapping[str, set[str]]) -> list[str]:
    """Every documented reason must match an emitted pattern, and every pattern a reason."""
    problems = []
    for kind, patterns in sorted(code.items()):
        for reason in sorted(documented.get(kind, ())):
            if not any(re.fullmatch(p, reason) for p in patterns):
                problems.append(f"{kind}: {reason!r} is documented but never emitted")
        for pattern in sorted(patterns):
            if not any(re.fullmatch(pattern, r) for r in documented.get(kind, ())):
                problems.append(f"{kind}: emitted reason /{pattern}/ is not documented")
    return problems


def test_reason_drift_is_reported_both_ways() -> None:
    code = {"truncate": {"leader-epoch", "out-of-range"},
            "partition-change": {re.escape("create"), "unclean\\-recovery\\-[a-z0-9-]+"}}
    assert reason_drift(code, {"truncate": {"leader-epoch", "out-of-range"},
                               "partition-change": {"create", "unclean-recovery-balanced"}}) == []
    assert reason_drift(code, {"truncate": {"leader-epoch", "recovery"},
                               "partition-change": {"create"}}) == [
        "partition-change: emitted reason /unclean\\-recovery\\-[a-z0-9-]+/ is not documented",
        "truncate: 'recovery' is documented but never emitted",
        "truncate: emitted reason /out-of-range/ is not documented",
    ]


# ---- docs/nemesis.md: fault kinds ------------------------------------------------------------------


def test_nemesis_md_lists_every_fault_kind_and_its_module() -> None:
    text = NEMESIS.read_text(encoding="utf-8")
    listed = [_ticked(row[0])[0] for row in _table_after(text, "## Fault kinds")]
    assert sorted(listed) == sorted(KNOWN_FAULTS), (
        f"docs/nemesis.md lists {sorted(set(listed) - set(KNOWN_FAULTS))} that are not kinds "
        f"and misses {sorted(set(KNOWN_FAULTS) - set(listed))}")
    modules = {kind: row[0].strip("`").removesuffix(".py").replace("/", ".")
               for row in _table_after(text, "## How kinds are built")
               for kind in _ticked(row[1])}
    actual = {k.name: type(k).__module__ for k in all_kinds()}
    assert modules == actual, "docs/nemesis.md's module table and nemesis/kinds/ disagree"
