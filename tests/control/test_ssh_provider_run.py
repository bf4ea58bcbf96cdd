"""`run_test` with hosts.provider = "ssh" on real sshds, and vagrant/inventory.py's key checks.

There is no hypervisor here, so the VMs of vagrant/ stand in as netns hosts: NetnsProvider
brings up hosts with their own sshd, vagrant/inventory.py's writer (with its ssh-keyscan
verification) turns them into an inventory, and the whole run goes through the ssh provider.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import stat
import sys
from collections import Counter
from pathlib import Path

import pytest
from support.history import read_history

from control import NetnsProvider
from control import toxiproxy as tp
from control.ssh_provider import SshProvider
from harness.config import load_config
from harness.runner import run_test
from harness.test import Plan, Test
from nemesis import link
from nemesis import partition as P

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.netns,
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces and sshd need root"),
    pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="openssh-server not installed"),
    pytest.mark.skipif(shutil.which("ssh-keyscan") is None, reason="ssh-keyscan not installed"),
]


def _vagrant_inventory():
    spec = importlib.util.spec_from_file_location("vagrant_inventory", ROOT / "vagrant" / "inventory.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def netns_hosts(tmp_path_factory):
    provider = NetnsProvider(tmp_path_factory.mktemp("kch") / "cluster", 4)
    hosts = provider.up()
    yield provider, hosts
    provider.down()


def _reported_key(provider: NetnsProvider, name: str) -> str:
    # What `vagrant ssh -c 'cat /etc/ssh/ssh_host_ed25519_key.pub'` reports for a VM.
    return (provider.cluster_dir / name / "sshd" / "ssh_host_ed25519_key.pub").read_text()


def _logging_python(path: Path, log: Path) -> Path:
    """An interpreter that records its arguments: shows which python the nodes ran with."""
    path.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >>{log}\nexec {sys.executable} "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _write_inventory(netns_hosts, tmp_path: Path) -> tuple[Path, Path, Path]:
    """vagrant/inventory.py's inventory of the netns hosts, each key verified, with a python
    that logs its calls: (inventory, the calls' log, the hosts' work directory)."""
    provider, hosts = netns_hosts
    inv = _vagrant_inventory()
    calls = tmp_path / "python-calls.log"
    python = _logging_python(tmp_path / "python", calls)
    vms = [inv.VmHost(h.name, h.address, provider.ssh_dir / "id_ed25519",
                      inv.verified_key(h.name, h.address, _reported_key(provider, h.name)))
           for h in hosts]
    work = tmp_path / "work"
    inventory = tmp_path / "inventory.toml"
    inv.write_inventory(inventory, vms, user="root", python=str(python), work_dir=str(work))
    return inventory, calls, work


def test_host_key_is_taken_only_when_it_matches(netns_hosts):
    provider, hosts = netns_hosts
    inv = _vagrant_inventory()
    n1, n2 = hosts[0], hosts[1]
    key = inv.verified_key("n1", n1.address, _reported_key(provider, "n1"))
    assert key == " ".join(_reported_key(provider, "n1").split()[:2])
    # n2's sshd answers at n2's address with n2's key, not the n1 key a VM might report there.
    with pytest.raises(inv.InventoryScriptError, match="refusing to trust it"):
        inv.verified_key("n1", n2.address, _reported_key(provider, "n1"))


def test_harness_run_over_the_ssh_provider(netns_hosts, tmp_path):
    hosts = netns_hosts[1]
    inventory, calls, work = _write_inventory(netns_hosts, tmp_path)

    config = load_config("fast", [
        "nodes=3", "topic.replication_factor=2", "time_limit=8", "seed=3",
        "nemesis.faults=['partition', 'power-loss']", "nemesis.interval=2", "nemesis.duration=2",
        "workload.final_read_timeout=30",
        "hosts.provider=ssh", f"hosts.inventory={str(inventory)!r}",
    ])
    # What a run killed on long-lived hosts leaves behind: it must be healed before nodes start
    # (n2 losing every packet and n1 cut off would keep the cluster from ever coming up).
    link.degrade(hosts[1], "lossy-link", link.settings({"link_loss_percent": 100}), sys.executable)
    P.apply(hosts[:3], P.isolate_node([h.name for h in hosts[:3]], "n1"))
    run_dir = run_test(Test.of(config, tmp_path / "results", check=False))
    assert all(link.rules(h) == [] and P.rules(h) == [] for h in hosts[:3])

    test = json.loads((run_dir / "test.json").read_text())
    assert test["config"]["hosts"] == {"provider": "ssh", "inventory": str(inventory),
                                       "toxiproxy": "auto"}
    ops = read_history(run_dir / "history.jsonl")
    assert any(op["f"] == "send" and op["type"] == "ok" for op in ops)
    assert any(op["f"] == "final-poll" and op["type"] == "ok" for op in ops)
    started = Counter(op["f"] for op in ops if op["process"] == "nemesis")
    assert started["start-partition"] + started["start-power-loss"] >= 1, started

    # The first `nodes` hosts of the inventory, in the ssh provider's layout, not netns's.
    assert sorted(p.name for p in work.iterdir()) == ["n1", "n2", "n3"]
    for name in ("n1", "n2", "n3"):
        assert (work / name / "logs" / "node.log").exists()
        assert (run_dir / "nodes" / name / "node.log").exists()
    assert not (run_dir / "nodes" / "n4").exists()

    # Every node and the page-cache-loss FS ran under the inventory's python.
    lines = calls.read_text().splitlines()
    assert sum("-m replication controller" in line for line in lines) >= 1
    assert sum("-m replication broker" in line for line in lines) >= 2
    assert sum("-m nemesis.lazyfs mount" in line for line in lines) == 3

    # Torn down: no node left running on any host, hosts still reachable for the next run.
    for h in hosts[:3]:
        assert not h.remote.run(["pgrep", "-f", str(work / h.name)], check=False).ok


# Slow (19 s): the default run holds the SSH provider (test_harness_run_over_the_ssh_provider)
# and every toxic on namespace hosts (tests/nemesis/test_toxiproxy.py).
@pytest.mark.slow
@pytest.mark.toxiproxy
def test_toxic_faults_over_the_ssh_provider(netns_hosts, tmp_path):
    """Toxiproxy started over SSH beside each node from the inventory's `toxiproxy` path, the
    toxic applied and recorded, every server stopped with the nodes."""
    binary = tp.local_binary()
    hosts = netns_hosts[1]
    inventory, calls, work = _write_inventory(netns_hosts, tmp_path)
    text = inventory.read_text()
    inventory.write_text(text.replace("[defaults]\n", f"[defaults]\ntoxiproxy = {binary!r}\n", 1))
    config = load_config("fast", [
        "nodes=3", "topic.replication_factor=2", "time_limit=6", "seed=3",
        "nemesis.faults=['latency']", "workload.final_read_timeout=30",
        "hosts.provider=ssh", f"hosts.inventory={str(inventory)!r}",
    ])
    plan = [{"id": 0, "kind": "latency", "start_s": 1.0, "duration_s": 3.0,
             "target": {"select": "leader", "partition": 0, "pick": 1}}]
    run_dir = run_test(Test.of(config, tmp_path / "results", plan=Plan.scripted(plan),
                               check=False))
    ops = read_history(run_dir / "history.jsonl")
    start = next(op for op in ops if op["f"] == "start-latency")
    assert "error" not in start["value"] and start["value"]["toxic"]["type"] == "latency"
    assert any(op["f"] == "final-poll" and op["type"] == "ok" for op in ops)
    lines = calls.read_text().splitlines()
    assert sum("--advertise" in line for line in lines if "-m replication broker" in line) >= 2
    for h in hosts[:3]:
        assert (work / h.name / "logs" / "toxiproxy.log").exists()
        assert (run_dir / "nodes" / h.name / "toxiproxy.log").exists()
        # stopped with the nodes: nothing answers on the host's API port any more (on its
        # loopback, through SSH, as the harness reaches it)
        assert not tp._answers(h)


# Slow (36-46 s): the default run holds the SSH provider with the embedded system (above) and
# Kafka on namespace hosts (tests/harness/test_kafka_runs.py).
@pytest.mark.slow
def test_kafka_over_the_ssh_provider(netns_hosts, tmp_path):
    """Apache Kafka on an inventory's hosts: the inventory's `java` runs every node, the
    classpath is copied to each host's folder (a second copy sends nothing and drops a jar
    that is not in the local folder), and the run is checked like any other."""
    from control import kafka_hosts, kafka_install

    version = "4.2.1"
    if not kafka_install.is_installed(version):
        pytest.fail(f"Kafka {version} is not installed: `make bootstrap` resolves it")
    inventory, _calls, work = _write_inventory(netns_hosts, tmp_path)
    java_calls = tmp_path / "java-calls.log"
    java = tmp_path / "java"
    java.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >>{java_calls}\nexec {kafka_install.java()} "$@"\n')
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    text = inventory.read_text()
    inventory.write_text(text.replace("[defaults]\n", f"[defaults]\njava = {str(java)!r}\n", 1))
    config = load_config("fast", [
        "system.kind=kafka", f"kafka.version={version}", "nodes=3",
        "topic.replication_factor=2", "time_limit=10", "seed=5", "nemesis.faults=['kill']",
        "nemesis.interval=3", "nemesis.duration=3", "workload.final_read_timeout=60",
        "checker.allow=['stale-read']", "hosts.provider=ssh", f"hosts.inventory={str(inventory)!r}",
    ])
    run_dir = run_test(Test.of(config, tmp_path / "results"))
    results = json.loads((run_dir / "results.json").read_text())
    ops = read_history(run_dir / "history.jsonl")
    assert sum(op["f"] == "send" and op["type"] == "ok" for op in ops) > 100
    assert any(op["f"] == "final-poll" and op["type"] == "ok" for op in ops)
    assert results["valid"] is True, results.get("anomalies")

    local = kafka_install.libs_dir(version)
    jars = sorted(p.name for p in local.iterdir() if p.is_file())
    for name in ("n1", "n2", "n3"):
        copied = work / name / "kafka" / version / "libs"
        assert sorted(p.name for p in copied.iterdir()) == jars
    lines = java_calls.read_text().splitlines()
    assert sum("kafka.Kafka" in line for line in lines) >= 3  # every node, by the inventory's java
    assert all(f"{work}/n" in line for line in lines if "kafka.Kafka" in line)

    # The next run's copy: the stale jar goes, nothing is sent again.
    copied = work / "n2" / "kafka" / version / "libs"
    (copied / "stale.jar").write_bytes(b"x")
    before = {p.name: p.stat().st_mtime_ns for p in copied.iterdir() if p.name != "stale.jar"}
    with SshProvider(inventory) as ssh_hosts:  # the hosts in the inventory's layout
        kafka_hosts.place_libs(ssh_hosts[1], local, version)
    assert {p.name: p.stat().st_mtime_ns for p in copied.iterdir()} == before
