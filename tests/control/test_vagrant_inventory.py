"""vagrant/inventory.py's parsing and the inventory it writes (pure: no vagrant, no VMs).

Its ssh-keyscan verification runs against real sshds in test_ssh_provider_run.py.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path, PurePosixPath

import pytest

from control.inventory import load_inventory

ROOT = Path(__file__).resolve().parents[2]
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIH0w8c9sYw1xZbq4mGm4v7Q0jzVb0nq9pQ2v3mV8bJqX"


def _load():
    spec = importlib.util.spec_from_file_location("vagrant_inventory", ROOT / "vagrant" / "inventory.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


inv = _load()


def test_running_machines_in_numeric_order():
    # `vagrant status --machine-readable` as vagrant 2.3.4 prints it (metadata lines trimmed).
    out = "\n".join([
        "1795332571,n10,state,running", "1795332571,n10,state-human-short,running",
        "1795332571,n2,state,running", "1795332571,n1,state,running",
        "1795332571,n3,state,not_created", "1795332571,,ui,info,Current machine states:",
    ])
    assert inv.running_machines(out) == ["n1", "n2", "n10"]


def test_identity_file_plain_and_quoted():
    config = ("Host n1\n  HostName 127.0.0.1\n  User vagrant\n  Port 2222\n"
              '  IdentityFile "/home/me/my vms/.vagrant/machines/n1/libvirt/private_key"\n'
              "  IdentitiesOnly yes\n")
    assert inv.identity_file(config, "n1") == Path("/home/me/my vms/.vagrant/machines/n1/libvirt/private_key")
    assert inv.identity_file("  IdentityFile /k/id\n", "n1") == Path("/k/id")
    with pytest.raises(inv.InventoryScriptError, match="n1: .*no IdentityFile"):
        inv.identity_file("Host n1\n", "n1")


def test_parse_report_checks_what_the_vm_said():
    assert inv.parse_report(f"192.168.56.11\n{KEY} root@n1\n", "n1") == ("192.168.56.11", KEY)
    with pytest.raises(inv.InventoryScriptError, match="was it provisioned"):
        inv.parse_report(f"{KEY} root@n1\n", "n1")
    with pytest.raises(inv.InventoryScriptError, match="not an address"):
        inv.parse_report(f"n1.local; rm -rf /\n{KEY}\n", "n1")
    with pytest.raises(inv.InventoryScriptError, match="not an ed25519 public key"):
        inv.parse_report("192.168.56.11\nssh-rsa AAAAB3 root@n1\n", "n1")


@pytest.mark.parametrize("user, sudo", [("root", False), ("vagrant", True)])
def test_written_inventory_loads_in_the_harness(tmp_path, user, sudo):
    hosts = [inv.VmHost(f"n{i}", f"192.168.56.{10 + i}", Path(f'/vms/"q"/n{i}/private_key'), KEY)
             for i in (1, 2)]
    out = tmp_path / "inventory.toml"
    inv.write_inventory(out, hosts, user=user, python="/opt/kch/.venv/bin/python",
                        work_dir="/var/lib/kch")
    entries = load_inventory(out)
    assert [(e.name, e.address, e.user, e.sudo) for e in entries] == [
        ("n1", "192.168.56.11", user, sudo), ("n2", "192.168.56.12", user, sudo)]
    assert entries[1].key_file == Path('/vms/"q"/n2/private_key')
    assert {e.python for e in entries} == {"/opt/kch/.venv/bin/python"}
    assert entries[0].work_dir == PurePosixPath("/var/lib/kch")
    assert entries[0].known_hosts == tmp_path / "known_hosts"
    assert (tmp_path / "known_hosts").read_text() == (
        f"192.168.56.11 {KEY}\n192.168.56.12 {KEY}\n")
