"""The ssh provider's inventory parsing (pure)."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from control.inventory import InventoryError, load_inventory


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "inventory.toml"
    path.write_text(text)
    return path


def test_defaults_merge_and_relative_paths(tmp_path):
    path = _write(tmp_path, """
[defaults]
key_file = "keys/id"
known_hosts = "/etc/kch/known_hosts"
user = "vagrant"
sudo = true

[[hosts]]
name = "n1"
address = "192.168.56.11"

[[hosts]]
name = "n2"
address = "192.168.56.12"
port = 2222
user = "root"
work_dir = "/srv/kch"
""")
    n1, n2 = load_inventory(path)
    assert n1.key_file == tmp_path / "keys" / "id"
    assert n1.known_hosts == Path("/etc/kch/known_hosts")
    assert (n1.user, n1.port, n1.sudo, n1.work_dir) == ("vagrant", 22, True, PurePosixPath("/var/lib/kch"))
    assert (n2.user, n2.port, n2.work_dir) == ("root", 2222, PurePosixPath("/srv/kch"))


@pytest.mark.parametrize("body, message", [
    ('[[hosts]]\nname = "n1"\naddress = "a"\nknown_hosts = "k"\n', r"hosts\[0\]: missing key 'key_file'"),
    ('[[hosts]]\nname = "n1"\naddress = "a"\nkey_file = "k"\nknown_hosts = "k"\nport = "22"\n',
     r"hosts\[0\]\.port: expected int"),
    ('[[hosts]]\nname = "n1"\naddress = "a"\nkey_file = "k"\nknown_hosts = "k"\nport = true\n',
     r"hosts\[0\]\.port: expected int"),
    ('[[hosts]]\nname = "n1"\naddress = "a"\nkey_file = "k"\nknown_hosts = "k"\npassword = "x"\n',
     r"hosts\[0\]: unknown key 'password'"),
    ('[defaults]\nkey_file = "k"\nknown_hosts = "k"\n[[hosts]]\nname = "n1"\naddress = "a"\n'
     '[[hosts]]\nname = "n1"\naddress = "b"\n', r"hosts\[1\]\.name: duplicate host name 'n1'"),
    ('[defaults]\nkey_file = "k"\nknown_hosts = "k"\n[[hosts]]\nname = "n1"\naddress = "a"\nport = 70000\n',
     r"hosts\[0\]\.port: 70000 is not a TCP port"),
    ('[defaults]\nkey_file = "k"\n', r"needs at least one \[\[hosts\]\]"),
    ('hosts = [\n', r"invalid TOML"),
    ('[hots]\n', r"unknown top-level key\(s\): hots"),
])
def test_bad_inventories_name_file_and_key(tmp_path, body, message):
    path = _write(tmp_path, body)
    with pytest.raises(InventoryError, match=message) as err:
        load_inventory(path)
    assert str(path) in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(InventoryError, match="cannot read inventory"):
        load_inventory(tmp_path / "nope.toml")


def test_toxiproxy_server_path_defaults_to_the_path_and_is_checked(tmp_path):
    hosts = '[[hosts]]\nname = "n1"\naddress = "a"\nkey_file = "k"\nknown_hosts = "k"\n'
    (n1,) = load_inventory(_write(tmp_path, hosts))
    assert n1.toxiproxy == "toxiproxy-server"
    (n1,) = load_inventory(_write(tmp_path, '[defaults]\ntoxiproxy = "/opt/tp/toxiproxy-server"\n'
                                            + hosts))
    assert n1.toxiproxy == "/opt/tp/toxiproxy-server"
    with pytest.raises(InventoryError, match=r"hosts\[0\]\.toxiproxy: .* must be one program"):
        load_inventory(_write(tmp_path, hosts + 'toxiproxy = "toxiproxy-server; rm -rf /"\n'))
