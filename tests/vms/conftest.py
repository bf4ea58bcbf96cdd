"""Tests of the VM hosts (vagrant/): the fast checks of the box recipe, the Vagrantfile, the
inventory and the vm-power-off fault run in the default suite; those marked `vms` need the
VMs of `make vms` and run with `make test-vms`."""

from __future__ import annotations


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "vms: needs the running VMs of `make vms` (vagrant/inventory.toml); "
                   "run with `make test-vms`")
