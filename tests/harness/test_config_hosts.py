"""The [hosts] table of the config and the provider factory (pure: nothing is brought up)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from control.inventory import InventoryError
from control.provider import InventoryProvider, LocalNetnsProvider, make_provider
from harness.config import ConfigError, load_config, typed, validate


def _inventory(path: Path, hosts: int, defaults: str = 'python = "/opt/kch/.venv/bin/python"',
               extra: str = "") -> Path:
    lines = ["[defaults]", 'key_file = "id_ed25519"', 'known_hosts = "known_hosts"', defaults]
    for i in range(1, hosts + 1):
        lines += ["[[hosts]]", f'name = "n{i}"', f'address = "192.168.56.{10 + i}"']
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


def test_default_is_netns_without_inventory():
    c = load_config()
    assert c["hosts"] == {"provider": "netns", "toxiproxy": "auto"}
    assert validate(json.loads(json.dumps(c))) == c


def test_stored_config_without_hosts_table_still_validates():
    c = load_config()
    del c["hosts"]
    assert validate(c, source="results/x/test.json")["hosts"] == {"provider": "netns"}


def test_ssh_needs_an_inventory():
    with pytest.raises(ConfigError) as info:
        load_config(sets=["hosts.provider=ssh"])
    assert info.value.key == "hosts.provider"
    assert "needs hosts.inventory" in str(info.value)


def test_unknown_provider_names_the_key():
    with pytest.raises(ConfigError, match=r"hosts\.provider: expected one of 'netns', 'ssh', 'sim', got 'vm'"):
        load_config(sets=["hosts.provider=vm"])


def test_missing_inventory_file_names_the_key(tmp_path):
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as info:
        load_config(sets=["hosts.provider=ssh", f"hosts.inventory={str(missing)!r}"])
    assert info.value.key == "hosts.inventory"
    assert "cannot read inventory" in str(info.value) and str(missing) in str(info.value)


def test_broken_inventory_names_the_key_and_the_inventory_key(tmp_path):
    inv = _inventory(tmp_path / "inv.toml", 5, extra="password = 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(sets=["hosts.provider=ssh", f"hosts.inventory={str(inv)!r}"])
    assert info.value.key == "hosts.inventory"
    assert "unknown key 'password'" in str(info.value)


def test_too_few_hosts_blames_what_was_set_last(tmp_path):
    inv = _inventory(tmp_path / "inv.toml", 3)
    sets = ["hosts.provider=ssh", f"hosts.inventory={str(inv)!r}"]
    with pytest.raises(ConfigError) as info:
        load_config(sets=sets)  # default nodes = 5
    assert info.value.key == "hosts.inventory"
    assert "nodes = 5 needs as many hosts" in str(info.value) and "lists 3" in str(info.value)
    test_file = tmp_path / "test.toml"
    test_file.write_text(f'[hosts]\nprovider = "ssh"\ninventory = "{inv}"\n[topic]\nreplication_factor = 2\n')
    with pytest.raises(ConfigError) as info:
        load_config(test_file, overrides={"nodes": 4})
    assert info.value.key == "nodes"
    assert load_config(test_file, overrides={"nodes": 3})["nodes"] == 3


def test_relative_inventory_is_relative_to_the_config_file(tmp_path, monkeypatch):
    (tmp_path / "vms").mkdir()
    inv = _inventory(tmp_path / "vms" / "inventory.toml", 5)
    test_file = tmp_path / "vms" / "test.toml"
    test_file.write_text('[hosts]\nprovider = "ssh"\ninventory = "inventory.toml"\n')
    monkeypatch.chdir(tmp_path)
    c = load_config(test_file)
    assert c["hosts"] == {"provider": "ssh", "inventory": str(inv), "toxiproxy": "auto"}
    # From the command line it is relative to the working directory.
    assert load_config(sets=["hosts.provider=ssh", "hosts.inventory=vms/inventory.toml"]) == c
    # Stored absolute, so a reproduction from elsewhere finds the same file.
    monkeypatch.chdir("/")
    assert validate(json.loads(json.dumps(c))) == c


def _provider(config, cluster_dir):
    s = typed(config)
    return make_provider(s.hosts.provider, s.nodes, s.hosts.inventory, cluster_dir)


def test_factory_picks_the_provider_and_its_python(tmp_path):
    c = load_config()
    netns = _provider(c, tmp_path / "cluster")
    assert isinstance(netns, LocalNetnsProvider)
    assert (netns.n, netns.python) == (5, sys.executable)
    inv = _inventory(tmp_path / "inv.toml", 6)
    c = load_config(sets=["hosts.provider=ssh", f"hosts.inventory={str(inv)!r}"])
    ssh = _provider(c, tmp_path / "cluster")
    assert isinstance(ssh, InventoryProvider)
    assert [e.name for e in ssh.entries] == ["n1", "n2", "n3", "n4", "n5"]
    assert ssh.python == "/opt/kch/.venv/bin/python"


def test_python_defaults_to_python3_and_must_agree(tmp_path):
    inv = _inventory(tmp_path / "inv.toml", 2, defaults="")
    assert InventoryProvider(inv, 2).python == "python3"
    assert InventoryProvider(inv, 2).code is None  # a VM runs what its interpreter has installed
    inv.write_text(inv.read_text() + 'python = "/usr/bin/python3.11"\n')  # n2 only
    assert InventoryProvider(inv, 1).python == "python3"
    with pytest.raises(InventoryError, match=r"python must be one non-empty path.*n2: '/usr/bin/python3.11'"):
        InventoryProvider(inv, 2)
    # caught when the config is validated, before a campaign starts any cell
    with pytest.raises(ConfigError, match=r"hosts.inventory.*python must be one non-empty path"):
        load_config(sets=["nodes=2", "topic.replication_factor=1", "system.min.insync.replicas=1",
                          "hosts.provider=ssh", f"hosts.inventory={str(inv)!r}"])


def test_factory_refuses_an_inventory_that_shrank(tmp_path):
    inv = _inventory(tmp_path / "inv.toml", 5)
    c = load_config(sets=["hosts.provider=ssh", f"hosts.inventory={str(inv)!r}"])
    _inventory(inv, 2)  # edited after the config was validated
    with pytest.raises(InventoryError, match="lists 2 host"):
        _provider(c, tmp_path / "cluster")


def test_the_simulated_start_up_delay_is_a_range_and_survives_the_move_to_the_simulator():
    from harness.config import typed
    from harness.sim_run import as_simulated

    config = load_config(sets=["hosts.startup_s=[2, 10]"])
    assert config["hosts"]["startup_s"] == [2.0, 10.0]
    simulated = as_simulated(config)
    assert simulated["hosts"] == {"provider": "sim", "toxiproxy": "auto", "startup_s": [2.0, 10.0]}
    assert typed(simulated).hosts.startup_s == (2.0, 10.0)
    assert typed(as_simulated(load_config())).hosts.startup_s is None  # the world's default


@pytest.mark.parametrize("value", ["[3, 1]", "[-1, 2]", "[1]", "2", "[1, 'x']", "[0, 601]"])
def test_a_bad_start_up_delay_names_the_key(value):
    with pytest.raises(ConfigError, match=r"hosts\.startup_s: expected \[lo, hi\]"):
        load_config(sets=[f"hosts.startup_s={value}"])


def test_the_placement_is_the_provider_and_its_inventory_and_leaves_toxiproxy_to_the_faults(
        tmp_path):
    inv = _inventory(tmp_path / "inv.toml", 5)
    c = load_config(sets=["hosts.provider=ssh", f"hosts.inventory={json.dumps(str(inv))}",
                          "hosts.toxiproxy=true", "nemesis.faults=['latency']"])
    assert typed(c).hosts.placement() == {"provider": "ssh", "inventory": str(inv)}
    assert typed(load_config()).hosts.placement() == {"provider": "netns"}
    # a placed config without toxics gets no Toxiproxy: "auto" decides by its own faults
    placed = validate({**load_config(sets=["nemesis.faults=['kill']"]),
                       "hosts": typed(c).hosts.placement()})
    assert not typed(placed).hosts.toxiproxy
