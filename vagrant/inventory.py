#!/usr/bin/env python3
"""Write the harness inventory (and its known_hosts) for the running VMs of this folder.

    cd vagrant && python3 inventory.py [--user root|vagrant] [--out inventory.toml]

For each running VM it asks vagrant for the login key (`vagrant ssh-config`) and, over
vagrant's own channel, for the VM's private address and ed25519 host key. It then scans the
private address with ssh-keyscan and accepts the key only if it is the one the VM reported:
the harness connects to the private address, so known_hosts must vouch for what answers there.
Standard library only: it runs with any python3 on the machine that runs vagrant.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENV_PYTHON = "/opt/kch/.venv/bin/python"  # where provision.sh installs the project
_REPORT = "cat /etc/kch/address /etc/ssh/ssh_host_ed25519_key.pub"


class InventoryScriptError(RuntimeError):
    pass


@dataclass(frozen=True)
class VmHost:
    name: str
    address: str
    key_file: Path  # the private key `vagrant ssh` logs in with
    host_key: str  # "ssh-ed25519 AAAA...", verified against the private address
    domain: str = ""  # the VM's libvirt domain (its UUID), for the vm-power-off fault


def running_machines(status_output: str) -> list[str]:
    """Names of running machines in `vagrant status --machine-readable`, n1 before n2 ... n10."""
    names = []
    for line in status_output.splitlines():
        fields = line.split(",")
        if len(fields) >= 4 and fields[2] == "state" and fields[3] == "running":
            names.append(fields[1])
    return sorted(names, key=lambda n: (len(n), n))


def identity_file(ssh_config_output: str, name: str) -> Path:
    """The IdentityFile of `vagrant ssh-config NAME` (vagrant quotes paths with blanks)."""
    for line in ssh_config_output.splitlines():
        key, _, value = line.strip().partition(" ")
        if key.lower() == "identityfile":
            return Path(value.strip().strip('"'))
    raise InventoryScriptError(f"{name}: `vagrant ssh-config` names no IdentityFile")


def parse_report(output: str, name: str) -> tuple[str, str]:
    """(address, "ssh-ed25519 AAAA...") from the output of _REPORT on the VM."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if len(lines) != 2:
        raise InventoryScriptError(f"{name}: expected its address and host key, got {output!r} "
                                   "(was it provisioned? see docs/vms.md)")
    address, key = lines
    parts = key.split()
    if not re.fullmatch(r"[0-9A-Fa-f:.]+", address):
        raise InventoryScriptError(f"{name}: /etc/kch/address holds {address!r}, not an address")
    if len(parts) < 2 or parts[0] != "ssh-ed25519":
        raise InventoryScriptError(f"{name}: not an ed25519 public key: {key!r}")
    return address, f"{parts[0]} {parts[1]}"


def scanned_key(address: str, timeout: int = 5) -> str:
    """The ed25519 host key that answers at address, port 22, as ssh-keyscan sees it."""
    argv = ["ssh-keyscan", "-T", str(timeout), "-t", "ed25519", address]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout + 10)
    for line in result.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and not line.startswith("#") and parts[1] == "ssh-ed25519":
            return f"{parts[1]} {parts[2]}"
    raise InventoryScriptError(f"ssh-keyscan found no ed25519 key at {address}: "
                               f"{result.stderr.strip() or 'no answer'}")


def verified_key(name: str, address: str, reported: str) -> str:
    """The scanned key if it is the reported one; otherwise refuse (something else answers)."""
    scanned = scanned_key(address)
    if scanned.split()[:2] != reported.split()[:2]:
        raise InventoryScriptError(
            f"{name}: the host key at {address} ({scanned[:40]}...) is not the key the "
            f"VM reports ({reported[:40]}...): refusing to trust it")
    return scanned


def known_hosts_text(hosts: list[VmHost]) -> str:
    return "".join(f"{h.address} {h.host_key}\n" for h in hosts)


def _toml_str(value: str | Path) -> str:
    # A JSON string without \u surrogate pairs is a TOML basic string.
    return json.dumps(str(value), ensure_ascii=False)


def inventory_text(hosts: list[VmHost], *, user: str, python: str, work_dir: str,
                   known_hosts: str = "known_hosts") -> str:
    """The inventory TOML (format: control/inventory.py)."""
    lines = [
        "# Written by vagrant/inventory.py; rerun it after `vagrant up` or `vagrant destroy`.",
        "[defaults]",
        f"user = {_toml_str(user)}",
        f"sudo = {'false' if user == 'root' else 'true'}",
        f"known_hosts = {_toml_str(known_hosts)}",
        f"work_dir = {_toml_str(work_dir)}",
        f"python = {_toml_str(python)}",
    ]
    for h in hosts:
        lines += ["", "[[hosts]]", f"name = {_toml_str(h.name)}",
                  f"address = {_toml_str(h.address)}", f"key_file = {_toml_str(h.key_file)}"]
        if h.domain:
            lines.append(f"libvirt_domain = {_toml_str(h.domain)}")
    return "\n".join(lines) + "\n"


def write_inventory(out: Path, hosts: list[VmHost], *, user: str, python: str,
                    work_dir: str) -> None:
    """inventory TOML at `out`, its known_hosts beside it."""
    (out.parent / "known_hosts").write_text(known_hosts_text(hosts))
    out.write_text(inventory_text(hosts, user=user, python=python, work_dir=work_dir))


def _vagrant(*args: str) -> str:
    try:
        result = subprocess.run(["vagrant", *args], cwd=HERE, capture_output=True, text=True,
                                timeout=300)
    except FileNotFoundError:
        raise InventoryScriptError("vagrant is not installed") from None
    if result.returncode != 0:
        raise InventoryScriptError(f"`vagrant {shlex.join(args)}` failed: {result.stderr.strip()}")
    return result.stdout


def libvirt_domain(machine_dir: Path, name: str) -> str:
    """The libvirt UUID vagrant-libvirt recorded for machine `name` ("" for other providers)."""
    path = machine_dir / name / "libvirt" / "id"
    if not path.exists():
        return ""
    uuid = path.read_text().strip()
    if not re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", uuid):
        raise InventoryScriptError(f"{name}: {path} holds {uuid!r}, not a libvirt UUID")
    return uuid


def vm_host(name: str) -> VmHost:
    key_file = identity_file(_vagrant("ssh-config", name), name)
    address, reported = parse_report(_vagrant("ssh", name, "-c", _REPORT, "--", "-q"), name)
    return VmHost(name, address, key_file, verified_key(name, address, reported),
                  libvirt_domain(HERE / ".vagrant" / "machines", name))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / "inventory.toml",
                        help="inventory file to write; known_hosts goes beside it")
    parser.add_argument("--user", choices=("root", "vagrant"), default="root",
                        help="login user; vagrant runs privileged commands under sudo")
    parser.add_argument("--python", default=VENV_PYTHON, help="interpreter on the VMs")
    parser.add_argument("--work-dir", default="/var/lib/kch", help="per-host folder on the VMs")
    args = parser.parse_args(argv)
    try:
        names = running_machines(_vagrant("status", "--machine-readable"))
        if not names:
            raise InventoryScriptError("no running VMs here: run `vagrant up` first")
        hosts = [vm_host(name) for name in names]
        write_inventory(args.out, hosts, user=args.user, python=args.python,
                        work_dir=args.work_dir)
    except InventoryScriptError as e:
        print(f"inventory.py: {e}", file=sys.stderr)
        return 1
    print(f"wrote {args.out} ({len(hosts)} hosts) and {args.out.parent / 'known_hosts'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
