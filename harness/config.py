"""Test configuration: resolved from layers, later layers winning key by key, then typed.

1. the embedded default profile (harness/profiles/default.toml),
2. a TOML test file or a profile name (`--config FILE.toml` / `--config fast`),
3. `--set table.key=value` overrides, in command-line order,
4. the named flags `--nodes`, `--nemesis`, `--time-limit`, `--seed`.

The result is validated against SCHEMA; every error is a ConfigError naming the key, where it
was set (file and line, or the command-line item) and what was expected. typed() turns the
resolved dict into the frozen TestConfig a run carries; test.json records TestConfig.record()
(every setting, defaults included), which a reproduction validates again, so validate()
accepts it unchanged (and a stored config of any age, with keys left out).
"""

from __future__ import annotations

import copy
import difflib
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import date, datetime, time
from pathlib import Path
from typing import Any

from checkers.definitions import ANOMALIES
from checkers.invariants import INVARIANTS
from checkers.txn.analysis import NAMES_FOUND as TXN_ANOMALIES
from control import kafka_install
from control.inventory import InventoryError, load_inventory
from control.kafka import KafkaSettings, refusals
from nemesis.kinds import KNOWN_FAULTS, TARGET_MODES, all_settings, lookup, needs_toxiproxy
from nemesis.kinds.toxics import ToxicError, check_tables
from nemesis.schedule import ScheduleParams
from replication.config import ConfigError as NodeConfigError
from replication.config import NodeConfig
from workloads.kafka import WorkloadParams

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
DEFAULT_PROFILE = PROFILE_DIR / "default.toml"

# the checker's names, for checker.allow: the history's anomalies and the protocol
# invariants' (checkers/invariants.py)
KNOWN_ANOMALIES = tuple(dict.fromkeys(ANOMALIES + TXN_ANOMALIES
                                      + tuple(i.anomaly for i in INVARIANTS)))
HOST_PROVIDERS = ("netns", "ssh", "sim")  # sim: the deterministic simulator (harness simulate)
# Names under results/ that are not tests: the newest-run link and the campaigns folder.
RESERVED_NAMES = ("latest", "campaigns")
TOP = ""  # the table holding the top-level keys in SCHEMA
# [system] kind: which system runs on the hosts; every other [system] key is a node setting
SYSTEM_KINDS = ("embedded", "kafka")
KIND = "kind"

_INT32 = 2**31 - 1
_INT64 = 2**63 - 1
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


class ConfigError(ValueError):
    """A bad configuration; the message says which key, where it was set, what was expected."""

    def __init__(self, message: str, *, key: str | None = None, source: str | None = None,
                 line: int | None = None) -> None:
        where = f"{source} line {line}" if source and line else source
        super().__init__(f"{where}: {message}" if where else message)
        self.key, self.source, self.line = key, source, line


class _Invalid(Exception):
    """Raised by a field check; the caller adds the key and the origin."""


@dataclass(frozen=True)
class Field:
    expected: str
    check: Callable[[Any], Any]  # returns the normalised value or raises _Invalid


def _int(lo: int, hi: int) -> Field:
    def check(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise _Invalid
        return v
    return Field(f"an integer in {lo}..{hi}", check)


def _number(lo: float, hi: float, *, lo_ok: bool = False) -> Field:
    """A number > lo (or >= lo with lo_ok) and <= hi."""
    def check(v: Any) -> int | float:
        if isinstance(v, bool) or not isinstance(v, int | float) or not lo <= v <= hi:
            raise _Invalid
        if v == lo and not lo_ok:
            raise _Invalid
        return v
    return Field(f"a number {'>=' if lo_ok else '>'} {lo} and <= {hi}", check)


def _fraction() -> Field:
    def check(v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= 1:
            raise _Invalid
        return float(v)
    return Field("a number in 0..1", check)


def _bool() -> Field:
    def check(v: Any) -> bool:
        if not isinstance(v, bool):
            raise _Invalid
        return v
    return Field("true or false", check)


def _choice(*options: str) -> Field:
    def check(v: Any) -> str:
        if v not in options:
            raise _Invalid
        return v
    return Field("one of " + ", ".join(repr(o) for o in options), check)


def _pattern(regex: re.Pattern[str], what: str, reserved: Iterable[str] = ()) -> Field:
    banned = frozenset(reserved)

    def check(v: Any) -> str:
        if not isinstance(v, str) or not regex.fullmatch(v) or v in banned:
            raise _Invalid
        return v
    return Field(what, check)


def _nonempty_str() -> Field:
    def check(v: Any) -> str:
        if not isinstance(v, str) or not v.strip():
            raise _Invalid
        return v
    return Field("a non-empty string", check)


def _names(known: Sequence[str], what: str) -> Field:
    def check(v: Any) -> list[str]:
        if not isinstance(v, list) or any(x not in known for x in v) or len(set(v)) != len(v):
            raise _Invalid(_suggest_in_list(v, known))
        return list(v)
    return Field(f"a list of distinct {what} from: {', '.join(known)}", check)


def _acks() -> Field:
    aliases = {0: "0", 1: "1", -1: "all", "-1": "all", "0": "0", "1": "1", "all": "all"}

    def check(v: Any) -> str:
        if isinstance(v, bool) or v not in aliases:
            raise _Invalid
        return aliases[v]
    return Field('"0", "1" or "all" (0, 1 and -1 also accepted)', check)


def _weights() -> Field:
    def check(v: Any) -> dict[str, float]:
        if not isinstance(v, dict):
            raise _Invalid
        bad = [k for k in v if k not in KNOWN_FAULTS]
        if bad:
            raise _Invalid(_suggest_in_list(bad, KNOWN_FAULTS))
        out = {}
        for k, w in v.items():
            if isinstance(w, bool) or not isinstance(w, int | float) or w < 0:
                raise _Invalid(f"weight of {k!r} must be a number >= 0")
            out[k] = float(w)
        return out
    return Field(f"a table of fault kind -> weight >= 0, kinds from: {', '.join(KNOWN_FAULTS)}",
                 check)


def _toxics() -> Field:
    def check(v: Any) -> dict[str, dict[str, Any]]:
        try:
            return check_tables(v)
        except ToxicError as e:
            raise _Invalid(str(e)) from None
    return Field("a table of toxic fault -> its settings ([nemesis.toxics.<kind>] tables of "
                 "direction, toxicity and Toxiproxy's attributes; docs/toxiproxy.md)", check)


def _span(hi: float) -> Field:
    """[lo, hi]: two numbers with 0 <= lo <= hi <= `hi`, a range to draw from."""
    def check(v: Any) -> list[float]:
        if (not isinstance(v, list) or len(v) != 2
                or any(isinstance(x, bool) or not isinstance(x, int | float) for x in v)
                or not 0 <= v[0] <= v[1] <= hi):
            raise _Invalid
        return [float(v[0]), float(v[1])]
    return Field(f"[lo, hi], two numbers with 0 <= lo <= hi <= {hi}", check)


def _auto_bool() -> Field:
    def check(v: Any) -> bool | str:
        if v != "auto" and not isinstance(v, bool):
            raise _Invalid
        return v
    return Field('true, false or "auto"', check)


SCHEMA: dict[str, dict[str, Field]] = {
    TOP: {
        "name": _pattern(_NAME, "a name of letters, digits, '_', '.', '-' (not one of "
                         + ", ".join(RESERVED_NAMES) + ")", reserved=RESERVED_NAMES),
        "nodes": _int(2, 64),
        "time_limit": _number(0, 7 * 86400),
        "seed": _int(0, _INT64),
    },
    "topic": {
        "name": _pattern(_TOPIC, "a Kafka topic name ([A-Za-z0-9._-], up to 249)",
                         reserved=(".", "..")),
        "partitions": _int(1, 1000),
        "replication_factor": _int(1, 63),
    },
    "system": {
        KIND: _choice(*SYSTEM_KINDS),
        "min.insync.replicas": _int(1, 63),
        "eligible.leader.replicas.enable": _bool(),
        "unclean.leader.election.enable": _bool(),
        "unclean.recovery.strategy": _choice("none", "proactive", "balanced", "manual", "last-leader"),
        "unclean.recovery.timeout.ms": _int(1, _INT32),
        "replica.lag.time.max.ms": _int(1, _INT32),
        "broker.session.timeout.ms": _int(1, _INT32),
        "broker.heartbeat.interval.ms": _int(1, _INT32),
        "replica.fetch.wait.max.ms": _int(1, _INT32),
        "replica.fetch.max.records": _int(1, _INT32),
        "request.timeout.ms": _int(1, _INT32),
        "flush.messages": _int(1, _INT64),
        "flush.ms": _int(1, _INT64),
        "segment.bytes": _int(64, _INT32),
        "replica.truncation": _choice("leader-epoch", "high-watermark"),
        "unclean.shutdown.detection": _bool(),
        "isr.update": _choice("controller", "local-first"),
    },
    "workload": {
        "acks": _acks(),
        "rate": _number(0, 1_000_000),
        "producers": _int(1, 10_000),
        "consumers": _int(0, 1000),
        "request_timeout_ms": _int(1, _INT32),
        "final_read_timeout": _number(0, 86400),
        # Kafka's idempotent producer (enable.idempotence, with acks = "all"); the embedded
        # client has no idempotence and ignores it
        "idempotence": _bool(),
        # log: producers of single records and consumers (every system); txn: transactions
        # and read-committed consumers, Apache Kafka only (workloads/rdkafka_txn.py)
        "kind": _choice("log", "txn"),
        # txn only: read-uncommitted consumers beside the read-committed ones (docs/kafka.md)
        "uncommitted_consumers": _int(0, 1000),
        # txn only: consume-transform-produce transactions through a group (docs/kafka.md)
        "transformers": _int(0, 1000),
    },
    "nemesis": {
        "faults": _names(KNOWN_FAULTS, "fault kinds"),
        "interval": _number(0, 86400),
        "duration": _number(0, 86400),
        "targets": _choice(*TARGET_MODES),
        "shrink_first": _fraction(),
        "weights": _weights(),
        # each fault kind's own settings (FaultKind.settings), e.g. link_delay_ms
        **{k: _number(s.lo, s.hi, lo_ok=s.lo_ok) for k, s in all_settings().items()},
        "toxics": _toxics(),
    },
    "checker": {
        "allow": _names(KNOWN_ANOMALIES, "anomaly names"),
        "spark_master": _nonempty_str(),
        "spark_min_ops": _int(0, _INT64),
        # transactions: write-write dependencies from offsets (Jepsen's :ww-deps; checkers/txn)
        "ww_deps": _bool(),
    },
    # Apache Kafka, when system.kind = "kafka" (docs/kafka.md)
    "kafka": {
        "version": _pattern(re.compile(r"[34]\.\d{1,2}\.\d{1,2}"),
                            "a Kafka release such as " + " or ".join(kafka_install.VERSIONS)),
        "heap_mb": _int(128, 65536),
        "controller_heap_mb": _int(128, 65536),
        "start_timeout_s": _int(10, 3600),
    },
    "hosts": {
        "provider": _choice(*HOST_PROVIDERS),
        "inventory": _nonempty_str(),
        # Toxiproxy beside every node: "auto" exactly when nemesis.faults lists a toxic kind
        "toxiproxy": _auto_bool(),
        # simulated hosts only: seconds from a node's start to its listening, drawn uniformly
        # from [lo, hi] (simulation/world.py DEFAULT_STARTUP_S; docs/simulation.md)
        "startup_s": _span(600),
    },
}
# Fields whose value is a table merged key by key across layers rather than replaced.
_MERGED = {("nemesis", "weights"), ("nemesis", "toxics")}
# Keys that may be left out of their table ([system] keys all may, see validate()); configs
# stored before a key existed leave it out.
_OPTIONAL = ({("hosts", "inventory"), ("hosts", "toxiproxy"), ("hosts", "startup_s"), ("nemesis", "toxics"),
              ("checker", "spark_min_ops"), ("checker", "ww_deps"), ("kafka", "heap_mb"),
              ("kafka", "controller_heap_mb"), ("kafka", "start_timeout_s"),
              ("workload", "idempotence"), ("workload", "kind"),
              ("workload", "uncommitted_consumers"), ("workload", "transformers")}
             | {("nemesis", k) for k in all_settings()})
# What a table missing altogether means: configs stored before [hosts] existed ran on netns.
_ABSENT_TABLES: dict[str, dict[str, Any]] = {"hosts": {"provider": "netns"},
                                              "kafka": {"version": kafka_install.DEFAULT_VERSION}}


@dataclass(frozen=True)
class _Origin:
    source: str
    line: int | None = None


Provenance = dict[str, _Origin]  # full dotted key -> where its current value came from


def full_key(table: str, key: str) -> str:
    return f"{table}.{key}" if table else key


# ---- public entry points -------------------------------------------------------------------

def load_config(path: str | Path | None = None, sets: Sequence[str] = (),
                overrides: Mapping[str, Any] | None = None,
                overrides_source: str = "command line") -> dict[str, Any]:
    """Resolve default profile <- `path` (file or profile name) <- `sets` <- `overrides`.

    `overrides` maps dotted keys to already-typed values, e.g. {"nodes": 3, "nemesis.faults":
    ["kill"]}; the CLI flags arrive this way, a campaign's matrix entries may too."""
    config: dict[str, Any] = {}
    prov: Provenance = {}
    _apply_file(config, prov, DEFAULT_PROFILE)
    if path is not None:
        _apply_file(config, prov, resolve_config_path(path))
    for item in sets:
        key, value = parse_set(item)
        _apply_layer(config, prov, _layer_from_dotted(key, value), _Origin(f"--set {item}"), {})
    for key, value in (overrides or {}).items():
        _apply_layer(config, prov, _layer_from_dotted(key, value),
                     _Origin(f"{overrides_source} ({key})"), {})
    return validate(config, prov)


def with_sets(config: Mapping[str, Any], sets: Sequence[str],
              source: str = "--set") -> dict[str, Any]:
    """with_values of `--set`-style items ("system.isr.update=controller"), read as the
    command line reads them (e.g. `harness shrink --against`: the same run with one switch
    back)."""
    return with_values(config, [parse_set(item) for item in sets],
                       f"{source} {' '.join(sets)}")


def with_values(config: Mapping[str, Any],
                values: Mapping[str, Any] | Sequence[tuple[str, Any]],
                source: str) -> dict[str, Any]:
    """A resolved config with dotted keys set to already-typed values ({"nemesis.faults":
    ["kill"]}, or (key, value) pairs applied in their order), validated again; `source` says
    in an error where they came from."""
    out = copy.deepcopy(dict(config))
    for key, value in values.items() if isinstance(values, Mapping) else values:
        _apply_layer(out, {}, _layer_from_dotted(key, value), _Origin(f"{source} ({key})"), {})
    return validate(out, source=source)


def from_args(args: Any) -> dict[str, Any]:
    """Resolve the config of `harness run` from its parsed argparse namespace."""
    flags: dict[str, Any] = {}
    if getattr(args, "nodes", None) is not None:
        flags["nodes"] = args.nodes
    if getattr(args, "nemesis", None) is not None:
        flags["nemesis.faults"] = parse_fault_list(args.nemesis)
    if getattr(args, "time_limit", None) is not None:
        flags["time_limit"] = args.time_limit
    if getattr(args, "seed", None) is not None:
        flags["seed"] = args.seed
    return load_config(getattr(args, "config", None), getattr(args, "set", None) or (), flags,
                       overrides_source="command-line flag")


def default_config() -> dict[str, Any]:
    return load_config()


def resolve_config_path(path: str | Path) -> Path:
    """A file path, or the name of a profile in harness/profiles (`fast` or `fast.toml`)."""
    p = Path(path)
    if p.is_file():
        return p
    profile = PROFILE_DIR / (p.name if p.suffix == ".toml" else f"{p.name}.toml")
    if p.parent == Path(".") and profile.is_file():
        return profile
    known = ", ".join(sorted(x.stem for x in PROFILE_DIR.glob("*.toml")))
    raise ConfigError(f"no such config file, and not a profile name (profiles: {known})",
                      source=str(path))


def parse_set(item: str) -> tuple[str, Any]:
    """`"system.min.insync.replicas=2"` -> ("system.min.insync.replicas", 2).

    The value is read as a TOML value when it is one (numbers, booleans, quoted strings,
    arrays, inline tables), otherwise kept as the literal string (`acks=all` -> "all")."""
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError("expected KEY=VALUE with a dotted KEY such as system.min.insync.replicas=2",
                          source=f"--set {item}")
    raw = raw.strip()
    try:
        parsed = tomllib.loads(f"v = {raw}")
    except tomllib.TOMLDecodeError:
        return key, raw
    if list(parsed) != ["v"]:  # a value with a newline smuggling in more keys is just text
        return key, raw
    value = parsed["v"]
    # Dates and times are TOML scalars, but no setting takes one: keep what the user typed.
    if isinstance(value, date | datetime | time):
        return key, raw
    return key, value


def parse_fault_list(text: str) -> list[str]:
    """`--nemesis kill,partition` -> ["kill", "partition"]; "none" or "" -> []."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    return [] if items == ["none"] else items


# ---- layers --------------------------------------------------------------------------------

def _apply_file(config: dict[str, Any], prov: Provenance, path: Path) -> None:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read: {e}", source=str(path)) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(e))
        line = int(m.group(1)) if m else None
        raise ConfigError(f"malformed TOML: {e}", source=str(path), line=line) from None
    _apply_layer(config, prov, data, _Origin(str(path)), _key_lines(text))


def _layer_from_dotted(key: str, value: Any) -> dict[str, Any]:
    """("system.flush.ms", 5) -> {"system": {"flush.ms": 5}}; ("nemesis.weights.kill", 2) ->
    {"nemesis": {"weights": {"kill": 2}}}. Kafka names in [system] keep their dots."""
    parts = key.split(".")
    if len(parts) > 1 and parts[0] == "system":
        return {"system": {".".join(parts[1:]): value}}
    layer: Any = value
    for part in reversed(parts):
        layer = {part: layer}
    return layer


def _apply_layer(config: dict[str, Any], prov: Provenance, data: Mapping[str, Any],
                 origin: _Origin, lines: Mapping[str, int]) -> None:
    for name, value in data.items():
        if name in SCHEMA[TOP]:
            config[name] = value
            prov[name] = _Origin(origin.source, lines.get(name))
        elif name in SCHEMA:
            if not isinstance(value, dict):
                raise ConfigError(f"{name}: expected a table of settings, got {value!r}",
                                  key=name, source=origin.source, line=lines.get(name))
            items = _flatten(value) if name == "system" else value
            for key, v in items.items():
                _set(config.setdefault(name, {}), prov, name, key, v, origin, lines)
        else:
            raise _unknown(name, origin, lines.get(name))


def _set(table: dict[str, Any], prov: Provenance, name: str, key: str, value: Any,
         origin: _Origin, lines: Mapping[str, int]) -> None:
    fk = full_key(name, key)
    if key not in SCHEMA[name]:
        raise _unknown(fk, origin, lines.get(fk))
    if (name, key) in _MERGED and isinstance(value, dict) and isinstance(table.get(key), dict):
        old = table[key]
        # two levels for [nemesis.toxics.<kind>]: `--set nemesis.toxics.bandwidth.rate=8`
        # keeps the direction a file gave bandwidth
        table[key] = {**old, **{k: {**old[k], **v} if isinstance(v, dict)
                                and isinstance(old.get(k), dict) else v
                                for k, v in value.items()}}
    else:
        table[key] = value
    prov[fk] = _Origin(origin.source, lines.get(fk))


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """TOML reads `min.insync.replicas = 2` as {"min": {"insync": {"replicas": 2}}}."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def _unknown(fk: str, origin: _Origin, line: int | None) -> ConfigError:
    known = [full_key(t, k) for t, fields in SCHEMA.items() for k in fields]
    tail = fk.split(".", 1)[-1]
    # A known key in the wrong table (`acks` under [system]) is the likeliest mistake.
    same_name = [k for k in known if k.endswith("." + tail) or k == tail]
    close = same_name or difflib.get_close_matches(fk, known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    tables = ", ".join(f"[{t}]" for t in SCHEMA if t)
    return ConfigError(f"unknown key {fk!r}{hint} (tables: {tables})",
                       key=fk, source=origin.source, line=line)


def _suggest_in_list(values: Any, known: Sequence[str]) -> str:
    if not isinstance(values, list):
        return ""
    for v in values:
        if v not in known:
            close = difflib.get_close_matches(str(v), known, n=1, cutoff=0.5)
            return f"unknown {v!r}" + (f"; did you mean {close[0]!r}?" if close else "")
    return "duplicates" if len(set(map(str, values))) != len(values) else ""


_KEY_LINE = re.compile(r"""\s*((?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*'))*)\s*=""")
_HEADER = re.compile(r"\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$")


def _key_parts(text: str) -> list[str]:
    parts = re.findall(r"""[A-Za-z0-9_-]+|"[^"]*"|'[^']*'""", text)
    return [p[1:-1] if p[:1] in "\"'" else p for p in parts]


def _key_lines(text: str) -> dict[str, int]:
    """Best-effort map of full dotted key -> line number, for error messages only."""
    out: dict[str, int] = {}
    table: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            table = _key_parts(header.group(1))
            out.setdefault(".".join(table), number)
            continue
        m = _KEY_LINE.match(line)
        if m:
            out.setdefault(".".join(table + _key_parts(m.group(1))), number)
    return out


# ---- validation ----------------------------------------------------------------------------

def validate(config: Mapping[str, Any], prov: Provenance | None = None, *,
             source: str = "config") -> dict[str, Any]:
    """Check every key, normalise values (acks -> str), check relations between keys.

    Returns a new dict in SCHEMA order; raises ConfigError on the first problem. Without
    `prov` (e.g. a config read back from test.json) errors name `source` as the origin."""
    prov = _everywhere(config, _Origin(source)) if prov is None else prov
    out: dict[str, Any] = {}
    for name in config:
        if name not in SCHEMA and name not in SCHEMA[TOP]:
            raise _unknown(name, prov.get(name, _Origin("config")), None)
    for key, field in SCHEMA[TOP].items():
        out[key] = _checked(key, config, field, prov, required=True)
    for table, fields in SCHEMA.items():
        if not table:
            continue
        given = config.get(table, _ABSENT_TABLES.get(table, {}))
        if not isinstance(given, Mapping):
            raise _bad(table, given, "a table of settings", prov)
        for key in given:
            if key not in fields:
                raise _unknown(full_key(table, key), prov.get(full_key(table, key),
                                                               _Origin("config")), None)
        out[table] = {key: _checked(full_key(table, key), given, field, prov,
                                    required=_required(table, key), local=key)
                      for key, field in fields.items() if key in given or _required(table, key)}
    _check_relations(out, prov)
    _check_hosts(out, prov)
    _check_kafka(out, prov)
    node_config(out["system"])  # the nodes' own rules, so a run never starts with settings they refuse
    return out


def _required(table: str, key: str) -> bool:
    # [system] keys are optional: a missing one takes the node's own default.
    return table != "system" and (table, key) not in _OPTIONAL


def _everywhere(config: Mapping[str, Any], origin: _Origin) -> Provenance:
    prov = {name: origin for name in config}
    for name, table in config.items():
        if name and name in SCHEMA and isinstance(table, Mapping):
            prov.update({full_key(name, key): origin for key in table})
    return prov


def _checked(fk: str, table: Mapping[str, Any], field: Field, prov: Provenance, *,
             required: bool, local: str | None = None) -> Any:
    key = local or fk
    if key not in table:
        if required:
            raise ConfigError(f"{fk}: missing; expected {field.expected}", key=fk,
                              source=_where(fk, prov).source)
        return None
    try:
        return field.check(table[key])
    except _Invalid as e:
        raise _bad(fk, table[key], field.expected, prov, str(e)) from None


def _bad(fk: str, value: Any, expected: str, prov: Provenance, detail: str = "") -> ConfigError:
    origin = _where(fk, prov)
    extra = f" ({detail})" if detail else ""
    return ConfigError(f"{fk}: expected {expected}, got {value!r}{extra}", key=fk,
                       source=origin.source, line=origin.line)


def _where(fk: str, prov: Provenance) -> _Origin:
    return prov.get(fk, _Origin("config"))


def _relation_error(fk: str, message: str, prov: Provenance) -> ConfigError:
    origin = _where(fk, prov)
    return ConfigError(f"{fk}: {message}", key=fk, source=origin.source, line=origin.line)


def _check_relations(c: Mapping[str, Any], prov: Provenance) -> None:
    n_brokers = c["nodes"] - 1
    rf = c["topic"]["replication_factor"]
    if rf > n_brokers:
        culprit = _later("topic.replication_factor", "nodes", prov)
        raise _relation_error(culprit, f"topic.replication_factor = {rf} needs at least "
                              f"{rf} brokers, but nodes = {c['nodes']} gives {n_brokers} "
                              "(n1 runs the controller)", prov)
    system = c["system"]
    misr = system.get("min.insync.replicas")
    if misr is not None and misr > rf:
        culprit = _later("system.min.insync.replicas", "topic.replication_factor", prov)
        raise _relation_error(culprit, f"min.insync.replicas = {misr} exceeds "
                              f"topic.replication_factor = {rf}", prov)
    beat, session = (system.get("broker.heartbeat.interval.ms"),
                     system.get("broker.session.timeout.ms"))
    if beat is not None and session is not None and beat >= session:
        culprit = _later("system.broker.heartbeat.interval.ms", "system.broker.session.timeout.ms",
                         prov)
        raise _relation_error(culprit, f"broker.heartbeat.interval.ms = {beat} must be less "
                              f"than broker.session.timeout.ms = {session}", prov)
    nemesis = c["nemesis"]
    if nemesis["faults"] and not any(nemesis["weights"].get(f, 1.0) > 0 for f in nemesis["faults"]):
        raise _relation_error("nemesis.weights", "every fault in nemesis.faults has weight 0",
                              prov)
    if "outage" in nemesis["faults"] and n_brokers < 2:
        raise _relation_error("nemesis.faults", "outage hits several brokers at once and "
                              f"needs nodes >= 3, got nodes = {c['nodes']}", prov)
    toxic = [f for f in nemesis["faults"] if lookup(f).family == "toxic"]
    if toxic and c["hosts"].get("toxiproxy") is False:
        culprit = _later("hosts.toxiproxy", "nemesis.faults", prov)
        raise _relation_error(culprit, f"{', '.join(toxic)} act through Toxiproxy, but "
                              "hosts.toxiproxy = false; set it to \"auto\" or true", prov)


def _check_hosts(c: dict[str, Any], prov: Provenance) -> None:
    """hosts.inventory becomes an absolute path (so test.json replays from anywhere); with
    the ssh provider it must load and list at least `nodes` hosts."""
    hosts = c["hosts"]
    if "inventory" in hosts:
        hosts["inventory"] = str(_inventory_path(hosts["inventory"], _where("hosts.inventory", prov)))
    if hosts["provider"] != "ssh":
        return
    if "inventory" not in hosts:
        raise _relation_error("hosts.provider", "the ssh provider needs hosts.inventory, the "
                              "path of an inventory TOML file (see docs/vms.md)", prov)
    try:
        entries = load_inventory(Path(hosts["inventory"]))
    except InventoryError as e:
        raise _relation_error("hosts.inventory", str(e), prov) from None
    if len(entries) < c["nodes"]:
        culprit = _later("hosts.inventory", "nodes", prov)
        raise _relation_error(culprit, f"nodes = {c['nodes']} needs as many hosts, but "
                              f"{hosts['inventory']} lists {len(entries)}", prov)
    try:  # every node of a run starts the same way, so the hosts used share one python
        # imported here: control.provider brings SSH and namespaces, which a simulated run
        # (possibly under PyPy, docs/simulation.md) neither needs nor has
        from control.provider import shared_value

        shared_value(Path(hosts["inventory"]), entries[:c["nodes"]], "python")
    except InventoryError as e:
        raise _relation_error("hosts.inventory", str(e), prov) from None


def _check_kafka(c: Mapping[str, Any], prov: Provenance) -> None:
    """What Apache Kafka cannot run: the embedded system's weakness switches, fault kinds that
    act on what only the embedded system has, hosts Kafka is not installed on."""
    if system_kind(c) != "kafka":
        return
    for reason in refusals(c["system"]):
        raise _relation_error("system.kind", reason, prov)
    for name in c["nemesis"]["faults"]:
        why = lookup(name).not_on_kafka
        if why:
            culprit = _later("system.kind", "nemesis.faults", prov)
            raise _relation_error(culprit, f"{name} cannot run with system.kind = \"kafka\": "
                                  f"{why}", prov)


def system_kind(config: Mapping[str, Any]) -> str:
    """"embedded" or "kafka": which system a validated config runs."""
    return config["system"].get(KIND, "embedded")


def node_settings(system: Mapping[str, Any]) -> dict[str, Any]:
    """A [system] table's node settings: everything but `kind`."""
    return {k: v for k, v in system.items() if k != KIND}


def _inventory_path(value: str, origin: _Origin) -> Path:
    """A relative path is relative to the TOML config file that set it, else to the cwd."""
    path = Path(value).expanduser()
    if path.is_absolute():
        return path
    source = Path(origin.source)
    base = source.parent if source.suffix == ".toml" and source.is_file() else Path.cwd()
    return (base / path).absolute()


def _later(a: str, b: str, prov: Provenance) -> str:
    """Of two related keys, blame the one set by the more specific layer (command line, then
    a test file, then the defaults), so the message points at what the user just changed."""
    def rank(fk: str) -> int:
        source = _where(fk, prov).source
        if source.startswith(("--set", "command")):
            return 2
        return 0 if source in ("config", str(DEFAULT_PROFILE)) else 1
    return b if rank(b) > rank(a) else a


# ---- typed sections ----------------------------------------------------------------------------
# validate() checks the nested dict a config file, the command line or a stored test.json
# gives; typed() turns it into these frozen sections, the one form a Test carries and hands
# to each layer. record() writes a section back in the dict shape validate() accepts: what
# test.json records (every setting, defaults included), so typed(record()) is the same test.


@dataclass(frozen=True)
class TopicSettings:
    name: str
    partitions: int
    replication_factor: int

    def record(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class WorkloadSettings:
    acks: str
    rate: float
    producers: int
    consumers: int
    request_timeout_ms: int
    final_read_timeout: float
    idempotence: bool = True
    kind: str = "log"
    uncommitted_consumers: int = 0
    transformers: int = 0

    def record(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class NemesisSettings:
    faults: tuple[str, ...]
    interval: float
    duration: float
    targets: str
    shrink_first: float
    weights: Mapping[str, float]
    link: Mapping[str, float]  # every kind's flat settings: link_delay_ms, clock_skew_ms, ...
    toxics: Mapping[str, Mapping[str, Any]]  # toxic fault kind -> its checked settings

    @property
    def settings(self) -> dict[str, Any]:
        """What the nemesis hands the fault kinds: link settings and the toxics' tables."""
        return {**self.link, "toxics": self.toxics}

    def record(self) -> dict[str, Any]:
        return {"faults": list(self.faults), "interval": self.interval, "duration": self.duration,
                "targets": self.targets, "shrink_first": self.shrink_first,
                "weights": dict(self.weights), **self.link,
                "toxics": {k: dict(v) for k, v in self.toxics.items()}}


@dataclass(frozen=True)
class CheckerSettings:
    allow: tuple[str, ...]
    spark_master: str | None
    spark_min_ops: int | None = None  # read by the checker from test.json (RunConfig)
    ww_deps: bool = False

    def record(self) -> dict[str, Any]:
        return _present({"allow": list(self.allow), "spark_master": self.spark_master,
                         "spark_min_ops": self.spark_min_ops, "ww_deps": self.ww_deps})


@dataclass(frozen=True)
class HostsSettings:
    provider: str
    inventory: str | None
    toxiproxy: bool  # "auto" resolved: Toxiproxy beside every node in this run
    startup_s: tuple[float, float] | None = None  # simulated hosts: a node's start-up delay
    toxiproxy_setting: bool | str = "auto"  # as given, so a record moved elsewhere re-resolves

    def record(self) -> dict[str, Any]:
        return _present({"provider": self.provider, "inventory": self.inventory,
                         "toxiproxy": self.toxiproxy_setting,
                         "startup_s": None if self.startup_s is None else list(self.startup_s)})

    def placement(self) -> dict[str, Any]:
        """The [hosts] table that puts another config on these hosts: the provider and its
        inventory. Toxiproxy is left to that config ("auto": its own faults decide)."""
        table: dict[str, Any] = {"provider": self.provider}
        if self.inventory is not None:
            table["inventory"] = self.inventory
        return table


@dataclass(frozen=True)
class TestConfig:
    __test__ = False  # not a pytest test class (tests import it by name)

    name: str
    nodes: int
    time_limit: float
    seed: int
    topic: TopicSettings
    system: NodeConfig  # the single source of node settings and their defaults
    node_settings: Mapping[str, Any]  # [system] but `kind`: what the nodes are started with
    system_kind: str  # "embedded" | "kafka"
    kafka: KafkaSettings  # used when system_kind is "kafka"
    workload: WorkloadSettings
    nemesis: NemesisSettings
    checker: CheckerSettings
    hosts: HostsSettings

    @property
    def brokers(self) -> int:
        """Every node but n1, which runs the controller."""
        return self.nodes - 1

    @property
    def schedule_params(self) -> ScheduleParams:
        """The nemesis schedule's parameters (nemesis/schedule.py)."""
        n = self.nemesis
        return ScheduleParams(
            seed=self.seed, faults=n.faults, time_limit=self.time_limit, interval=n.interval,
            duration=n.duration, partitions=self.topic.partitions, brokers=self.brokers,
            targets=n.targets, weights=dict(n.weights), shrink_first=n.shrink_first,
            # Followers leave the ISR after the lag time; allow for the leader's check period.
            shrink_wait=round(self.system.replica_lag_time_max_ms * 1.5 / 1000 + 1, 3))

    @classmethod
    def load(cls, record: Mapping[str, Any], source: str = "a config record") -> TestConfig:
        """record()'s inverse, validated: how a config crosses a process boundary (a search's
        worker, a Spark task, the PyPy child, a mutation child) or comes back from a file, so
        both sides hold the typed form and only this pair touches the dict."""
        return typed(validate(record, source=source))

    def record(self) -> dict[str, Any]:
        """The dict test.json records, in SCHEMA's order; validate() returns it unchanged."""
        return {"name": self.name, "nodes": self.nodes, "time_limit": self.time_limit,
                "seed": self.seed, "topic": self.topic.record(),
                "system": {KIND: self.system_kind, **self.node_settings},
                "workload": self.workload.record(), "nemesis": self.nemesis.record(),
                "checker": self.checker.record(), "kafka": asdict(self.kafka),
                "hosts": self.hosts.record()}

    @property
    def workload_params(self) -> WorkloadParams:
        """What the workload runs with (workloads/kafka.py), from [topic] and [workload]."""
        w = self.workload
        return WorkloadParams(topic=self.topic.name, partitions=self.topic.partitions,
                              acks=w.acks, rate=w.rate, producers=w.producers,
                              consumers=w.consumers, request_timeout_s=w.request_timeout_ms / 1000,
                              seed=self.seed)


def _present(table: Mapping[str, Any]) -> dict[str, Any]:
    """The table without its optional keys that were left out (None)."""
    return {k: v for k, v in table.items() if v is not None}


def uses_toxiproxy(config: Mapping[str, Any]) -> bool:
    """Whether a run of this validated config puts Toxiproxy beside every node: as
    hosts.toxiproxy says, and with "auto" (or left out) exactly when a toxic kind is listed,
    so runs without toxics keep their direct, one-hop connections."""
    setting = config["hosts"].get("toxiproxy", "auto")
    if isinstance(setting, bool):
        return setting
    return needs_toxiproxy(config["nemesis"]["faults"])


def require_toxiproxy(hosts: HostsSettings) -> None:
    """Refuse, before anything is touched, a run on these hosts, this machine's netns hosts,
    that needs Toxiproxy when toxiproxy-server is not installed (a machine without Go: make
    bootstrap skipped it). ToxiproxyError says how to install it (exit 3). An inventory's
    hosts name their own server (control.provider)."""
    if hosts.provider == "netns" and hosts.toxiproxy:
        # imported here: control.toxiproxy brings SSH (paramiko), which a simulated run, under
        # PyPy too (docs/simulation.md), neither needs nor has
        from control.toxiproxy import local_binary

        local_binary()


def node_config(system: Mapping[str, Any]) -> NodeConfig:
    """The nodes' settings of a [system] table, exactly as the nodes parse `--config K=V`."""
    try:
        return NodeConfig.from_settings(node_settings(system))
    except NodeConfigError as e:
        raise ConfigError(f"[system]: {e}") from None


def typed(config: Mapping[str, Any]) -> TestConfig:
    """The frozen, typed view of a validated config."""
    t, w, n, c, h = (config[k] for k in ("topic", "workload", "nemesis", "checker", "hosts"))
    return TestConfig(
        name=config["name"], nodes=int(config["nodes"]), time_limit=float(config["time_limit"]),
        seed=int(config["seed"]),
        topic=TopicSettings(t["name"], int(t["partitions"]), int(t["replication_factor"])),
        system=node_config(config["system"]), node_settings=node_settings(config["system"]),
        system_kind=system_kind(config),
        kafka=KafkaSettings(**config.get("kafka", _ABSENT_TABLES["kafka"])),
        workload=WorkloadSettings(str(w["acks"]), float(w["rate"]), int(w["producers"]),
                                  int(w["consumers"]), int(w["request_timeout_ms"]),
                                  float(w["final_read_timeout"]), bool(w.get("idempotence", True)),
                                  str(w.get("kind", "log")),
                                  int(w.get("uncommitted_consumers", 0)),
                                  int(w.get("transformers", 0))),
        nemesis=NemesisSettings(tuple(n["faults"]), float(n["interval"]), float(n["duration"]),
                                n["targets"], float(n["shrink_first"]), dict(n["weights"]),
                                {k: float(n.get(k, s.default)) for k, s in all_settings().items()},
                                check_tables(n.get("toxics", {}))),
        checker=CheckerSettings(tuple(c.get("allow", ())), c.get("spark_master"),
                                c.get("spark_min_ops"), bool(c.get("ww_deps", False))),
        hosts=HostsSettings(h["provider"], h.get("inventory"), uses_toxiproxy(config),
                            tuple(h["startup_s"]) if "startup_s" in h else None,
                            h.get("toxiproxy", "auto")),
    )
