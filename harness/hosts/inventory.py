"""The `ssh` provider's inventory: a TOML file naming real machines or VMs.

    [defaults]                       # optional; any host key may be given here
    user = "root"
    port = 22
    key_file = "~/.ssh/id_ed25519"   # relative paths are relative to this file
    known_hosts = "known_hosts"      # must already vouch for every host's key
    work_dir = "/var/lib/kch"        # on each host: <work_dir>/<name>/{data,run,logs}
    sudo = false                     # true: privileged commands run under `sudo -n`
    python = "python3"               # runs the nodes: an interpreter with this project installed

    [[hosts]]
    name = "n1"
    address = "192.168.56.11"
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any


class InventoryError(ValueError):
    pass


@dataclass(frozen=True)
class HostEntry:
    name: str
    address: str
    port: int
    user: str
    key_file: Path
    known_hosts: Path
    work_dir: PurePosixPath
    sudo: bool
    python: str


_DEFAULTS: dict[str, Any] = {"port": 22, "user": "root", "work_dir": "/var/lib/kch", "sudo": False,
                             "python": "python3"}
_TYPES: dict[str, type] = {
    "name": str, "address": str, "port": int, "user": str, "key_file": str,
    "known_hosts": str, "work_dir": str, "sudo": bool, "python": str,
}


def _field(path: Path, where: str, merged: dict[str, Any], key: str) -> Any:
    if key not in merged:
        raise InventoryError(f"{path}: {where}: missing key {key!r}")
    value = merged[key]
    expected = _TYPES[key]
    # bool is an int in Python; do not accept `port = true`.
    if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
        raise InventoryError(f"{path}: {where}.{key}: expected {expected.__name__}, got {value!r}")
    return value


def _local_path(base: Path, value: str) -> Path:
    p = Path(value).expanduser()
    return p if p.is_absolute() else (base / p)


def load_inventory(path: Path) -> list[HostEntry]:
    """Parse and validate an inventory; errors name the file and the offending key."""
    try:
        doc = tomllib.loads(path.read_text())
    except OSError as err:
        raise InventoryError(f"cannot read inventory {path}: {err}") from err
    except tomllib.TOMLDecodeError as err:
        raise InventoryError(f"{path}: invalid TOML: {err}") from err
    unknown_tables = set(doc) - {"defaults", "hosts"}
    if unknown_tables:
        raise InventoryError(f"{path}: unknown top-level key(s): {', '.join(sorted(unknown_tables))}")
    defaults = doc.get("defaults", {})
    hosts = doc.get("hosts")
    if not isinstance(defaults, dict):
        raise InventoryError(f"{path}: [defaults] must be a table")
    if not isinstance(hosts, list) or not hosts:
        raise InventoryError(f"{path}: needs at least one [[hosts]] entry")
    entries, seen = [], set()
    for i, raw in enumerate(hosts):
        where = f"hosts[{i}]"
        if not isinstance(raw, dict):
            raise InventoryError(f"{path}: {where} must be a table")
        for key in list(defaults) + list(raw):
            if key not in _TYPES:
                raise InventoryError(f"{path}: {where}: unknown key {key!r}")
        merged = {**_DEFAULTS, **defaults, **raw}
        values = {key: _field(path, where, merged, key) for key in _TYPES}
        if values["name"] in seen:
            raise InventoryError(f"{path}: {where}.name: duplicate host name {values['name']!r}")
        seen.add(values["name"])
        if not 1 <= values["port"] <= 65535:
            raise InventoryError(f"{path}: {where}.port: {values['port']} is not a TCP port")
        entries.append(HostEntry(
            name=values["name"], address=values["address"], port=values["port"],
            user=values["user"], key_file=_local_path(path.parent, values["key_file"]),
            known_hosts=_local_path(path.parent, values["known_hosts"]),
            work_dir=PurePosixPath(values["work_dir"]), sudo=values["sudo"],
            python=values["python"],
        ))
    return entries
