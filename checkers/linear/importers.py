"""Reading histories from files: our JSONL, and Jepsen's EDN and text forms.

Jepsen's ``history.edn`` holds one op map per line (``{:type :invoke, :f :write, :value 3,
:process 0, :time 123, :index 0}``), sometimes as a record (``#jepsen.history.Op{...}``) or
all inside one vector. ``history.txt`` is tab-separated ``process type f value`` with each
field in EDN. Both become plain events: keywords turn into strings (``:ok`` -> ``"ok"``) and
vectors into lists, so they pair exactly as JSONL events do. Independent (kv) values such as
``[:x 3]`` stay pairs; the kv model takes the key from them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkers.linear import edn
from checkers.linear.history import HistoryError, read_jsonl
from control.files import check_regular_file

Events = list[tuple[str, dict[str, Any]]]


def plain(value: Any) -> Any:
    """EDN data as plain JSON-like data: keywords and symbols become strings."""
    if isinstance(value, edn.Keyword | edn.Symbol):
        return str.__str__(value)
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    if isinstance(value, frozenset):
        return frozenset(plain(v) for v in value)
    return value


def read_edn(path: str | Path) -> Events:
    """Read a Jepsen history.edn: op maps one after another, or one vector of them."""
    try:
        values = list(edn.iter_values(check_regular_file(path).read_text(encoding="utf-8")))
    except edn.EdnError as e:
        raise HistoryError(f"{path}:{e.line}: {e.reason}") from None
    if len(values) == 1 and isinstance(values[0][1], tuple):
        line, ops = values[0]
        values = [(line, op) for op in ops]
    events = []
    for line, value in values:
        where = f"{path}:{line}"
        if not isinstance(value, dict):
            raise HistoryError(f"{where}: expected an op map, got {edn.dumps(value)[:80]}")
        events.append((where, plain(value)))
    return events


def read_text(path: str | Path) -> Events:
    """Read a Jepsen history.txt: ``process<TAB>type<TAB>f<TAB>value[<TAB>error]``.

    A .txt file whose first op is an EDN map (``{:process 0, :type :invoke, ...}``, as in
    Porcupine's test_data/kv corpus) is read as EDN instead."""
    with open(check_regular_file(path), encoding="utf-8") as fh:
        first = next((line.lstrip() for line in fh if line.strip()), "")
    if first.startswith(("{", "#", "[")):
        return read_edn(path)
    events = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 4:
                raise HistoryError(f"{where}: expected process, type, f and value separated by "
                                   f"tabs, got {len(fields)} field(s)")
            try:
                process, kind, f, value, *rest = (plain(edn.loads(x)) for x in fields)
            except edn.EdnError as e:
                raise HistoryError(f"{where}: {e.reason}") from None
            event = {"process": process, "type": kind, "f": f, "value": value}
            if rest:
                event["error"] = rest[0] if len(rest) == 1 else rest
            events.append((where, event))
    return events


def read_events(path: str | Path) -> Events:
    """Read a history by its suffix: .jsonl/.json (ours), .edn or .txt (Jepsen)."""
    suffix = Path(path).suffix.lower()
    if suffix in (".jsonl", ".json"):
        return read_jsonl(path)
    if suffix == ".edn":
        return read_edn(path)
    if suffix == ".txt":
        return read_text(path)
    raise HistoryError(f"{path}: unknown history format {suffix!r} (expected .jsonl, .edn or .txt)")
