"""Fast checks of the VM recipe (default suite, no VMs): the box build scripts, the
Vagrantfile, vagrant/vms.py, `harness vms`, the inventory's libvirt_domain and the
vm-power-off fault kind up to the point where it needs a VM.

The VMs themselves are exercised by test_vms_runs.py (`make test-vms`)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest

from control.host import Host
from control.inventory import InventoryError, load_inventory
from control.remote import Endpoint, Remote
from harness.cli import build_parser
from harness.commands import vms as vms_command
from harness.config import load_config
from nemesis.hosts_world import RealHost
from nemesis.kinds import KNOWN_FAULTS, lookup
from nemesis.kinds.vm import PowerCycle, lost_bytes, parse_snapshot, snapshot_command

ROOT = Path(__file__).resolve().parents[2]
VAGRANT = ROOT / "vagrant"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIH0w8c9sYw1xZbq4mGm4v7Q0jzVb0nq9pQ2v3mV8bJqX"
UUID = "0b7f6c2e-3f1d-4c9a-9a55-1f2e3d4c5b6a"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"vagrant_{name}", VAGRANT / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


inv = _load("inventory")
vms = _load("vms")


# -- the box recipe -----------------------------------------------------------------------

@pytest.mark.parametrize("script", ["box/build.sh", "box/guest-setup.sh", "provision.sh"])
def test_shell_scripts_parse(script):
    result = subprocess.run(["sh", "-n", str(VAGRANT / script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def _packages() -> set[str]:
    text = (VAGRANT / "box" / "build.sh").read_text()
    block = re.search(r"^packages=((?:.*\\\n)*.*)$", text, re.M)
    assert block, "build.sh must list its packages in packages=..."
    return set(block.group(1).replace("\\\n", "").split(","))


def test_box_holds_what_the_nodes_need():
    # docs/vms.md: kernel and boot loader, sshd, python3 >= 3.11 with venv, fuse3 (lazyfs),
    # iptables (partitions), rsync (the synced folder), DHCP + ifupdown (vagrant's networking),
    # a Java 17 runtime (Kafka brokers: docs/kafka.md).
    needed = {"linux-image-cloud-amd64", "grub-pc-bin", "openssh-server", "python3",
              "python3-venv", "fuse3", "iptables", "rsync", "sudo", "ifupdown",
              "isc-dhcp-client", "chrony", "openjdk-17-jre-headless"}
    assert needed <= _packages(), f"missing from the box: {sorted(needed - _packages())}"


def test_guest_clocks_follow_the_host_and_its_time_server_serves_only_their_network(tmp_path):
    """The trace checker orders events across hosts by wall clock (docs/vms.md, "Clocks"):
    each guest's chrony has the host's private-network address as its only source, and the
    host's chronyd binds there, answers that /24 only, has no command port, never sets this
    machine's clock."""
    setup = (VAGRANT / "box" / "guest-setup.sh").read_text()
    assert "systemctl enable chrony.service" in setup
    assert "pool" not in setup.split("cat >/etc/chrony/chrony.conf", 1)[1].split("CHRONY", 2)[1]
    provision = (VAGRANT / "provision.sh").read_text()
    assert "printf 'server %s iburst" in provision and '"${address%.*}.1"' in provision
    conf = vms.time_server_config("192.168.56.1", tmp_path).splitlines()
    assert conf[:4] == ["bindaddress 192.168.56.1", "allow 192.168.56.0/24", "local stratum 8",
                        "cmdport 0"]
    assert not any(line.startswith(("server", "pool", "allow all")) for line in conf)
    source = (VAGRANT / "vms.py").read_text()
    assert '["chronyd", "-x", "-f"' in source  # -x: the host's clock is never touched


def test_box_makes_its_own_keys_and_no_shared_host_keys():
    build = (VAGRANT / "box" / "build.sh").read_text()
    setup = (VAGRANT / "box" / "guest-setup.sh").read_text()
    # A key pair per build, never vagrant's published insecure key.
    assert re.search(r"ssh-keygen .*-t ed25519 .*-f \"\$out/id_ed25519\"", build)
    vagrantfile = (VAGRANT / "Vagrantfile").read_text()
    assert 'File.join(__dir__, ".box", "id_ed25519")' in vagrantfile
    assert "config.ssh.insert_key = false" in vagrantfile
    # Host keys made at build time would be shared by every VM: removed, made at first boot.
    assert "rm -f /etc/ssh/ssh_host_*" in setup
    assert "ExecStart=/usr/bin/ssh-keygen -A" in setup
    assert "PasswordAuthentication no" in setup


def test_node_requirements_come_from_pyproject():
    # build.sh installs, with pyproject's ranges, exactly the packages the node processes import.
    import tomllib
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.match(r"[A-Za-z0-9_.-]+", d).group(0) for d in deps}
    wanted = {"mfusepy", "paramiko", "cryptography", "toxiproxy-python"}
    assert wanted <= names, "build.sh picks these from pyproject.toml's dependencies"
    assert all(f'"{n}"' in (VAGRANT / "box" / "build.sh").read_text() for n in wanted)


# -- the Vagrantfile ----------------------------------------------------------------------

def _validate(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    # A copy, so a real .vms/settings.json beside the Vagrantfile does not leak in.
    shutil.copy(VAGRANT / "Vagrantfile", tmp_path / "Vagrantfile")
    (tmp_path / "provision.sh").write_text((VAGRANT / "provision.sh").read_text())
    (tmp_path / "key").write_text("")  # vagrant validate wants the key file to exist
    full = {**os.environ, "VAGRANT_DEFAULT_PROVIDER": "libvirt",
            "KCH_SSH_KEY": str(tmp_path / "key"), **env}
    return subprocess.run(["vagrant", "validate"], cwd=tmp_path, env=full, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.skipif(shutil.which("vagrant") is None, reason="vagrant is not installed (make vms installs it)")
def test_vagrantfile_validates_and_rejects_bad_settings(tmp_path):
    ok = _validate(tmp_path, KCH_ACCEL="tcg", KCH_VMS="3")
    assert ok.returncode == 0, ok.stderr + ok.stdout
    bad = _validate(tmp_path, KCH_ACCEL="hvf")
    assert bad.returncode != 0 and "KCH_ACCEL must be kvm or tcg" in bad.stderr + bad.stdout
    bad = _validate(tmp_path, KCH_VMS="1")
    assert bad.returncode != 0 and "KCH_VMS must be between 2 and 64" in bad.stderr + bad.stdout


def test_vagrantfile_disk_cache_keeps_guest_flushes():
    text = (VAGRANT / "Vagrantfile").read_text()
    modes = re.findall(r"disk_driver :cache => \"(\w+)\"", text)
    # "unsafe" ignores the guest's flushes: a power-off would then lose what was fsynced.
    assert modes == ["none"], modes


# -- vms.py and `harness vms` -------------------------------------------------------------

def test_missing_tools_are_named_by_package(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(vms.shutil, "which", lambda tool, path=None: None)
    missing = vms.missing_tools()
    assert {"vagrant", "libvirt-daemon-system", "qemu-system-x86", "debootstrap"} <= set(missing)
    with pytest.raises(vms.VmsError, match="missing: .*apt-get install"):
        vms.check_tools()


def test_vms_up_refuses_a_bad_count(capsys):
    assert vms.main(["up", "--vms", "1"]) == 1
    assert "--vms must be between 2 and 64" in capsys.readouterr().err


def test_box_volume_names():
    assert vms.box_volume("kch-VAGRANTSLASH-debian12_vagrant_box_image_0_1795465308_box.img")
    assert not vms.box_volume("kch-n1.img")


def test_harness_vms_builds_the_script_command_line():
    parser = build_parser()
    args = parser.parse_args(["vms", "up", "--vms", "3", "--accel", "tcg"])
    assert vms_command.vms_argv(args)[1:] == [str(VAGRANT / "vms.py"), "up", "--vms", "3", "--accel", "tcg"]
    args = parser.parse_args(["vms", "down", "--box"])
    assert vms_command.vms_argv(args)[2:] == ["down", "--box"]
    assert vms_command.VMS_SCRIPT.exists()


# -- the inventory's libvirt_domain --------------------------------------------------------

def test_inventory_records_each_vms_libvirt_domain(tmp_path):
    machines = tmp_path / "machines"
    (machines / "n1" / "libvirt").mkdir(parents=True)
    (machines / "n1" / "libvirt" / "id").write_text(UUID + "\n")
    assert inv.libvirt_domain(machines, "n1") == UUID
    assert inv.libvirt_domain(machines, "n2") == ""  # another provider: no libvirt id
    (machines / "n1" / "libvirt" / "id").write_text("kch-n1; virsh destroy all\n")
    with pytest.raises(inv.InventoryScriptError, match="not a libvirt UUID"):
        inv.libvirt_domain(machines, "n1")
    hosts = [inv.VmHost("n1", "192.168.56.11", Path("/k/n1"), KEY, UUID),
             inv.VmHost("n2", "192.168.56.12", Path("/k/n2"), KEY)]
    inv.write_inventory(tmp_path / "inventory.toml", hosts, user="root",
                        python="/opt/kch/.venv/bin/python", work_dir="/var/lib/kch")
    entries = load_inventory(tmp_path / "inventory.toml")
    assert [e.libvirt_domain for e in entries] == [UUID, ""]


def test_inventory_rejects_a_bad_libvirt_domain(tmp_path):
    path = tmp_path / "inventory.toml"
    path.write_text('[[hosts]]\nname = "n1"\naddress = "10.0.0.1"\nkey_file = "k"\n'
                    'known_hosts = "kh"\nlibvirt_domain = "a b"\n')
    with pytest.raises(InventoryError, match=r"hosts\[0\]\.libvirt_domain: 'a b' is not a libvirt domain"):
        load_inventory(path)


# -- the vm-power-off kind ----------------------------------------------------------------

def test_vm_power_off_is_registered_and_accepted():
    kind = lookup("vm-power-off")
    assert "vm-power-off" in KNOWN_FAULTS
    assert kind.family == "host" and not kind.simulated and not kind.needs_lazyfs
    config = load_config("fast", ["nemesis.faults=['vm-power-off', 'kill']"])
    assert config["nemesis"]["faults"] == ["vm-power-off", "kill"]


def test_snapshot_parsing_and_loss():
    out = ("Dirty:              1234 kB\nWriteback:             8 kB\n"
           "F 4096 chaos-0/00000000000000000000.log\nF 10 chaos-0/state.json\nF 7 a b.log\n")
    counters, sizes = parse_snapshot(out)
    assert counters == {"Dirty": 1234, "Writeback": 8}
    assert sizes == {"chaos-0/00000000000000000000.log": 4096, "chaos-0/state.json": 10, "a b.log": 7}

def test_lost_bytes_compare_content_not_size():
    before = {"seg.log": b"A" * 100, "state.json": b"{}", "gone.log": b"xyz", "same": b"s"}
    # the size kept but the tail zeros (ext4 kept the size, not the data), the file gone
    after = {"seg.log": b"A" * 60 + b"\0" * 40, "state.json": b"{}", "same": b"s"}
    assert lost_bytes(before, after) == {"gone.log": 3, "seg.log": 40}
    assert lost_bytes({"grew": b"ab"}, {"grew": b"abc"}) == {}


def test_snapshot_command_quotes_the_data_dir():
    command = snapshot_command("/var/lib/kch/n1/data; rm -rf /")
    assert "'/var/lib/kch/n1/data; rm -rf /'" in command
    # the real command, on this machine's own /proc and a folder of ours
    result = subprocess.run(["sh", "-c", snapshot_command(str(ROOT / "vagrant" / "box"))],
                            capture_output=True, text=True, check=True)
    counters, sizes = parse_snapshot(result.stdout)
    assert "Dirty" in counters and sizes["build.sh"] == (VAGRANT / "box" / "build.sh").stat().st_size


def test_power_cycle_refuses_a_host_that_is_not_a_vm(tmp_path):
    endpoint = Endpoint("n2", "192.0.2.1", 22, "root", tmp_path / "key", tmp_path / "kh",
                        PurePosixPath("/var/lib/kch/n2/run"))
    host = Host("n2", "192.0.2.1", PurePosixPath("/var/lib/kch/n2/data"),
                PurePosixPath("/var/lib/kch/n2/run"), PurePosixPath("/var/lib/kch/n2/logs"),
                Remote(endpoint))
    # Nothing is signalled or connected to: the check comes first (the port has no cluster,
    # so a signal or the cluster's record of stopped nodes would fail otherwise).
    with pytest.raises(RuntimeError, match="n2 is not a VM: vm-power-off needs `libvirt_domain`"):
        PowerCycle().on_host(RealHost(host, "python3", None))


def test_settings_file_is_what_the_vagrantfile_reads():
    # vms.py writes KCH_* keys to .vms/settings.json; the Vagrantfile reads the same path.
    text = (VAGRANT / "Vagrantfile").read_text()
    assert 'File.join(__dir__, ".vms", "settings.json")' in text
    assert vms.STATE == VAGRANT / ".vms"
    assert json.loads(json.dumps({"KCH_VMS": 3}))["KCH_VMS"] == 3


# -- the campaign over the VMs ----------------------------------------------------------------

def test_vm_campaign_runs_every_cell_on_the_inventory_of_make_vms(tmp_path):
    """campaigns/vms.toml, laid out as in the repository (campaigns/ beside vagrant/) with an
    inventory such as `make vms` writes: every cell is an `ssh` run on those hosts."""
    from harness.campaign_spec import load_spec

    (tmp_path / "campaigns").mkdir()
    (tmp_path / "vagrant").mkdir()
    shutil.copy(ROOT / "campaigns" / "vms.toml", tmp_path / "campaigns" / "vms.toml")
    shutil.copy(VAGRANT / "vms.toml", tmp_path / "vagrant" / "vms.toml")
    hosts = [inv.VmHost(f"n{i}", f"192.168.121.{10 + i}", tmp_path / f"k{i}", KEY, UUID)
             for i in range(1, 5)]
    inv.write_inventory(tmp_path / "vagrant" / "inventory.toml", hosts, user="root",
                        python="/opt/kch/.venv/bin/python", work_dir="/var/lib/kch")
    _, cells = load_spec(tmp_path / "campaigns" / "vms.toml")
    assert {c.config for c in cells} == {"safe", "acks1"}
    for cell in cells:
        assert cell.resolved["hosts"]["provider"] == "ssh"
        assert Path(cell.resolved["hosts"]["inventory"]).resolve() == \
            (tmp_path / "vagrant" / "inventory.toml").resolve()
        assert cell.resolved["nodes"] == 4 and cell.resolved["workload"]["rate"] == 100
