"""A campaign file (TOML): the matrix configs x nemesis mixes x seeds x time limits.

    name = "quick"                  # optional, default: the file's stem
    base = "fast"                   # optional: a profile name or a test file (relative to this file)
    seeds = [1, 2]
    time_limit = 30                 # seconds, or a list of them
    [set]                           # optional overrides for every cell, dotted keys as `--set`
    "workload.rate" = 200

    [[config]]
    name = "safe"
    expect = "no-loss"              # or "loss-allowed"
    set = { "workload.acks" = "all", "system.min.insync.replicas" = 2 }

    nemesis = ["kill"]              # optional: only these [[nemesis]] mixes (default: all)

    systems = ["sim", "embedded", "kafka:3.9.1", "kafka:4.2.1"]   # optional, top level

With `systems` (or `harness campaign --systems`), every cell runs once on each system with the
same seed, hence the same planned schedule, and its id ends in "@<system>"; the config is moved
onto each system by harness.system_spec (a weakness switch Kafka has no equivalent of is set
back to Kafka's behaviour there, and that cell expects no loss). docs/differential.md.

    [[nemesis]]
    name = "kill"
    faults = ["kill"]               # every other key is a [nemesis] setting: interval, duration...
    interval = 8

Every cell's configuration is resolved and validated by harness.config before anything runs,
so a typo fails the whole campaign up front, naming the file and the key.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from checkers.exitcodes import UserError
from harness.config import ConfigError, load_config, resolve_config_path
from harness.system_spec import SystemSpec, expectation_on, on_system, parse_systems

EXPECTATIONS = ("no-loss", "loss-allowed")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,39}")
_TOP_KEYS = {"name", "base", "seeds", "time_limit", "set", "config", "nemesis", "hosts",
             "systems"}
# Where cells run: real hosts (the config's [hosts]) or the deterministic simulator.
_HOSTS = ("netns", "ssh", "sim")
# More seeds than this in one range, or cells in one campaign, is a typo, not a plan (a million
# simulated seeds take days on one machine): refused at once, before anything is built from it.
MAX_SEEDS = 1_000_000
MAX_CELLS = 100_000
_SEED_MAX = 2**63 - 1  # a seed is an int64 (harness.config)


class CampaignError(ValueError):
    """A bad campaign file; the message names the file and the key."""


@dataclass(frozen=True)
class Cell:
    id: str  # "<config>/<nemesis>/s<seed>/t<time limit>"
    config: str
    nemesis: str
    seed: int
    time_limit: float
    expect: str
    resolved: dict[str, Any]  # the full test config handed to the runner
    system: str | None = None  # sim | embedded | kafka:X.Y.Z in a campaign across systems
    notes: tuple[str, ...] = ()  # what moving the config onto `system` changed


def flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"workload": {"acks": "1"}} -> {"workload.acks": "1"}: TOML nests unquoted dotted keys."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and name != "nemesis.weights":
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def load_spec(path: Path, seeds: str | None = None, only: list[str] | None = None,
              systems: Sequence[SystemSpec] | None = None) -> tuple[str, list[Cell]]:
    """Parse and validate `path`; returns the campaign name and its cells in run order.

    `seeds` ("A-B" or "1,2,5") replaces the file's top-level seeds (a config with seeds of
    its own keeps them); `only` keeps just the named configs. Both let one file serve a
    short nightly and a long measurement without a copy of its configs."""
    path = Path(path)
    data = _read(path)
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise CampaignError(f"{path}: unknown key(s) {unknown}; known: {sorted(_TOP_KEYS)}")
    name = _name(data.get("name", path.stem), path, "name")
    base = _base(data.get("base"), path)
    seeds = _seeds(data.get("seeds") if seeds is None else _seed_option(seeds), path)
    limits = _time_limits(data.get("time_limit"), path)
    common = _overrides(data.get("set", {}), path, "set")
    if "hosts" in data:
        common["hosts.provider"] = _hosts(data["hosts"], path, "hosts")
    if systems is None and "systems" in data:
        systems = _systems(data["systems"], path)
    configs = _only(_entries(data.get("config"), path, "config"), only, path)
    nemeses = _entries(data.get("nemesis"), path, "nemesis")
    planned = [_plan(config, nemeses, seeds, common, path) for config in configs]
    total = sum(len(mixes) * len(limits) * len(config_seeds) for _, _, config_seeds, mixes in planned)
    if total > MAX_CELLS:  # before any cell is built: each takes a config's validation
        raise CampaignError(f"{path}: more than {MAX_CELLS:,} cells ({total:,}): run fewer "
                            "seeds at a time")
    cells = []
    for config, sets, config_seeds, mixes in planned:
        expect = config["expect"]
        for nemesis in mixes:
            mix = {f"nemesis.{k}": v for k, v in nemesis.items() if k != "name"}
            for limit in limits:
                for seed in config_seeds:
                    cell_id = f"{config['name']}/{nemesis['name']}/s{seed}/t{limit:g}"
                    overrides = {**sets, **mix, "seed": seed, "time_limit": limit,
                                 "name": f"{name}-{config['name']}-{nemesis['name']}"}
                    resolved = load_config(base, overrides=overrides,
                                           overrides_source=f"{path} cell {cell_id}")
                    cell = Cell(cell_id, config["name"], nemesis["name"], seed, limit,
                                expect, resolved)
                    cells += _across(cell, systems, path) if systems else [cell]
    return name, cells


def _plan(config: dict[str, Any], nemeses: list[dict[str, Any]], seeds: Sequence[int],
          common: dict[str, Any], path: Path) -> tuple[dict[str, Any], dict[str, Any],
                                                      Sequence[int], list[dict[str, Any]]]:
    """One config of the file, checked: (it, its overrides over the file's, its seeds, its
    nemesis mixes)."""
    expect = config.get("expect")
    if expect not in EXPECTATIONS:
        raise CampaignError(f"{path}: config {config['name']!r}: expect must be one of "
                            f"{EXPECTATIONS}, got {expect!r}")
    extra = sorted(set(config) - {"name", "expect", "set", "nemesis", "hosts", "seeds"})
    if extra:
        raise CampaignError(f"{path}: config {config['name']!r}: unknown key(s) {extra}; "
                            "known: name, expect, set, nemesis, hosts, seeds")
    sets = _overrides(config.get("set", {}), path, f"config {config['name']!r} set")
    if "hosts" in config:
        sets["hosts.provider"] = _hosts(config["hosts"], path, f"config {config['name']!r} hosts")
    config_seeds = _seeds(config["seeds"], path) if "seeds" in config else seeds
    return config, {**common, **sets}, config_seeds, _mixes_for(config, nemeses, path)


def _across(cell: Cell, systems: Sequence[SystemSpec], path: Path) -> list[Cell]:
    """The cell once on each system, side by side (same seed, so the same planned faults)."""
    out = []
    for spec in systems:
        try:
            config, notes = on_system(cell.resolved, spec)
        except (UserError, ConfigError) as e:
            raise CampaignError(f"{path}: cell {cell.id} on {spec.label}: {e}") from None
        expect = expectation_on(cell.expect, cell.resolved, config)
        out.append(replace(cell, id=f"{cell.id}@{spec.label}", expect=expect, resolved=config,
                           system=spec.label, notes=tuple(notes)))
    return out


def _systems(value: Any, path: Path) -> list[SystemSpec]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CampaignError(f"{path}: systems must be a list such as [\"sim\", \"embedded\", "
                            f"\"kafka:4.2.1\"], got {value!r}")
    try:
        return parse_systems(",".join(value))
    except UserError as e:
        raise CampaignError(f"{path}: systems: {e}") from None


def _mixes_for(config: dict[str, Any], nemeses: list[dict[str, Any]],
               path: Path) -> list[dict[str, Any]]:
    """The [[nemesis]] mixes a config runs under: those its `nemesis` list names, else all.

    A weakness is found by the faults that exercise it, so each config may pick its own."""
    wanted = config.get("nemesis")
    if wanted is None:
        return nemeses
    by_name = {n["name"]: n for n in nemeses}
    if (not isinstance(wanted, list) or not wanted or not all(isinstance(w, str) for w in wanted)
            or len(set(wanted)) != len(wanted)):
        raise CampaignError(f"{path}: config {config['name']!r}: nemesis must be a non-empty "
                            f"list of distinct [[nemesis]] names, got {wanted!r}")
    unknown = [w for w in wanted if w not in by_name]
    if unknown:
        raise CampaignError(f"{path}: config {config['name']!r}: nemesis {unknown} not defined; "
                            f"[[nemesis]] tables: {sorted(by_name)}")
    return [by_name[w] for w in wanted]


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CampaignError(f"{path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise CampaignError(f"{path}: malformed TOML: {exc}") from None


def _name(value: Any, path: Path, key: str) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise CampaignError(f"{path}: {key} must be 1-40 letters, digits, '_', '.', '-' "
                            f"(starting with a letter or digit), got {value!r}")
    return value


def _base(value: Any, path: Path) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise CampaignError(f"{path}: base must be a profile name or a file, got {value!r}")
    beside = path.parent / value
    return str(beside) if beside.is_file() else str(resolve_config_path(value))


def _hosts(value: Any, path: Path, key: str) -> str:
    if value not in _HOSTS:
        raise CampaignError(f"{path}: {key} must be one of {_HOSTS}, got {value!r}")
    return value


def seed_range(text: str) -> range:
    """"A-B" (inclusive) or "N" -> the seeds, as a lazy range; ValueError for anything else,
    a seed past int64, or more than MAX_SEEDS seeds."""
    m = re.fullmatch(r"\s*(\d{1,19})\s*(?:-\s*(\d{1,19})\s*)?", text)
    if not m:
        raise ValueError(f"bad seed range {text!r:.60}: expected A-B or N, seeds up to 2^63-1")
    first, last = int(m.group(1)), int(m.group(2) or m.group(1))
    if last < first:
        raise ValueError(f"bad seed range {text!r}: {last} < {first}")
    if last > _SEED_MAX:
        raise ValueError(f"bad seed range {text!r}: seeds go up to 2^63-1")
    if last - first + 1 > MAX_SEEDS:
        raise ValueError(f"seed range {text!r} holds {last - first + 1:,} seeds, more than "
                         f"{MAX_SEEDS:,}: search it in parts")
    return range(first, last + 1)


def _seeds(value: Any, path: Path) -> Sequence[int]:
    """A list of seeds, or a range "A-B" (inclusive: thousands of simulated seeds)."""
    if isinstance(value, str):
        try:
            return seed_range(value)
        except ValueError as e:
            raise CampaignError(f"{path}: seeds must be a list or a range \"A-B\": {e}") from None
    if (not isinstance(value, list) or not value or len(set(value)) != len(value)
            or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in value)):
        raise CampaignError(f"{path}: seeds must be a non-empty list of distinct integers >= 0, "
                            f"got {value!r}")
    return value


def check_seed_option(value: str) -> str:
    """A `--seeds` text as given, or CampaignError when it names no seeds or too many: so a
    command line can refuse it before the campaign's file is read."""
    _seeds(_seed_option(value), Path("--seeds"))
    return value


def _seed_option(value: str) -> str | list[int]:
    """`--seeds` text: a range "A-B" as in the file, or a comma-separated list."""
    if "," not in value:
        return value
    try:
        return [int(part) for part in value.split(",")]
    except ValueError:
        raise CampaignError(f"--seeds must be a range \"A-B\" or a list \"1,2,5\", "
                            f"got {value!r}") from None


def _only(configs: list[dict[str, Any]], only: list[str] | None,
          path: Path) -> list[dict[str, Any]]:
    if not only:
        return configs
    names = [c.get("name") for c in configs]
    unknown = sorted(set(only) - set(names))
    if unknown:
        raise CampaignError(f"{path}: no config named {unknown}; configs: {names}")
    return [c for c in configs if c.get("name") in only]


def _time_limits(value: Any, path: Path) -> list[float]:
    values = value if isinstance(value, list) else [value]
    if (not values or len(set(values)) != len(values)
            or any(isinstance(v, bool) or not isinstance(v, int | float) or v <= 0
                   for v in values)):
        raise CampaignError(f"{path}: time_limit must be a number of seconds > 0 or a list of "
                            f"distinct ones, got {value!r}")
    return values


def _overrides(value: Any, path: Path, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise CampaignError(f"{path}: {where} must be a table of dotted keys, got {value!r}")
    flat = flatten(value)
    reserved = sorted({"name", "seed", "time_limit"} & set(flat))
    if reserved:
        raise CampaignError(f"{path}: {where}: {reserved} are set by the campaign matrix "
                            "(use seeds / time_limit)")
    return flat


def _entries(value: Any, path: Path, table: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value or not all(isinstance(e, dict) for e in value):
        raise CampaignError(f"{path}: needs at least one [[{table}]] table")
    seen = set()
    for i, entry in enumerate(value):
        name = _name(entry.get("name"), path, f"{table}[{i}].name")
        if name in seen:
            raise CampaignError(f"{path}: two [[{table}]] tables are named {name!r}")
        seen.add(name)
    return value
