"""The `ssh` provider's inventory: a TOML file naming real machines or VMs.

    [defaults]                       # optional; any host key may be given here
    user = "root"
    port = 22
    key_file = "~/.ssh/id_ed25519"   # relative paths are relative to this file
    known_hosts = "known_hosts"      # must already vouch for every host's key
    work_dir = "/var/lib/kch"        # on each host: <work_dir>/<name>/{data,run,logs}
    sudo = false                     # true: privileged commands run under `sudo -n`
    python = "python3"               # runs the nodes: an interpreter with this project installed
    toxiproxy = "toxiproxy-server"   # Toxiproxy's server, for runs with toxic faults
    libvirt_domain = ""              # per host: its libvirt VM (name or UUID), for vm-power-off
    java = "java"                    # runs Apache Kafka's nodes (system.kind = "kafka"): Java 17+

    [[hosts]]
    name = "n1"
    address = "192.168.56.11"

Every value that ends up in a path or a command on a host is checked here, with an error
naming the file and the key: a host name is one path component (`<work_dir>/<name>/data` is
wiped with `rm -rf` on that host), the user a plain login name, work_dir an absolute,
normalised path below the system directories, python (and toxiproxy, java) one program path or name.
"""

from __future__ import annotations

import re
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
    toxiproxy: str = "toxiproxy-server"
    libvirt_domain: str = ""  # the host is this libvirt VM (name or UUID), for vm-power-off
    java: str = "java"  # runs Apache Kafka's nodes (system.kind = "kafka")


_DEFAULTS: dict[str, Any] = {"port": 22, "user": "root", "work_dir": "/var/lib/kch", "sudo": False,
                             "python": "python3", "toxiproxy": "toxiproxy-server",
                             "libvirt_domain": "", "java": "java"}
_TYPES: dict[str, type] = {
    "name": str, "address": str, "port": int, "user": str, "key_file": str,
    "known_hosts": str, "work_dir": str, "sudo": bool, "python": str, "toxiproxy": str,
    "libvirt_domain": str, "java": str,
}


# One path component, as hostnames and folder names go: no "/", no "." or "..", no blanks.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
USER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
# A DNS name, an IPv4 or an IPv6 address (optionally with a %zone).
ADDRESS_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*(%[A-Za-z0-9_.-]+)?")
PYTHON_RE = re.compile(r"[A-Za-z0-9_./+-]+")
# work_dir may not be one of these (nor "/"): <work_dir>/<name>/data would be a system folder.
SYSTEM_DIRS = frozenset({
    "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media",
    "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var",
    "/usr/bin", "/usr/lib", "/usr/lib64", "/usr/local", "/usr/sbin", "/usr/share", "/var/lib",
    "/var/log", "/var/cache", "/var/tmp", "/var/run", "/var/spool", "/var/mail", "/var/www",
})  # fmt: skip


def _check_values(path: Path, where: str, values: dict[str, Any]) -> None:
    def bad(key: str, why: str) -> InventoryError:
        return InventoryError(f"{path}: {where}.{key}: {values[key]!r} {why}")

    if not NAME_RE.fullmatch(values["name"]) or values["name"] in (".", ".."):
        raise bad("name", "is not a host name: use letters, digits, '.', '_' and '-' (at most "
                          "63, starting with a letter or digit); it names a folder on the host")
    if not USER_RE.fullmatch(values["user"]):
        raise bad("user", "is not a login name (letters, digits, '_', '.', '-'; at most 32)")
    if not ADDRESS_RE.fullmatch(values["address"]):
        raise bad("address", "is not a host name or an IP address")
    work_dir = values["work_dir"]
    parts = work_dir.split("/")
    if (not work_dir.startswith("/") or any(p in ("", ".", "..") for p in parts[1:])
            or any(ord(c) < 32 or c == "\x7f" for c in work_dir)):
        raise bad("work_dir", "must be an absolute, normalised path (no '.', '..', '//', "
                              "trailing '/' or control characters)")
    if work_dir == "/" or work_dir in SYSTEM_DIRS:
        raise bad("work_dir", "is a system directory: the hosts' folders are created and wiped "
                              "below it; use a folder of its own such as /var/lib/kch")
    if not PYTHON_RE.fullmatch(values["python"]) or values["python"].startswith("-"):
        raise bad("python", "must be one interpreter, a name on the PATH or an absolute path "
                            "(no blanks or shell characters)")
    if values["libvirt_domain"] and not NAME_RE.fullmatch(values["libvirt_domain"]):
        raise bad("libvirt_domain", "is not a libvirt domain name or UUID (letters, digits, "
                                    "'.', '_', '-')")
    for key in ("toxiproxy", "java"):
        if not PYTHON_RE.fullmatch(values[key]) or values[key].startswith("-"):
            raise bad(key, "must be one program, a name on the PATH or an absolute path "
                           "(no blanks or shell characters)")


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
        _check_values(path, where, values)
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
            python=values["python"], toxiproxy=values["toxiproxy"],
            libvirt_domain=values["libvirt_domain"], java=values["java"],
        ))
    return entries
